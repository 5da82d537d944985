//! Test support shared by tollgate's crates (a dev-dependency only, never
//! published): real `redis-server` processes on free loopback ports, killed
//! on drop, and a 3-master Redis Cluster. `.ci/deps` installs
//! `redis-server` and `redis-cli` where they are missing.
//!
//! Everything here panics on failure: it runs in tests and benchmarks,
//! where a missing server is a broken set-up, not an error to handle.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port: bound, read, released.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// `redis-cli` against `port`: its trimmed output if it succeeded.
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

/// One `redis-server` process without persistence.
pub struct RedisServer {
    /// The loopback port it listens on.
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    cluster: bool,
}

impl RedisServer {
    /// A fresh server on a free port, answering PING.
    pub fn start() -> RedisServer {
        RedisServer::start_on(free_port(), false)
    }

    /// A fresh server on `port`, in cluster mode if `cluster`.
    pub fn start_on(port: u16, cluster: bool) -> RedisServer {
        let mut server = RedisServer {
            port,
            child: None,
            dir: tempfile::tempdir().expect("temp dir"),
            cluster,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.path().to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000"]);
        }
        self.child = Some(
            command
                .spawn()
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

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `redis-cli` against this server; empty if it failed.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args).unwrap_or_default()
    }

    /// Every key matching `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        self.cli(&["--scan", "--pattern", pattern])
            .lines()
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect()
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
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A stopped process must be resumed to die cleanly.
            self.signal("-CONT");
        }
        self.kill();
    }
}

/// A 3-master Redis Cluster, no replicas.
pub struct RedisCluster {
    /// The three masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three cluster-mode servers joined by `redis-cli --cluster create`,
    /// once every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_on(free_port(), true))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
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
        RedisCluster { nodes }
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node holding `key`'s slot (`usize::MAX` if none has a key there).
    pub fn node_of(&self, key: &[u8]) -> usize {
        let key = String::from_utf8_lossy(key).to_string();
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", &key])
            .parse()
            .expect("a slot number");
        self.nodes
            .iter()
            .position(|node| {
                node.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
                    .parse::<u64>()
                    .is_ok_and(|count| count > 0)
            })
            .unwrap_or(usize::MAX)
    }
}
