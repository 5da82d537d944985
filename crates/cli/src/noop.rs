//! A no-op HTTP server for tests and benchmarks: answers every request
//! with `200 OK` and an empty body, over HTTP/1.1 and h2c (prior
//! knowledge), and can stop answering for a while (a stall) to show what
//! coordinated omission hides.
//!
//! It runs on its own thread and tokio runtime, so that a test can load it
//! from the same process without sharing the load generator's scheduler.
//! Dropping the [`NoopServer`] stops it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A window during which the server holds every response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// From the server's start to the beginning of the stall.
    pub after: Duration,
    /// How long it lasts: a request arriving during it is answered at its end.
    pub length: Duration,
}

/// A running no-op server.
#[derive(Debug)]
pub struct NoopServer {
    address: SocketAddr,
    answered: Arc<AtomicU64>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NoopServer {
    /// Binds `address` (port 0 for any free port) and serves on `threads`
    /// worker threads (at least 1).
    ///
    /// # Errors
    ///
    /// If the address cannot be bound or the runtime cannot start.
    pub fn start(
        address: SocketAddr,
        threads: usize,
        stall: Option<Stall>,
    ) -> io::Result<NoopServer> {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .enable_all()
            .build()?;
        let answered = Arc::new(AtomicU64::new(0));
        let (shutdown, stopped) = oneshot::channel();
        let counter = Arc::clone(&answered);
        let thread = std::thread::Builder::new()
            .name("noop-server".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept_loop(listener, stall, counter) => {}
                        _ = stopped => {}
                    }
                });
                // Connections still open are dropped with the runtime.
                runtime.shutdown_background();
            })?;
        Ok(NoopServer {
            address,
            answered,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        // Relaxed: a statistic; no other memory is published through it.
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for NoopServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    stall: Option<Stall>,
    answered: Arc<AtomicU64>,
) {
    let start = Instant::now();
    let stall = stall.map(|stall| (start + stall.after, start + stall.after + stall.length));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors or similar: try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let answered = Arc::clone(&answered);
        tokio::spawn(async move {
            let service = service_fn(move |_request: Request<hyper::body::Incoming>| {
                let answered = Arc::clone(&answered);
                async move {
                    if let Some((from, until)) = stall {
                        let now = Instant::now();
                        if now >= from && now < until {
                            tokio::time::sleep_until(until).await;
                        }
                    }
                    // Relaxed: a statistic.
                    answered.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::new())))
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
