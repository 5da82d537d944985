//! `tollgate serve` as a user runs it: the binary on a YAML file, answering
//! on 127.0.0.1, stopped by SIGTERM; and a bad file refused with its line.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use crate::support;
use support::Server;

const RULES: &str = "server:
  grpc_listen: 127.0.0.1:0
  http_listen: 127.0.0.1:0
  reload_interval_ms: 0
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// One HTTP/1.1 exchange; the response as text.
fn http(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout set");
    stream.write_all(request.as_bytes()).expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response read");
    response
}

fn check(addr: SocketAddr) -> String {
    let body =
        r#"{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"ada"}]}],"cost":1}"#;
    http(
        addr,
        &format!(
            "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

#[test]
fn serve_answers_on_loopback_and_stops_on_sigterm() {
    let stderr = serve_until_sigterm("plain", &[]);
    // Piped: the logs are there, without a single ANSI escape.
    assert!(
        stderr
            .iter()
            .any(|line| line.contains("tollgate server stopped")),
        "{stderr:?}"
    );
    assert!(
        !stderr.iter().any(|line| line.contains('\u{1b}')),
        "ANSI codes in logs written to a pipe: {stderr:?}"
    );
}

/// `--log-format json`: every line of stderr is one JSON object, as log
/// shippers read them, the "serving on" line included (it was text, which a
/// JSON pipeline cannot parse).
#[test]
fn json_logs_on_request() {
    let stderr = serve_until_sigterm("json", &["--log-format", "json"]);
    let events: Vec<serde_json::Value> = stderr
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line:?}: {error}")))
        .collect();
    let serving = events
        .iter()
        .find(|event| event["fields"]["http"].is_string())
        .unwrap_or_else(|| panic!("no 'serving' event in {stderr:?}"));
    assert_eq!(serving["level"], "INFO");
    assert!(serving["fields"]["grpc"].is_string(), "{serving}");
    assert!(
        serving["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("tollgate: serving")),
        "{serving}"
    );
    let stopped = events
        .iter()
        .find(|event| event["fields"]["message"] == "tollgate server stopped")
        .unwrap_or_else(|| panic!("no 'stopped' event in {stderr:?}"));
    assert_eq!(stopped["level"], "INFO");
    assert_eq!(stopped["target"], "tollgate_server::server");
    assert!(stopped["timestamp"].is_string(), "{stopped}");
    assert!(
        events.len() >= 2,
        "the drain and the stop are logged: {stderr:?}"
    );
    assert!(!stderr.iter().any(|line| line.contains('\u{1b}')));
}

/// Runs `tollgate serve` with `args`, checks it answers and stops on
/// SIGTERM; its whole stderr, line by line.
fn serve_until_sigterm(name: &str, args: &[&str]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("tollgate-serve-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("rules.yaml");
    std::fs::write(&config, RULES).expect("config written");
    let mut server = Server::spawn(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(args)
            .env_remove("RUST_LOG"),
    );
    let http_addr = server.http_addr();
    assert!(http_addr.ip().is_loopback());
    assert!(
        http(
            http_addr,
            "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .starts_with("HTTP/1.1 200")
    );
    let first = check(http_addr);
    assert!(first.contains(r#""allowed":true"#), "{first}");
    let second = check(http_addr);
    assert!(second.contains(r#""allowed":false"#), "{second}");
    assert!(
        second.contains(r#""overall_code":"OVER_LIMIT""#),
        "{second}"
    );

    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
    std::mem::take(&mut server.seen)
}

#[test]
fn a_bad_config_is_refused_with_its_line_before_binding() {
    let dir = std::env::temp_dir().join(format!("tollgate-serve-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("rules.yaml");
    std::fs::write(
        &config,
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .expect("config written");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rules.yaml:3"), "{stderr}");
    assert!(stderr.contains("rate_limit.unit"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // With JSON logs, the refusal is one JSON error event, the only line.
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .output()
        .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let event: serde_json::Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|error| panic!("{stderr:?}: {error}"));
    assert_eq!(event["level"], "ERROR", "{event}");
    let error = event["fields"]["error"].as_str().expect("an error field");
    assert!(error.contains("rules.yaml:3"), "{event}");
    assert!(error.contains("rate_limit.unit"), "{event}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Regression: a file that is not YAML (here a README) read as one
/// string, and the error repeated the whole file; it names the line and
/// quotes only the start of the first (failed before the fix).
#[test]
fn a_file_that_is_not_yaml_is_not_echoed_whole() {
    let dir = std::env::temp_dir().join(format!("tollgate-serve-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("README.txt");
    let secret_line = "a third line the error must not repeat";
    std::fs::write(
        &config,
        format!("This is not a rules file\nbut plain text on several lines\n{secret_line}\n"),
    )
    .expect("file written");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("README.txt:1"), "{stderr}");
    assert!(stderr.contains("This is not a rules file"), "{stderr}");
    assert!(!stderr.contains(secret_line), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The process's resident bytes (`VmRSS`).
fn resident_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the server's status")
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

/// `--compact-keys N` as a user turns it on: a `remote_address` rule is
/// served from a compact table, which is resident (13.7 bytes a key at its
/// capacity, written whole when the rule meets its first IPv4 address)
/// and answers as the rule says; 0, and the flag under Redis, are refused
/// before anything is bound.
#[test]
fn compact_keys_serve_a_client_address_rule_from_a_table() {
    const KEYS: u64 = 2_000_000;
    let dir = std::env::temp_dir().join(format!("tollgate-serve-compact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("rules.yaml");
    std::fs::write(&config, RULES.replace("key: user", "key: remote_address"))
        .expect("config written");
    let mut server = Server::spawn(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--compact-keys", &KEYS.to_string()])
            .env_remove("RUST_LOG"),
    );
    let http_addr = server.http_addr();
    let check = |value: &str| {
        let body = format!(
            r#"{{"domain":"api","descriptors":[{{"entries":[{{"key":"remote_address","value":"{value}"}}]}}],"cost":1}}"#
        );
        http(
            http_addr,
            &format!(
                "POST /v1/check HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    // A name is no address: the keyed map, before any table is built.
    assert!(check("ada").contains(r#""allowed":true"#));
    let before = resident_bytes(server.child.id());
    let first = check("10.0.0.1");
    let after = resident_bytes(server.child.id());
    assert!(first.contains(r#""allowed":true"#), "{first}");
    let second = check("10.0.0.1");
    assert!(second.contains(r#""allowed":false"#), "{second}");
    assert!(check("10.0.0.2").contains(r#""allowed":true"#));
    assert!(check("ada").contains(r#""allowed":false"#));
    // The IPv4 table: 12-byte slots, 8/7 of the capacity.
    let table = KEYS * 12 * 8 / 7;
    assert!(
        after.saturating_sub(before) >= table * 9 / 10,
        "resident {before} -> {after} bytes at the first address: no table of {table}"
    );
    drop(server);

    let refused = |args: &[&str], code: i32, message: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(args)
            .output()
            .expect("tollgate runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("serving"), "{args:?}: {stderr}");
    };
    refused(
        &["--compact-keys", "0"],
        2,
        "0 keys: a capacity is from 1 key up",
    );
    refused(
        &["--compact-keys", "1e6"],
        2,
        "'1e6' is not a whole number of keys",
    );
    // Under Redis (none needed: refused before connecting).
    std::fs::write(
        &config,
        format!(
            "backend:\n  redis: redis://127.0.0.1:1\n{}",
            RULES.replace("key: user", "key: remote_address")
        ),
    )
    .expect("config written");
    refused(
        &["--compact-keys", "1000"],
        1,
        "compact_keys: sizes the in-memory backend's",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
