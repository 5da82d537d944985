//! The README shows the very files the proxy tests run: each file of
//! `tests/proxies/` must appear in it whole.

use crate::support::{proxies_dir, read_proxy_file};

#[test]
fn readme_shows_every_proxy_file_the_tests_run() {
    let readme = std::fs::read_to_string(proxies_dir().join("../../README.md")).expect("README");
    for file in [
        "rules.yaml",
        "nginx.conf",
        "Caddyfile",
        "haproxy.cfg",
        "tollgate.lua",
        "traefik-static.yml",
        "traefik-dynamic.yml",
    ] {
        let text = read_proxy_file(file);
        assert!(
            readme.contains(text.trim_end()),
            "crates/server/README.md does not show tests/proxies/{file} as it is"
        );
    }
}
