//! Accepting connections: a back-off on accept errors, and a read-idle
//! timeout on every connection.
//!
//! # Guarantees
//!
//! - **An accept error never spins.** When `accept()` fails (`EMFILE`,
//!   `ENFILE`, `ENOBUFS`: the process or the system is out of descriptors
//!   or memory), the listener waits before trying again: 5 ms after the
//!   first failure, doubling at each failure in a row up to 1 s, back to
//!   5 ms after the first success. The connections waiting in the kernel's
//!   backlog are accepted as descriptors free up. The error is logged at
//!   `warn`, at most once a second, with the number of failures since the
//!   last line.
//! - **A connection that sends nothing is closed** after `idle_timeout`
//!   (`server.idle_timeout_ms`, by default 30 s): a client that connects
//!   and stays silent, a half-open connection whose peer is gone, an
//!   HTTP/1.1 keep-alive connection left idle. Only bytes *read* restart
//!   the clock, so a peer that only receives cannot hold a connection open.
//! - **A connection's opening must arrive whole within `idle_timeout`** of
//!   accept: until its first [`OPENING`] bytes are read (the HTTP/2
//!   connection preface; the start of an HTTP/1 request line or of a TLS
//!   ClientHello), reads do not restart the clock, so a client trickling
//!   its preface a byte at a time is closed at `idle_timeout` (bug of issue
//!   15: each byte restarted it). What follows the opening is bounded by
//!   the protocols' own timers, set to the same `idle_timeout`: hyper's
//!   header-read timeout for every HTTP/1 request head
//!   ([`crate::http::serve`]), and on HTTP/2 (both listeners) PINGs every
//!   `idle_timeout / 2` that must be answered within `idle_timeout / 2`, so
//!   that a frame that never ends is cut too.
//! - **A live gRPC peer is never cut.** The gRPC server sends HTTP/2 PINGs
//!   every `idle_timeout / 2`; a live client (Envoy) answers each, and the
//!   answer is a read, so a connection that is merely quiet between calls
//!   stays open, while one whose peer does not answer is closed (by the
//!   idle timeout, or by tonic's keep-alive timeout, whichever comes first).
//!
//! # Decisions
//!
//! - A read-idle timeout on the byte stream rather than per-protocol
//!   timers: hyper has a header-read timeout for HTTP/1 only, and tonic
//!   none for a connection that never finishes its HTTP/2 preface; the byte
//!   stream covers both protocols, plain or TLS, in one place.
//! - The opening rule is protocol-blind (it counts bytes), so it covers
//!   both listeners, plain or TLS, in one place; the rest needs the
//!   protocol's view of where a head ends, which only the HTTP stacks have.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// The first pause after an accept error.
pub const BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest pause between two accept attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// The bytes a connection must send within its first `idle_timeout`
/// before reads restart the clock: the length of the HTTP/2 preface.
pub const OPENING: usize = 24;
/// The shortest time between two log lines about accept errors.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// A listener whose `accept` backs off on errors (see the module docs).
#[derive(Debug)]
pub struct Acceptor {
    listener: TcpListener,
    idle_timeout: Duration,
    backoff: Duration,
    /// When the last accept error was logged, and failures since.
    logged: Option<Instant>,
    unlogged: u64,
}

impl Acceptor {
    /// Accepts on `listener`; each connection closes after `idle_timeout`
    /// without a byte read.
    pub fn new(listener: TcpListener, idle_timeout: Duration) -> Acceptor {
        Acceptor {
            listener,
            idle_timeout,
            backoff: BACKOFF_MIN,
            logged: None,
            unlogged: 0,
        }
    }

    /// The next connection, waiting out accept errors.
    pub async fn accept(&mut self) -> (IdleTimeout<TcpStream>, SocketAddr) {
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    self.backoff = BACKOFF_MIN;
                    // Small unary calls: do not wait to fill a segment.
                    let _ = stream.set_nodelay(true);
                    return (IdleTimeout::new(stream, self.idle_timeout), peer);
                }
                Err(error) => {
                    self.failed(&error);
                    tokio::time::sleep(self.backoff).await;
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    fn failed(&mut self, error: &io::Error) {
        self.unlogged += 1;
        let now = Instant::now();
        if self
            .logged
            .is_none_or(|at| now.duration_since(at) >= LOG_EVERY)
        {
            let addr = self.listener.local_addr().ok();
            tracing::warn!(
                %error,
                ?addr,
                failures = self.unlogged,
                retry_in_ms = u64::try_from(self.backoff.as_millis()).unwrap_or(u64::MAX),
                "accept failed; backing off"
            );
            self.logged = Some(now);
            self.unlogged = 0;
        }
    }

    /// The connections, as a stream for tonic's `serve_with_incoming`.
    pub fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = io::Result<IdleTimeout<TcpStream>>> + Send + 'static {
        futures_util::stream::unfold(self, |mut acceptor| async move {
            let (stream, _) = acceptor.accept().await;
            Some((Ok(stream), acceptor))
        })
    }
}

/// Plain HTTP over an [`Acceptor`], for `axum::serve`.
impl axum::serve::Listener for Acceptor {
    type Io = IdleTimeout<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        Acceptor::accept(self).await
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// A byte stream whose reads fail with `TimedOut` once nothing was read
/// for its timeout (see the module docs).
#[derive(Debug)]
pub struct IdleTimeout<S> {
    inner: S,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    /// Bytes of the opening still to read; reads restart the clock once 0.
    opening: usize,
}

impl<S> IdleTimeout<S> {
    /// `inner`, closed after `timeout` without a byte read.
    pub fn new(inner: S, timeout: Duration) -> IdleTimeout<S> {
        IdleTimeout {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            opening: OPENING,
        }
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                let read = buf.filled().len() - before;
                if read > 0 {
                    if self.opening == 0 {
                        let next = Instant::now() + self.timeout;
                        self.deadline.as_mut().reset(next);
                    }
                    self.opening = self.opening.saturating_sub(read);
                }
                Poll::Ready(result)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle: nothing read within the idle timeout",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for IdleTimeout<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A silent peer is cut after the timeout; one that writes is not
    /// (tokio's paused clock: no real waiting).
    #[tokio::test(start_paused = true)]
    async fn idle_reads_time_out_and_reads_restart_the_clock() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(10));
        let mut client = client;
        let mut buf = [0u8; OPENING];
        client.write_all(&[b'o'; OPENING]).await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), OPENING);
        tokio::time::advance(Duration::from_secs(9)).await;
        client.write_all(b"x").await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        // 9 s more: 18 s since the start, 9 s since the read.
        tokio::time::advance(Duration::from_secs(9)).await;
        client.write_all(b"y").await.unwrap();
        assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        // Writing does not count as activity.
        server.write_all(b"pong").await.unwrap();
        let started = Instant::now();
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    /// Regression: a peer trickling its opening a byte at a time
    /// restarted the clock with each byte; the opening must now arrive
    /// whole within the timeout of accept.
    #[tokio::test(start_paused = true)]
    async fn a_trickled_opening_times_out_from_accept() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(10));
        let mut buf = [0u8; OPENING];
        let started = Instant::now();
        for _ in 0..OPENING - 1 {
            client.write_all(b"P").await.unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
            tokio::time::advance(Duration::from_millis(300)).await;
        }
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }
}
