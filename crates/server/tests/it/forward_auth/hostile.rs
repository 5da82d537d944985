//! What a hostile client tries through a proxy, the same tries for each
//! proxy, counted at the upstream ([`crate::forward_auth::upstream`]): a try "passes"
//! only if the upstream received it. Each check is one client (its own
//! loopback address, its own `x-test` name) of one proxy's domain in
//! `tests/proxies/rules.yaml`: `/limited` 3 a minute per client, `POST
//! /login` 1, `/pair` two limits (5 and 2), `/keyed` 2 per `x-api-key`,
//! anything else unlimited.
//!
//! Where the proxies differ (what each answers to many headers, or when
//! tollgate hangs), the caller passes the answer `docs/reverse-proxies.md` documents.

use std::net::SocketAddr;
use std::time::Duration;

use crate::forward_auth::raw::{Answer, Raw, send};
use crate::forward_auth::support::Recorder;
use crate::forward_auth::upstream::seen;

/// A proxy under test: its name (also its tollgate domain) and address.
#[derive(Clone, Copy)]
pub struct Target {
    pub name: &'static str,
    pub addr: SocketAddr,
}

impl Target {
    fn test(&self, what: &str) -> String {
        format!("{}/{what}", self.name)
    }
}

async fn passes(target: Target, source: [u8; 4], test: &str, request: &Raw<'_>) -> Answer {
    let answer = send(target.addr, source, test, request).await;
    assert_eq!(
        answer.status, 200,
        "{test}: {} {} should pass: {answer:?}",
        request.method, request.target
    );
    answer
}

/// Uses up `/limited` for `source` (3 passes).
async fn use_up_limited(target: Target, source: [u8; 4], test: &str) {
    for _ in 0..3 {
        passes(target, source, test, &Raw::get("/limited/a")).await;
    }
}

/// Headers a client may send to pose as a proxy, or to move its request
/// to another path, method, host or address.
const SPOOFED: &[(&str, &str)] = &[
    ("X-Forwarded-Prefix", "/x"),
    ("X-Forwarded-Prefix", "/free"),
    ("X-Forwarded-Uri", "/free"),
    ("X-Original-URI", "/free"),
    ("X-Original-URL", "http://other.example/free"),
    ("X-Original-Host", "other.example"),
    ("X-Forwarded-Path", "/free"),
    ("X-Rewrite-URL", "/free"),
    ("X-Forwarded-For", "198.51.100.7"),
    ("X-Forwarded-For", "198.51.100.7, 127.0.0.3"),
    ("X-Real-IP", "198.51.100.7"),
    (
        "Forwarded",
        "for=198.51.100.7;host=other.example;proto=https",
    ),
    ("X-Forwarded-Host", "other.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Scheme", "https"),
    ("X-Forwarded-Port", "8443"),
    ("X-Client-IP", "198.51.100.7"),
    ("True-Client-IP", "198.51.100.7"),
];

/// Once the client's `/limited` is used up, no forwarded header it writes
/// (one at a time, then all at once, then twice each) gets another request
/// through; nor does a method header on `POST /login`.
pub async fn forwarded_headers_are_not_believed(target: Target, source: [u8; 4]) {
    let test = target.test("spoof");
    use_up_limited(target, source, &test).await;
    let mut requests: Vec<Raw> = SPOOFED
        .iter()
        .map(|(name, value)| Raw::get("/limited/a").header(*name, *value))
        .collect();
    let mut all = Raw::get("/limited/a");
    let mut twice = Raw::get("/limited/a");
    for (name, value) in SPOOFED {
        all = all.header(*name, *value);
        twice = twice.header(*name, *value).header(*name, *value);
    }
    requests.push(all);
    requests.push(twice);
    for request in &requests {
        let answer = send(target.addr, source, &test, request).await;
        assert_eq!(
            answer.status, 429,
            "{test}: {:?} should be refused by the limit: {answer:?}",
            request.headers
        );
    }
    let mut login = Raw::get("/login");
    login.method = "POST";
    passes(target, source, &test, &login).await;
    for name in [
        "X-Forwarded-Method",
        "X-Original-Method",
        "X-HTTP-Method-Override",
    ] {
        let answer = send(
            target.addr,
            source,
            &test,
            &login.clone().header(name, "GET"),
        )
        .await;
        assert_eq!(answer.status, 429, "{test}: {name}: GET: {answer:?}");
    }
    assert_eq!(seen(&test).len(), 4, "{test}: {:?}", seen(&test));
}

/// What the recipe sends tollgate for a request that carries every header
/// of [`SPOOFED`] (the proxy in front of a [`Recorder`]): one auth call to
/// `/v1/forward-auth/{name}…`; one line each of `X-Forwarded-Method`,
/// `-Uri`, `-Host` and `-Proto`, with the proxy's values; an
/// `X-Forwarded-For` whose last address is the client's; and no other
/// `X-Forwarded-*`, `X-Original-*`, `Forwarded` or `X-Real-IP` with the
/// client's value.
pub async fn auth_call_carries_only_the_proxys_view(
    proxy: SocketAddr,
    recorder: &Recorder,
    name: &str,
    source: [u8; 4],
) {
    let test = format!("{name}/auth-call");
    let mut request = Raw::get("/limited/a?q=1");
    for (header, value) in SPOOFED {
        request = request.header(*header, *value);
    }
    let answer = send(proxy, source, &test, &request).await;
    assert_eq!(answer.status, 200, "{test}: {answer:?}");
    // Less the proxy's start-up probe (`/.ready`).
    let calls: Vec<_> = recorder
        .calls()
        .into_iter()
        .filter(|(_, headers)| !headers.iter().any(|(_, v)| v == "/.ready"))
        .collect();
    let [(target, headers)] = calls.as_slice() else {
        panic!("{test}: one auth call: {calls:?}");
    };
    assert!(
        target.starts_with(&format!("/v1/forward-auth/{name}")),
        "{test}: {target}"
    );
    let all = |wanted: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(wanted))
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let client = std::net::Ipv4Addr::from(source).to_string();
    assert_eq!(all("x-forwarded-method"), ["GET"], "{test}: {headers:?}");
    assert_eq!(
        all("x-forwarded-uri"),
        ["/limited/a?q=1"],
        "{test}: {headers:?}"
    );
    // nginx's `$host` has no port.
    let host = all("x-forwarded-host");
    assert!(
        host == [proxy.to_string()] || host == [proxy.ip().to_string()],
        "{test}: {headers:?}"
    );
    assert_eq!(all("x-forwarded-proto"), ["http"], "{test}: {headers:?}");
    // The first address from the right that is not a trusted hop (the
    // rules' trusted_proxies) is the client's.
    let xff = all("x-forwarded-for").join(", ");
    let walked = xff
        .rsplit(',')
        .map(str::trim)
        .find(|hop| !["127.0.0.1", "127.0.0.3"].contains(hop));
    assert_eq!(
        walked,
        Some(client.as_str()),
        "{test}: X-Forwarded-For: {xff}"
    );
    for (name, value) in headers {
        let forwarded = name.starts_with("x-forwarded-")
            || name.starts_with("x-original-")
            || name == "forwarded"
            || name == "x-real-ip";
        if !forwarded || name == "x-forwarded-for" {
            continue;
        }
        assert!(
            !SPOOFED
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value),
            "{test}: the client's {name}: {value} reached tollgate: {headers:?}"
        );
    }
}

/// Spellings of `/limited` that the upstream (any RFC 3986 resolver)
/// serves as `/limited…`: once `/limited` is used up, none passes.
const LIMITED_SPELLINGS: &[&str] = &[
    "/x/../limited/y",
    "/x/%2e%2e/limited",
    "/x/%2E%2E/limited/y",
    "/x/.%2e/limited",
    "/%6cimited",
    "/%6Cimited/y",
    "/%2flimited",
    "//limited",
    "///limited/y",
    "/./limited",
    "/x/..//limited",
    "/../limited",
    "/limited/./y",
    "/limited?x=1",
];

/// Paths tollgate refuses whatever the rules: ones an upstream may resolve
/// two ways (a dot segment next to an encoded `/` or `\`, Tomcat's
/// `..;`), an encoded control character, a bad percent-encoding. None
/// reaches the upstream.
const REFUSED_PATHS: &[&str] = &[
    "/x/..%2Ffree",
    "/x/..%2ffree",
    "/x/..%5Cfree",
    "/x/..;/free",
    "/free%00",
    "/free%1F",
    "/free%zz",
    "/free%2",
];

/// Dot-segments, percent-encodings and repeated slashes are counted
/// against the rule the upstream serves: `/x/../limited/y` is `/limited`,
/// `/limited/../x` is not; paths that cannot be normalised safely never
/// pass.
pub async fn path_spellings_count_against_the_rule_served(target: Target, source: [u8; 4]) {
    let test = target.test("paths");
    use_up_limited(target, source, &test).await;
    // What the proxy answered each, printed (--nocapture) for `docs/reverse-proxies.md`.
    let mut answers = Vec::new();
    for path in LIMITED_SPELLINGS.iter().chain(REFUSED_PATHS) {
        let answer = send(target.addr, source, &test, &Raw::get(path)).await;
        assert_ne!(answer.status, 200, "{test}: {path} passed: {answer:?}");
        answers.push(format!("{path} {}", answer.status));
    }
    eprintln!("{test}: {}", answers.join(", "));
    passes(target, source, &test, &Raw::get("/limited/../free")).await;
    passes(target, source, &test, &Raw::get("/limited/%2e%2e/free")).await;
    assert_eq!(seen(&test).len(), 5, "{test}: {:?}", seen(&test));
}

/// A query string is the client's: never a 400, and its `deny_status`,
/// `source_cluster` or `destination_cluster` change nothing.
pub async fn query_strings_are_the_clients(target: Target, source: [u8; 4]) {
    let test = target.test("query");
    for path in [
        "/free?probe=1",
        "/free?deny_status=403",
        "/free?deny_status=oops&source_cluster=x&destination_cluster=y",
        "/free?a=%zz;b",
    ] {
        passes(target, source, &test, &Raw::get(path)).await;
    }
    for path in [
        "/limited?a=1",
        "/limited?deny_status=403",
        "/limited?deny_status=oops",
    ] {
        passes(target, source, &test, &Raw::get(path)).await;
    }
    for path in [
        "/limited?deny_status=403",
        "/limited?deny_status=200",
        "/limited",
    ] {
        let answer = send(target.addr, source, &test, &Raw::get(path)).await;
        assert_eq!(answer.status, 429, "{test}: {path}: {answer:?}");
    }
    let seen = seen(&test);
    assert_eq!(seen.len(), 7, "{test}: {seen:?}");
    assert_eq!(
        seen[0].target, "/free?probe=1",
        "{test}: the query reaches the upstream"
    );
}

fn with_headers(target: &str, count: usize) -> Raw<'_> {
    let mut request = Raw::get(target);
    for i in 0..count {
        request = request.header(format!("x-many-{i}"), format!("{i}"));
    }
    request
}

/// How many extra headers [`many_headers`] sends: 97 (with `Host`,
/// `x-test` and `Connection`, 100 lines: under HAProxy's limit of 101, and
/// past the 95 that crashed HAProxy through a Lua action that forwarded
/// them all), 100 and 200.
pub const MANY: [usize; 3] = [97, 100, 200];

/// [`MANY`] extra headers: the proxy answers `expected` (a pass or a
/// refusal, as the README documents) and keeps serving; on a used-up
/// `/limited` they never pass.
pub async fn many_headers(target: Target, source: [u8; 4], expected: [u16; 3]) {
    let test = target.test("headers");
    let mut passed = 0;
    for (count, expected) in MANY.into_iter().zip(expected) {
        let answer = send(target.addr, source, &test, &with_headers("/free", count)).await;
        assert_eq!(
            answer.status, expected,
            "{test}: {count} headers: {answer:?}"
        );
        passed += usize::from(answer.status == 200);
        passes(target, source, &test, &Raw::get("/free")).await;
    }
    use_up_limited(target, source, &test).await;
    for count in MANY {
        let answer = send(target.addr, source, &test, &with_headers("/limited", count)).await;
        assert_ne!(answer.status, 200, "{test}: {count} headers on /limited");
    }
    assert_eq!(seen(&test).len(), passed + MANY.len() + 3, "{test}");
}

/// A 1 MB body reaches the upstream whole on a pass, and is refused like
/// any request over the limit.
pub async fn large_body(target: Target, source: [u8; 4]) {
    let test = target.test("body");
    let mut request = Raw::get("/login");
    request.method = "POST";
    request.body = vec![b'x'; 1_000_000];
    passes(target, source, &test, &request).await;
    let refused = send(target.addr, source, &test, &request).await;
    assert_eq!(refused.status, 429, "{test}: {refused:?}");
    let seen = seen(&test);
    assert_eq!(seen.len(), 1, "{test}");
    assert_eq!(seen[0].method, "POST", "{test}");
    assert_eq!(seen[0].body_len, 1_000_000, "{test}");
}

/// Four clients at once, six requests each at once: exactly three of each
/// reach the upstream.
pub async fn concurrent_clients_are_counted_exactly(target: Target) {
    let mut tasks = Vec::new();
    for client in 0..4u8 {
        for _ in 0..6 {
            tasks.push(tokio::spawn(async move {
                let test = target.test(&format!("client{client}"));
                send(
                    target.addr,
                    [127, 0, 0, 40 + client],
                    &test,
                    &Raw::get("/limited/c"),
                )
                .await
                .status
            }));
        }
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("client"));
    }
    for client in 0..4 {
        let mine = &statuses[client * 6..client * 6 + 6];
        assert_eq!(
            mine.iter().filter(|s| **s == 200).count(),
            3,
            "{}: client {client}: {mine:?}",
            target.name
        );
        assert!(mine.iter().all(|s| *s == 200 || *s == 429), "{mine:?}");
        let test = target.test(&format!("client{client}"));
        assert_eq!(seen(&test).len(), 3, "{test}");
    }
}

/// With tollgate hung (it accepts and never answers), the proxy answers
/// `expected` within its recipe's timeout of about 1 s: refused, never
/// passed.
pub async fn answers_in_time_when_tollgate_hangs(target: Target, source: [u8; 4], expected: u16) {
    let test = target.test("hung");
    let answer = send(target.addr, source, &test, &Raw::get("/limited")).await;
    eprintln!("{test}: {} after {:?}", answer.status, answer.elapsed);
    assert_eq!(answer.status, expected, "{test}: {answer:?}");
    assert!(
        answer.elapsed >= Duration::from_millis(900)
            && answer.elapsed < Duration::from_millis(2500),
        "{test}: answered after {:?}",
        answer.elapsed
    );
    assert!(seen(&test).is_empty(), "{test}: passed");
}

/// Where a proxy puts tollgate's `RateLimit` on a pass.
#[derive(Clone, Copy, Debug)]
pub enum Copies {
    /// Into the client's response (nginx, HAProxy).
    ToResponse,
    /// Into the upstream's request (Caddy, Traefik).
    ToUpstream,
}

/// `/pair` has two limits (5 and 2 a minute): both items reach the
/// response or the upstream in one line, and the refusal by the second
/// shows that second item whole.
pub async fn every_ratelimit_item_is_copied(target: Target, source: [u8; 4], copies: Copies) {
    let test = target.test("pair");
    let loose = format!("\"{}.header_match_pair.remote_address\";r=", target.name);
    let tight = format!(
        "\"{}.header_match_pair_tight.remote_address\";r=",
        target.name
    );
    for remaining in [1, 0] {
        let answer = passes(target, source, &test, &Raw::get("/pair")).await;
        let lines: Vec<String> = match copies {
            Copies::ToResponse => answer
                .all("ratelimit")
                .iter()
                .map(|v| v.to_string())
                .collect(),
            Copies::ToUpstream => seen(&test).last().expect("seen").ratelimit.clone(),
        };
        assert_eq!(lines.len(), 1, "{test}: one RateLimit line: {lines:?}");
        assert!(
            lines[0].contains(&loose) && lines[0].contains(&format!("{tight}{remaining}")),
            "{test}: {lines:?}"
        );
    }
    let refused = send(target.addr, source, &test, &Raw::get("/pair")).await;
    assert_eq!(refused.status, 429, "{test}: {refused:?}");
    let lines = refused.all("ratelimit");
    assert_eq!(lines.len(), 1, "{test}: one RateLimit line: {lines:?}");
    assert!(lines[0].contains(&format!("{tight}0")), "{test}: {lines:?}");
    assert_eq!(seen(&test).len(), 2, "{test}");
}

/// `/keyed` is limited per `x-api-key` (2 a minute): the key's count is
/// shared by every client address that sends it.
pub async fn keys_are_shared_across_clients(target: Target, sources: [[u8; 4]; 2]) {
    let test = target.test("keyed");
    let key = format!("key-{}", target.name);
    let keyed = Raw::get("/keyed").header("x-api-key", key.as_str());
    passes(target, sources[0], &test, &keyed).await;
    passes(target, sources[1], &test, &keyed).await;
    for source in sources {
        let answer = send(target.addr, source, &test, &keyed).await;
        assert_eq!(answer.status, 429, "{test}: {answer:?}");
    }
    assert_eq!(seen(&test).len(), 2, "{test}");
}
