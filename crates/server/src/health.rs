//! The server's health: one state that envoyproxy/ratelimit's
//! `GET /healthcheck` and `grpc.health.v1.Health` (`ratelimit`, and the
//! rate limit service's full name) both answer from, so that an HTTP probe
//! and a gRPC probe never disagree.
//!
//! Healthy when every component is:
//! - `sigterm`: the server has not begun to shut down;
//! - `config`: with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, a rule is
//!   loaded;
//! - any component added with [`Health::add`] (the backend's connection,
//!   for instance), each a check read at every probe.
//!
//! The components are envoyproxy/ratelimit's (`src/server/health.go`),
//! read when asked rather than pushed, so that no state can go stale.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use crate::service::Service;

/// A component's check: `Err(why)` while it is unhealthy.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The server's health (see the module docs); clones share it.
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    ready: Arc<AtomicBool>,
    service: Arc<Service>,
    healthy_only_with_rules: bool,
    components: RwLock<Vec<(&'static str, Check)>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("healthy", &self.check().is_ok())
            .finish_non_exhaustive()
    }
}

/// Why the server is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    /// The first unhealthy component.
    pub component: &'static str,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.component, self.reason)
    }
}

impl Health {
    /// The health of a server whose `ready` flag falls at shutdown;
    /// `healthy_only_with_rules` adds the `config` component.
    pub fn new(
        ready: Arc<AtomicBool>,
        service: Arc<Service>,
        healthy_only_with_rules: bool,
    ) -> Health {
        Health {
            inner: Arc::new(Inner {
                ready,
                service,
                healthy_only_with_rules,
                components: RwLock::new(Vec::new()),
            }),
        }
    }

    /// Adds the component `name`, unhealthy while `check` answers `Err`.
    pub fn add(
        &self,
        name: &'static str,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.inner
            .components
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((name, Arc::new(check)));
    }

    /// Whether the server still serves (not shutting down): what gRPC's
    /// server-wide `""` answers.
    pub fn serving(&self) -> bool {
        // Relaxed: a flag read on its own; no other memory depends on it.
        self.inner.ready.load(Ordering::Relaxed)
    }

    /// Healthy, or the first component that is not.
    ///
    /// # Errors
    ///
    /// [`Unhealthy`], naming the component.
    pub fn check(&self) -> Result<(), Unhealthy> {
        if !self.serving() {
            return Err(Unhealthy {
                component: "sigterm",
                reason: "shutting down".to_owned(),
            });
        }
        if self.inner.healthy_only_with_rules && self.inner.service.rules().rules().is_empty() {
            return Err(Unhealthy {
                component: "config",
                reason: "no rule loaded yet".to_owned(),
            });
        }
        let components = self
            .inner
            .components
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (component, check) in components.iter() {
            check().map_err(|reason| Unhealthy { component, reason })?;
        }
        Ok(())
    }
}
