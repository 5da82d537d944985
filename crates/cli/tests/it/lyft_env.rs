//! `tollgate serve` with no `--config`, as a container started with
//! envoyproxy/ratelimit's environment runs it: the binary, its
//! environment cleared and set as envoyproxy/ratelimit's
//! `docker-compose.yml` sets it, answering `/json` and `/healthcheck`, and
//! refusing what it does not support by the variable's name.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use crate::support;
use support::Server;

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

fn json(addr: SocketAddr, body: &str) -> String {
    http(
        addr,
        &format!(
            "POST /json HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// envoyproxy/ratelimit's `docker-compose.yml` environment (counts in
/// memory instead of its Redis service, on loopback ports the OS picks).
fn lyft_command(root: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command.arg("serve");
    with_lyft_env(command, root)
}

fn with_lyft_env(mut command: Command, root: &std::path::Path) -> Command {
    command
        .env_clear()
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "info")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", "redis:6379")
        .env("RUNTIME_ROOT", root)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("MEMCACHE_HOST_PORT", "memcached:11211")
        .env("BACKEND_TYPE", "memory")
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", "0")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", "0");
    command
}

fn temp_root(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("tollgate-lyft-{name}-{}", std::process::id()));
    let config = root.join("ratelimit").join("config");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(
        config.join("example.yaml"),
        "---\ndomain: rl\ndescriptors:\n  - key: foo\n    descriptors:\n      - key: baz\n        value: not-so-shady\n        rate_limit:\n          unit: minute\n          requests_per_unit: 3\n",
    )
    .expect("rules written");
    root
}

#[test]
fn serve_without_config_runs_from_lyfts_environment() {
    let root = temp_root("serve");
    serves_and_stops(lyft_command(&root));
    let _ = std::fs::remove_dir_all(&root);
}

/// Envoy Gateway's ratelimit Deployment runs `/bin/ratelimit` with no
/// arguments: the binary under that name is `tollgate serve`.
#[test]
fn the_binary_named_ratelimit_serves_as_envoyproxys_does() {
    let root = temp_root("named");
    let ratelimit = root.join("ratelimit-bin");
    std::fs::create_dir_all(&ratelimit).expect("bin dir");
    let ratelimit = ratelimit.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &ratelimit).expect("symlink");
    serves_and_stops(with_lyft_env(Command::new(&ratelimit), &root));
    let _ = std::fs::remove_dir_all(&root);
}

/// Starts `command` (a server on the example rules), checks /healthcheck and
/// that the fourth call of a rule of 3 a minute is refused, then stops it
/// with SIGTERM: exit 0.
fn serves_and_stops(mut command: Command) {
    let mut server = Server::spawn(&mut command);
    let http_addr = server.http_addr();
    let health = http(
        http_addr,
        "GET /healthcheck HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with("OK"), "{health}");
    let body = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"pelle"},{"key":"baz","value":"not-so-shady"}]}]}"#;
    for _ in 0..3 {
        let answer = json(http_addr, body);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#""overallCode":"OK""#), "{answer}");
    }
    let answer = json(http_addr, body);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains(r#""overallCode":"OVER_LIMIT""#), "{answer}");

    let status = server.stop();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_refused_variable_is_named_and_no_environment_asks_for_config() {
    let root = temp_root("refused");
    let output = lyft_command(&root)
        .env("BACKEND_TYPE", "memcache")
        .output()
        .expect("tollgate runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("BACKEND_TYPE: memcache is not supported"),
        "{stderr}"
    );

    // A bad rule file in the directory: named with its line, before binding.
    std::fs::write(
        root.join("ratelimit/config/bad.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .expect("bad file");
    let output = lyft_command(&root).output().expect("tollgate runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad.yaml:3"), "{stderr}");

    // Neither --config nor Lyft's variables: serve asks for --config, as
    // it always did.
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("serve")
        .env_clear()
        .env("PORT", "8080")
        .output()
        .expect("tollgate runs");
    assert_ne!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--config"), "{stderr}");
    let _ = std::fs::remove_dir_all(&root);
}

/// `count` gRPC health checks over one HTTP/2 connection to `grpc`.
fn grpc_health_checks(grpc: SocketAddr, count: usize) {
    use http_body_util::{BodyExt, Full};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(grpc)
            .await
            .expect("connects");
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .expect("h2 handshake");
        tokio::spawn(connection);
        for _ in 0..count {
            // grpc.health.v1.Health/Check with an empty request (service "").
            let request = http::Request::post(format!("http://{grpc}/grpc.health.v1.Health/Check"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(Full::new(bytes::Bytes::from_static(&[0, 0, 0, 0, 0])))
                .expect("request");
            let response =
                tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
                    .await
                    .expect("in time")
                    .expect("answered");
            assert_eq!(response.status(), 200);
            let _ = response.into_body().collect().await.expect("body");
        }
    });
}

#[test]
fn log_format_json_writes_logrus_lines_and_debug_is_not_flooded_by_frames() {
    let root = temp_root("logrus");
    let mut server = Server::spawn(
        lyft_command(&root)
            .env("LOG_FORMAT", "json")
            .env("LOG_LEVEL", "debug"),
    );
    let grpc: SocketAddr = server.wait_for(|line| {
        let object: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        object["grpc"]
            .as_str()
            .map(|grpc| grpc.parse().expect("an address"))
    });
    let before = server.seen.len();
    grpc_health_checks(grpc, 20);
    let status = server.stop();
    assert!(status.success(), "{status:?}");
    let seen = std::mem::take(&mut server.seen);
    let _ = std::fs::remove_dir_all(&root);

    // Every line is logrus' JSONFormatter with envoyproxy/ratelimit's
    // field map: @timestamp (RFC 3339, UTC), @message, level.
    for line in &seen {
        let object: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let stamp = object["@timestamp"].as_str().unwrap_or_default();
        assert!(stamp.ends_with('Z') && stamp.contains('T'), "{line}");
        assert!(object["@message"].is_string(), "{line}");
        assert!(
            ["trace", "debug", "info", "warning", "error"]
                .contains(&object["level"].as_str().unwrap_or_default()),
            "{line}"
        );
        assert!(
            object.get("fields").is_none() && object.get("timestamp").is_none(),
            "{line}"
        );
    }
    // The docker-compose memcached address has no effect: said once, at WARN.
    let notices: Vec<&String> = seen
        .iter()
        .filter(|line| line.contains("MEMCACHE_HOST_PORT is set but has no effect"))
        .collect();
    assert_eq!(notices.len(), 1, "{seen:#?}");
    assert!(
        notices[0].contains(r#""level":"warning""#),
        "{}",
        notices[0]
    );
    // 20 calls over HTTP/2 at debug: h2 logs each frame sent and received
    // at debug (more than 80 lines); kept at info, at most a few remain.
    let debug_after = seen[before..]
        .iter()
        .filter(|line| line.contains(r#""level":"debug""#))
        .count();
    assert!(
        debug_after < 20,
        "{debug_after} debug lines:\n{:#?}",
        &seen[before..]
    );
}
