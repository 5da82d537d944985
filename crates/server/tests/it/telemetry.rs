//! envoyproxy/ratelimit's metrics and stats through the real server
//! ("Metrics and traces operators already chart"): `/metrics` in Prometheus text 0.0.4 by default and OpenMetrics on
//! request, both checked by outside parsers (`promtool check metrics`, and
//! Python's `prometheus_client` OpenMetrics parser: promtool 2.42 reads
//! 0.0.4 only); its Prometheus names and labels for a known sequence of
//! calls; its own Prometheus listener; its StatsD lines (TCP) and
//! DogStatsD lines (UDP) received by the test.
//!
//! The expected names, labels and counts below are derived by hand from
//! envoyproxy/ratelimit's code (`src/stats/manager_impl.go`,
//! `src/limiter/base_limiter.go`, `src/stats/prom/default_mapper.yaml`),
//! not from tollgate's. Debian bookworm has no `prometheus-statsd-exporter`
//! package, so the StatsD lines are checked as received, line for line,
//! against what envoyproxy/ratelimit sends for the same calls.

#[allow(dead_code)]
use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{descriptor, http_client, metric, request, within};
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;
use tollgate::ManualClock;
use tollgate_server::Server;
use tollgate_server::config::telemetry::TelemetrySettings;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

const RULES: &str = "
domain: rl
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
  - key: k1
    value: v1
    descriptors:
      - key: k2
        descriptors:
          - key: k3
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
";

struct Running {
    grpc: SocketAddr,
    http: SocketAddr,
    prometheus: Option<SocketAddr>,
    _dir: tempfile::TempDir,
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), tollgate_server::ServeError>>,
}

async fn start(telemetry: TelemetrySettings) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rules.yaml");
    std::fs::write(
        &path,
        format!(
            "server:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n  reload_interval_ms: 0\n{RULES}"
        ),
    )
    .expect("write");
    let bound = Server::from_config_file(&path)
        .expect("config")
        .with_clock(ManualClock::new())
        .with_telemetry(telemetry)
        .bind()
        .await
        .expect("bind");
    let (shutdown, rx) = oneshot::channel::<()>();
    Running {
        grpc: bound.grpc_addr(),
        http: bound.http_addr(),
        prometheus: bound.prometheus_addr(),
        _dir: dir,
        shutdown,
        task: tokio::spawn(bound.run(async move {
            let _ = rx.await;
        })),
    }
}

impl Running {
    async fn stop(self) {
        let _ = self.shutdown.send(());
        within(self.task)
            .await
            .expect("task")
            .expect("stopped cleanly");
    }

    /// `/metrics` with `accept`: the content type and the body.
    async fn scrape(&self, addr: SocketAddr, path: &str, accept: Option<&str>) -> (String, String) {
        let mut get = http_client().get(format!("http://{addr}{path}"));
        if let Some(accept) = accept {
            get = get.header("accept", accept);
        }
        let response = within(get.send()).await.expect("scrape");
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned();
        (content_type, response.text().await.expect("text"))
    }
}

/// A descriptor entry: key, value.
type Entry = (&'static str, &'static str);

/// The calls every test makes, and the codes envoyproxy/ratelimit answers.
async fn replay(grpc: SocketAddr) {
    let mut client = within(RateLimitServiceClient::connect(format!("http://{grpc}")))
        .await
        .expect("connect");
    let calls: [(&[Entry], usize, Code); 5] = [
        // limit 5: 5 admitted (the 5th above floor(5 × 0.8) = 4: near), 1 over.
        (&[("user", "alice")], 5, Code::Ok),
        (&[("user", "alice")], 1, Code::OverLimit),
        // shadow mode, limit 1: the 2nd is over, answered OK.
        (&[("shadow", "x")], 2, Code::Ok),
        // detailed_metric, limit 2: the key names the values (IPv4 dots sanitized).
        (
            &[("k1", "v1"), ("k2", "a"), ("k3", "10.0.0.1")],
            2,
            Code::Ok,
        ),
        (
            &[("k1", "v1"), ("k2", "a"), ("k3", "10.0.0.1")],
            1,
            Code::OverLimit,
        ),
    ];
    for (entries, times, code) in calls {
        for _ in 0..times {
            let response =
                within(client.should_rate_limit(request("rl", vec![descriptor(entries)])))
                    .await
                    .expect("call")
                    .into_inner();
            assert_eq!(response.overall_code(), code, "{entries:?}");
        }
    }
}

/// envoyproxy/ratelimit's StatsD stats after [`replay`], as its
/// `gostats` store names them, with their totals.
fn lyft_stats() -> BTreeMap<String, u64> {
    let rule = "ratelimit.service.rate_limit.rl";
    let detailed = format!("{rule}.k1_v1.k2_a.k3_10_0_0_1");
    [
        ("ratelimit.service.config_load_success".to_owned(), 1),
        (
            "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
            11,
        ),
        (format!("{rule}.user.total_hits"), 6),
        (format!("{rule}.user.within_limit"), 5),
        (format!("{rule}.user.near_limit"), 1),
        (format!("{rule}.user.over_limit"), 1),
        (format!("{rule}.shadow.total_hits"), 2),
        (format!("{rule}.shadow.within_limit"), 1),
        // floor(1 × 0.8) = 0: the first admission is already near.
        (format!("{rule}.shadow.near_limit"), 1),
        (format!("{rule}.shadow.over_limit"), 1),
        (format!("{rule}.shadow.shadow_mode"), 1),
        (format!("{detailed}.total_hits"), 3),
        (format!("{detailed}.within_limit"), 2),
        (format!("{detailed}.near_limit"), 1),
        (format!("{detailed}.over_limit"), 1),
    ]
    .into_iter()
    .collect()
}

/// The same after envoyproxy/ratelimit's default statsd_exporter mapping:
/// the Prometheus series lines it serves.
fn lyft_series() -> Vec<String> {
    let mut lines = vec![
        "ratelimit_service_config_load_success 1".to_owned(),
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 11".to_owned(),
    ];
    for (labels, counts) in [
        (
            "domain=\"rl\",key1=\"user\"",
            [
                ("total_hits", 6),
                ("within_limit", 5),
                ("near_limit", 1),
                ("over_limit", 1),
            ]
            .as_slice(),
        ),
        (
            "domain=\"rl\",key1=\"shadow\"",
            &[
                ("total_hits", 2),
                ("within_limit", 1),
                ("near_limit", 1),
                ("over_limit", 1),
                ("shadow_mode", 1),
            ],
        ),
        (
            "domain=\"rl\",key1=\"k1_v1\",key2=\"k2_a\"",
            &[
                ("total_hits", 3),
                ("within_limit", 2),
                ("near_limit", 1),
                ("over_limit", 1),
            ],
        ),
    ] {
        for (stat, count) in counts {
            lines.push(format!(
                "ratelimit_service_rate_limit_{stat}{{{labels}}} {count}"
            ));
        }
    }
    lines
}

/// The histogram of envoyproxy/ratelimit's `response_time` timer.
const RESPONSE_TIME: &str = "ratelimit_service_response_time_seconds";

/// The lines of `text` that are envoyproxy/ratelimit's counter series
/// (its `response_time` histogram is checked apart: its buckets depend on
/// timing).
fn lyft_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| line.starts_with("ratelimit_") && !line.starts_with(RESPONSE_TIME))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// The `response_time` histogram of [`replay`]'s 11 calls: declared a
/// histogram, 11 observations, buckets cumulative up to `+Inf`.
fn response_time_histogram(text: &str) {
    assert!(
        text.contains(&format!("# TYPE {RESPONSE_TIME} histogram\n")),
        "{text}"
    );
    let labels = "grpc_method=\"ShouldRateLimit\"";
    assert_eq!(
        metric(text, &format!("{RESPONSE_TIME}_count{{{labels}}}")),
        11.0
    );
    let buckets: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with(&format!("{RESPONSE_TIME}_bucket{{")))
        .map(|line| {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect(line)
        })
        .collect();
    assert_eq!(
        buckets.len(),
        12,
        "Prometheus' 11 default buckets and +Inf: {text}"
    );
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{text}");
    assert_eq!(
        metric(
            text,
            &format!("{RESPONSE_TIME}_bucket{{{labels},le=\"+Inf\"}}")
        ),
        11.0
    );
}

/// `promtool check metrics` on `text`: no parse error (exit 1), and no
/// lint problem but the one envoyproxy/ratelimit's own names draw (its
/// counters do not end in `_total`).
fn promtool_accepts(text: &str) {
    promtool(text, true);
}

/// `promtool check metrics` on `text`: no parse error (exit 1); lint
/// problems allowed when not `strict` (names a mapping file chose).
fn promtool(text: &str, strict: bool) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus, see .ci/deps)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let problems: Vec<&str> = report
        .lines()
        .filter(|line| {
            strict
                && !(line.starts_with("ratelimit_service_")
                    && line.ends_with("counter metrics should have \"_total\" suffix"))
        })
        .collect();
    assert!(
        matches!(out.status.code(), Some(0 | 3)) && problems.is_empty(),
        "promtool: {:?}: {report}\n{text}",
        out.status
    );
}

/// Python's `prometheus_client` OpenMetrics parser (Debian
/// `python3-prometheus-client`) reads all of `text`.
fn openmetrics_parser_accepts(text: &str) {
    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\nlist(p(sys.stdin.read()))\n";
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (Debian package python3-prometheus-client, see .ci/deps)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "OpenMetrics parser: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Regression (fails before: `/metrics` was OpenMetrics whatever the
/// scraper asked, and envoyproxy/ratelimit's counters came out as
/// `…_total_total`-style `_total` samples): a scraper asking for
/// `text/plain`, or for nothing, gets Prometheus text 0.0.4 with
/// envoyproxy/ratelimit's exact names; one asking for OpenMetrics gets
/// OpenMetrics with the same series names. Both pass outside parsers.
#[tokio::test]
async fn metrics_formats_keep_envoyproxy_ratelimit_names() {
    let server = start(TelemetrySettings::default()).await;
    replay(server.grpc).await;
    for accept in [Some("text/plain"), None, Some("*/*")] {
        let (content_type, text) = server.scrape(server.http, "/metrics", accept).await;
        assert_eq!(
            content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(
            text.contains("# TYPE ratelimit_service_rate_limit_total_hits counter\n"),
            "{text}"
        );
        assert!(
            !text.contains("ratelimit_service_rate_limit_total_hits_total"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        assert!(
            text.contains("# TYPE tollgate_rule_total_hits_total counter\n"),
            "{text}"
        );
        assert_eq!(lyft_lines(&text), sorted(lyft_series()), "{text}");
        response_time_histogram(&text);
        assert_eq!(
            metric(&text, "tollgate_rule_total_hits_total{rule=\"rl.user\"}"),
            6.0
        );
        promtool_accepts(&text);
    }
    // Prometheus' own default Accept prefers OpenMetrics.
    let (content_type, text) = server
        .scrape(
            server.http,
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"),
        )
        .await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE ratelimit_service_rate_limit_total_hits unknown\n"),
        "{text}"
    );
    assert_eq!(lyft_lines(&text), sorted(lyft_series()), "{text}");
    response_time_histogram(&text);
    assert_eq!(
        metric(&text, "tollgate_rule_total_hits_total{rule=\"rl.user\"}"),
        6.0
    );
    openmetrics_parser_accepts(&text);
    server.stop().await;
}

/// `USE_PROMETHEUS`: envoyproxy/ratelimit's own listener and path, text
/// 0.0.4 whatever the scraper asks (as its `promhttp.Handler()`), with
/// `NEAR_LIMIT_RATIO` applied to both its names and tollgate's, and a
/// `PROMETHEUS_MAPPER_YAML` file renaming and dropping its stats.
#[tokio::test]
async fn use_prometheus_serves_its_listener_and_near_limit_ratio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mapper = dir.path().join("mapper.yaml");
    std::fs::write(
        &mapper,
        r#"mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "rl_hits"
    labels: {domain: "$1", descriptor: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    action: drop
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    labels: {domain: "$1", key1: "$2"}
"#,
    )
    .expect("write");
    let mapper = mapper.to_str().expect("utf-8").to_owned();
    let vars: HashMap<&str, &str> = [
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("PROMETHEUS_PATH", "/prom"),
        ("PROMETHEUS_MAPPER_YAML", mapper.as_str()),
        ("NEAR_LIMIT_RATIO", "0.5"),
    ]
    .into_iter()
    .collect();
    let telemetry = TelemetrySettings::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()))
        .expect("settings");
    let server = start(telemetry).await;
    let prometheus = server.prometheus.expect("a Prometheus listener");
    replay(server.grpc).await;
    let (content_type, text) = server
        .scrape(prometheus, "/prom", Some("application/openmetrics-text"))
        .await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    // limit 5, ratio 0.5: above floor(2.5) = 2, the 3rd to 5th admissions.
    assert_eq!(
        metric(
            &text,
            "ratelimit_service_rate_limit_near_limit{domain=\"rl\",key1=\"user\"}"
        ),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, "tollgate_rule_near_limit_total{rule=\"rl.user\"}"),
        3.0,
        "{text}"
    );
    // The mapping file: renamed, dropped, and (unmapped) escaped names.
    assert_eq!(
        metric(&text, "rl_hits{descriptor=\"user\",domain=\"rl\"}"),
        6.0,
        "{text}"
    );
    assert!(!text.contains("within_limit{"), "{text}");
    assert_eq!(
        metric(&text, "ratelimit_service_rate_limit_rl_user_over_limit"),
        1.0,
        "{text}"
    );
    // The file's unmapped names draw lint remarks (`ratelimit_server_
    // ShouldRateLimit_…` is camelCase), not parse errors.
    promtool(&text, false);
    let missing = within(
        http_client()
            .get(format!("http://{prometheus}/metrics"))
            .send(),
    )
    .await
    .expect("get");
    assert_eq!(missing.status(), 404);
    server.stop().await;
}

/// The StatsD name of envoyproxy/ratelimit's `response_time` timer.
const RESPONSE_TIME_STAT: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// Sums `name:delta|c…` lines per name, checking each line's shape (the
/// `response_time` timer's lines are [`timer_lines`]').
fn sum_lines(text: &str, suffix: &str) -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for line in text
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with(RESPONSE_TIME_STAT))
    {
        let (name, rest) = line.split_once(':').unwrap_or_else(|| panic!("{line}"));
        let (delta, kind) = rest.split_once('|').unwrap_or_else(|| panic!("{line}"));
        assert_eq!(kind, suffix, "{line}");
        *totals.entry(name.to_owned()).or_default() += delta.parse::<u64>().expect(line);
    }
    totals
}

/// The `response_time` lines of `text`, each `name…:ms|ms…` with `suffix`
/// after the `|ms`: their count.
fn timer_lines(text: &str, name: &str, suffix: &str) -> usize {
    text.lines()
        .filter(|line| line.starts_with(RESPONSE_TIME_STAT))
        .map(|line| {
            let (stat, rest) = line.split_once(':').unwrap_or_else(|| panic!("{line}"));
            assert_eq!(stat, name, "{line}");
            let (ms, kind) = rest.split_once('|').unwrap_or_else(|| panic!("{line}"));
            ms.parse::<u64>().expect(line);
            assert_eq!(kind, format!("ms{suffix}"), "{line}");
        })
        .count()
}

/// `USE_STATSD` (envoyproxy/ratelimit's default sink): its StatsD lines
/// over TCP, `EXTRA_TAGS` in the names as `gostats` serializes them; the
/// server's last flush (at stop) sends every count.
#[tokio::test]
async fn use_statsd_sends_envoyproxy_ratelimit_lines_over_tcp() {
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = receiver.local_addr().expect("addr").port().to_string();
    let vars: HashMap<&str, String> = [
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", port),
        ("EXTRA_TAGS", "pod:rl-1.a,app:rl".to_owned()),
        // Only the flush at stop: the lines do not depend on timing.
        ("STATS_FLUSH_INTERVAL", "1h".to_owned()),
    ]
    .into_iter()
    .collect();
    let telemetry =
        TelemetrySettings::from_lookup(|name| vars.get(name).cloned()).expect("settings");
    let server = start(telemetry).await;
    replay(server.grpc).await;
    server.stop().await;
    let (mut connection, _) = within(receiver.accept()).await.expect("accept");
    let mut text = String::new();
    within(connection.read_to_string(&mut text))
        .await
        .expect("read");
    let expected: BTreeMap<String, u64> = lyft_stats()
        .into_iter()
        .map(|(name, total)| (format!("{name}.__app=rl.__pod=rl-1_a"), total))
        .collect();
    assert_eq!(sum_lines(&text, "c"), expected, "{text}");
    // One line per call of the timer, as gostats sends it.
    let timer = format!("{RESPONSE_TIME_STAT}.__app=rl.__pod=rl-1_a");
    assert_eq!(timer_lines(&text, &timer, ""), 11, "{text}");
    // One line per stat: the whole count in one flush.
    assert_eq!(text.lines().count(), expected.len() + 11, "{text}");
}

/// `USE_DOG_STATSD`: DogStatsD lines over UDP, tags after `|#`, the deltas
/// of successive flushes adding up to envoyproxy/ratelimit's totals.
#[tokio::test]
async fn use_dog_statsd_sends_deltas_over_udp() {
    let receiver = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = receiver.local_addr().expect("addr").port().to_string();
    let vars: HashMap<&str, String> = [
        ("USE_STATSD", "false".to_owned()),
        ("USE_DOG_STATSD", "true".to_owned()),
        ("STATSD_HOST", "127.0.0.1".to_owned()),
        ("STATSD_PORT", port),
        ("EXTRA_TAGS", "app:rl".to_owned()),
        ("STATS_FLUSH_INTERVAL", "50ms".to_owned()),
    ]
    .into_iter()
    .collect();
    let telemetry =
        TelemetrySettings::from_lookup(|name| vars.get(name).cloned()).expect("settings");
    let server = start(telemetry).await;
    replay(server.grpc).await;
    // Flushes go on while the test reads; stop once everything came.
    let expected = lyft_stats();
    let mut text = String::new();
    let mut buf = vec![0; 65536];
    while sum_lines(&text, "c|#app:rl") != expected
        || timer_lines(&text, RESPONSE_TIME_STAT, "|#app:rl") < 11
    {
        let n = within(receiver.recv(&mut buf)).await.expect("datagram");
        assert!(n <= 1432, "datagram of {n} bytes");
        text.push_str(std::str::from_utf8(&buf[..n]).expect("utf-8"));
        let sums = sum_lines(&text, "c|#app:rl");
        for (name, total) in &sums {
            assert!(
                expected.get(name).is_some_and(|e| total <= e),
                "{name} {total}: {text}"
            );
        }
    }
    server.stop().await;
    // The stop flush has nothing new to send.
    let late = tokio::time::timeout(Duration::from_millis(200), receiver.recv(&mut buf)).await;
    assert!(late.is_err(), "unexpected datagram after the totals");
}

mod otlp {
    //! An OTLP trace receiver, over gRPC (tonic) or HTTP (axum, protobuf
    //! bodies), keeping every request it gets.

    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use prost::Message as _;

    pub type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

    #[derive(Clone, Default)]
    struct Receiver(Received);

    #[tonic::async_trait]
    impl TraceService for Receiver {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().expect("lock").push(request.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    /// Serves OTLP/gRPC on a free port until the test ends.
    pub async fn grpc() -> (SocketAddr, Received) {
        let receiver = Receiver::default();
        let received = Arc::clone(&receiver.0);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (addr, received)
    }

    /// Serves OTLP/HTTP (`POST /v1/traces`, protobuf) on a free port.
    pub async fn http() -> (SocketAddr, Received) {
        let received = Received::default();
        let kept = Arc::clone(&received);
        let router = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = Arc::clone(&kept);
                async move {
                    let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    kept.lock().expect("lock").push(request);
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, router).await });
        (addr, received)
    }
}

/// `TRACING_ENABLED=true`: a span per decision, envoyproxy/ratelimit's
/// `ShouldRateLimit Execution` with its `domain`, received by an OTLP
/// receiver the test runs, over `TRACING_EXPORTER_PROTOCOL=grpc` and
/// `http` (its default); the spans still queued are sent at shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracing_sends_a_span_per_decision_over_otlp() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;

    for protocol in ["grpc", "http"] {
        let (addr, received) = match protocol {
            "grpc" => otlp::grpc().await,
            _ => otlp::http().await,
        };
        let endpoint = format!("http://{addr}");
        let vars: HashMap<&str, &str> = [
            ("USE_STATSD", "false"),
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", protocol),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("TRACING_SERVICE_NAME", "rl-test"),
        ]
        .into_iter()
        .collect();
        let telemetry =
            TelemetrySettings::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()))
                .expect("settings");
        let server = start(telemetry).await;
        replay(server.grpc).await;
        server.stop().await;

        let requests = received.lock().expect("lock").clone();
        let mut codes: BTreeMap<String, usize> = BTreeMap::new();
        let mut spans = 0;
        for request in &requests {
            for resource_spans in &request.resource_spans {
                let resource = resource_spans.resource.as_ref().expect("resource");
                assert!(
                    resource.attributes.iter().any(|kv| kv.key == "service.name"
                        && kv.value.as_ref().and_then(|v| v.value.as_ref())
                            == Some(&Value::StringValue("rl-test".to_owned()))),
                    "{protocol}: {resource:?}"
                );
                for span in resource_spans.scope_spans.iter().flat_map(|s| &s.spans) {
                    assert_eq!(span.name, "ShouldRateLimit Execution", "{protocol}");
                    assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
                    let attribute = |key: &str| {
                        span.attributes
                            .iter()
                            .find(|kv| kv.key == key)
                            .and_then(|kv| kv.value.as_ref()?.value.clone())
                    };
                    assert_eq!(
                        attribute("domain"),
                        Some(Value::StringValue("rl".to_owned()))
                    );
                    assert_eq!(
                        attribute("api"),
                        Some(Value::StringValue("grpc".to_owned()))
                    );
                    if let Some(Value::StringValue(code)) = attribute("overall_code") {
                        *codes.entry(code).or_default() += 1;
                    }
                    spans += 1;
                }
            }
        }
        assert_eq!(spans, 11, "{protocol}: one span per call");
        assert_eq!(
            codes,
            BTreeMap::from([("OK".to_owned(), 9), ("OVER_LIMIT".to_owned(), 2)]),
            "{protocol}"
        );
    }
}
