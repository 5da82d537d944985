//! The spoofing matrix: which address a request is keyed by, whatever the
//! client writes into proxy headers.

use crate::support;

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use rand::Rng;
use support::{from_peer, send};
use tollgate::{Gcra, KeyedLimiter, ManualClock, Quota};
use tollgate_tower::{
    ClientIp, KeyErrorKind, KeyExtractor, OnMissingKey, ProxyHeader, RateLimitLayer, Unvouched,
};
use tower::Layer;

const PROXIES: [&str; 2] = ["10.0.0.0/8", "fd00::/8"];

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn headers(lines: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in lines {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn client(header: ProxyHeader) -> ClientIp {
    ClientIp::trusting(PROXIES).unwrap().header(header)
}

/// The client address `ClientIp` finds for `peer` and `lines`.
fn keyed(header: ProxyHeader, peer: &str, lines: &[(&str, &str)]) -> IpAddr {
    client(header).client_of(ip(peer), &headers(lines))
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_it_writes() {
    let spoofs: [(&str, &str); 4] = [
        ("x-forwarded-for", "198.51.100.1"),
        ("x-real-ip", "198.51.100.1"),
        ("forwarded", "for=198.51.100.1"),
        ("x-forwarded-for", "10.0.0.7"),
    ];
    for header in [
        ProxyHeader::XForwardedFor,
        ProxyHeader::Forwarded,
        ProxyHeader::XRealIp,
    ] {
        for spoof in spoofs {
            assert_eq!(
                keyed(header, "203.0.113.9", &[spoof]),
                ip("203.0.113.9"),
                "{header:?} {spoof:?}"
            );
        }
        assert_eq!(keyed(header, "203.0.113.9", &spoofs), ip("203.0.113.9"));
        // Also when the attacker's address is written IPv4-mapped.
        assert_eq!(
            keyed(header, "::ffff:203.0.113.9", &spoofs),
            ip("203.0.113.9")
        );
    }
}

#[test]
fn one_trusted_proxy_vouches_for_the_entry_it_appended() {
    use ProxyHeader::*;
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "198.51.100.7")]
        ),
        ip("198.51.100.7")
    );
    // The leftmost entry is the client's own writing: never taken.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "1.1.1.1, 6.6.6.6, 198.51.100.7")]
        ),
        ip("198.51.100.7")
    );
    assert_eq!(
        keyed(
            Forwarded,
            "10.0.0.1",
            &[("forwarded", "for=1.1.1.1, for=198.51.100.7;proto=https")]
        ),
        ip("198.51.100.7")
    );
    assert_eq!(
        keyed(XRealIp, "10.0.0.1", &[("x-real-ip", "198.51.100.7")]),
        ip("198.51.100.7")
    );
    // The other headers are not read: the proxy does not write them.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("forwarded", "for=1.1.1.1"), ("x-real-ip", "1.1.1.1")]
        ),
        ip("10.0.0.1")
    );
    assert_eq!(
        keyed(Forwarded, "10.0.0.1", &[("x-forwarded-for", "1.1.1.1")]),
        ip("10.0.0.1")
    );
    // No header: the proxy's own request.
    assert_eq!(keyed(XForwardedFor, "10.0.0.1", &[]), ip("10.0.0.1"));
}

#[test]
fn two_trusted_hops_are_walked_from_the_right() {
    use ProxyHeader::*;
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]
        ),
        ip("198.51.100.7")
    );
    assert_eq!(
        keyed(
            Forwarded,
            "fd00::1",
            &[(
                "forwarded",
                r#"for=6.6.6.6, For="[2001:db8:cafe::17]:4711";proto=https, for="[fd00::2]""#
            )]
        ),
        ip("2001:db8:cafe::17")
    );
    // A client inside the trusted networks is vouched for by its proxy.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "10.9.9.9, 10.0.0.2")]
        ),
        ip("10.9.9.9")
    );
}

#[test]
fn several_header_lines_are_one_list_in_order() {
    use ProxyHeader::*;
    let lines = [
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-for", "198.51.100.7, 10.0.0.2"),
    ];
    assert_eq!(keyed(XForwardedFor, "10.0.0.1", &lines), ip("198.51.100.7"));
    let lines = [
        ("x-forwarded-for", "198.51.100.7"),
        ("x-forwarded-for", "10.0.0.2"),
        ("x-forwarded-for", ""),
    ];
    assert_eq!(keyed(XForwardedFor, "10.0.0.1", &lines), ip("198.51.100.7"));
    let lines = [
        ("forwarded", "for=6.6.6.6"),
        ("forwarded", "for=198.51.100.7, for=10.0.0.2"),
    ];
    assert_eq!(keyed(Forwarded, "10.0.0.1", &lines), ip("198.51.100.7"));
    // Two X-Real-IP lines: which one the proxy set is unknowable.
    let lines = [("x-real-ip", "6.6.6.6"), ("x-real-ip", "198.51.100.7")];
    assert_eq!(keyed(XRealIp, "10.0.0.1", &lines), ip("10.0.0.1"));
}

#[test]
fn garbage_stops_the_walk_at_the_last_vouched_address() {
    use ProxyHeader::*;
    for value in [
        "garbage",
        "unknown",
        "198.51.100.7 10.0.0.2",
        "300.0.0.1",
        "1.2.3.4:99999",
        "[2001:db8::1",
        "\t",
    ]
    .map(str::as_bytes)
    .into_iter()
    // obs-text: bytes a header value may carry that are not UTF-8.
    .chain([&b"\x80\xff"[..], b"1.2.3.4\xa0"])
    {
        let line = HeaderValue::from_bytes(value).expect("a valid header value");
        let mut map = HeaderMap::new();
        map.append("x-forwarded-for", line);
        assert_eq!(
            client(XForwardedFor).client_of(ip("10.0.0.1"), &map),
            ip("10.0.0.1"),
            "{value:?}"
        );
    }
    // DEL (and other controls) cannot be in a header value at all: hyper
    // refuses the request before any extractor sees it.
    assert!(HeaderValue::from_bytes(b"\x7f").is_err());
    // Garbage left of an untrusted hop is never reached.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "garbage, 198.51.100.7")]
        ),
        ip("198.51.100.7")
    );
    // Garbage left of a trusted hop: that hop is the last one vouched for.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "garbage, 10.0.0.2")]
        ),
        ip("10.0.0.2")
    );
    for value in [
        "for=_hidden",
        "for=unknown",
        "proto=https",
        r#"for="198.51.100.7"#,
        "for=198.51.100.7;for=6.6.6.6",
        r#"for="\198.51.100.7""#,
        r#"for=6.6.6.6, for="198.51.100.7"#,
        "for=6.6.6.6, for=1.2.3.4;for=5.6.7.8",
    ] {
        assert_eq!(
            keyed(Forwarded, "10.0.0.1", &[("forwarded", value)]),
            ip("10.0.0.1"),
            "{value:?}"
        );
    }
    // Non-UTF-8 bytes in a header value.
    let mut map = HeaderMap::new();
    map.append(
        "x-forwarded-for",
        HeaderValue::from_bytes(b"\xff\xfe, 10.0.0.2").unwrap(),
    );
    assert_eq!(
        client(XForwardedFor).client_of(ip("10.0.0.1"), &map),
        ip("10.0.0.2")
    );
}

/// Regression: `Forwarded` was split left to right, so a quote the client
/// left open (`for="x`) swallowed the element a trusted proxy appended to
/// the same line, and the request was keyed by the proxy's own address.
#[test]
fn a_quote_left_open_by_the_client_does_not_swallow_the_proxy_element() {
    use ProxyHeader::Forwarded;
    for (value, expected) in [
        // One proxy appended the client it saw.
        (r#"for="x, for=198.51.100.7"#, "198.51.100.7"),
        (
            r#"for="x, for="[2001:db8:cafe::17]:4711""#,
            "2001:db8:cafe::17",
        ),
        (
            r#"for=1.1.1.1;host="x, for=198.51.100.7;proto=https"#,
            "198.51.100.7",
        ),
        (r#"for="x;, for=198.51.100.7"#, "198.51.100.7"),
        (r#"for=""x, for=198.51.100.7"#, "198.51.100.7"),
        // Two proxies: the first one's element is read, and walked past.
        (r#"for="x, for=198.51.100.7, for=10.0.0.2"#, "198.51.100.7"),
        // Escapes written by the client do not reach the proxy element.
        (r#"for="x\, for=198.51.100.7"#, "198.51.100.7"),
        (r#"for=\"x, for=198.51.100.7"#, "198.51.100.7"),
        // The client element itself is unreadable: a trusted hop right of
        // it is the last one vouched for.
        (r#"for="x, for=10.0.0.2"#, "10.0.0.2"),
    ] {
        assert_eq!(
            keyed(Forwarded, "10.0.0.1", &[("forwarded", value)]),
            ip(expected),
            "{value:?}"
        );
    }
    // The same on separate lines (a proxy that adds a line).
    let lines = [
        ("forwarded", r#"for="x"#),
        ("forwarded", "for=198.51.100.7"),
    ];
    assert_eq!(keyed(Forwarded, "10.0.0.1", &lines), ip("198.51.100.7"));
}

/// Through the layer: the client with the open quote gets its own bucket,
/// and does not spend the bucket of the other clients of its proxy.
#[tokio::test(start_paused = true)]
async fn an_open_quote_neither_escapes_the_limit_nor_spends_others_quota() {
    let limiter: KeyedLimiter<IpAddr> =
        KeyedLimiter::builder(Gcra::new(Quota::per_hour(1).unwrap()).unwrap())
            .clock(ManualClock::new())
            .sweep_every(None)
            .build();
    let extractor = client(ProxyHeader::Forwarded);
    let mut service = RateLimitLayer::new(extractor, limiter.clone()).layer(support::ok_service());
    let request = |forwarded: &str| {
        from_peer("10.0.0.1")
            .header("forwarded", forwarded)
            .body(String::new())
            .unwrap()
    };
    let attack = r#"for="x, for=198.51.100.66"#;
    let statuses = [
        send(&mut service, request(attack)).await.status(),
        send(&mut service, request(attack)).await.status(),
        send(&mut service, request("for=198.51.100.7"))
            .await
            .status(),
        send(&mut service, request("for=198.51.100.8"))
            .await
            .status(),
    ];
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::OK,
            StatusCode::OK
        ]
    );
    assert_eq!(limiter.len(), 3);
    assert!(limiter.peek(&ip("198.51.100.66")).is_denied());
    assert!(limiter.peek(&ip("10.0.0.1")).is_allowed());
}

#[test]
fn a_trusted_peer_that_vouches_for_no_client() {
    use ProxyHeader::*;
    let parts = |header: &str, value: Option<&str>| {
        let mut request = from_peer("10.0.0.1");
        if let Some(value) = value {
            request = request.header(header, value);
        }
        request.body(()).unwrap().into_parts().0
    };
    let chain: Vec<String> = (1..=20).map(|i| format!("10.0.1.{i}")).collect();
    let chain = format!("198.51.100.7, {}", chain.join(", "));
    let unvouched = [
        (XForwardedFor, "x-forwarded-for", None, "10.0.0.1"),
        (
            XForwardedFor,
            "x-forwarded-for",
            Some("garbage"),
            "10.0.0.1",
        ),
        (XForwardedFor, "x-forwarded-for", Some(" , "), "10.0.0.1"),
        (
            XForwardedFor,
            "x-forwarded-for",
            Some("garbage, 10.0.0.2"),
            "10.0.0.2",
        ),
        (
            XForwardedFor,
            "x-forwarded-for",
            Some(&chain[..]),
            "10.0.1.5",
        ),
        (Forwarded, "forwarded", None, "10.0.0.1"),
        (Forwarded, "forwarded", Some("for=unknown"), "10.0.0.1"),
        (
            Forwarded,
            "forwarded",
            Some("for=_hidden;proto=https"),
            "10.0.0.1",
        ),
        (Forwarded, "forwarded", Some("proto=https"), "10.0.0.1"),
        (Forwarded, "forwarded", Some(r#"for="x"#), "10.0.0.1"),
        (
            Forwarded,
            "forwarded",
            Some(r#"for="x, for=10.0.0.2"#),
            "10.0.0.2",
        ),
        (XRealIp, "x-real-ip", None, "10.0.0.1"),
        (XRealIp, "x-real-ip", Some("garbage"), "10.0.0.1"),
    ];
    for (header, name, value, last_proxy) in unvouched {
        let lenient = client(header);
        let strict = client(header).unvouched(Unvouched::MissingKey);
        // By default: the last trusted proxy's address.
        assert_eq!(
            lenient.extract(&parts(name, value)),
            Ok(ip(last_proxy)),
            "{header:?} {value:?}"
        );
        // Asked for: a missing key.
        let error = strict.extract(&parts(name, value)).unwrap_err();
        assert_eq!(error.kind(), KeyErrorKind::Missing, "{header:?} {value:?}");
        let headers = parts(name, value).headers;
        assert_eq!(strict.vouched_client_of(ip("10.0.0.1"), &headers), None);
        assert_eq!(strict.client_of(ip("10.0.0.1"), &headers), ip(last_proxy));
    }
    let vouched = [
        (
            XForwardedFor,
            "x-forwarded-for",
            "198.51.100.7",
            "198.51.100.7",
        ),
        (
            XForwardedFor,
            "x-forwarded-for",
            "garbage, 198.51.100.7",
            "198.51.100.7",
        ),
        // A client inside the trusted networks, written by its proxy.
        (
            XForwardedFor,
            "x-forwarded-for",
            "10.9.9.9, 10.0.0.2",
            "10.9.9.9",
        ),
        (
            Forwarded,
            "forwarded",
            r#"for="x, for=198.51.100.7"#,
            "198.51.100.7",
        ),
        (XRealIp, "x-real-ip", "198.51.100.7", "198.51.100.7"),
    ];
    for (header, name, value, expected) in vouched {
        let strict = client(header).unvouched(Unvouched::MissingKey);
        assert_eq!(
            strict.extract(&parts(name, Some(value))),
            Ok(ip(expected)),
            "{header:?} {value:?}"
        );
    }
    // An untrusted peer is always its own client.
    let strict = client(XForwardedFor).unvouched(Unvouched::MissingKey);
    let request = from_peer("203.0.113.9").body(()).unwrap().into_parts().0;
    assert_eq!(strict.extract(&request), Ok(ip("203.0.113.9")));
}

/// `Unvouched::MissingKey` through the layer: answered as `OnMissingKey`
/// says, never counted in the proxy's bucket.
#[tokio::test(start_paused = true)]
async fn unvouched_requests_are_answered_as_missing_keys() {
    let limiter: KeyedLimiter<IpAddr> =
        KeyedLimiter::builder(Gcra::new(Quota::per_hour(1).unwrap()).unwrap())
            .clock(ManualClock::new())
            .sweep_every(None)
            .build();
    let strict = client(ProxyHeader::Forwarded).unvouched(Unvouched::MissingKey);
    let mut rejecting =
        RateLimitLayer::new(strict.clone(), limiter.clone()).layer(support::ok_service());
    let mut allowing = RateLimitLayer::builder(strict, limiter.clone())
        .on_missing_key(OnMissingKey::Allow)
        .build()
        .unwrap()
        .layer(support::ok_service());
    let request = |forwarded: &str| {
        from_peer("10.0.0.1")
            .header("forwarded", forwarded)
            .body(String::new())
            .unwrap()
    };
    for _ in 0..3 {
        let response = send(&mut rejecting, request(r#"for="x"#)).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let response = send(&mut allowing, request("for=unknown")).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(limiter.len(), 0);
    let response = send(&mut rejecting, request("for=198.51.100.7")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(limiter.len(), 1);
}

#[test]
fn overlong_values_cost_nothing_and_change_nothing() {
    use ProxyHeader::*;
    // 100 KB of fabricated hops left of the real one: only the right end is read.
    let long = format!("{}198.51.100.7", "6.6.6.6, ".repeat(11_000));
    assert_eq!(
        keyed(XForwardedFor, "10.0.0.1", &[("x-forwarded-for", &long)]),
        ip("198.51.100.7")
    );
    let long = format!("{}for=198.51.100.7", "for=6.6.6.6, ".repeat(8_000));
    assert_eq!(
        keyed(Forwarded, "10.0.0.1", &[("forwarded", &long)]),
        ip("198.51.100.7")
    );
    // One overlong entry is unreadable.
    let entry = format!("{}1", "0".repeat(100));
    assert_eq!(
        keyed(XForwardedFor, "10.0.0.1", &[("x-forwarded-for", &entry)]),
        ip("10.0.0.1")
    );
    // A chain of trusted hops longer than max_hops stops at the last walked.
    let chain: Vec<String> = (1..=40).map(|i| format!("10.0.1.{i}")).collect();
    let chain = format!("6.6.6.6, {}", chain.join(", "));
    let walked = client(XForwardedFor)
        .max_hops(16)
        .client_of(ip("10.0.0.1"), &headers(&[("x-forwarded-for", &chain)]));
    assert_eq!(walked, ip("10.0.1.25"));
}

#[test]
fn ipv6_zones_and_ipv4_mapped_addresses_are_canonical() {
    use ProxyHeader::*;
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "fe80::5%eth0")]
        ),
        ip("fe80::5")
    );
    assert_eq!(
        keyed(
            Forwarded,
            "10.0.0.1",
            &[("forwarded", r#"for="[fe80::5%25eth0]:80""#)]
        ),
        ip("fe80::5")
    );
    // A trusted proxy seen IPv4-mapped is still trusted, and a mapped client
    // is the IPv4 client.
    assert_eq!(
        keyed(
            XForwardedFor,
            "::ffff:10.0.0.1",
            &[("x-forwarded-for", "::ffff:198.51.100.7")]
        ),
        ip("198.51.100.7")
    );
    // A mapped address inside the trusted network is trusted, and walked past.
    assert_eq!(
        keyed(
            XForwardedFor,
            "10.0.0.1",
            &[("x-forwarded-for", "198.51.100.7, ::ffff:10.0.0.2")]
        ),
        ip("198.51.100.7")
    );
}

#[test]
fn ipv6_clients_are_keyed_by_their_prefix() {
    let parts = |peer: &str, xff: &str| {
        from_peer(peer)
            .header("x-forwarded-for", xff)
            .body(())
            .unwrap()
            .into_parts()
            .0
    };
    let by64 = ClientIp::trusting(PROXIES).unwrap();
    let a = by64.extract(&parts("10.0.0.1", "2001:db8:1:2::1")).unwrap();
    let b = by64
        .extract(&parts("10.0.0.1", "2001:db8:1:2:ffff::9"))
        .unwrap();
    assert_eq!((a, b), (ip("2001:db8:1:2::"), ip("2001:db8:1:2::")));
    let by56 = ClientIp::trusting(PROXIES)
        .unwrap()
        .ipv6_prefix(56)
        .unwrap();
    let c = by56
        .extract(&parts("10.0.0.1", "2001:db8:1:2ff::1"))
        .unwrap();
    assert_eq!(c, ip("2001:db8:1:200::"));
    // An IPv6 peer that is not trusted: its /64.
    let d = by64
        .extract(&parts("2001:db8:9:9:1:2:3:4", "198.51.100.7"))
        .unwrap();
    assert_eq!(d, ip("2001:db8:9:9::"));
}

/// 10,000 requests from one peer, each with a random fabricated leftmost
/// hop, through the layer: one bucket.
#[tokio::test(start_paused = true)]
async fn ten_thousand_fabricated_leftmost_hops_land_in_one_bucket() {
    for (peer, real) in [("10.0.0.1", "198.51.100.7"), ("203.0.113.9", "")] {
        let limiter: KeyedLimiter<IpAddr> =
            KeyedLimiter::builder(Gcra::new(Quota::per_hour(100).unwrap()).unwrap())
                .clock(ManualClock::new())
                .sweep_every(None)
                .build();
        let layer = RateLimitLayer::new(ClientIp::trusting(PROXIES).unwrap(), limiter.clone());
        let mut service = layer.layer(support::ok_service());
        let mut rng = rand::rng();
        let mut admitted = 0;
        for _ in 0..10_000 {
            let fake = IpAddr::from(rng.random::<[u8; 4]>());
            let xff = if real.is_empty() {
                fake.to_string()
            } else {
                format!("{fake}, {real}")
            };
            let request = from_peer(peer)
                .header("x-forwarded-for", xff)
                .header("x-real-ip", fake.to_string())
                .header("forwarded", format!("for={fake}"))
                .body(String::new())
                .unwrap();
            admitted += usize::from(send(&mut service, request).await.status() == StatusCode::OK);
        }
        assert_eq!(limiter.len(), 1, "peer {peer}");
        assert_eq!(admitted, 100, "peer {peer}");
        let expected = if real.is_empty() { peer } else { real };
        assert!(limiter.peek(&ip(expected)).is_denied());
    }
}

#[test]
fn requests_without_connection_info_are_a_server_error() {
    let parts = Request::get("/").body(()).unwrap().into_parts().0;
    let error = ClientIp::trusting(PROXIES)
        .unwrap()
        .extract(&parts)
        .unwrap_err();
    assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // A plain SocketAddr extension (hyper, tonic) is read when asked for.
    let peer: std::net::SocketAddr = "192.0.2.4:5000".parse().unwrap();
    let parts = Request::get("/")
        .extension(peer)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let client = ClientIp::trusting(PROXIES)
        .unwrap()
        .with_extension::<std::net::SocketAddr>();
    assert_eq!(client.extract(&parts).unwrap(), ip("192.0.2.4"));
}
