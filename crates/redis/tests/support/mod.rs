//! Real Redis servers for the tests: started on free loopback ports, killed
//! on drop; a 3-master cluster; a TCP fault proxy.
#![allow(dead_code)]

pub mod proxy;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_redis::{Options, Redis};

/// A free loopback port: bound, read, released.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// One `redis-server` process.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    dir: std::path::PathBuf,
    cluster: bool,
}

fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Server {
    /// A fresh server (no persistence) on a free port, answering PING.
    pub fn start() -> Server {
        Server::start_on(free_port(), false)
    }

    /// A server on `port`, in cluster mode if `cluster`.
    pub fn start_on(port: u16, cluster: bool) -> Server {
        let dir =
            std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Server {
            port,
            child: None,
            dir,
            cluster,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            cmd.args(["--cluster-enabled", "yes"])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{}.conf", self.port),
                ])
                .args(["--cluster-node-timeout", "2000"]);
        }
        self.child = Some(
            cmd.spawn()
                .expect("redis-server is installed (see .ci/deps)"),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis_cli(self.port, &["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `redis-cli` against this server.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args).unwrap_or_default()
    }

    /// Sends `signal` (`-STOP`, `-CONT`) through the shell's built-in
    /// `kill`, which needs no package beyond `sh`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("sh")
            .args(["-c", &format!("kill {signal} {}", self.pid())])
            .status()
            .expect("sh");
        assert!(status.success());
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub async fn connect(&self) -> Redis {
        let options = Options {
            response_timeout: Duration::from_millis(200),
            connection_timeout: Duration::from_millis(200),
            retries: 2,
        };
        tokio::time::timeout(
            Duration::from_secs(5),
            Redis::connect(&self.url(), &options),
        )
        .await
        .expect("connect in time")
        .expect("connect")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A stopped process must be resumed to die cleanly.
            let _ = Command::new("sh")
                .args(["-c", &format!("kill -CONT {}", child.id())])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A 3-master Redis Cluster, no replicas.
pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub fn start() -> Cluster {
        let nodes: Vec<Server> = (0..3)
            .map(|_| Server::start_on(free_port(), true))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(status.success(), "redis-cli --cluster create failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
                assert!(Instant::now() < deadline, "cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Cluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    pub async fn connect(&self) -> Redis {
        let urls = self.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let options = Options {
            response_timeout: Duration::from_millis(500),
            connection_timeout: Duration::from_millis(500),
            retries: 3,
        };
        tokio::time::timeout(
            Duration::from_secs(10),
            Redis::connect_cluster(&urls, &options),
        )
        .await
        .expect("cluster connect in time")
        .expect("cluster connect")
    }

    /// The node holding `key`'s slot.
    pub fn node_of(&self, key: &[u8]) -> usize {
        let key = String::from_utf8_lossy(key).to_string();
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", &key])
            .parse()
            .expect("a slot number");
        self.nodes
            .iter()
            .position(|n| {
                n.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
                    .parse::<u64>()
                    .is_ok_and(|count| count > 0)
            })
            .unwrap_or(usize::MAX)
    }
}
