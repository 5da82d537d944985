//! envoyproxy/ratelimit's config directory: every file under
//! `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, read whole
//! into a [`Snapshot`] and checked into one list of domains.
//!
//! # Decisions
//!
//! - **Which files.** envoyproxy/ratelimit (through goruntime) walks the
//!   directory recursively and parses *every* file as YAML, whatever its
//!   name; so does this reader: a `rules.yml` or a `README` left in the
//!   directory is read (and refused if it is no rule file, as there),
//!   never skipped in silence. `RUNTIME_WATCH_ROOT` changes which
//!   directory goruntime watches, not which files are loaded (with it,
//!   only keys under `RUNTIME_APPDIRECTORY.` are taken; without it the
//!   walk starts there): both read the same files here.
//! - **Kubernetes.** Entries whose name starts with `..` (the kubelet's
//!   `..data` symlink and `..2026_…` timestamped directories of a
//!   ConfigMap volume) are never walked: their files are reached through
//!   the volume's top-level symlinks (`x.yaml -> ..data/x.yaml`), and
//!   walking them too would load each domain twice. Other dot files are
//!   read unless `RUNTIME_IGNOREDOTFILES=true`, as in envoyproxy/ratelimit.
//!   Symlinks are followed (a file's bytes are its target's).
//! - **One or more domains per file** (a `domains:` list is the YAML
//!   door's extension, accepted here too). A domain named by two files is
//!   refused unless `MERGE_DOMAIN_CONFIG=true`, which appends the second
//!   file's descriptors to the first's as envoyproxy/ratelimit does (a
//!   top-level `(key, value)` given by both is refused, as there).
//! - **No rule file at all** (a missing or empty directory) is refused:
//!   a volume not mounted yet must not start a server that limits
//!   nothing (envoyproxy/ratelimit would load an empty config).
//!   `FORCE_START_WITHOUT_INITIAL_CONFIG=true` starts anyway, with no
//!   rules, and the first good snapshot is loaded by the reloader.
//! - `SHADOW_MODE=true` puts every rule in shadow mode as it is loaded,
//!   and `QUOTA_MODE=true` every rule in quota mode (envoyproxy/ratelimit's
//!   global quota mode: a request is over the limit only when every one of
//!   its limited descriptors is).

use std::path::{Path, PathBuf};

use crate::config::{ConfigError, DescriptorConfig, DomainConfig};

/// Where the rule files are and how they are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDir {
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
    pub dir: PathBuf,
    /// `RUNTIME_IGNOREDOTFILES`.
    pub ignore_dot_files: bool,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `SHADOW_MODE`: every rule in shadow mode.
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every rule in quota mode.
    pub quota_mode: bool,
    /// Whether the rules run on Redis (which refuses `sliding_log`).
    pub redis: bool,
}

/// Every rule file's path and bytes, in path order: what the reloader
/// compares (a change of name, of content, or of a symlink's target is a
/// change of snapshot).
pub type Snapshot = Vec<(PathBuf, Vec<u8>)>;

impl RuntimeDir {
    /// Reads every rule file.
    ///
    /// # Errors
    ///
    /// A directory or file that cannot be read (a missing directory
    /// included).
    pub fn snapshot(&self) -> Result<Snapshot, ConfigError> {
        let mut files = Vec::new();
        self.walk(&self.dir, &mut files)?;
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files)
    }

    fn walk(&self, dir: &Path, files: &mut Snapshot) -> Result<(), ConfigError> {
        let entries = std::fs::read_dir(dir).map_err(|error| ConfigError::io(dir, &error))?;
        for entry in entries {
            let entry = entry.map_err(|error| ConfigError::io(dir, &error))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("..") || (self.ignore_dot_files && name.starts_with('.')) {
                continue;
            }
            let path = entry.path();
            // Follows symlinks: a ConfigMap's files are links into `..data`.
            let metadata = match std::fs::metadata(&path) {
                Ok(metadata) => metadata,
                // A link whose target was just swapped away: the next poll
                // sees the new one.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(ConfigError::io(&path, &error)),
            };
            if metadata.is_dir() {
                self.walk(&path, files)?;
            } else {
                let bytes = std::fs::read(&path).map_err(|error| ConfigError::io(&path, &error))?;
                files.push((path, bytes));
            }
        }
        Ok(())
    }

    /// The domains of `snapshot`, checked file by file and then together
    /// (see the module docs).
    ///
    /// # Errors
    ///
    /// The first file refused (naming it, its line and field), a domain
    /// given twice (without `MERGE_DOMAIN_CONFIG`), or no file at all.
    pub fn load(&self, snapshot: &Snapshot) -> Result<Vec<DomainConfig>, ConfigError> {
        if snapshot.is_empty() {
            return Err(ConfigError::rules(
                &self.dir,
                &"no rule file in the config directory: refused (a server that limits nothing); set FORCE_START_WITHOUT_INITIAL_CONFIG=true to start anyway",
            ));
        }
        let mut domains: Vec<DomainConfig> = Vec::new();
        for (path, bytes) in snapshot {
            let text = String::from_utf8_lossy(bytes);
            for domain in crate::Config::domains_from_lyft_yaml(path, &text, self.redis)? {
                match domains.iter_mut().find(|d| d.domain == domain.domain) {
                    None => domains.push(domain),
                    Some(_) if !self.merge_domains => {
                        return Err(ConfigError::rules(
                            path,
                            &format!(
                                "duplicate domain '{}' in config file (set MERGE_DOMAIN_CONFIG=true to merge the files of one domain)",
                                domain.domain
                            ),
                        ));
                    }
                    Some(existing) => {
                        merge(existing, domain).map_err(|e| ConfigError::rules(path, &e))?
                    }
                }
            }
        }
        for domain in &mut domains {
            mark(&mut domain.descriptors, self.shadow_mode, self.quota_mode);
        }
        Ok(domains)
    }
}

/// Appends `more`'s descriptors to `into`'s, refusing a top-level
/// `(key, value)` both give (envoyproxy/ratelimit's "duplicate descriptor
/// composite key").
fn merge(into: &mut DomainConfig, more: DomainConfig) -> Result<(), String> {
    for descriptor in more.descriptors {
        if into
            .descriptors
            .iter()
            .any(|d| d.key == descriptor.key && d.value == descriptor.value)
        {
            return Err(format!(
                "duplicate descriptor composite key '{}.{}{}' across the files of one domain",
                into.domain,
                descriptor.key,
                descriptor
                    .value
                    .as_deref()
                    .map(|v| format!("_{v}"))
                    .unwrap_or_default()
            ));
        }
        into.descriptors.push(descriptor);
    }
    Ok(())
}

/// Puts every rule in shadow mode and / or quota mode.
fn mark(descriptors: &mut [DescriptorConfig], shadow: bool, quota: bool) {
    for descriptor in descriptors {
        descriptor.shadow_mode |= shadow;
        descriptor.quota_mode |= quota;
        mark(&mut descriptor.descriptors, shadow, quota);
    }
}
