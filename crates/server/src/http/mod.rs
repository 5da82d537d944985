//! The server's HTTP doors: every route a client, a proxy, a scraper or an
//! operator calls over HTTP, each door's handlers in a module of its own,
//! every route registered in one file, [`router`].
//!
//! | door | routes | module |
//! |---|---|---|
//! | tollgate's JSON API | `POST /v1/check`, `GET /v1/rules` | [`api`] |
//! | probes, metrics, status | `GET /healthz`, `/readyz`, `/metrics`, `/status.json`; the status page `/status` ([`crate::status::page`]) | [`api`] |
//! | concurrency leases | `POST /v1/acquire`, `POST /v1/release` | [`concurrency`] |
//! | reverse proxies' auth calls | `ANY /v1/forward-auth/{domain}`, `POST /v1/forward-auth/{domain}/charge` | [`forward_auth`] |
//! | envoyproxy/ratelimit's endpoints | `POST /json`, `GET /healthcheck`; the debug listener's `/`, `/rlconfig`, `/stats`; the Prometheus listener's path | [`lyft`] |
//! | the admin API (off by default) | `/v1/admin/...` | [`admin`] |
//!
//! # How a request reaches the service
//!
//! [`crate::listen`] accepts the connection (TLS with [`crate::tls`]),
//! [`serve`] runs hyper on it with its per-request timers and hands each
//! request to the listener's router ([`router`]), whose layers check the
//! bearer token and the body limit; the door's handler turns the request
//! into a transport-neutral [`CheckRequest`](crate::service::CheckRequest)
//! (or a lease, or a control) and asks the one [`Service`] that gRPC asks
//! too, then turns the outcome back into its own answer. The doors share
//! everything but these edges: same rules, counts, shadow mode, lists,
//! penalties, metrics and status page.
//!
//! # Guarantees
//!
//! - **No pass by accident**: a bad input is a 4xx, an overload or a
//!   backend that cannot decide a 503 (or the door's refusal), never an
//!   answer that reads as "allowed"; each door's module says which. The
//!   one 500 is envoyproxy/ratelimit's own: `/healthcheck` while
//!   unhealthy.
//! - **A request head must arrive whole within `idle_timeout_ms`** (30 s
//!   by default), and an HTTP/2 peer must answer PINGs: [`serve`], not
//!   `axum::serve`, which sets no timer.
//! - **Drained on shutdown**: accepting stops, requests in flight finish
//!   ([`serve`]), and `/readyz` answers 503 from the first moment.
//!
//! # Parameters
//!
//! The bearer token, the body limit and the admin API's token are the
//! router's ([`router::Doors`], with their defaults); the listeners'
//! addresses are [`crate::config`]'s (`server.http_listen`,
//! `127.0.0.1:8080` by default).
//!
//! [`Service`]: crate::service::Service

pub mod admin;
pub mod api;
pub mod concurrency;
pub mod forward_auth;
pub mod lyft;
pub mod router;
pub mod serve;
