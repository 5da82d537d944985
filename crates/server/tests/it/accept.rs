//! The accept loop and idle connections.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// Reads until the server closes the connection (EOF or reset).
async fn closed_by_server(stream: &mut tokio::net::TcpStream) {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Regression: a request whose headers never end, and a
/// client that connects and says nothing, were held forever. With a short
/// `idle_timeout_ms` both listeners close them.
#[tokio::test]
async fn half_open_connections_are_closed_after_the_idle_timeout() {
    let server = start_with("  idle_timeout_ms: 200\n", RULES).await;
    for (name, addr, bytes) in [
        (
            "grpc, half a preface",
            server.grpc,
            &b"PRI * HTTP/2.0\r\n"[..],
        ),
        ("grpc, silent", server.grpc, &b""[..]),
        (
            "http, headers never end",
            server.http,
            &b"POST /v1/check HTTP/1.1\r\nHost: x\r\n"[..],
        ),
        ("http, silent", server.http, &b""[..]),
    ] {
        let mut stream = within(tokio::net::TcpStream::connect(addr))
            .await
            .expect(name);
        stream.write_all(bytes).await.expect(name);
        within(closed_by_server(&mut stream)).await;
    }
    // A live gRPC client keeps working across several idle periods.
    let mut client = server.grpc_client().await;
    for _ in 0..3 {
        within(client.should_rate_limit(request("rl", vec![descriptor(&[("internal", "x")])])))
            .await
            .expect("answered");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    server.stop().await;
}

/// The environment variable that turns [`helper_server_out_of_descriptors`]
/// into the helper process.
const HELPER: &str = "TOLLGATE_TEST_EMFILE_HELPER";

/// Regression: with its descriptors exhausted, the gRPC
/// accept loop spun a core at 100 % and logged nothing. A helper process
/// (this test binary, re-run on the helper test below) serves with its
/// descriptor limit lowered to what it holds plus a few; 40 connections
/// exhaust it, leaving the rest in the kernel's backlog, where every
/// `accept()` fails with EMFILE. Over the next 2 s the helper must use a
/// small part of one core (it spun: 2 s), and log the error.
#[cfg(target_os = "linux")]
#[test]
fn out_of_descriptors_backs_off_and_logs() {
    let mut helper = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "accept::helper_server_out_of_descriptors",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the helper");
    let pid = helper.id();
    let mut lines = BufReader::new(helper.stdout.take().expect("stdout")).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            // libtest may print its "test … " before ours on the same line.
            line.split_once("GRPC ")
                .map(|(_, addr)| addr.trim().to_owned())
        })
        .expect("the helper's address");
    let connections: Vec<std::net::TcpStream> = (0..40)
        .map(|_| std::net::TcpStream::connect(&addr).expect("connect"))
        .collect();
    // Let the back-off reach its longer pauses, then measure.
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_ticks(pid) - before;
    drop(connections);
    drop(helper.stdin.take());
    let _ = helper.kill();
    let _ = helper.wait();
    let mut stderr = String::new();
    helper
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    // 100 ticks a second: spinning used up to 200 (57 on a loaded
    // machine); backing off uses about 0.
    eprintln!("helper CPU: {used} ticks in 2 s");
    assert!(used < 20, "the helper used {used} ticks of CPU in 2 s");
    assert!(
        stderr.contains("accept failed") && stderr.contains("Too many open files"),
        "{stderr}"
    );
}

/// User plus system CPU time of `pid`, in clock ticks (`/proc/pid/stat`).
#[cfg(target_os = "linux")]
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name, which ends with ')': utime and stime
    // are the 14th and 15th fields, the 12th and 13th after it.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// The helper of [`out_of_descriptors_backs_off_and_logs`]: does nothing
/// unless that test started it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn helper_server_out_of_descriptors() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let server = start(RULES).await;
    let open = std::fs::read_dir("/proc/self/fd").expect("fds").count() as u64;
    let limit = rustix::process::Rlimit {
        current: Some(open + 8),
        maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
    };
    rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).expect("setrlimit");
    println!("GRPC {}", server.grpc);
    std::io::stdout().flush().expect("flush");
    // Serve until the parent closes stdin.
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await
    .expect("stdin");
    server.stop().await;
}

/// Sends `opening` at once, then the bytes of `trickle` one every 200 ms
/// (cycling); how long until the server closed the connection, or `None`
/// if it was still open after `limit`.
async fn trickled(
    addr: std::net::SocketAddr,
    opening: &[u8],
    trickle: &[u8],
    limit: Duration,
) -> Option<Duration> {
    let stream = within(tokio::net::TcpStream::connect(addr))
        .await
        .expect("connect");
    let started = std::time::Instant::now();
    let (mut read, mut write) = stream.into_split();
    let reader = async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    let writer = async move {
        if write.write_all(opening).await.is_err() {
            return;
        }
        for &byte in trickle.iter().cycle() {
            if write.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        () = reader => Some(started.elapsed()),
        () = writer => Some(started.elapsed()),
        () = tokio::time::sleep(limit) => None,
    }
}

/// The HTTP/2 connection preface, an empty SETTINGS frame, and the 9-byte
/// header of a HEADERS frame (stream 1) announcing 16,384 bytes that never
/// all come.
fn h2_endless_headers() -> Vec<u8> {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&[0, 0x40, 0, 1, 0x4, 0, 0, 0, 1]);
    bytes
}

/// Regression: a client trickling a byte every 200 ms was never
/// closed, since each byte restarted the idle clock: on HTTP/1 a request
/// head that never ends, on gRPC a connection preface sent byte by byte.
/// The idle timeout now bounds the whole head and the preface (and an
/// HTTP/2 frame that never ends, by PINGs the trickler does not answer).
/// With `idle_timeout_ms: 300`, each is closed long before 3 s (the
/// preface alone takes 4.8 s to trickle).
#[tokio::test]
async fn a_client_trickling_bytes_is_closed_after_the_idle_timeout() {
    let server = start_with("  idle_timeout_ms: 300\n", RULES).await;
    let limit = Duration::from_secs(3);
    let h2 = h2_endless_headers();
    for (name, addr, opening, trickle) in [
        (
            "grpc, the preface trickled",
            server.grpc,
            &b""[..],
            &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
        ),
        (
            "grpc, a HEADERS frame that never ends",
            server.grpc,
            &h2[..],
            &b"a"[..],
        ),
        (
            "http/1, a request head that never ends",
            server.http,
            &b"POST /v1/check HTTP/1.1\r\nHost: x\r\nX-Slow: "[..],
            &b"a"[..],
        ),
        (
            "http/1, the request line trickled",
            server.http,
            &b""[..],
            &b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"[..],
        ),
        (
            "http/2, a HEADERS frame that never ends",
            server.http,
            &h2[..],
            &b"a"[..],
        ),
    ] {
        let closed = trickled(addr, opening, trickle, limit).await;
        assert!(closed.is_some(), "{name}: still open after {limit:?}");
    }
    // Live clients keep working.
    let mut client = server.grpc_client().await;
    within(client.should_rate_limit(request("rl", vec![descriptor(&[("internal", "x")])])))
        .await
        .expect("answered");
    let health = within(http_client().get(server.url("/healthz")).send())
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    server.stop().await;
}
