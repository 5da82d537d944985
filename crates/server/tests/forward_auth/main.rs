//! The forward-auth endpoint behind the real proxies: nginx, Caddy and
//! HAProxy from Debian (`.ci/deps`), and Traefik's ForwardAuth protocol
//! spoken by a client written to its documentation (Traefik is not
//! packaged). Each proxy is started once for the binary, from the files
//! under `tests/proxies/` that `crates/server/README.md` shows.

mod caddy;
mod checks;
mod haproxy;
mod nginx;
mod readme;
mod redis;
mod support;
mod traefik;
