//! The status page (`/status`, `/status.json`) against the real server:
//! in process over HTTP, on a real redis-server, and in headless Chromium
//! loading the page from the real `tollgate` binary while load runs.

#[allow(dead_code)]
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use support::{BackendSection, RedisServer, http_client, metric, start_with, within};

/// The servers' rules and a rule of concurrency slots alone.
fn rules() -> String {
    format!(
        "{}  - key: slots\n    concurrency: {{limit: 2, lease_ttl: 10s}}\n",
        support::RULES
    )
}

async fn check(server_url: &str, entries: &[(&str, &str)], token: Option<&str>) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(key, value)| json!({"key": key, "value": value}))
        .collect();
    let mut request = http_client()
        .post(format!("{server_url}/v1/check"))
        .json(&json!({"domain": "rl", "descriptors": [{"entries": entries}]}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = within(request.send()).await.expect("check");
    assert_eq!(response.status(), 200);
    response.json().await.expect("json")
}

/// `/status.json` once `ready` holds for it, polled every 100 ms (the
/// sampler runs on the real clock), within the tests' patience.
async fn status_once(server_url: &str, ready: impl Fn(&Value) -> bool) -> Value {
    within(async {
        loop {
            let status: Value = status_json(server_url, None)
                .await
                .json()
                .await
                .expect("json");
            if ready(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

async fn status_json(server_url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = http_client().get(format!("{server_url}/status.json"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    within(request.send()).await.expect("status.json")
}

fn rule<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|rule| rule["rule"] == id)
        .unwrap_or_else(|| panic!("rule {id} in {status}"))
}

/// The totals `/metrics` has for `rule`: allowed, denied (answered
/// OVER_LIMIT), shadow.
fn metric_totals(metrics: &str, rule: &str) -> [u64; 3] {
    let get = |name: &str| {
        metric(
            metrics,
            &format!("tollgate_rule_{name}_total{{rule=\"{rule}\"}}"),
        ) as u64
    };
    let (within, over, shadow) = (get("within_limit"), get("over_limit"), get("shadow_mode"));
    [within, over - shadow, shadow]
}

/// The page is embedded and public; its data is behind the token; the
/// numbers are `/metrics`' numbers; the most-denied key is the one
/// hammered, with its error bound.
#[tokio::test]
async fn status_page_serves_the_metrics_numbers_behind_the_token() {
    let server = start_with("  bearer_token: sesame\n", &rules()).await;
    let base = format!("http://{}", server.http);
    let token = Some("sesame");

    // The page: public, embedded, nothing external.
    let page = within(http_client().get(server.url("/status")).send())
        .await
        .expect("page");
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .expect("csp")
        .to_owned();
    assert!(csp.starts_with("default-src 'self'"), "{csp}");
    let html = page.text().await.expect("html");
    assert_eq!(html, tollgate_server::status::PAGE);
    // Nothing loaded from elsewhere: no absolute source, import or url().
    for asset in [
        &html,
        tollgate_server::status::SCRIPT,
        tollgate_server::status::STYLE,
    ] {
        for outside in [
            "src=\"http",
            "href=\"http",
            "src=\"//",
            "href=\"//",
            "@import",
            "url(",
            "fetch(\"http",
        ] {
            assert!(!asset.contains(outside), "{outside} in an asset");
        }
    }
    for path in ["/status/status.js", "/status/status.css"] {
        let response = within(http_client().get(server.url(path)).send())
            .await
            .expect("asset");
        assert_eq!(response.status(), 200, "{path}");
    }

    // The data: behind the token.
    assert_eq!(status_json(&base, None).await.status(), 401);
    assert_eq!(status_json(&base, Some("wrong")).await.status(), 401);

    // Load: alice within her limit of 2, mallory hammering; a shadow rule
    // denying.
    for _ in 0..2 {
        check(&base, &[("user", "alice")], token).await;
    }
    for _ in 0..7 {
        check(&base, &[("user", "mallory")], token).await;
    }
    for _ in 0..3 {
        check(&base, &[("shadow", "s")], token).await;
    }
    // Two slots taken (the lease TTL is 10 s), three refused.
    for _ in 0..5 {
        check(&base, &[("slots", "x")], token).await;
    }
    let response = status_json(&base, token).await;
    assert_eq!(response.status(), 200);
    let status: Value = response.json().await.expect("json");
    let metrics = within(
        http_client()
            .get(server.url("/metrics"))
            .bearer_auth("sesame")
            .send(),
    )
    .await
    .expect("metrics")
    .text()
    .await
    .expect("text");
    for id in ["rl.user", "rl.shadow", "rl.path_/login"] {
        let totals = &rule(&status, id)["totals"];
        let [allowed, denied, shadow] = metric_totals(&metrics, id);
        assert_eq!(
            (
                totals["allowed"].as_u64(),
                totals["denied"].as_u64(),
                totals["shadow"].as_u64()
            ),
            (Some(allowed), Some(denied), Some(shadow)),
            "{id}: {totals} against /metrics"
        );
    }
    assert_eq!(metric_totals(&metrics, "rl.user"), [4, 5, 0]);
    assert_eq!(metric_totals(&metrics, "rl.shadow"), [1, 0, 2]);
    assert_eq!(rule(&status, "rl.internal")["limit"], "unlimited");
    assert_eq!(rule(&status, "rl.user")["limit"], "2/minute fixed_window");
    // A rule of concurrency slots alone counts its leases (it
    // showed "unlimited" and no counts).
    let slots = rule(&status, "rl.slots");
    assert_eq!(slots["limit"], "concurrency 2 (lease 10s)");
    assert_eq!(
        slots["totals"],
        json!({"allowed": 2, "denied": 3, "shadow": 0}),
        "{slots}"
    );

    // The most denied key first, exact while the sketch is not full.
    let keys = status["top_denied"]["keys"].as_array().expect("keys");
    assert_eq!(keys[0]["rule"], "rl.user");
    assert_eq!(keys[0]["key"], "user=mallory");
    assert_eq!(
        (keys[0]["count"].as_u64(), keys[0]["error"].as_u64()),
        (Some(5), Some(0))
    );
    // Shadow-mode denials are kept apart (Regression: `shadow=s` was
    // listed among the denied).
    assert!(
        keys.iter().all(|key| key["key"] != "shadow=s"),
        "a shadow denial among the denied: {keys:?}"
    );
    assert_eq!(status["top_denied"]["denied_permits"], 5);
    let shadow = &status["top_shadow"]["keys"][0];
    assert_eq!(
        (shadow["key"].as_str(), shadow["count"].as_u64()),
        (Some("shadow=s"), Some(2))
    );
    assert_eq!(status["top_shadow"]["denied_permits"], 2);
    assert_eq!(status["backend"]["kind"], "memory");
    assert_eq!(status["backend"]["breaker"], "n/a");
    server.stop().await;
}

/// On a real redis-server: the backend is `redis`, its decisions counted
/// as the store's, the breaker `ok` once a sample has passed.
#[tokio::test]
async fn status_page_shows_the_redis_backend() {
    let redis = RedisServer::start();
    let rules = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
";
    let server = start_with("", &format!("{}{rules}", redis.backend(support::PATIENT))).await;
    let base = format!("http://{}", server.http);
    for _ in 0..3 {
        check(&base, &[("user", "bob")], None).await;
    }
    // The sampler runs every second on the real clock: wait for a sample
    // that saw the three decisions.
    let status = status_once(&base, |status| {
        status["backend"]["policy"]["store"].as_u64() >= Some(3)
            && status["backend"]["points"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
    })
    .await;
    assert_eq!(status["backend"]["kind"], "redis");
    assert_eq!(status["backend"]["breaker"], "ok");
    assert_eq!(status["backend"]["policy"]["timeout"], 0);
    let totals = &rule(&status, "rl.user")["totals"];
    assert_eq!(
        (totals["allowed"].as_u64(), totals["denied"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(status["top_denied"]["keys"][0]["key"], "user=bob");
    server.stop().await;
}

/// An admission that no replica acknowledged (`wait:` on a Redis without
/// replicas) is counted on the status page as the policy's, `unreplicated`
/// (before, only the Prometheus fault metric counted it).
#[tokio::test]
async fn status_page_counts_unreplicated_admissions() {
    let redis = RedisServer::start();
    let rules = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
";
    // An unanswered WAIT returns on Redis's cron tick (up to 100 ms at
    // hz 10): under the default 50 ms response timeout it was counted as
    // a timeout, not unreplicated, and under load all three checks were
    // (the test timed out 2 runs in 5 beside two simulations).
    let backend = redis.backend(&format!(
        "{}  response_timeout: 1s\n  wait: {{replicas: 1, timeout: 10ms}}\n",
        support::PATIENT
    ));
    let server = start_with("", &format!("{backend}{rules}")).await;
    let base = format!("http://{}", server.http);
    for _ in 0..3 {
        check(&base, &[("user", "bob")], None).await;
    }
    let status = status_once(&base, |status| {
        status["backend"]["policy"]["unreplicated"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(status["backend"]["kind"], "redis");
    assert_eq!(status["backend"]["policy"]["store"], 0, "{status}");
    server.stop().await;
}

// ---- headless Chromium against the real binary ----

/// The Chromium binary, installed by `.ci/deps` (as redis-server is) when
/// missing.
fn chromium() -> PathBuf {
    let find = || {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .find_map(|name| which(name))
    };
    if let Some(path) = find() {
        return path;
    }
    let deps = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/deps");
    let status = Command::new("bash").arg(&deps).status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "chromium is missing and `bash {}` could not install it",
        deps.display()
    );
    find().expect("chromium installed by .ci/deps")
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// The `tollgate` binary of this build (`<target>/<profile>/tollgate`),
/// built first if missing or older than this crate's status page (a
/// `cargo test -p tollgate-server` run does not build the CLI; `cargo
/// test --workspace --all-targets` does).
fn tollgate_binary(fresh: bool) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // <target>/<profile>/deps/<test>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target profile directory");
    let binary = profile_dir.join(format!("tollgate{}", std::env::consts::EXE_SUFFIX));
    if binary.is_file() && fresh {
        return binary;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "-p",
            "tollgate-cli",
            "--bin",
            "tollgate",
            "--all-features",
        ])
        .arg("--target-dir")
        .arg(profile_dir.parent().expect("target directory"));
    if profile_dir
        .file_name()
        .is_some_and(|name| name == "release")
    {
        command.arg("--release");
    }
    let status = command.status().expect("run cargo");
    assert!(status.success(), "cannot build the tollgate binary");
    binary
}

/// `tollgate serve` in a child process, killed on drop.
struct Binary {
    child: Child,
    http: String,
    _dir: tempfile::TempDir,
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve(binary: &Path) -> Binary {
    // A port another test took between `free_port` and our bind kills our
    // child with a bind error, while that test's server answers there: a
    // server is ready only once it answers and our child holds the port,
    // and a child that died is started again on new ports.
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rules.yaml");
        let (grpc, http) = (tollgate_testkit::free_port(), tollgate_testkit::free_port());
        std::fs::write(
            &path,
            format!(
                "server:\n  grpc_listen: 127.0.0.1:{grpc}\n  http_listen: 127.0.0.1:{http}\n  reload_interval_ms: 0\n{}",
                rules()
            ),
        )
        .expect("config");
        let child = Command::new(binary)
            .args(["serve", "--config"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tollgate serve");
        let mut server = Binary {
            child,
            http: format!("http://127.0.0.1:{http}"),
            _dir: dir,
        };
        let pid = server.child.id();
        let started = within(async {
            loop {
                if server.child.try_wait().ok().flatten().is_some() {
                    return false;
                }
                let ready = http_client()
                    .get(format!("{}/readyz", server.http))
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
                    && tollgate_testkit::process_listens_on(pid, http)
                    && tollgate_testkit::process_listens_on(pid, grpc);
                if ready {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if started {
            return server;
        }
    }
    panic!("tollgate serve did not start on five pairs of free ports")
}

/// Chromium on `url`: the DOM after the page's script ran, and a
/// screenshot to `screenshot` if given.
fn chromium_run(browser: &Path, url: &str, screenshot: Option<&Path>) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut command = Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,900",
            // Lets the page's fetch and first redraws run before the dump.
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()));
    match screenshot {
        Some(path) => command.arg(format!("--screenshot={}", path.display())),
        None => command.arg("--dump-dom"),
    };
    let output = command
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("run chromium");
    assert!(
        output.status.success(),
        "chromium failed: {:?}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The table of id `id` in `dom`.
fn table<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("<table id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id}"));
    let rest = &dom[start..];
    &rest[..rest.find("</table>").expect("table end")]
}

/// The number in the cell `data-field="{field}"` of the row of `rule`.
fn rendered(dom: &str, rule: &str, field: &str) -> u64 {
    let row_start = dom
        .find(&format!("data-rule=\"{rule}\""))
        .unwrap_or_else(|| panic!("no row for {rule} in the page"));
    let row = &dom[row_start..];
    let row = &row[..row.find("</tr>").expect("row end")];
    let cell = format!("data-field=\"{field}\">");
    let at = row
        .find(&cell)
        .unwrap_or_else(|| panic!("no {field} for {rule}"))
        + cell.len();
    let text = &row[at..];
    text[..text.find('<').expect("cell end")]
        .parse()
        .unwrap_or_else(|_| panic!("{rule} {field}: not a number"))
}

/// Headless Chromium loads the page from the real `tollgate` binary while
/// load runs (the screenshot: the README's), then once the load stopped;
/// the numbers it rendered are `/metrics`' numbers, the chart has points
/// and the hammered key leads the most denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_renders_the_numbers_of_metrics() {
    let browser = chromium();
    let mut binary = tollgate_binary(true);
    let mut server = serve(&binary).await;
    // A binary built before this page or its script: rebuild it once.
    let page = within(http_client().get(format!("{}/status", server.http)).send())
        .await
        .expect("page")
        .text()
        .await
        .unwrap_or_default();
    let script = within(
        http_client()
            .get(format!("{}/status/status.js", server.http))
            .send(),
    )
    .await
    .expect("script")
    .text()
    .await
    .unwrap_or_default();
    if page != tollgate_server::status::PAGE || script != tollgate_server::status::SCRIPT {
        drop(server);
        binary = tollgate_binary(false);
        server = serve(&binary).await;
    }
    let base = server.http.clone();

    // Load: alice within her limit, mallory hammering, a shadow rule.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, base) = (Arc::clone(&stop), base.clone());
        tokio::spawn(async move {
            let mut sent = 0u64;
            // Relaxed: a flag read on its own.
            while !stop.load(Ordering::Relaxed) {
                let user = if sent % 4 == 0 { "alice" } else { "mallory" };
                check(&base, &[("user", user)], None).await;
                check(&base, &[("shadow", "s")], None).await;
                check(&base, &[("slots", "x")], None).await;
                sent += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            sent
        })
    };
    // Three samples of load, then the page while it runs.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let shot_dir = tempfile::tempdir().expect("dir");
    let shot = std::env::var_os("TOLLGATE_STATUS_SCREENSHOT")
        .map_or_else(|| shot_dir.path().join("status.png"), PathBuf::from);
    let during = {
        let (browser, url, shot) = (browser.clone(), format!("{base}/status"), shot.clone());
        tokio::task::spawn_blocking(move || {
            chromium_run(&browser, &url, Some(&shot));
            chromium_run(&browser, &url, None)
        })
        .await
        .expect("chromium")
    };
    // Relaxed: see the loop.
    stop.store(true, Ordering::Relaxed);
    let sent = within(load).await.expect("load");
    assert!(sent > 0);
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1_000),
        "no screenshot at {}",
        shot.display()
    );
    // While load ran: the chart has points, denials among them.
    let row = &during[during.find("data-rule=\"rl.user\"").expect("rl.user row")..];
    let denied = &row[row.find("data-kind=\"denied\"").expect("denied line")..];
    let points = denied
        .split("points=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("points");
    assert!(points.split(' ').count() >= 2, "chart points: {points}");
    assert!(
        during.contains("user=mallory"),
        "mallory among the most denied"
    );
    // The chart has a time axis and a y scale.
    let chart = &row[..row.find("</svg>").expect("chart end")];
    for label in ["now", "\u{2212}1m", "\u{2212}5m", "/s</text>"] {
        assert!(chart.contains(label), "no {label:?} on the chart: {chart}");
    }
    let y_max: f64 = chart
        .split("data-y-max=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|v| v.parse().ok())
        .expect("data-y-max");
    assert!(y_max >= 1.0, "{chart}");

    // Load stopped: what the page renders is what /metrics says.
    let after = tokio::task::spawn_blocking({
        let (browser, url) = (browser.clone(), format!("{base}/status"));
        move || chromium_run(&browser, &url, None)
    })
    .await
    .expect("chromium");
    assert!(after.contains("data-state=\"ready\""), "the page rendered");
    let metrics = within(http_client().get(format!("{base}/metrics")).send())
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    // A rule of concurrency slots alone shows its leases, as /status.json
    // counts them (Regression: "unlimited" and dashes).
    let status: Value = status_json(&base, None).await.json().await.expect("json");
    let slots = &rule(&status, "rl.slots")["totals"];
    assert!(slots["denied"].as_u64() > Some(0), "{slots}");
    assert_eq!(
        [
            rendered(&after, "rl.slots", "allowed"),
            rendered(&after, "rl.slots", "denied"),
            rendered(&after, "rl.slots", "shadow"),
        ],
        [
            slots["allowed"].as_u64().expect("allowed"),
            slots["denied"].as_u64().expect("denied"),
            0
        ],
        "rl.slots: the page against /status.json"
    );
    // Shadow-mode denials in their own table, not among the denied (item 2).
    let denied_table = table(&after, "top");
    assert!(!denied_table.contains("shadow=s"), "{denied_table}");
    assert!(table(&after, "top-shadow").contains("shadow=s"));
    for rule in ["rl.user", "rl.shadow"] {
        let [allowed, denied, shadow] = metric_totals(&metrics, rule);
        assert_eq!(
            [
                rendered(&after, rule, "allowed"),
                rendered(&after, rule, "denied"),
                rendered(&after, rule, "shadow"),
            ],
            [allowed, denied, shadow],
            "{rule}: the page against /metrics"
        );
    }
    let [allowed, denied, _] = metric_totals(&metrics, "rl.user");
    assert_eq!(allowed + denied, sent, "every check of a user counted once");
    let [_, _, shadow] = metric_totals(&metrics, "rl.shadow");
    assert!(shadow > 0);
    let mallory = after.find("user=mallory").expect("mallory");
    if let Some(alice) = after.find("user=alice") {
        assert!(mallory < alice, "mallory is denied most");
    }
}
