//! Serving accepted HTTP connections with hyper's own per-request timers,
//! in place of `axum::serve` (which sets none).
//!
//! # Guarantees
//!
//! - **A request head must arrive whole within `idle_timeout`** on HTTP/1:
//!   hyper's header-read timer runs from the moment the server waits for a
//!   head (after accept, after each answer on a keep-alive connection) to
//!   the head's last byte, so a client trickling one byte at a time is
//!   closed at `idle_timeout`, whatever the gap between its bytes (not
//!   only the gap between two bytes).
//! - **An HTTP/2 peer must answer PINGs**: sent every `idle_timeout / 2`
//!   without a new request, each to be answered within `idle_timeout / 2`,
//!   as on the gRPC listener; a peer trickling a frame that never ends is
//!   closed, a live client (which answers) is not.
//! - **Graceful shutdown** as `axum::serve`'s: on `shutdown`, accepting
//!   stops, every connection is asked to finish its requests in flight and
//!   close, and [`serve`] returns once all are closed.
//!
//! `idle_timeout` is `server.idle_timeout_ms` (30 s by default). The
//! connection's opening (before any protocol timer runs) is bounded by
//! [`crate::listen`].

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt as _;

/// The HTTP/1 and HTTP/2 connection settings (see the module docs).
fn builder(idle_timeout: Duration) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(idle_timeout / 2)
        .keep_alive_timeout(idle_timeout / 2);
    builder
}

/// Serves `router` on the connections of `listener` until `shutdown`
/// resolves, then drains (see the module docs).
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    idle_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener<Addr = std::net::SocketAddr>,
    L::Io: Unpin,
{
    // Connections hold a receiver of `stop` (told to drain) and a clone of
    // `open_tx`'s receiver (dropped when they close).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    let builder = builder(idle_timeout);
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // The peer's address, as axum's `ConnectInfo` (the forward-auth
        // endpoint's trusted-proxy rule reads it: super::forward_auth).
        let service = TowerToHyperService::new(router.clone().map_request(
            move |mut request: http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            },
        ));
        let builder = builder.clone();
        let mut stop = stop_rx.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
            tokio::pin!(connection);
            let mut draining = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(error) = result {
                            tracing::trace!(%error, "http connection ended");
                        }
                        break;
                    }
                    changed = stop.wait_for(|stop| *stop), if !draining => {
                        draining = true;
                        if changed.is_ok() {
                            connection.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
    Ok(())
}
