//! A small TCP fault proxy between the client and one Redis server.
//!
//! Modes, switchable at any time and applied to open connections too:
//! - `Pass`: forward both ways;
//! - `Latency(d)`: forward each chunk after `d`;
//! - `BlackHole`: accept and read, never forward nor answer; a connection
//!   that saw the black hole stays in it (as on a dead route: the bytes it
//!   swallowed are gone), only new connections pass again;
//! - `Reset`: reset every connection (RST) as soon as it is seen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Latency(Duration),
    BlackHole,
    Reset,
}

pub struct Proxy {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let shared = mode.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = shared.clone();
                tokio::spawn(async move {
                    if current(&mode) == Mode::Reset {
                        reset(client);
                        return;
                    }
                    let Ok(Ok(server)) = tokio::time::timeout(
                        Duration::from_secs(1),
                        TcpStream::connect(("127.0.0.1", upstream)),
                    )
                    .await
                    else {
                        reset(client);
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    relay(client, server, mode).await;
                });
            }
        });
        Proxy { port, mode, task }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().expect("mode lock") = mode;
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn current(mode: &Mutex<Mode>) -> Mode {
    *mode.lock().expect("mode lock")
}

#[allow(deprecated)]
fn reset(stream: TcpStream) {
    // Linger 0: close with RST instead of FIN.
    let _ = stream.set_linger(Some(Duration::ZERO));
    drop(stream);
}

async fn relay(client: TcpStream, server: TcpStream, mode: Arc<Mutex<Mode>>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let holed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up_holed = holed.clone();
    let up_mode = mode.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Poll the mode while idle too, so that a reset reaches open connections.
            let read =
                tokio::time::timeout(Duration::from_millis(20), client_read.read(&mut buf)).await;
            let mut mode = current(&up_mode);
            if mode == Mode::Reset {
                return;
            }
            // SeqCst: two flags read by two tasks; simplest order, no hot path.
            if mode == Mode::BlackHole {
                up_holed.store(true, std::sync::atomic::Ordering::SeqCst);
            } else if up_holed.load(std::sync::atomic::Ordering::SeqCst) {
                mode = Mode::BlackHole;
            }
            let n = match read {
                Err(_) => continue,
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => n,
            };
            match mode {
                Mode::BlackHole => continue,
                Mode::Latency(d) => tokio::time::sleep(d).await,
                _ => {}
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let down_holed = holed.clone();
    let down_mode = mode.clone();
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let read =
                tokio::time::timeout(Duration::from_millis(20), server_read.read(&mut buf)).await;
            let mut mode = current(&down_mode);
            if mode == Mode::Reset {
                return;
            }
            // SeqCst: as above.
            if mode == Mode::BlackHole {
                down_holed.store(true, std::sync::atomic::Ordering::SeqCst);
            } else if down_holed.load(std::sync::atomic::Ordering::SeqCst) {
                mode = Mode::BlackHole;
            }
            let n = match read {
                Err(_) => continue,
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => n,
            };
            match mode {
                Mode::BlackHole => continue,
                Mode::Latency(d) => tokio::time::sleep(d).await,
                _ => {}
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
    // Dropping the halves closes both sockets; in Reset mode the client sees
    // the connection end at once (the reunited stream is reset).
}
