//! Redis Sentinel: a master, its replica and one sentinel, started here;
//! the limiter finds the master through the sentinel, the master is killed
//! mid-run, decisions go to the failure policy meanwhile (each within the
//! deadline) and then to the promoted replica.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::{Gcra, Quota};
use tollgate_redis::{FailurePolicy, Options, Redis, RedisConfig, RedisLimiter, Source};
use tollgate_testkit::{RedisServer, redis_is_process, spawn_on_free_port};

/// A `redis-sentinel` process, killed on drop.
struct Sentinel {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        let mut dirs = Vec::new();
        // The port is checked to be this sentinel's own (see the testkit).
        let (port, child) = spawn_on_free_port(
            "redis-sentinel",
            |port| {
                let dir = std::env::temp_dir()
                    .join(format!("tollgate-sentinel-{}-{port}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let conf = dir.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor main 127.0.0.1 {master_port} 1\n\
                         sentinel down-after-milliseconds main 500\n\
                         sentinel failover-timeout main 2000\n",
                        dir.display()
                    ),
                )
                .unwrap();
                let mut command = Command::new("redis-sentinel");
                command
                    .arg(&conf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                dirs.push(dir);
                command
            },
            redis_is_process,
        );
        let dir = dirs.pop().expect("one directory per attempt");
        for stale in dirs {
            let _ = std::fs::remove_dir_all(stale);
        }
        Sentinel { port, child, dir }
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
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_follows_a_sentinel_failover() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start();
    assert_eq!(
        replica.cli(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]),
        "OK"
    );
    wait_for("the replica did not sync", Duration::from_secs(10), || {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
    });
    let sentinel = Sentinel::start(master.port);
    wait_for(
        "the sentinel did not see the replica",
        Duration::from_secs(15),
        || {
            sentinel
                .cli(&["SENTINEL", "REPLICAS", "main"])
                .contains(&replica.port.to_string())
        },
    );

    let mut config =
        RedisConfig::sentinel([format!("redis://127.0.0.1:{}", sentinel.port)], "main");
    config.options = Options {
        response_timeout: Duration::from_millis(100),
        connection_timeout: Duration::from_millis(100),
        retries: 1,
    };
    let redis = Redis::open(&config).await.expect("master through sentinel");
    let deadline = Duration::from_millis(50);
    let limiter = RedisLimiter::builder(redis, "sentinel")
        .limit(Gcra::new(Quota::per_hour(10_000).unwrap()).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .deadline(deadline)
        .build()
        .unwrap();
    // Twenty decisions by Redis. A healthy Redis can miss the 50 ms
    // deadline on a loaded 2-core machine: that is timing, not the fault
    // under test, and is asked again (at most ten times).
    let (mut by_redis, mut late) = (0, 0);
    while by_redis < 20 {
        match limiter.check_outcome("k", 1).await.unwrap().source {
            Source::Redis => by_redis += 1,
            Source::Policy(tollgate_redis::Fault::Timeout | tollgate_redis::Fault::BreakerOpen)
                if late < 10 =>
            {
                late += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("before the failover: {other:?} after {late} late decisions"),
        }
    }
    let key = String::from_utf8(limiter.redis_keys("k")[0].clone()).unwrap();
    assert_eq!(master.cli(&["EXISTS", &key]), "1");

    master.kill();
    let start = Instant::now();
    let (mut by_policy, mut back) = (0, false);
    while start.elapsed() < Duration::from_secs(15) {
        let t = Instant::now();
        let outcome = limiter.check_outcome("k", 1).await.unwrap();
        // The deadline bounds every decision (loosely: the machine is shared).
        assert!(t.elapsed() < deadline * 20, "took {:?}", t.elapsed());
        match outcome.source {
            Source::Redis if by_policy > 0 => {
                back = true;
                break;
            }
            Source::Redis => {}
            _ => {
                assert!(outcome.decision.is_denied(), "fail closed admitted");
                by_policy += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(by_policy > 0, "no decision went to the policy");
    assert!(back, "no decision on the new master within 15 s");
    // The promoted replica is the master now, and holds the key.
    assert!(replica.cli(&["ROLE"]).starts_with("master"));
    assert_eq!(replica.cli(&["EXISTS", &key]), "1");
}
