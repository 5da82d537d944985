//! The native module (`crates/redis-module`) against real servers that load
//! it: the core's parity vectors, the shared scenarios, detection and the
//! fallback to the scripts, input validation and per-key errors, on a single
//! server and on a 3-master cluster.
//!
//! The module is built by `cargo build -p tollgate-redis-module` from this
//! test (a no-op when `cargo test --workspace` has built it already) into
//! this test's own target directory, and loaded with `--loadmodule`.

mod scenarios;
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::AsyncCommands as _;
use scenarios::*;
use serde::Deserialize;
use tollgate::{FixedWindow, Gcra, ManualClock, Nanos, Quota, SlidingWindow};
use tollgate_redis::{FailurePolicy, Limit, Options, Redis, RedisLimiter, Source};
use tollgate_testkit::{redis_is_process, spawn_on_free_port};

/// One `redis-server` with the module loaded, killed on drop.
struct ModuleServer {
    port: u16,
    child: Child,
    _dir: tempfile_dir::Dir,
}

mod tempfile_dir {
    /// A directory removed on drop (the server's working directory).
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new(port: u16) -> Dir {
            let path =
                std::env::temp_dir().join(format!("tollgate-module-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&path).expect("temp dir");
            Dir(path)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl ModuleServer {
    fn start(cluster: bool) -> ModuleServer {
        let mut dirs = Vec::new();
        // The port is checked to be this server's own (see the testkit).
        let (port, child) = spawn_on_free_port(
            "redis-server --loadmodule",
            |port| {
                let dir = tempfile_dir::Dir::new(port);
                let mut command = Command::new("redis-server");
                command
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(&dir.0)
                    .arg("--loadmodule")
                    .arg(tollgate_testkit::redis_module_library())
                    .args(["--enable-module-command", "local"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                if cluster {
                    command
                        .args(["--cluster-enabled", "yes"])
                        .args(["--cluster-config-file", "nodes.conf"])
                        .args(["--cluster-node-timeout", "2000"]);
                }
                dirs.push(dir);
                command
            },
            redis_is_process,
        );
        ModuleServer {
            port,
            child,
            _dir: dirs.pop().expect("one directory per attempt"),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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

    /// The module's decisions: `TOLLGATE.DECIDE` and `TOLLGATE.LEAN` calls.
    fn decisions(&self) -> u64 {
        self.calls("tollgate.decide") + self.calls("tollgate.lean")
    }

    /// `calls` of `command` in `INFO commandstats` (0 if never called).
    fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for ModuleServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn options() -> Options {
    Options {
        response_timeout: Duration::from_millis(500),
        connection_timeout: Duration::from_millis(500),
        retries: 3,
    }
}

async fn connect(server: &ModuleServer) -> Redis {
    Redis::connect(&server.url(), &options())
        .await
        .expect("connect")
}

// ---------------------------------------------------------------------------
// The parity vectors (as in tests/parity.rs).

#[derive(Deserialize)]
struct Case {
    name: String,
    algorithm: String,
    quota: QuotaSpec,
    slots: Option<u32>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct QuotaSpec {
    limit: u64,
    period_ns: u64,
    burst: u64,
}

#[derive(Deserialize)]
struct Step {
    now_ns: u64,
    cost: u64,
    expect: Expect,
}

#[derive(Deserialize, Debug, PartialEq, Eq)]
struct Expect {
    allowed: bool,
    limit: u64,
    remaining: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

fn limit_of(case: &Case) -> Option<Limit> {
    let q = Quota::new(case.quota.limit, Duration::from_nanos(case.quota.period_ns))
        .and_then(|q| q.with_burst(case.quota.burst))
        .expect("valid quota");
    Some(match case.algorithm.as_str() {
        "gcra" => Gcra::new(q).expect("gcra").into(),
        "fixed_window" => FixedWindow::new(q).expect("fixed window").into(),
        "sliding_window" => SlidingWindow::new(q, case.slots.expect("slots"))
            .expect("sliding window")
            .into(),
        _ => return None,
    })
}

/// Replays every vector through `redis`; returns the cases replayed.
async fn replay_vectors(redis: &Redis, tag: &str) -> usize {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/tests/vectors/core.json"
    );
    let cases: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("core.json")).expect("json");
    let mut replayed = 0;
    for case in &cases {
        let Some(limit) = limit_of(case) else {
            continue;
        };
        let clock = ManualClock::new();
        let limiter = RedisLimiter::builder(redis.clone(), format!("{tag}-{}", case.name))
            .limit(limit)
            .manual_time(clock.clone())
            .failure_policy(FailurePolicy::FailClosed)
            .deadline(Duration::from_secs(2))
            .build()
            .expect("limiter");
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(Nanos::new(step.now_ns));
            let outcome = limiter
                .check_outcome(b"vector-key", step.cost)
                .await
                .expect("cost within capacity");
            assert_eq!(outcome.source, Source::Redis, "{} step {i}", case.name);
            let d = outcome.decision;
            let got = Expect {
                allowed: d.is_allowed(),
                limit: d.limit(),
                remaining: d.remaining(),
                retry_after_ns: u64::try_from(d.retry_after().as_nanos()).expect("u64"),
                reset_after_ns: u64::try_from(d.reset_after().as_nanos()).expect("u64"),
            };
            assert_eq!(
                got, step.expect,
                "{} step {i} at {} ns, cost {}",
                case.name, step.now_ns, step.cost
            );
        }
        replayed += 1;
    }
    replayed
}

#[tokio::test]
async fn the_module_passes_the_parity_vectors_and_the_scenarios_on_one_server() {
    let server = ModuleServer::start(false);
    let redis = connect(&server).await;
    assert!(redis.uses_module(), "the module was not detected");

    assert!(replay_vectors(&redis, "v").await >= 30);
    several_limits_are_all_or_nothing(&redis, "and").await;
    let mut raw = support::raw(server.url()).await;
    every_key_has_a_bounded_ttl(&redis, &mut raw, "ttl").await;
    let connections: Vec<Redis> =
        futures_util::future::join_all((0..16).map(|_| connect(&server))).await;
    frozen_time_admits_exactly_capacity(
        &connections,
        gcra(300, Duration::from_secs(3_600), 300),
        "atomic",
        b"k",
        40,
    )
    .await;

    // Every decision went to the module, none to a script: one GCRA or
    // fixed window limit to its lean command, several to the general one.
    assert!(server.decisions() > 100);
    assert!(server.calls("tollgate.lean") > 0);
    assert!(server.calls("tollgate.decide") > 0);
    assert_eq!(server.calls("evalsha") + server.calls("eval"), 0);

    // the controls (always scripts) read by the module's decisions:
    // the same scenarios as through the scripts (tests/controls.rs).
    let decided = server.decisions();
    scenarios::controls::every_control_on_every_shape(&redis, "ctl").await;
    scenarios::controls::refunds_racing_checks_admit_exactly_the_refunds(
        &connections,
        "ctl-race",
        b"k",
        10,
    )
    .await;
    assert!(server.decisions() > decided + 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_passes_the_parity_vectors_on_a_cluster() {
    let nodes: Vec<ModuleServer> = (0..3).map(|_| ModuleServer::start(true)).collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let status = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli");
    assert!(status.success(), "cluster create");
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        while !node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let urls: Vec<String> = nodes.iter().map(ModuleServer::url).collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let redis = Redis::connect_cluster(&urls, &options())
        .await
        .expect("cluster connect");
    assert!(
        redis.uses_module(),
        "the module was not detected on the cluster"
    );

    assert!(replay_vectors(&redis, "v").await >= 30);
    several_limits_are_all_or_nothing(&redis, "and").await;
    scenarios::controls::every_control_on_every_shape(&redis, "ctl").await;
    for (i, node) in nodes.iter().enumerate() {
        assert!(
            node.decisions() > 0,
            "node {i} decided nothing: the keys did not spread"
        );
        // The controls are scripts; every decision is the module's.
        assert!(node.calls("evalsha") + node.calls("eval") > 0, "node {i}");
    }

    // A budget's charge on GCRA limits is the module's on every node: one
    // TOLLGATE.CHARGE each, no peek after it.
    let clock = ManualClock::new();
    let budget = frozen(
        &redis,
        "budget",
        gcra(10, Duration::from_secs(1), 2),
        &clock,
    );
    let count = |f: &dyn Fn(&ModuleServer) -> u64| nodes.iter().map(f).sum::<u64>();
    let charges = || count(&|n| n.calls("tollgate.charge"));
    let (before, decided) = (charges(), count(&ModuleServer::decisions));
    for key in 0..12 {
        let outcome = budget.charge_outcome(format!("k{key}"), 3).await.unwrap();
        assert_eq!(outcome.source, Source::Redis, "k{key}");
        assert!(outcome.decision.is_denied(), "k{key}: 3 over a burst of 2");
    }
    assert_eq!(charges() - before, 12);
    assert_eq!(count(&ModuleServer::decisions), decided);
}

#[tokio::test]
async fn without_the_module_the_scripts_decide_and_a_lost_module_falls_back_at_once() {
    // A server without the module: detected as absent, the scripts decide.
    let plain = support::Server::start();
    let redis = Redis::connect(&plain.url(), &options()).await.unwrap();
    assert!(!redis.uses_module());
    let limiter = RedisLimiter::builder(redis, "plain")
        .limit(gcra(10, Duration::from_secs(1), 2))
        .build()
        .unwrap();
    assert_eq!(
        limiter.check_outcome("k", 1).await.unwrap().source,
        Source::Redis
    );

    // Required but absent: an error at connect time.
    let mut required = tollgate_redis::RedisConfig::single(plain.url());
    required.module = tollgate_redis::ModuleUse::Require;
    assert!(Redis::open(&required).await.is_err());

    // Never: the scripts, even where the module is loaded.
    let server = ModuleServer::start(false);
    let mut never = tollgate_redis::RedisConfig::single(server.url());
    never.module = tollgate_redis::ModuleUse::Never;
    let redis = Redis::open(&never).await.unwrap();
    assert!(!redis.uses_module());
    assert!(!redis.detect_module().await);
    let limiter = RedisLimiter::builder(redis, "never")
        .limit(gcra(10, Duration::from_secs(1), 2))
        .build()
        .unwrap();
    assert_eq!(
        limiter.check_outcome("k", 1).await.unwrap().source,
        Source::Redis
    );
    assert_eq!(server.decisions(), 0);
    drop(server);

    // The module unloaded under a connected client: the same call is
    // answered by the script, and the scripts decide from then on.
    let server = ModuleServer::start(false);
    let redis = connect(&server).await;
    assert!(redis.uses_module());
    let clock = ManualClock::new();
    let limiter = frozen(&redis, "lost", gcra(10, Duration::from_secs(1), 3), &clock);
    assert!(limiter.check("k").await.is_allowed());
    assert_eq!(server.cli(&["MODULE", "UNLOAD", "tollgate"]), "OK");
    for _ in 0..2 {
        let outcome = limiter.check_outcome("k", 1).await.unwrap();
        assert_eq!(outcome.source, Source::Redis);
        assert!(outcome.decision.is_allowed());
    }
    // The script read the state the module wrote: the burst of 3 is spent.
    assert!(limiter.check("k").await.is_denied());
    assert!(!redis.uses_module());
    // (An unloaded command leaves `INFO commandstats`: count the scripts.)
    assert!(server.calls("evalsha") + server.calls("eval") >= 3);
}

/// Regression ("script input"): called directly, cost −2 and 1.5 are refused
/// with an error reply and nothing is written. A foreign value (garbage, a
/// key of another type) is read as no state and replaced by the admission,
/// as the scripts do (`script`, "Foreign values"): never an error.
#[tokio::test]
async fn direct_calls_are_validated_and_foreign_values_are_replaced() {
    let server = ModuleServer::start(false);
    let mut c = support::raw(server.url()).await;
    let call = |key: &str, cost: &str| {
        let mut cmd = redis::cmd("TOLLGATE.DECIDE");
        cmd.arg(key)
            .arg(&["g", "1", "100", "500", "9000000000000", "0"])
            .arg(&["c", "", cost, "10", "0"]);
        cmd
    };
    for cost in ["-2", "1.5", "x", ""] {
        let reply: redis::RedisResult<Vec<i64>> = call("{v}a", cost).query_async(&mut c).await;
        let error = reply.expect_err(cost).to_string();
        assert!(error.contains("cost"), "{cost}: {error}");
        // The lean command (the same arguments) refuses them the same way.
        let mut lean = redis::cmd("TOLLGATE.LEAN");
        lean.arg("{v}a")
            .arg(&["g", "1", "100", "500", "9000000000000", "0"])
            .arg(&["c", "", cost, "10", "0"]);
        let error = lean.query_async::<i64>(&mut c).await.expect_err(cost);
        assert!(error.to_string().contains("cost"), "lean {cost}: {error}");
    }
    let keys: Vec<String> = c.keys("*").await.unwrap();
    assert!(keys.is_empty(), "a refused call wrote {keys:?}");

    let ok: Vec<i64> = call("{v}a", "2").query_async(&mut c).await.unwrap();
    assert_eq!(&ok[..2], &[1, 2]);
    let ttl: i64 = c.pttl("{v}a").await.unwrap();
    // -1 is "no TTL"; -2 (already expired: the TTL is a few ms and the
    // machine may be loaded) is fine.
    assert_ne!(ttl, -1, "an admitted call left a key without TTL");

    // The old GCRA parameters (a burst in place of the modulus) are refused.
    let mut old = redis::cmd("TOLLGATE.DECIDE");
    old.arg("{v}a")
        .arg(&["g", "1", "100", "500", "5", "0"])
        .arg(&["c", "", "1", "10", "0"]);
    let error = old.query_async::<Vec<i64>>(&mut c).await.unwrap_err();
    assert!(error.to_string().contains("tollgate:"), "{error}");

    for (key, foreign) in [("{v}bad", "garbage"), ("{v}old", "200 1700000000000000")] {
        let _: () = c.set(key, foreign).await.unwrap();
        let reply: Vec<i64> = call(key, "1").query_async(&mut c).await.unwrap();
        assert_eq!(&reply[..2], &[1, 1], "{foreign}");
        let state: i64 = c.get(key).await.unwrap();
        assert!(state >= 0, "{foreign} was not replaced by a state");
    }
    let _: () = c.hset("{v}hash", "f", "1").await.unwrap();
    let reply: Vec<i64> = call("{v}hash", "1").query_async(&mut c).await.unwrap();
    assert_eq!(&reply[..2], &[1, 1]);
    let kind: String = redis::cmd("TYPE")
        .arg("{v}hash")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(kind, "string", "the hash was not replaced");
    let ttl: i64 = c.pttl("{v}hash").await.unwrap();
    assert_ne!(ttl, -1, "the replaced key has no TTL");
}

/// `TOLLGATE.LEAN` answers as the lean scripts do, byte for byte, and
/// leaves the same state: the same calls on two keys, one through
/// `gcra.lua`/`fixed.lua`, one through the command, on one server (the
/// lean scripts' off-vector calls, [`scenarios::lean_cases`], then every
/// control's marker). Any other shape is an error reply that writes nothing.
#[tokio::test]
async fn the_lean_command_answers_as_the_lean_scripts() {
    let server = ModuleServer::start(false);
    let mut c = support::raw(server.url()).await;
    type Step = scenarios::lean_cases::Step;
    let mut compact = Vec::new();
    for scenarios::lean_cases::LeanCase {
        name,
        source,
        limit,
        steps,
        ..
    } in scenarios::lean_cases::cases()
    {
        compact.push(0);
        let markers = ["!d", "!a", "!p99999999", "!p1", "!pn"];
        let mut calls: Vec<(Option<&str>, Step)> = steps.iter().map(|s| (None, *s)).collect();
        calls.extend(markers.iter().map(|m| (Some(*m), ("c", 7000, 1))));
        for (i, (marker, (op, now, cost))) in calls.into_iter().enumerate() {
            let (script_key, lean_key) = (format!("{name}:script"), format!("{name}:lean"));
            if let Some(marker) = marker {
                for key in [&script_key, &lean_key] {
                    let _: () = c.set(key, marker).await.unwrap();
                }
            }
            let tail = [op, &now.to_string(), &cost.to_string(), "600000", "0"].map(str::to_owned);
            let by_script: redis::Value = redis::cmd("EVAL")
                .arg(source)
                .arg(1)
                .arg(&script_key)
                .arg(&tail)
                .arg(&limit)
                .arg(0)
                .query_async(&mut c)
                .await
                .unwrap();
            let by_module: redis::Value = redis::cmd("TOLLGATE.LEAN")
                .arg(&lean_key)
                .arg(&limit)
                .arg(0)
                .arg(&tail)
                .query_async(&mut c)
                .await
                .unwrap();
            assert_eq!(
                by_module, by_script,
                "{name} call {i}: {marker:?} {op} {now} {cost}"
            );
            *compact.last_mut().unwrap() +=
                usize::from(marker.is_none() && matches!(by_module, redis::Value::Int(_)));
            let states: [Option<String>; 2] = [
                c.get(&script_key).await.unwrap(),
                c.get(&lean_key).await.unwrap(),
            ];
            assert_eq!(states[1], states[0], "{name} call {i}: the states differ");
        }
    }
    // The same split as the scripts' (tests/parity.rs).
    assert_eq!(compact, scenarios::lean_cases::COMPACT);

    // Several limits, a sliding window, a lease: TOLLGATE.DECIDE's.
    let shapes: [&[&str]; 3] = [
        &[
            "{s}a",
            "g",
            "1",
            "100",
            "500",
            "9000000000000",
            "0",
            "{s}b",
            "f",
            "10",
            "1",
            "0",
            "0",
            "0",
            "c",
            "",
            "1",
            "10",
            "0",
        ],
        &[
            "{s}c", "s", "1000", "10", "5", "0", "0", "c", "", "1", "10", "0",
        ],
        &[
            "{s}d",
            "g",
            "1",
            "100",
            "500",
            "9000000000000",
            "0",
            "l",
            "",
            "1",
            "10",
            "0",
        ],
    ];
    for args in shapes {
        let error = redis::cmd("TOLLGATE.LEAN")
            .arg(args)
            .query_async::<redis::Value>(&mut c)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("TOLLGATE.LEAN"), "{error}");
    }
    let keys: Vec<String> = c.keys("{s}*").await.unwrap();
    assert!(keys.is_empty(), "a refused call wrote {keys:?}");
}

// ---------------------------------------------------------------------------
// Warm-up and budget charges through the module.

/// A case of `crates/core/tests/vectors/warm_up.json`.
#[derive(Deserialize)]
struct WarmCase {
    name: String,
    limit: u64,
    period_ns: u64,
    burst: u64,
    warmup_ns: u64,
    cold_factor: u32,
    steps: Vec<Step>,
}

fn warm_of(case: &WarmCase) -> tollgate::WarmUp {
    let quota = Quota::new(case.limit, Duration::from_nanos(case.period_ns))
        .and_then(|q| q.with_burst(case.burst))
        .expect("valid quota");
    tollgate::WarmUp::with_cold_factor(
        quota,
        Duration::from_nanos(case.warmup_ns),
        case.cold_factor,
    )
    .expect("valid warm-up")
}

fn expect_of(d: tollgate::Decision) -> Expect {
    Expect {
        allowed: d.is_allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        retry_after_ns: u64::try_from(d.retry_after().as_nanos()).expect("u64"),
        reset_after_ns: u64::try_from(d.reset_after().as_nanos()).expect("u64"),
    }
}

/// Module ≡ script ≡ core on warm-up: every step of every warm-up vector
/// (Guava's table among them: 2 per second, 4 s warm-up, cold factor 3,
/// waits of 1.375, 1.125, 0.875, 0.625 then 0.5 s, to the ns) in test-clock
/// mode, a peek then the check, alternately by a client on the module and
/// a client on the scripts on the same key: each reads the state the other
/// wrote, and both give the core's decisions. The module decided its half.
#[tokio::test]
async fn warm_up_through_the_module_is_the_script_and_the_core() {
    let server = ModuleServer::start(false);
    let on_module = connect(&server).await;
    assert!(on_module.uses_module());
    let mut never = tollgate_redis::RedisConfig::single(server.url());
    never.module = tollgate_redis::ModuleUse::Never;
    let on_scripts = Redis::open(&never).await.unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../core/tests/vectors/warm_up.json"
    );
    let cases: Vec<WarmCase> =
        serde_json::from_str(&std::fs::read_to_string(path).expect("warm_up.json")).unwrap();
    assert!(cases.iter().any(|c| c.name.contains("guava")));
    let mut by_module = 0;
    for case in &cases {
        let clock = ManualClock::new();
        let limit = Limit::from(warm_of(case));
        let limiters = [
            frozen(&on_module, &case.name, limit.clone(), &clock),
            frozen(&on_scripts, &case.name, limit, &clock),
        ];
        for (i, step) in case.steps.iter().enumerate() {
            clock.set(Nanos::new(step.now_ns));
            let limiter = &limiters[i % 2];
            let before = server.calls("tollgate.decide");
            let peek = limiter.peek_n(b"k", step.cost).await.expect("peek");
            let outcome = limiter.check_outcome(b"k", step.cost).await.expect("check");
            assert_eq!(outcome.source, Source::Redis, "{} step {i}", case.name);
            for (what, d) in [("peek", peek), ("check", outcome.decision)] {
                assert_eq!(expect_of(d), step.expect, "{} step {i} ({what})", case.name);
            }
            let decided = server.calls("tollgate.decide") - before;
            assert_eq!(
                decided,
                if i % 2 == 0 { 2 } else { 0 },
                "{} step {i}",
                case.name
            );
            by_module += decided;
        }
    }
    assert!(by_module > 20, "{by_module}");
}

/// Several clients (connections of their own, checking at once from
/// threads of a multi-threaded runtime, as processes of a fleet) warm one
/// key together, through the module and through the warm-up script
/// (`warm_up.lua`, on the same server): at each instant every client
/// checks; each call is one atomic step, so the admissions are exactly
/// those of one core limiter checked once per instant, from cold (1.375 s,
/// 1.125 s, 0.875 s, 0.625 s apart, then 0.5 s): a cold fleet starts at
/// `rate / cold_factor` together, not each on its own. Reservations from
/// the fleet queue in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_clients_warm_one_key_together() {
    use tollgate_redis::warm_up::{Op, call};
    let server = ModuleServer::start(false);
    let warm =
        tollgate::WarmUp::new(Quota::per_second(2).unwrap(), Duration::from_secs(4)).unwrap();
    let clock = ManualClock::new();
    let mut clients = Vec::new();
    let mut scripts = Vec::new();
    for _ in 0..4 {
        let redis = connect(&server).await;
        assert!(redis.uses_module());
        clients.push(frozen(&redis, "fleet", Limit::from(warm.clone()), &clock));
        scripts.push(support::raw(server.url()).await);
    }
    let instants: Vec<u64> = (0..96).map(|i| i * 125_000_000).collect();
    let mut model = warm.fresh();
    let mut expected = Vec::new();
    for &t in &instants {
        let (decision, next) = warm.transition(&model, Nanos::new(t), 1);
        if let Some(next) = next {
            model = next;
        }
        if decision.is_allowed() {
            expected.push(t);
        }
    }
    let gaps = |admitted: &[u64]| -> Vec<u64> {
        admitted.windows(2).take(5).map(|w| w[1] - w[0]).collect()
    };
    let cold_start = [
        1_375_000_000,
        1_125_000_000,
        875_000_000,
        625_000_000,
        500_000_000,
    ];

    // Through the module.
    let before = server.calls("tollgate.decide");
    let mut admitted = Vec::new();
    for &t in &instants {
        clock.set(Nanos::new(t));
        let checks = clients.iter().map(|limiter| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check_outcome(b"k", 1).await.unwrap() })
        });
        let outcomes = futures_util::future::join_all(checks).await;
        let wins = outcomes
            .iter()
            .map(|o| o.as_ref().expect("joined"))
            .inspect(|o| assert_eq!(o.source, Source::Redis))
            .filter(|o| o.decision.is_allowed())
            .count();
        assert!(wins <= 1, "module, at {t}: {wins} admitted");
        if wins == 1 {
            admitted.push(t);
        }
    }
    assert_eq!(admitted, expected, "module");
    assert_eq!(gaps(&admitted), cold_start, "module");
    assert_eq!(
        server.calls("tollgate.decide") - before,
        4 * 96,
        "all by the module"
    );

    // Through the warm-up script.
    let mut admitted = Vec::new();
    for &t in &instants {
        let calls = scripts.iter_mut().map(|client| {
            let warm = warm.clone();
            async move {
                call(
                    client,
                    "fleet-script",
                    &warm,
                    Op::Check,
                    Some(Nanos::new(t)),
                    1,
                )
                .await
                .unwrap()
                .0
            }
        });
        let decisions = futures_util::future::join_all(calls).await;
        let wins = decisions.iter().filter(|d| d.is_allowed()).count();
        assert!(wins <= 1, "script, at {t}: {wins} admitted");
        if wins == 1 {
            admitted.push(t);
        }
    }
    assert_eq!(admitted, expected, "script");
    assert_eq!(gaps(&admitted), cold_start, "script");

    // Reservations from every client at one instant queue in arrival order.
    let at = Some(Nanos::new(100_000_000_000));
    let mut ready = Vec::new();
    for client in &mut scripts {
        let (decision, instant) = call(client, "queue", &warm, Op::Reserve, at, 1)
            .await
            .unwrap();
        assert!(decision.is_allowed());
        ready.push(instant.as_u64() - 100_000_000_000);
    }
    assert_eq!(ready, [0, 1_375_000_000, 2_500_000_000, 3_375_000_000]);
}

/// `TOLLGATE.CHARGE` (the charge script's call with op `h`) against the
/// core's `Limiter::charge` on a manual clock: the permits recorded, the
/// debt capped at the core's `DEBT_PERIODS` periods beyond the burst (one
/// charge of 10^12, then repeated ones), and the module's peeks after each
/// charge refused until the debt is repaid, with the core's retry; the
/// charge script gives the same replies (the charge, then the state after
/// it, which is the module's peek of one permit at the same time) and
/// stored states.
#[tokio::test]
async fn the_module_charges_a_budget_as_the_core() {
    let server = ModuleServer::start(false);
    let mut raw = support::raw(server.url()).await;
    let quota = Quota::per_second(10).unwrap().with_burst(5).unwrap();
    let g = Gcra::new(quota).unwrap();
    let clock = ManualClock::new();
    let core = tollgate::Limiter::with_clock(g.clone(), clock.clone());
    let cap =
        g.capacity_ticks() + tollgate::algorithm::DEBT_PERIODS * quota.limit() * g.interval_ticks();
    let m = 9_000_000_000_000_000 / g.scale();
    let limit = |cmd: &mut redis::Cmd, x: u64| {
        cmd.arg("budget")
            .arg("g")
            .arg(g.scale())
            .arg(g.interval_ticks());
        cmd.arg(g.capacity_ticks()).arg(m).arg(x);
    };
    let schedule: [(u64, u64); 7] = [
        (0, 3),
        (0, 4),
        (150_000_000, 1),
        (200_000_000, 1_000_000_000_000),
        (300_000_000, 5),
        (1_000_000_000, 2),
        (17_000_000_000, 1),
    ];
    for (now, cost) in schedule {
        clock.set(Nanos::new(now));
        let mut charge = redis::cmd("TOLLGATE.CHARGE");
        limit(&mut charge, cap);
        charge.arg("h").arg(now).arg(cost).arg(10_000).arg(0);
        let reply: Vec<i64> = charge.query_async(&mut raw).await.unwrap();
        // The charge script on a key of its own: the same reply and state.
        let script = redis::Script::new(tollgate_redis::script::SOURCE_CHARGE);
        let mut invocation = script.key("budget-script");
        invocation.arg("h").arg(now).arg(cost).arg(10_000).arg(0);
        invocation.arg("g").arg(g.scale()).arg(g.interval_ticks());
        invocation.arg(g.capacity_ticks()).arg(m).arg(cap);
        let by_script: Vec<i64> = invocation.invoke_async(&mut raw).await.unwrap();
        assert_eq!(reply, by_script, "at {now}");
        let states: (Option<String>, Option<String>) = redis::pipe()
            .get("budget")
            .get("budget-script")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(states.0, states.1, "at {now}");
        let want = core.charge(cost);
        assert_eq!(
            reply[1],
            i64::try_from(want.recorded()).unwrap(),
            "at {now}: {reply:?}"
        );
        let over = core.peek_n(0).unwrap().is_denied();
        assert_eq!(reply[0], i64::from(!over), "at {now}: {reply:?}");
        for later in [0, 50_000_000, 1_000_000_000] {
            let at = now + later;
            clock.set(Nanos::new(at));
            let mut peek = redis::cmd("TOLLGATE.DECIDE");
            limit(&mut peek, 0);
            peek.arg("p").arg(at).arg(1).arg(10_000).arg(0);
            let got: Vec<i64> = peek.query_async(&mut raw).await.unwrap();
            if later == 0 {
                // The state after the charge, in both replies, is this
                // peek's reply.
                assert_eq!(got[..], reply[2..], "at {now}");
            }
            let core_peek = core.peek_n(1).unwrap();
            let retry = u64::try_from(got[5]).unwrap().div_ceil(g.scale());
            assert_eq!(
                (got[0] == 1, retry),
                (
                    core_peek.is_allowed(),
                    u64::try_from(core_peek.retry_after().as_nanos()).unwrap()
                ),
                "{later} ns after the charge at {now}: {got:?}"
            );
        }
    }
    assert_eq!(server.calls("tollgate.charge"), 7);
    // The key specification is DECIDE's: the keys, and nothing else, are
    // what Redis Cluster routes and checks.
    let mut getkeys = redis::cmd("COMMAND");
    getkeys.arg("GETKEYS").arg("TOLLGATE.CHARGE");
    limit(&mut getkeys, cap);
    getkeys
        .arg("other")
        .arg("g")
        .arg(1)
        .arg(10)
        .arg(20)
        .arg(m)
        .arg(180);
    getkeys.arg("h").arg(0).arg(1).arg(10).arg(0);
    let keys: Vec<String> = getkeys.query_async(&mut raw).await.unwrap();
    assert_eq!(keys, ["budget", "other"]);
    // A window charge is not the module's: an error reply, nothing written.
    let window = redis::cmd("TOLLGATE.CHARGE")
        .arg("w")
        .arg(&["f", "1000", "2", "0", "0", "34", "h", "0", "1", "10", "0"])
        .query_async::<Vec<i64>>(&mut raw)
        .await;
    assert!(window.is_err());
    assert!(!raw.exists::<_, bool>("w").await.unwrap());
}

/// A budget's charge through a client on the module is one call, one
/// `TOLLGATE.CHARGE` and no peek after it (there was one: the state after
/// the charge was read by a second call), and answers as a client on the
/// scripts and as the core's charge: fitted, then the state after the
/// charge (limit, remaining, retry, reset), for one GCRA limit and for
/// two of one key (the core's `AllOf`). The module reports its version.
#[tokio::test]
async fn a_charge_through_the_module_is_one_call_and_answers_as_the_scripts_and_the_core() {
    use tollgate::algorithm::any::AnyAlgorithm;

    let server = ModuleServer::start(false);
    let on_module = connect(&server).await;
    assert!(on_module.uses_module());
    let mut never = tollgate_redis::RedisConfig::single(server.url());
    never.module = tollgate_redis::ModuleUse::Never;
    let on_scripts = Redis::open(&never).await.unwrap();
    let mut raw = support::raw(server.url()).await;
    let version: i64 = redis::cmd("TOLLGATE.VERSION")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(version, 2);

    let second = Gcra::new(Quota::per_second(10).unwrap().with_burst(5).unwrap()).unwrap();
    let minute = Quota::new(100, Duration::from_secs(60)).unwrap();
    let minute = Gcra::new(minute.with_burst(20).unwrap()).unwrap();
    let build = |redis: &Redis, name: &str, limits: &[Gcra], clock: &ManualClock| {
        let mut b = RedisLimiter::builder(redis.clone(), name)
            .manual_time(clock.clone())
            .failure_policy(FailurePolicy::FailClosed)
            .deadline(Duration::from_secs(5));
        for g in limits {
            b = b.limit(Limit::from(g.clone()));
        }
        b.build().unwrap()
    };
    let fields = |d: tollgate::Decision| support::fields(&d);
    let sets = [("one", vec![second.clone()]), ("two", vec![second, minute])];
    for (name, limits) in sets {
        let clock = ManualClock::new();
        let all = limits.iter().cloned().map(AnyAlgorithm::Gcra).collect();
        let core = tollgate::Limiter::with_clock(tollgate::AllOf::new(all).unwrap(), clock.clone());
        let module = build(&on_module, name, &limits, &clock);
        let scripts = build(&on_scripts, &format!("{name}-scripts"), &limits, &clock);
        // The scripts' first calls load them (NOSCRIPT, then EVAL).
        let _ = scripts.charge_outcome("warm", 1).await.unwrap();
        let schedule: [(u64, u64); 8] = [
            (0, 3),
            (0, 4),
            (150_000_000, 1),
            (200_000_000, 1_000_000_000_000),
            (300_000_000, 5),
            (1_000_000_000, 2),
            (17_000_000_000, 1),
            (17_000_000_000, 30),
        ];
        for (now, cost) in schedule {
            clock.set(Nanos::new(now));
            let calls = (
                server.calls("tollgate.charge"),
                server.decisions(),
                server.calls("evalsha") + server.calls("eval"),
            );
            let got = module.charge_outcome("k", cost).await.unwrap();
            assert_eq!(
                (
                    server.calls("tollgate.charge"),
                    server.decisions(),
                    server.calls("evalsha") + server.calls("eval"),
                ),
                (calls.0 + 1, calls.1, calls.2),
                "{name} at {now}: one TOLLGATE.CHARGE, nothing else"
            );
            let by_scripts = scripts.charge_outcome("k", cost).await.unwrap();
            assert_eq!(got.source, Source::Redis, "{name} at {now}");
            assert_eq!(by_scripts.source, Source::Redis, "{name} at {now}");
            assert_eq!(
                fields(got.decision),
                fields(by_scripts.decision),
                "{name} at {now}: a charge of {cost}"
            );
            let want = core.charge(cost).decision();
            let fitted = !core.peek_n(0).unwrap().is_denied();
            assert_eq!(
                fields(got.decision),
                (
                    fitted,
                    want.limit(),
                    want.remaining(),
                    want.retry_after(),
                    want.reset_after()
                ),
                "{name} at {now}: a charge of {cost} against the core"
            );
        }
        // Under a control's marker nothing is charged, and the answer is the
        // marker's (an allow-listed key in debt: a look at the state its
        // list holds aside): the same from the module (in its one call) as
        // from the scripts.
        for (key, control) in [("denied", 0), ("penalized", 1), ("allowed", 2)] {
            for limiter in [&module, &scripts] {
                match control {
                    0 => limiter.deny(key).await.unwrap(),
                    1 => limiter
                        .penalize(key, Duration::from_millis(2_500))
                        .await
                        .unwrap(),
                    _ => {
                        let _ = limiter.charge_outcome(key, 30).await.unwrap();
                        limiter.allow(key).await.unwrap()
                    }
                };
            }
            let calls = (server.calls("tollgate.charge"), server.decisions());
            let got = module.charge_outcome(key, 2).await.unwrap();
            assert_eq!(
                (server.calls("tollgate.charge"), server.decisions()),
                (calls.0 + 1, calls.1),
                "{name} {key}"
            );
            let by_scripts = scripts.charge_outcome(key, 2).await.unwrap();
            assert_eq!(
                fields(got.decision),
                fields(by_scripts.decision),
                "{name} {key}"
            );
            assert_eq!(got.decision.is_allowed(), control == 2, "{name} {key}");
            match control {
                1 => assert_eq!(got.decision.retry_after(), Duration::from_millis(2_500)),
                2 => assert_eq!(got.decision.remaining(), 0, "{name}: the debt held aside"),
                _ => {}
            }
        }
    }
}

/// A fixed window charged into debt (by the charge script) is not read as
/// empty through the module: the module answers DEFER, the client sends the
/// same check to the script, which refuses it until the debt has drained,
/// as the core's fixed window does.
#[tokio::test]
async fn a_window_in_debt_is_decided_by_the_scripts_through_a_module_client() {
    let server = ModuleServer::start(false);
    let redis = connect(&server).await;
    assert!(redis.uses_module());
    let clock = ManualClock::new();
    let window = FixedWindow::new(Quota::new(10, Duration::from_secs(1)).unwrap()).unwrap();
    let core = tollgate::Limiter::with_clock(window.clone(), clock.clone());
    let limiter = frozen(&redis, "window-debt", Limit::from(window), &clock);
    clock.set(Nanos::new(1_000_000_000));
    let charged = limiter.charge_outcome(b"k", 25).await.unwrap();
    let _ = core.charge(25);
    assert!(charged.decision.is_denied(), "25 of 10 went over");
    let asked = server.decisions();
    let scripts = server.calls("evalsha") + server.calls("eval");
    for at in [1_000_000_000, 1_500_000_000, 2_000_000_000, 3_000_000_000] {
        clock.set(Nanos::new(at));
        let outcome = limiter.check_outcome(b"k", 1).await.unwrap();
        let want = core.check_n(1).unwrap();
        assert_eq!(expect_of(outcome.decision), expect_of(want), "at {at}");
    }
    assert!(
        server.decisions() - asked >= 3,
        "the module was asked first"
    );
    assert!(
        server.calls("evalsha") + server.calls("eval") - scripts >= 3,
        "and deferred"
    );
}
