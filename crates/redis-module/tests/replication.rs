//! Replication by effects, against real servers: a master with the module
//! and the AOF on, a replica attached with `--replicaof` that does **not**
//! load the module, and a third server started from a copy of the master's
//! AOF (no module either). After admissions of every kind on the master
//! (GCRA, fixed and sliding windows, foreign values replaced, a state whose
//! length changes, a refund that deletes), the replica and the AOF hold
//! exactly the master's keys, values and absolute expiry times: a failover
//! or a restart from the AOF loses no admission and re-credits nothing.
//!
//! The module is built by `cargo build -p tollgate-redis-module` from this
//! test (a no-op when the test's own build made it) and loaded with
//! `--loadmodule`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate_testkit::{redis_is_process, spawn_on_free_port};

/// One `redis-server`, killed (and its directory removed) on drop.
struct Server {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Server {
    /// A server in a fresh directory named after `role`, with `args`.
    fn start(role: &str, args: &[&str], setup: impl FnOnce(&Path)) -> Server {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tollgate-replication-{}-{role}-{}",
            std::process::id(),
            // Relaxed: a unique number, nothing else is published.
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        setup(&dir);
        // The port is checked to be this server's own (see the testkit).
        let (port, child) = spawn_on_free_port(
            "redis-server",
            |port| {
                let mut command = Command::new("redis-server");
                command
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", ""])
                    .arg("--dir")
                    .arg(&dir)
                    .args(args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                command
            },
            redis_is_process,
        );
        Server { port, child, dir }
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `TOLLGATE.DECIDE` with `args`, the reply's integers.
    fn decide(&self, args: &[&str]) -> Vec<i64> {
        let mut command = vec!["TOLLGATE.DECIDE"];
        command.extend_from_slice(args);
        let reply = self.cli(&command);
        reply
            .lines()
            .map(|l| {
                l.parse()
                    .unwrap_or_else(|_| panic!("{args:?} replied {reply}"))
            })
            .collect()
    }

    /// `TOLLGATE.LEAN` with `args`: its one integer (the lean reply).
    fn lean(&self, args: &[&str]) -> i64 {
        let mut command = vec!["TOLLGATE.LEAN"];
        command.extend_from_slice(args);
        let reply = self.cli(&command);
        reply
            .parse()
            .unwrap_or_else(|_| panic!("{args:?} replied {reply}"))
    }

    /// Every key with its type, value and absolute expiry (ms), sorted.
    fn dump(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .cli(&["--scan"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys.into_iter()
            .map(|key| {
                let kind = self.cli(&["TYPE", &key]);
                let value = match kind.as_str() {
                    "string" => self.cli(&["GET", &key]),
                    "hash" => {
                        let flat = self.cli(&["HGETALL", &key]);
                        let lines: Vec<&str> = flat.lines().collect();
                        let mut pairs: Vec<String> = lines.chunks(2).map(|p| p.join("=")).collect();
                        pairs.sort();
                        pairs.join(",")
                    }
                    other => panic!("{key} holds a {other}"),
                };
                let expiry = self.cli(&["PEXPIRETIME", &key]);
                format!("{key} {kind} {value} @{expiry}")
            })
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

// GCRA on the server's clock: 1 per 1,000 s, burst 20 (every admission
// adds 1,000 s of debt and a longer TTL: no key expires while a loaded
// machine runs the test); the fourth value is the modulus m for the
// server's clock (µs) and scale 1.
const GCRA: [&str; 6] = [
    "g",
    "1",
    "1000000000000",
    "20000000000000",
    "9000000000000",
    "0",
];
const CHECK: [&str; 5] = ["c", "", "1", "1000", "0"];

fn limit<'a>(key: &'a str, params: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![key];
    args.extend_from_slice(params);
    args
}

fn call<'a>(limits: &[&Vec<&'a str>], tail: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&str> = limits.iter().flat_map(|l| l.iter()).copied().collect();
    args.extend_from_slice(tail);
    args
}

#[test]
fn replicas_and_the_aof_hold_exactly_the_masters_state() {
    let module = tollgate_testkit::redis_module_library()
        .to_str()
        .expect("utf-8 path")
        .to_owned();
    let master = Server::start(
        "master",
        &[
            "--loadmodule",
            &module,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ],
        |_| {},
    );
    let port = master.port.to_string();
    let replica = Server::start(
        "replica",
        &["--appendonly", "no", "--replicaof", "127.0.0.1", &port],
        |_| {},
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica did not sync");
        std::thread::sleep(Duration::from_millis(20));
    }

    // GCRA: admissions, then a denial (nothing written).
    let gcra = limit("g:hot", &GCRA);
    for _ in 0..20 {
        assert_eq!(master.decide(&call(&[&gcra], &CHECK))[0], 1);
    }
    assert_eq!(master.decide(&call(&[&gcra], &CHECK))[0], 0);
    // Foreign values replaced by an admission: a hash, a short string,
    // a string of another length than the state's.
    master.cli(&["HSET", "g:hash", "f", "v"]);
    master.cli(&["SET", "g:short", "x"]);
    master.cli(&["SET", "g:long", "12345678901234567890123"]);
    for key in ["g:hash", "g:short", "g:long"] {
        assert_eq!(master.decide(&call(&[&limit(key, &GCRA)], &CHECK))[0], 1);
    }
    // A fixed window whose count grows from one to two digits, and a
    // sliding window (a hash), decided together (all or nothing).
    let fixed = limit("f:w", &["f", "3600000000", "100", "0", "0", "0"]);
    let sliding = limit("s:w", &["s", "3600000000", "4", "100", "0", "0"]);
    for _ in 0..12 {
        assert_eq!(master.decide(&call(&[&fixed, &sliding], &CHECK))[0], 1);
    }
    // The lean command writes what the general one writes: replicated the
    // same way (admitted: a reply of at least 0).
    let lean_gcra = limit("g:lean", &GCRA);
    let lean_fixed = limit("f:lean", &["f", "3600000000", "100", "0", "0", "0"]);
    for _ in 0..12 {
        assert!(master.lean(&call(&[&lean_gcra], &CHECK)) >= 0);
        assert!(master.lean(&call(&[&lean_fixed], &CHECK)) >= 0);
    }
    // Many sliding windows (hashes), one write each: the master gives each
    // the absolute expiry it replicates. (It once set a relative one, read
    // from its clock a little later than the module's reading: across a
    // millisecond boundary the replica's expiry differed by one, which
    // enough keys make near certain to show.)
    let wheels: Vec<String> = (0..100).map(|k| format!("s:{k:03}")).collect();
    for key in &wheels {
        let wheel = limit(key, &["s", "3600000000", "4", "100", "0", "0"]);
        assert_eq!(master.decide(&call(&[&wheel], &CHECK))[0], 1);
    }
    // A refund of a whole fixed window deletes its key.
    let gone = limit("f:gone", &["f", "3600000000", "100", "0", "0", "0"]);
    let now = master.decide(&call(&[&gone], &["c", "", "3", "1000", "0"]))[2].to_string();
    let refund = master.decide(&call(&[&gone], &["r", "", "3", "1000", &now]));
    assert_eq!(refund[0], 1);

    let expected = master.dump();
    let keys: Vec<&str> = expected
        .iter()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    let mut want = vec![
        "f:lean", "f:w", "g:hash", "g:hot", "g:lean", "g:long", "g:short",
    ];
    want.extend(wheels.iter().map(String::as_str));
    want.push("s:w");
    assert_eq!(keys, want, "{expected:#?}");
    assert!(
        expected.iter().all(|l| !l.ends_with("@-1")),
        "every key has an expiry: {expected:#?}"
    );

    // The replica has acknowledged everything the master propagated.
    assert_eq!(master.cli(&["WAIT", "1", "10000"]), "1");
    assert_holds(&replica.dump(), &expected, "the replica");

    // A server started from the AOF (fsynced on every write) alone.
    let from_aof = Server::start("aof", &["--appendonly", "yes"], |dir| {
        copy_dir(
            &master.dir.join("appendonlydir"),
            &dir.join("appendonlydir"),
        );
    });
    assert_holds(&from_aof.dump(), &expected, "the AOF");
}

/// `got`, dumped after `expected`, holds exactly `expected`'s keys, values
/// and expiry times, but for keys whose expiry passed before the dump
/// ended: those are gone on the master too, and may be gone here (a
/// loaded machine once took longer than a key's TTL between the dumps).
fn assert_holds(got: &[String], expected: &[String], what: &str) {
    let ended = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let expiry = |line: &String| -> i64 {
        line.rsplit_once(" @")
            .and_then(|(_, at)| at.parse().ok())
            .unwrap_or_else(|| panic!("no expiry in {line}"))
    };
    let live = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| expiry(l) > ended)
            .cloned()
            .collect()
    };
    assert_eq!(live(got), live(expected), "{what} differs");
    for line in got {
        assert!(
            expected.contains(line),
            "{what} holds {line}, the master did not"
        );
    }
}
