//! A hostile client: HTTP/1.1 written byte for byte on a socket bound to a
//! loopback address of its own. A URL library would resolve `..`, `%2e`
//! and `//` before sending (reqwest does), and would refuse many of the
//! requests the hostile tests must send; this sends the request target
//! exactly as written, any headers (any number, repeated), and any body.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

use crate::forward_auth::support::TIMEOUT;

/// A request to send as is.
#[derive(Clone)]
pub struct Raw<'a> {
    pub method: &'a str,
    /// The request target, unchanged: `/x/../limited?a=1`.
    pub target: &'a str,
    /// Header lines after `Host` and `x-test` (the upstream's client name).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl<'a> Raw<'a> {
    pub fn get(target: &'a str) -> Raw<'a> {
        Raw {
            method: "GET",
            target,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Raw<'a> {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the client got.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// Header lines, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    pub elapsed: Duration,
}

impl Answer {
    /// Every value of header `name` (lower case).
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Sends `request` to `proxy` from `source`, as the client named `test`,
/// on a connection of its own (`Connection: close`); panics when no
/// answer comes within [`TIMEOUT`].
pub async fn send(proxy: SocketAddr, source: [u8; 4], test: &str, request: &Raw<'_>) -> Answer {
    let started = Instant::now();
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::from(source), 0))
        .expect("bind the client's address");
    let mut stream = tokio::time::timeout(TIMEOUT, socket.connect(proxy))
        .await
        .expect("connect timed out")
        .expect("connect");
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {proxy}\r\nx-test: {test}\r\n",
        request.method, request.target
    );
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !request.body.is_empty() || request.method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", request.body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    // A proxy that refuses before reading the body may close early: the
    // answer is still read.
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&request.body);
    let _ = stream.write_all(&bytes).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(TIMEOUT, async {
        let mut buf = [0u8; 16 << 10];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                // A reset after the answer (a body left unread).
                Err(_) => break,
            }
        }
    })
    .await;
    read.unwrap_or_else(|_| panic!("{test}: no answer to {} in {TIMEOUT:?}", request.target));
    parse(&answer, started.elapsed()).unwrap_or_else(|| {
        panic!(
            "{test}: not an HTTP answer to {}: {answer:?}",
            request.target
        )
    })
}

fn parse(answer: &[u8], elapsed: Duration) -> Option<Answer> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(Answer {
        status,
        headers,
        elapsed,
    })
}
