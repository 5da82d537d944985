//! Test support shared by tollgate's crates (a dev-dependency only, never
//! published): real `redis-server` processes on free loopback ports, killed
//! on drop, a 3-master Redis Cluster, and a cluster with replicas that a
//! test can reshard, fail over and grow under load ([`cluster`]). `.ci/deps` installs
//! `redis-server` and `redis-cli` where they are missing. [`Stalls`]
//! measures how late the machine schedules a thread, for tests that bound
//! a latency.
//!
//! Everything here panics on failure: it runs in tests and benchmarks,
//! where a missing server is a broken set-up, not an error to handle.

pub mod cluster;
pub mod stalls;
pub mod tls;

pub use cluster::{ReplicatedCluster, key_slot};
pub use stalls::Stalls;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A free loopback port: bound, read, released; never one this process was
/// given before. A port freed by one test's killed server and handed to the
/// next test's server would receive the first test's reconnecting clients
/// (it happened: a module test saw calls it never made).
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        if given.insert(port) {
            return port;
        }
    }
}

/// Starts a process that must listen on a free loopback port, and makes sure
/// the process answering there is the one started.
///
/// Between [`free_port`] releasing a port and the new process binding it,
/// another process (a parallel test, a helper's test on the same machine)
/// may take it: the new process then exits on its bind error while the
/// other one answers, and a test would silently share another test's server
/// and its keys. So: `command(port)` is spawned on a fresh free port, and
/// `owns(port, pid)` is polled until it confirms that the process answering
/// on `port` has the child's pid (e.g. `process_id` in `INFO server`). If
/// the child exits first, the port was taken: a new port is tried, up to 5
/// times. Panics (this is test set-up) if no attempt works within 10 s each.
pub fn spawn_on_free_port(
    what: &str,
    mut command: impl FnMut(u16) -> Command,
    mut owns: impl FnMut(u16, u32) -> bool,
) -> (u16, Child) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = command(port)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: spawn failed ({e}); see .ci/deps"));
        if wait_until_owned(&mut child, port, &mut owns) {
            return (port, child);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("{what}: no free port could be bound in 5 attempts");
}

/// Polls `owns(port, pid)` until it holds (true), or until the child exits
/// (false: its port was taken). Panics after 10 s.
fn wait_until_owned(child: &mut Child, port: u16, owns: &mut impl FnMut(u16, u32) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        if owns(port, child.id()) {
            return true;
        }
        assert!(
            Instant::now() < deadline,
            "the process on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the Redis (or Sentinel) answering plain-text `redis-cli` on
/// `port` is the process `pid`, by its `INFO server` `process_id`.
pub fn redis_is_process(port: u16, pid: u32) -> bool {
    redis_is_process_with(port, pid, &[])
}

/// [`redis_is_process`] with `redis-cli` options before the command (e.g.
/// `--tls --cacert … --cert … --key … --user … --pass …` for a TLS port).
pub fn redis_is_process_with(port: u16, pid: u32, options: &[&std::ffi::OsStr]) -> bool {
    Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--no-auth-warning",
        ])
        .args(options)
        .args(["INFO", "server"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|line| line.trim() == format!("process_id:{pid}"))
        })
}

/// Whether process `pid` holds the socket listening on TCP `port` (any
/// local address): the listening socket's inode in `/proc/net/tcp{,6}`
/// found among `/proc/<pid>/fd`. For a test that starts a server binary
/// on a port from [`free_port`] and must know that what answers there is
/// its own child, not another test's server that took the port first.
/// Linux only; `false` where `/proc` cannot be read.
pub fn process_listens_on(pid: u32, port: u16) -> bool {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    // sl local_address rem_address st … uid timeout inode
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let local_port = fields.get(1)?.rsplit(':').next()?;
                    let listening = *fields.get(3)? == "0A";
                    (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                        .then(|| fields.get(9).map(|inode| format!("socket:[{inode}]")))
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|link| {
            inodes
                .iter()
                .any(|inode| link.as_os_str() == inode.as_str())
        })
}

/// The Redis module's shared library (`tollgate-redis-module`), built once
/// per test binary by `cargo build` into the test's own target directory
/// (a no-op when the test's build made it already), in the test's profile.
pub fn redis_module_library() -> &'static std::path::Path {
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        // target/<profile>/deps/<test>-<hash> → target/<profile>.
        let exe = std::env::current_exe().expect("test executable");
        let profile_dir = exe
            .parent()
            .and_then(|deps| deps.parent())
            .expect("target/<profile>/deps");
        let target_dir = profile_dir.parent().expect("target dir");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "-p", "tollgate-redis-module", "--target-dir"])
            .arg(target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo");
        assert!(status.success(), "cargo build -p tollgate-redis-module");
        let path = profile_dir.join("libtollgate_redis_module.so");
        assert!(path.exists(), "{} was not built", path.display());
        path
    })
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
        RedisServer::start_free(false)
    }

    /// A fresh server on a free port that it is checked to own (see
    /// [`spawn_on_free_port`]), in cluster mode if `cluster`.
    fn start_free(cluster: bool) -> RedisServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let (port, child) = spawn_on_free_port(
            "redis-server",
            |port| RedisServer::command(port, dir.path(), cluster),
            redis_is_process,
        );
        RedisServer {
            port,
            child: Some(child),
            dir,
            cluster,
        }
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

    fn command(port: u16, dir: &std::path::Path, cluster: bool) -> Command {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", dir.to_str().expect("utf-8 temp dir")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", "2000"]);
        }
        command
    }

    /// Starts the process on its own port again; panics if another process
    /// took the port meanwhile (a test must never talk to another's server).
    fn spawn(&mut self) {
        let mut child = RedisServer::command(self.port, self.dir.path(), self.cluster)
            .spawn()
            .expect("redis-server is installed (see .ci/deps)");
        let owned = wait_until_owned(&mut child, self.port, &mut redis_is_process);
        self.child = Some(child);
        assert!(owned, "port {} was taken by another process", self.port);
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
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_free(true)).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_never_handed_out_twice() {
        let ports: Vec<u16> = (0..500).map(|_| free_port()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    /// The bug behind a flaky CI run: a port taken between `free_port` and
    /// the bind left the new redis-server dead while another test's server
    /// answered PING, and the test shared that server's keys. Here the first
    /// attempt's port is taken by a rogue server first: a PING there still
    /// answers (what the old start-up check trusted), but the process is not
    /// ours, so a second port is used.
    #[test]
    fn a_port_taken_before_the_bind_is_never_mistaken_for_ours() {
        let mut rogue = None;
        let mut attempts = 0;
        let dir = tempfile::tempdir().expect("temp dir");
        let (port, mut child) = spawn_on_free_port(
            "redis-server",
            |port| {
                attempts += 1;
                if rogue.is_none() {
                    rogue = Some(RedisServer::start_on(port, false));
                }
                RedisServer::command(port, dir.path(), false)
            },
            |port, pid| {
                // What the old check saw: the rogue answers on the first port.
                redis_is_process(port, pid)
            },
        );
        let rogue = rogue.expect("the rogue server");
        assert_eq!(attempts, 2, "the taken port was retried");
        assert_ne!(port, rogue.port);
        assert_eq!(redis_cli(rogue.port, &["PING"]).as_deref(), Some("PONG"));
        assert!(redis_is_process(port, child.id()));
        assert!(!redis_is_process(rogue.port, child.id()));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_listening_socket_is_found_in_its_own_process_only() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(process_listens_on(std::process::id(), port));
        // Another process (a redis-server on its own port) holds it not.
        let other = RedisServer::start();
        assert!(!process_listens_on(other.pid(), port));
        assert!(process_listens_on(other.pid(), other.port));
        drop(listener);
        assert!(!process_listens_on(std::process::id(), port));
    }
}
