//! Hot reload: the file is read every `reload_interval_ms` and, when its
//! bytes changed and then stayed still, its rules replace the old ones.
//!
//! # Guarantees
//!
//! A reload never turns a limit off by accident:
//!
//! - The file is read whole, in one read, and checked whole before anything
//!   changes; an empty file, a file naming no domain, and a file that does
//!   not parse or validate are refused (see [`crate::config`]).
//! - The watcher ([`Reloader::poll`]) loads a change only once it has read
//!   the *same* bytes at two consecutive polls: a file being rewritten in
//!   place (truncated, then written in chunks) is held until it is still
//!   for one interval, so a prefix that happens to parse (a list of
//!   descriptors cut short) is never loaded while it is written. A writer
//!   that stops for longer than one interval midway still defeats this:
//!   deploy by writing a new file and renaming it over the old one (as
//!   editors, `kubectl` ConfigMaps and `install` do), which is atomic.
//! - A refused file leaves the old rules in force: the error (file, line,
//!   field) is logged once per distinct content,
//!   `tollgate_config_loads{result="error"}` counts it and
//!   `tollgate_config_last_load_ok` drops to 0 until a good file comes.
//! - A rule that did not change keeps its counts across a reload, and so
//!   does a rule removed and later restored (see [`crate::backend`]): a
//!   reload can never hand out a fresh burst.
//!
//! # envoyproxy/ratelimit's config directory
//!
//! From envoyproxy/ratelimit's environment ([`Reloader::for_directory`]),
//! the rules are every file of a directory, and the whole directory is one
//! snapshot: every file's path and bytes, symlinks followed (see
//! [`RuntimeDir`]). A Kubernetes ConfigMap update (the kubelet renames a
//! `..data_tmp` link over `..data`), an `mv` over a file, an in-place
//! write, a file added or removed each change the snapshot, and each is
//! loaded as a file's change is: once read twice the same, checked whole,
//! refused whole (old rules kept), applied atomically.
//!
//! # Decisions
//!
//! - Polling the content rather than `notify` events: a read of a small
//!   file per second costs nothing, and it sees every way a file changes
//!   (editors that write a new file and rename it, Kubernetes ConfigMaps
//!   that swap a symlink, network file systems without events, an mtime
//!   that does not move within its granularity), where events miss some.
//!   A change therefore takes effect one to two intervals after it is made.
//! - [`Reloader::reload`] is the explicit "load it now" (tests, an
//!   operator's signal): it skips the stillness check, not the validation.
//! - The new rules go live atomically (`arc-swap`): a request is decided
//!   wholly under the old rules or wholly under the new.
//! - The `server` and `backend` sections are not reloaded (listeners stay
//!   bound, the Redis connection stays); a change is logged as needing a
//!   restart.
//! - A rule set the backend refuses (the Redis backend: a limit its script
//!   cannot hold exactly) is a failed load like a bad file: the old rules
//!   stay.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::config::lyft_env::{RuntimeDir, Snapshot};
use crate::config::{AdminSettings, BackendSettings, Config, ConfigError, ServerSettings};
use crate::rules::RuleSet;
use crate::service::Service;

/// Reloads the rules of one file (or of envoyproxy/ratelimit's config
/// directory) into one service.
#[derive(Debug)]
pub struct Reloader {
    path: PathBuf,
    /// Set when the rules are a directory's (`path` is then the directory).
    directory: Option<RuntimeDir>,
    service: Arc<Service>,
    settings: ServerSettings,
    backend: BackendSettings,
    state: Mutex<Seen>,
}

/// What the reloader has read.
#[derive(Debug)]
struct Seen {
    /// The files (names and bytes) last loaded or refused, so that a bad
    /// file is reported once.
    last: Snapshot,
    /// Files read at the previous poll that differ from `last`: loaded
    /// when the next poll reads them again.
    pending: Option<Snapshot>,
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The file has not changed since it was last read.
    Unchanged,
    /// The file changed since the previous poll: it is loaded once a poll
    /// reads the same bytes again (it may be being written).
    Settling,
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
            directory: None,
            state: Mutex::new(Seen {
                last: vec![(path.clone(), loaded)],
                pending: None,
            }),
            path,
            service,
            settings: config.server.clone(),
            backend: config.backend.clone(),
        }
    }

    /// A reloader for envoyproxy/ratelimit's config directory `dir`, whose
    /// current files are `loaded` (see the module docs: the whole
    /// directory is one snapshot).
    pub fn for_directory(
        dir: RuntimeDir,
        service: Arc<Service>,
        config: &Config,
        loaded: Snapshot,
    ) -> Reloader {
        Reloader {
            path: dir.dir.clone(),
            directory: Some(dir),
            service,
            settings: config.server.clone(),
            backend: config.backend.clone(),
            state: Mutex::new(Seen {
                last: loaded,
                pending: None,
            }),
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> Result<Snapshot, ConfigError> {
        match &self.directory {
            Some(dir) => dir.snapshot().map_err(|error| self.failed(error)),
            None => std::fs::read(&self.path)
                .map(|bytes| vec![(self.path.clone(), bytes)])
                .map_err(|error| self.failed(ConfigError::io(&self.path, &error))),
        }
    }

    /// One step of the watcher: reads the file and loads it if it changed
    /// and the previous poll read the same bytes (see the module docs).
    ///
    /// # Errors
    ///
    /// The file cannot be read, or it is still and invalid: the old rules
    /// stay in force.
    pub fn poll(&self) -> Result<Reloaded, ConfigError> {
        let bytes = self.read()?;
        {
            let mut seen = self.seen();
            if seen.last == bytes {
                seen.pending = None;
                return Ok(Reloaded::Unchanged);
            }
            if seen.pending.as_ref() != Some(&bytes) {
                seen.pending = Some(bytes);
                return Ok(Reloaded::Settling);
            }
            seen.pending = None;
            seen.last.clone_from(&bytes);
        }
        self.apply(&bytes)
    }

    /// Reads the file and applies it now if it changed (no stillness
    /// check: see the module docs).
    ///
    /// # Errors
    ///
    /// The file cannot be read or is invalid: the old rules stay in force.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let bytes = self.read()?;
        {
            let mut seen = self.seen();
            seen.pending = None;
            if seen.last == bytes {
                return Ok(Reloaded::Unchanged);
            }
            seen.last.clone_from(&bytes);
        }
        self.apply(&bytes)
    }

    fn apply(&self, snapshot: &Snapshot) -> Result<Reloaded, ConfigError> {
        let config = self.parse(snapshot).map_err(|error| self.failed(error))?;
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

    /// The configuration `snapshot` holds: the file's, or the directory's
    /// rules under the settings read at start.
    fn parse(&self, snapshot: &Snapshot) -> Result<Config, ConfigError> {
        match &self.directory {
            Some(dir) => Ok(Config {
                server: self.settings.clone(),
                backend: self.backend.clone(),
                admin: AdminSettings::default(),
                domains: dir.load(snapshot)?,
            }),
            None => {
                let bytes = snapshot.first().map(|(_, bytes)| bytes.as_slice());
                let text = String::from_utf8_lossy(bytes.unwrap_or_default());
                Config::from_yaml(&self.path, &text)
            }
        }
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
            let _ = tokio::task::spawn_blocking(move || reloader.poll()).await;
        }
    }
}
