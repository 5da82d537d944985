//! Hot reload: the file is read every `reload_interval_ms` and, when its
//! bytes changed, its rules replace the old ones.
//!
//! # Decisions
//!
//! - Polling the content rather than `notify` events: a read of a small
//!   file per second costs nothing, and it sees every way a file changes
//!   (editors that write a new file and rename it, Kubernetes ConfigMaps
//!   that swap a symlink, network file systems without events, an mtime
//!   that does not move within its granularity), where events miss some.
//! - A file that does not parse or validate leaves the old rules running:
//!   the error (file, line, field) is logged, `tollgate_config_loads{result="error"}`
//!   counts it and `tollgate_config_last_load_ok` drops to 0 until a good
//!   file comes.
//! - The new rules go live atomically (`arc-swap`): a request is decided
//!   wholly under the old rules or wholly under the new. What happens to
//!   the buckets is the backend's: see [`crate::backend`].
//! - The `server` and `backend` sections are not reloaded (listeners stay
//!   bound, the Redis connection stays); a change is logged as needing a
//!   restart.
//! - A rule set the backend refuses (the Redis backend: a limit its script
//!   cannot hold exactly) is a failed load like a bad file: the old rules
//!   stay.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::{BackendSettings, Config, ConfigError, ServerSettings};
use crate::rules::RuleSet;
use crate::service::Service;

/// Reloads the rules of one file into one service.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    service: Arc<Service>,
    settings: ServerSettings,
    backend: BackendSettings,
    /// The bytes last seen, good or bad, so that a bad file is reported once.
    last_seen: Mutex<Vec<u8>>,
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The file has not changed since it was last read.
    Unchanged,
    /// New rules are in force.
    Applied {
        /// How many rules.
        rules: usize,
    },
}

impl Reloader {
    /// A reloader for `path`, whose current bytes are `loaded`, started
    /// with `config`'s `server` and `backend` sections.
    pub fn new(path: PathBuf, service: Arc<Service>, config: &Config, loaded: Vec<u8>) -> Reloader {
        Reloader {
            path,
            service,
            settings: config.server.clone(),
            backend: config.backend.clone(),
            last_seen: Mutex::new(loaded),
        }
    }

    /// Reads the file and applies it if it changed.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is invalid: the old rules stay in force.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) => return Err(self.failed(ConfigError::io(&self.path, &error))),
        };
        {
            let mut last = self
                .last_seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if *last == bytes {
                return Ok(Reloaded::Unchanged);
            }
            last.clone_from(&bytes);
        }
        let text = String::from_utf8_lossy(&bytes);
        let config = Config::from_yaml(&self.path, &text).map_err(|error| self.failed(error))?;
        if config.server != self.settings {
            tracing::warn!(
                file = %self.path.display(),
                "the server section changed: it takes effect on restart only"
            );
        }
        if config.backend != self.backend {
            tracing::warn!(
                file = %self.path.display(),
                "the backend section changed: it takes effect on restart only"
            );
        }
        let rules = RuleSet::new(&config);
        let count = rules.rules().len();
        if let Err(error) = self.service.replace_rules(rules) {
            let error = ConfigError::rules(&self.path, &error);
            return Err(self.failed(error));
        }
        self.service.metrics().config_loaded(true);
        tracing::info!(file = %self.path.display(), rules = count, "configuration reloaded");
        Ok(Reloaded::Applied { rules: count })
    }

    fn failed(&self, error: ConfigError) -> ConfigError {
        self.service.metrics().config_loaded(false);
        tracing::error!(%error, "configuration reload failed; the previous rules stay in force");
        error
    }

    /// Reloads every `interval`, forever (the server aborts the task on
    /// shutdown).
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let reloader = Arc::clone(&self);
            // File reads and parsing are blocking work.
            let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
        }
    }
}
