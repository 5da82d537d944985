use super::header::{MAX_ELEMENT_LEN, forwarded_node, last_element};
use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn entries_are_canonical() {
    assert_eq!(parse_entry(b" 192.0.2.1 "), Some(ip("192.0.2.1")));
    assert_eq!(parse_entry(b"192.0.2.1:8080"), Some(ip("192.0.2.1")));
    assert_eq!(parse_entry(b"[2001:db8::1]:443"), Some(ip("2001:db8::1")));
    assert_eq!(parse_entry(b"[2001:db8::1]"), Some(ip("2001:db8::1")));
    assert_eq!(parse_entry(b"fe80::1%eth0"), Some(ip("fe80::1")));
    assert_eq!(parse_entry(b"[fe80::1%25eth0]:80"), Some(ip("fe80::1")));
    assert_eq!(parse_entry(b"::ffff:192.0.2.7"), Some(ip("192.0.2.7")));
    for garbage in [
        &b"unknown"[..],
        b"_hidden",
        b"",
        b"1.2.3.4.5",
        b"1.2.3.4:",
        b"1.2.3.4:123456",
        b"1.2.3.4:65536",
        b"1.2.3.4:+80",
        b"[::1",
        b"[::1]x",
        b"1.2.3.4%eth0",
        b"\xff\xfe",
        b"300.1.1.1",
    ] {
        assert_eq!(parse_entry(garbage), None, "{garbage:?}");
    }
    let long = format!("{}1.2.3.4", " ".repeat(0) + &"0".repeat(70));
    assert_eq!(parse_entry(long.as_bytes()), None);
}

#[test]
fn ipv6_is_cut_to_its_prefix() {
    assert_eq!(
        aggregate(ip("2001:db8:1:2:3:4:5:6"), 64),
        ip("2001:db8:1:2::")
    );
    assert_eq!(
        aggregate(ip("2001:db8:1:2:3:4:5:6"), 48),
        ip("2001:db8:1::")
    );
    assert_eq!(aggregate(ip("2001:db8::6"), 128), ip("2001:db8::6"));
    assert_eq!(aggregate(ip("2001:db8::6"), 0), ip("::"));
    assert_eq!(aggregate(ip("::ffff:10.1.2.3"), 64), ip("10.1.2.3"));
    assert!(PeerIp::new().ipv6_prefix(129).is_err());
}

/// Every hop of one `Forwarded` line, right to left, read to the end
/// (the walk itself stops at the first `None`).
fn hops(line: &[u8]) -> Vec<Option<IpAddr>> {
    let mut all = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let (element, before) = last_element(rest, usize::MAX).unwrap();
        if !element.trim_ascii().is_empty() {
            all.push(forwarded_node(element));
        }
        rest = before;
    }
    all
}

#[test]
fn forwarded_elements_respect_quotes() {
    let line = br#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711", for=unknown, proto=https, for="a,b""#;
    assert_eq!(
        hops(line),
        vec![
            None,
            None,
            None,
            Some(ip("2001:db8:cafe::17")),
            Some(ip("192.0.2.60")),
        ]
    );
    assert_eq!(hops(br#"for="1.2.3.4"#), vec![None]);
    assert_eq!(hops(b"for=1.2.3.4;for=5.6.7.8"), vec![None]);
    // An escaped quote inside a quoted string does not end it.
    assert_eq!(
        hops(br#"for=192.0.2.1, host="a\",b";for=192.0.2.2, for=192.0.2.3"#),
        vec![
            Some(ip("192.0.2.3")),
            Some(ip("192.0.2.2")),
            Some(ip("192.0.2.1"))
        ]
    );
    // A quote the client left open swallows only what is left of it.
    assert_eq!(
        hops(br#"for="x, for=192.0.2.9"#),
        vec![Some(ip("192.0.2.9")), None]
    );
}

/// Regression: the `Forwarded` walk parsed and collected every element
/// of every line before looking at the rightmost one.
#[test]
fn forwarded_hops_read_only_what_is_walked() {
    let long = format!("{}for=192.0.2.9", "for=6.6.6.6, ".repeat(100_000));
    let lines = [long.as_bytes()];
    let mut walk = ForwardedHops::new(lines.into_iter());
    assert_eq!(walk.next(), Some(Some(ip("192.0.2.9"))));
    assert_eq!(walk.next(), Some(Some(ip("6.6.6.6"))));
    // Two elements read: the rest of the line is untouched.
    assert_eq!(
        walk.rest.len(),
        long.len() - "for=192.0.2.9".len() - "for=6.6.6.6, ".len() - 2
    );
    // An element (with the empty ones before it) longer than the bound
    // is unreadable, and ends the walk.
    let commas = format!(
        "for=192.0.2.1{}for=192.0.2.9",
        ",".repeat(MAX_ELEMENT_LEN + 1)
    );
    let host = format!("for=192.0.2.1;host={}", "a".repeat(MAX_ELEMENT_LEN));
    for line in [commas, host] {
        let lines = [line.as_bytes(), b"for=192.0.2.9"];
        let mut walk = ForwardedHops::new(lines.into_iter().rev());
        assert_eq!(walk.next(), Some(Some(ip("192.0.2.9"))));
        if line.contains(',') {
            assert_eq!(walk.next(), Some(Some(ip("192.0.2.9"))));
        }
        assert_eq!(walk.next(), Some(None));
        assert_eq!(walk.next(), None);
    }
}

#[cfg(feature = "tonic")]
#[test]
fn tonic_connection_info_is_a_peer_address() {
    let info = tonic::transport::server::TcpConnectInfo {
        local_addr: None,
        remote_addr: Some("[2001:db8::1:2:3:4]:5000".parse().unwrap()),
    };
    let parts = http::Request::get("/")
        .extension(info)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    let peer = PeerIp::new().with_extension::<tonic::transport::server::TcpConnectInfo>();
    assert_eq!(peer.extract(&parts), Ok(ip("2001:db8::")));
    let unknown = tonic::transport::server::TcpConnectInfo {
        local_addr: None,
        remote_addr: None,
    };
    let parts = http::Request::get("/")
        .extension(unknown)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    assert!(peer.extract(&parts).is_err());
}

#[test]
fn mapped_trusted_networks_match_ipv4_peers() {
    let client = ClientIp::trusting(["::ffff:10.0.0.0/104"]).unwrap();
    assert!(client.is_trusted(ip("10.9.9.9")));
    assert!(!client.is_trusted(ip("11.0.0.1")));
    assert!(ClientIp::trusting(["10.0.0.0/33"]).is_err());
    let single = ClientIp::trusting(["10.0.0.1"]).unwrap();
    assert!(single.is_trusted(ip("10.0.0.1")));
    assert!(!single.is_trusted(ip("10.0.0.2")));
}
