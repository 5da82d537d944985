//! The reverse-proxies chapter shows the very files the proxy tests run:
//! each file of `tests/proxies/` must appear in it whole (and `.ci/links`
//! checks that each block marked with its file is that file, byte for byte).

use crate::forward_auth::support::{proxies_dir, read_proxy_file};

#[test]
fn the_docs_show_every_proxy_file_the_tests_run() {
    let readme = std::fs::read_to_string(proxies_dir().join("../../docs/reverse-proxies.md"))
        .expect("docs/reverse-proxies.md");
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
            "crates/server/docs/reverse-proxies.md does not show tests/proxies/{file} as it is"
        );
    }
}
