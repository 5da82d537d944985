//! Every way Kubernetes (and an operator) changes the config directory,
//! seen by the reloader: a ConfigMap update (the kubelet's `..data`
//! symlink swap), a key added to or removed from the ConfigMap, a plain
//! `mv` over a file, an in-place write, a file added or removed, and a bad
//! file, which keeps the old rules. Polls are driven by the test.

use std::path::{Path, PathBuf};

use tollgate_server::reload::Reloaded;

use crate::lyft_env::support::*;

fn rules_of(limit: u64) -> String {
    format!(
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
    )
}

const B: &str =
    "domain: b\ndescriptors:\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 7}\n";

/// A ConfigMap volume as the kubelet writes it, mounted at `dir`.
struct ConfigMap {
    dir: PathBuf,
    version: u32,
}

impl ConfigMap {
    /// The kubelet's first write: a timestamped directory, `..data`
    /// pointing at it, and one top-level link per key.
    fn create(dir: &Path, files: &[(&str, &str)]) -> ConfigMap {
        std::fs::create_dir_all(dir).expect("mount point");
        let mut map = ConfigMap {
            dir: dir.to_owned(),
            version: 0,
        };
        let data = map.write_version(files);
        std::os::unix::fs::symlink(&data, dir.join("..data")).expect("..data");
        map.link_keys(files);
        map
    }

    fn write_version(&mut self, files: &[(&str, &str)]) -> String {
        self.version += 1;
        let name = format!(
            "..2026_11_27_06_00_0{}.00000000{}",
            self.version, self.version
        );
        for (file, text) in files {
            write(&self.dir.join(&name).join(file), text);
        }
        name
    }

    fn link_keys(&self, files: &[(&str, &str)]) {
        for (file, _) in files {
            let link = self.dir.join(file);
            if std::fs::symlink_metadata(&link).is_err() {
                std::os::unix::fs::symlink(format!("..data/{file}"), link).expect("key link");
            }
        }
    }

    /// The kubelet's update: a new timestamped directory, a `..data_tmp`
    /// link to it renamed over `..data` (the atomic step), links for new
    /// keys, links of removed keys deleted, the old directory removed.
    fn update(&mut self, files: &[(&str, &str)]) {
        let old = std::fs::read_link(self.dir.join("..data")).expect("..data");
        let data = self.write_version(files);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&data, &tmp).expect("..data_tmp");
        std::fs::rename(&tmp, self.dir.join("..data")).expect("swap");
        self.link_keys(files);
        for entry in std::fs::read_dir(&self.dir).expect("list") {
            let entry = entry.expect("entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !files.iter().any(|(file, _)| *file == name) {
                std::fs::remove_file(entry.path()).expect("remove key link");
            }
        }
        std::fs::remove_dir_all(self.dir.join(old)).expect("old version");
    }
}

/// Two polls: a change is loaded once read twice the same.
fn settle(server: &LyftServer) -> Result<Reloaded, tollgate_server::ConfigError> {
    let first = server.reloader.poll()?;
    if first == Reloaded::Unchanged {
        return Ok(first);
    }
    assert_eq!(first, Reloaded::Settling);
    server.reloader.poll()
}

fn limits(server: &LyftServer) -> Vec<u64> {
    server.rules().into_iter().map(|(_, limit)| limit).collect()
}

#[tokio::test]
async fn a_configmap_update_swapping_the_data_symlink_is_reloaded() {
    let mut map = None;
    let server = start(
        Counts::Memory,
        &[("RUNTIME_IGNOREDOTFILES", "true")],
        |root| {
            map = Some(ConfigMap::create(
                &config_dir(root),
                &[("a.yaml", &rules_of(1))],
            ));
        },
    )
    .await;
    let mut map = map.expect("created");
    assert_eq!(limits(&server), [1]);
    assert_eq!(server.reloader.poll().expect("poll"), Reloaded::Unchanged);

    map.update(&[("a.yaml", &rules_of(2))]);
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 1 }
    );
    assert_eq!(limits(&server), [2]);

    // A key added to the ConfigMap, then removed.
    map.update(&[("a.yaml", &rules_of(2)), ("b.yaml", B)]);
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 2 }
    );
    assert_eq!(limits(&server), [2, 7]);
    map.update(&[("a.yaml", &rules_of(3))]);
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 1 }
    );
    assert_eq!(limits(&server), [3]);

    // A bad update keeps the old rules.
    map.update(&[("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")]);
    assert!(server.reloader.poll().is_ok());
    let error = server.reloader.poll().expect_err("bad file");
    assert!(error.message().contains("fortnight"), "{error}");
    assert_eq!(limits(&server), [3]);
    server.stop().await;
}

#[tokio::test]
async fn a_mv_over_a_file_an_in_place_write_and_files_added_or_removed_are_reloaded() {
    let server = start(Counts::Memory, &[], |root| {
        write(&config_dir(root).join("a.yaml"), &rules_of(1));
    })
    .await;
    let dir = config_dir(&server.root);
    let file = dir.join("a.yaml");

    // `mv new.yaml a.yaml`: written beside the directory, renamed over.
    let staged = server.root.join("a.yaml.new");
    std::fs::write(&staged, rules_of(4)).expect("stage");
    std::fs::rename(&staged, &file).expect("mv");
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 1 }
    );
    assert_eq!(limits(&server), [4]);

    // An in-place write seen half done: held until it is still.
    let full = rules_of(5);
    std::fs::write(&file, &full[..full.len() / 2]).expect("half");
    assert_eq!(server.reloader.poll().expect("poll"), Reloaded::Settling);
    std::fs::write(&file, &full).expect("whole");
    assert_eq!(server.reloader.poll().expect("poll"), Reloaded::Settling);
    assert_eq!(
        server.reloader.poll().expect("poll"),
        Reloaded::Applied { rules: 1 }
    );
    assert_eq!(limits(&server), [5]);

    // A file added, then removed.
    write(&dir.join("sub/b.yaml"), B);
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 2 }
    );
    assert_eq!(limits(&server), [5, 7]);
    std::fs::remove_file(dir.join("sub/b.yaml")).expect("rm");
    assert_eq!(
        settle(&server).expect("reload"),
        Reloaded::Applied { rules: 1 }
    );
    assert_eq!(limits(&server), [5]);

    // Every file removed: refused (a server limiting nothing), old rules kept.
    std::fs::remove_file(&file).expect("rm");
    assert!(server.reloader.poll().is_ok());
    assert!(server.reloader.poll().is_err());
    assert_eq!(limits(&server), [5]);
    server.stop().await;
}
