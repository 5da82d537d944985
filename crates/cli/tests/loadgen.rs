//! `tollgate loadgen` against the in-repo no-op server on 127.0.0.1.
//!
//! Real time against a real server, so the margins are wide: counts are
//! exact where the schedule makes them so (the number of requests due),
//! and a tolerance of 1 % is allowed on what the server answered, since a
//! machine shared with other work may fail a request; latency thresholds
//! are hundreds of milliseconds apart.

mod support;

use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use support::tollgate;
use tollgate_cli::noop::{NoopServer, Stall};

const DEADLINE: Duration = Duration::from_secs(60);

/// One load run at a time: each keeps a core busy holding its schedule, and
/// the tests must not take each other's time on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn exclusive() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

fn server(stall: Option<Stall>) -> NoopServer {
    NoopServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), 1, stall)
        .expect("the no-op server starts")
}

fn url(server: &NoopServer) -> String {
    format!("http://{}/", server.address())
}

fn number(json: &Value, pointer: &str) -> f64 {
    json.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{pointer} in {json}"))
}

#[test]
fn a_modest_rate_sends_the_scheduled_requests() {
    let _one = exclusive();
    let server = server(None);
    let run = tollgate(
        &[
            "loadgen",
            &url(&server),
            "--rate",
            "200",
            "--duration",
            "2s",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    // 200/s for 2 s: exactly 400 are due (0, 5 ms, …, 1995 ms).
    assert_eq!(number(&json, "/scheduled"), 400.0);
    assert_eq!(number(&json, "/sent") + number(&json, "/dropped"), 400.0);
    let answered = number(&json, "/answered");
    assert!(answered >= 396.0, "answered {answered} of 400:\n{json}");
    assert_eq!(number(&json, "/status_codes/200"), answered);
    assert_eq!(server.answered() as f64, answered);
    // Piped: no progress bar, and nothing went wrong to warn about.
    assert!(run.stderr.is_empty(), "{}", run.stderr);
    // Each request is counted in the rate; the rate is a figure, not asserted
    // beyond sanity (a busy machine can delay sends).
    assert!(number(&json, "/achieved_rate") > 150.0, "{json}");
    for percentile in ["p50", "p90", "p99", "p99_9", "p99_99", "max"] {
        assert!(
            number(&json, &format!("/latency_ms/{percentile}"))
                >= number(&json, &format!("/service_time_ms/{percentile}")) - 0.01
        );
    }
}

#[test]
fn http2_and_a_request_count() {
    let _one = exclusive();
    let server = server(None);
    let run = tollgate(
        &[
            "loadgen",
            &url(&server),
            "--http2",
            "--rate",
            "300",
            "--requests",
            "300",
            "-X",
            "POST",
            "-H",
            "X-Test: 1",
            "--body",
            "hello",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["protocol"], "HTTP/2 (h2c)");
    assert_eq!(json["method"], "POST");
    assert_eq!(number(&json, "/scheduled"), 300.0);
    assert!(number(&json, "/answered") >= 297.0, "{json}");
}

#[test]
fn a_stall_shows_in_the_corrected_latency_and_not_in_the_service_time() {
    let _one = exclusive();
    // The server stops answering from 1 s to 2 s after its start; two
    // connections, each stuck behind a stalled request, and requests may
    // wait up to 5 s for one: they are sent late, after the stall.
    let server = server(Some(Stall {
        after: Duration::from_secs(1),
        length: Duration::from_secs(1),
    }));
    let dir = std::env::temp_dir().join(format!("tollgate-loadgen-hgrm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hgrm = dir.join("stall.hgrm");
    let run = tollgate(
        &[
            "loadgen",
            &url(&server),
            "--rate",
            "200",
            "--duration",
            "3s",
            "--connections",
            "2",
            "--max-connections",
            "2",
            "--max-send-lag",
            "5s",
            "--json",
            "--hgrm",
            hgrm.to_str().unwrap(),
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    assert_eq!(number(&json, "/dropped"), 0.0, "{json}");
    // About 200 of 600 requests were due during the stall and waited up to
    // 1 s: the corrected p99 is close to the whole stall.
    let corrected = number(&json, "/latency_ms/p99");
    let service = number(&json, "/service_time_ms/p99");
    assert!(corrected >= 500.0, "corrected p99 {corrected} ms:\n{json}");
    // Only the two requests on the wire when it began saw the stall as
    // service time: 0.3 % of them, below the 99th percentile.
    assert!(service < 200.0, "service p99 {service} ms:\n{json}");
    assert!(number(&json, "/send_lag_us/max") >= 500_000.0, "{json}");

    // The distribution files: cumulative counts reach every answer.
    let answered = number(&json, "/answered");
    for file in [hgrm.clone(), dir.join("stall.service.hgrm")] {
        let text = std::fs::read_to_string(&file).expect("the .hgrm file is written");
        let last = text
            .lines()
            .rfind(|line| !line.starts_with('#') && !line.trim().is_empty())
            .unwrap();
        let fields: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(fields[1].parse::<f64>().unwrap(), 1.0, "{file:?}: {last}");
        assert_eq!(
            fields[2].parse::<f64>().unwrap(),
            answered,
            "{file:?}: {last}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_waiting_requests_due_during_a_stall_are_dropped_and_reported() {
    let _one = exclusive();
    let server = server(Some(Stall {
        after: Duration::from_millis(500),
        length: Duration::from_secs(1),
    }));
    let run = tollgate(
        &[
            "loadgen",
            &url(&server),
            "--rate",
            "200",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--max-connections",
            "2",
            "--json",
        ],
        DEADLINE,
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let json = run.json();
    let dropped = number(&json, "/dropped");
    // ~200 due in the stall, less the 2 that took the stuck connections.
    assert!(dropped >= 150.0, "{json}");
    assert_eq!(number(&json, "/sent") + dropped, 400.0);
    assert!(run.stderr.contains("were not sent"), "{}", run.stderr);
}

#[test]
fn ctrl_c_prints_the_partial_result() {
    let _one = exclusive();
    let server = server(None);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "loadgen",
            &url(&server),
            "--rate",
            "100",
            "--duration",
            "20s",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the tollgate binary starts");
    std::thread::sleep(Duration::from_millis(1_500));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT is sent");
    // A deadline in case the interrupt were ignored.
    let (done, waited) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = waited
        .recv_timeout(Duration::from_secs(20))
        .expect("exits soon after Ctrl-C")
        .expect("output");
    assert_eq!(output.status.code(), Some(130));
    let json: Value = serde_json::from_slice(&output.stdout).expect("the partial result is JSON");
    assert_eq!(json["interrupted"], true);
    let due = number(&json, "/due");
    assert!(due > 0.0 && due < 2_000.0, "{json}");
    assert_eq!(number(&json, "/scheduled"), 2_000.0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("interrupted by Ctrl-C"), "{stderr}");
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    let _one = exclusive();
    let cases: [(&[&str], &str); 8] = [
        (
            &[
                "loadgen",
                "http://127.0.0.1:9/",
                "--rate",
                "-5",
                "--duration",
                "1s",
            ],
            "--rate must be a whole number of requests per second",
        ),
        (
            &[
                "loadgen",
                "http://127.0.0.1:9/",
                "--rate",
                "1.5",
                "--duration",
                "1s",
            ],
            "--rate must be a whole number",
        ),
        (
            &[
                "loadgen",
                "http://127.0.0.1:9/",
                "--rate",
                "10",
                "--duration",
                "0s",
            ],
            "--duration must be longer than zero",
        ),
        (
            &["loadgen", "not a url", "--rate", "10", "--duration", "1s"],
            "cannot load \"not a url\"",
        ),
        (
            &[
                "loadgen",
                "https://127.0.0.1/",
                "--rate",
                "10",
                "--duration",
                "1s",
            ],
            "https is not supported",
        ),
        (
            &[
                "loadgen",
                "http://127.0.0.1:9/",
                "--rate",
                "10",
                "--requests",
                "0",
            ],
            "--requests must be a whole number above zero",
        ),
        (
            &[
                "loadgen",
                "http://127.0.0.1:9/",
                "--rate",
                "10",
                "--duration",
                "1s",
                "-H",
                "oops",
            ],
            "invalid header \"oops\"",
        ),
        (
            &["loadgen", "http://127.0.0.1:9/", "--rate", "10"],
            "--duration",
        ),
    ];
    for (args, message) in cases {
        tollgate(args, DEADLINE).assert_refused(2, message);
    }
}

#[test]
fn an_unreachable_target_fails_before_the_run() {
    let _one = exclusive();
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/");
    tollgate(
        &["loadgen", &url, "--rate", "10", "--duration", "1s"],
        DEADLINE,
    )
    .assert_refused(1, "cannot reach 127.0.0.1");
}
