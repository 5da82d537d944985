//! Keys by client address: the connection's peer ([`PeerIp`]) and the
//! client behind trusted proxies ([`ClientIp`]).
//!
//! # Decisions
//!
//! - **The peer address comes from a request extension** whose type is a
//!   parameter ([`ConnectionAddr`]): axum's `ConnectInfo<SocketAddr>` (with
//!   `Router::into_make_service_with_connect_info::<SocketAddr>()`), tonic's
//!   `TcpConnectInfo` (feature `tonic`), or a plain `SocketAddr` / `IpAddr`
//!   that a hyper server inserts itself. A request without it is a server misconfiguration
//!   ([`KeyErrorKind::NoConnectionInfo`](crate::KeyErrorKind), `500` by
//!   default), never a shared bucket.
//! - **Proxy headers are read only from trusted peers.** If the peer is not
//!   in a configured trusted network, every header is ignored and the peer
//!   is the client: a client cannot choose its own key.
//! - **Walked from the right.** Each proxy appends the address it saw to
//!   the right; only entries written by trusted hops are true. Starting
//!   from the peer, [`ClientIp`] steps left while the hop is trusted and
//!   takes the first untrusted one. The leftmost entry, which the client
//!   wrote itself, is never taken unless every hop to its right is trusted
//!   (and then it was written by a trusted proxy).
//! - **One header, chosen.** Reading a header the proxies do not write is
//!   reading what the client wrote, so [`ClientIp`] reads exactly one:
//!   `X-Forwarded-For` by default, RFC 7239 `Forwarded`, or `X-Real-IP`
//!   ([`ProxyHeader`]). Several header lines are one list, in order
//!   (RFC 9110 §5.3); empty list elements are skipped.
//! - **Unreadable or too many hops stop the walk** at the last address
//!   read, which a trusted hop vouched for: garbage, `unknown`, obfuscated
//!   identifiers (`_hidden`), entries over 64 bytes, or more than
//!   [`max_hops`](ClientIp::max_hops) trusted hops.
//! - **Addresses are canonical:** IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is
//!   IPv4, zone identifiers (`fe80::1%eth0`) and ports are dropped, before
//!   matching trusted networks and before keying.
//! - **IPv6 clients are keyed by prefix**, `/64` by default: one subscriber
//!   usually holds a whole /64 and can rotate addresses within it at will.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};
use http::request::Parts;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::key::{KeyError, KeyExtractor};

/// The default IPv6 prefix length that is one client.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// The default most trusted hops walked in a proxy header.
pub const DEFAULT_MAX_HOPS: usize = 16;
/// The longest proxy-header entry read, in bytes (a bracketed IPv6 address
/// with a zone and a port fits).
const MAX_ENTRY_LEN: usize = 64;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// A request extension that carries the connection's peer address.
///
/// Implemented for `SocketAddr` and `IpAddr` (what a hyper server inserts
/// itself), axum's `ConnectInfo<T>` (with the `axum` feature) and tonic's
/// `TcpConnectInfo` (with the `tonic` feature).
pub trait ConnectionAddr: Send + Sync + 'static {
    /// The peer's IP address, if the extension knows it.
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl ConnectionAddr for SocketAddr {
    fn peer_ip(&self) -> Option<IpAddr> {
        Some(self.ip())
    }
}

impl ConnectionAddr for IpAddr {
    fn peer_ip(&self) -> Option<IpAddr> {
        Some(*self)
    }
}

#[cfg(feature = "axum")]
impl<T: ConnectionAddr> ConnectionAddr for axum::extract::ConnectInfo<T> {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.0.peer_ip()
    }
}

#[cfg(feature = "tonic")]
impl ConnectionAddr for tonic::transport::server::TcpConnectInfo {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.remote_addr.map(|addr| addr.ip())
    }
}

/// The extension [`PeerIp`] and [`ClientIp`] read by default: axum's
/// `ConnectInfo<SocketAddr>` with the `axum` feature, else `SocketAddr`.
#[cfg(feature = "axum")]
pub type DefaultConnectionAddr = axum::extract::ConnectInfo<SocketAddr>;
/// The extension [`PeerIp`] and [`ClientIp`] read by default: axum's
/// `ConnectInfo<SocketAddr>` with the `axum` feature, else `SocketAddr`.
#[cfg(not(feature = "axum"))]
pub type DefaultConnectionAddr = SocketAddr;

/// An IPv6 prefix length above 128.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixError(u8);

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an IPv6 prefix is 0 to 128 bits long, not {}", self.0)
    }
}

impl std::error::Error for PrefixError {}

/// The connection's peer address: right when clients connect directly.
///
/// `T` is the request extension that carries it (see [`ConnectionAddr`]).
pub struct PeerIp<T = DefaultConnectionAddr> {
    ipv6_prefix: u8,
    addr: PhantomData<fn() -> T>,
}

impl PeerIp {
    /// The peer address, read from the [`DefaultConnectionAddr`] extension,
    /// IPv6 by /64.
    pub fn new() -> PeerIp {
        PeerIp {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            addr: PhantomData,
        }
    }
}

impl<T> PeerIp<T> {
    /// The same, reading the peer address from extension `U` instead (a
    /// `SocketAddr` that a hyper or tonic server inserts itself).
    pub fn with_extension<U>(self) -> PeerIp<U> {
        PeerIp {
            ipv6_prefix: self.ipv6_prefix,
            addr: PhantomData,
        }
    }

    /// How many leading bits of an IPv6 address are one client. By default,
    /// 64.
    ///
    /// # Errors
    ///
    /// [`PrefixError`] above 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<PeerIp<T>, PrefixError> {
        self.ipv6_prefix = check_prefix(bits)?;
        Ok(self)
    }
}

impl Default for PeerIp {
    fn default() -> PeerIp {
        PeerIp::new()
    }
}

impl<T> Clone for PeerIp<T> {
    fn clone(&self) -> PeerIp<T> {
        PeerIp {
            ipv6_prefix: self.ipv6_prefix,
            addr: PhantomData,
        }
    }
}

impl<T> fmt::Debug for PeerIp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerIp")
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

impl<T: ConnectionAddr> KeyExtractor for PeerIp<T> {
    type Key = IpAddr;

    fn extract(&self, request: &Parts) -> Result<IpAddr, KeyError> {
        let peer = peer_ip::<T>(request)?;
        Ok(aggregate(peer, self.ipv6_prefix))
    }
}

/// Which header the trusted proxies write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`, each proxy appending the
    /// address it saw. The default.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:443"`, read from
    /// each element's `for` parameter.
    Forwarded,
    /// `X-Real-IP: client`, one address set (not appended) by the trusted
    /// proxy; anything but exactly one readable address is ignored.
    XRealIp,
}

/// The client's address behind trusted reverse proxies.
///
/// ```
/// use tollgate_tower::{ClientIp, ProxyHeader};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The load balancers live in 10.0.0.0/8 and append to X-Forwarded-For.
/// let client = ClientIp::trusting(["10.0.0.0/8", "fd00::/8"])?
///     .header(ProxyHeader::XForwardedFor);
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
///
/// See the [module docs](self) for how the client is found.
pub struct ClientIp<T = DefaultConnectionAddr> {
    trusted: Vec<IpNet>,
    header: ProxyHeader,
    max_hops: usize,
    ipv6_prefix: u8,
    addr: PhantomData<fn() -> T>,
}

impl ClientIp {
    /// The client behind proxies in `trusted` networks, the peer read from
    /// the [`DefaultConnectionAddr`] extension.
    pub fn new(trusted: impl IntoIterator<Item = IpNet>) -> ClientIp {
        ClientIp {
            trusted: trusted.into_iter().map(canonical_net).collect(),
            header: ProxyHeader::default(),
            max_hops: DEFAULT_MAX_HOPS,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            addr: PhantomData,
        }
    }

    /// The client behind proxies in `trusted` networks, in CIDR notation
    /// (`"10.0.0.0/8"`; a bare address is a /32 or /128).
    ///
    /// # Errors
    ///
    /// [`ipnet::AddrParseError`] for an entry that is neither a network nor
    /// an address.
    pub fn trusting<'a>(
        trusted: impl IntoIterator<Item = &'a str>,
    ) -> Result<ClientIp, ipnet::AddrParseError> {
        let nets = trusted
            .into_iter()
            .map(|entry| {
                let entry = entry.trim();
                entry
                    .parse::<IpNet>()
                    .or_else(|error| entry.parse::<IpAddr>().map(IpNet::from).map_err(|_| error))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClientIp::new(nets))
    }
}

impl<T> ClientIp<T> {
    /// The same, reading the peer address from extension `U` instead (a
    /// `SocketAddr` that a hyper or tonic server inserts itself).
    pub fn with_extension<U>(self) -> ClientIp<U> {
        ClientIp {
            trusted: self.trusted,
            header: self.header,
            max_hops: self.max_hops,
            ipv6_prefix: self.ipv6_prefix,
            addr: PhantomData,
        }
    }

    /// The header the trusted proxies write. By default,
    /// [`ProxyHeader::XForwardedFor`].
    pub fn header(mut self, header: ProxyHeader) -> ClientIp<T> {
        self.header = header;
        self
    }

    /// The most trusted hops walked before the walk stops at the last one.
    /// By default, 16.
    pub fn max_hops(mut self, max_hops: usize) -> ClientIp<T> {
        self.max_hops = max_hops;
        self
    }

    /// How many leading bits of an IPv6 address are one client. By default,
    /// 64.
    ///
    /// # Errors
    ///
    /// [`PrefixError`] above 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<ClientIp<T>, PrefixError> {
        self.ipv6_prefix = check_prefix(bits)?;
        Ok(self)
    }

    /// Whether `ip` (canonical) is in a trusted network.
    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client's full address, given the peer's and the headers.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        match self.header {
            ProxyHeader::XRealIp => real_ip(headers).unwrap_or(peer),
            ProxyHeader::XForwardedFor => {
                let hops = headers
                    .get_all(X_FORWARDED_FOR)
                    .iter()
                    .rev()
                    .flat_map(|line| line.as_bytes().rsplit(|&byte| byte == b','))
                    .filter(|entry| !entry.trim_ascii().is_empty())
                    .map(parse_entry);
                self.walk(peer, hops)
            }
            ProxyHeader::Forwarded => {
                let elements: Vec<Option<IpAddr>> = headers
                    .get_all(FORWARDED)
                    .iter()
                    .flat_map(|line| forwarded_for(line.as_bytes()))
                    .collect();
                self.walk(peer, elements.into_iter().rev())
            }
        }
    }

    /// Steps left from the trusted `peer` over `hops` (right to left, `None`
    /// for an unreadable one) while they are trusted.
    fn walk(&self, peer: IpAddr, hops: impl Iterator<Item = Option<IpAddr>>) -> IpAddr {
        let mut client = peer;
        for hop in hops.take(self.max_hops) {
            let Some(hop) = hop else { break };
            client = hop;
            if !self.is_trusted(hop) {
                break;
            }
        }
        client
    }
}

impl<T> Clone for ClientIp<T> {
    fn clone(&self) -> ClientIp<T> {
        ClientIp {
            trusted: self.trusted.clone(),
            header: self.header,
            max_hops: self.max_hops,
            ipv6_prefix: self.ipv6_prefix,
            addr: PhantomData,
        }
    }
}

impl<T> fmt::Debug for ClientIp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIp")
            .field("trusted", &self.trusted)
            .field("header", &self.header)
            .field("max_hops", &self.max_hops)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

impl<T: ConnectionAddr> KeyExtractor for ClientIp<T> {
    type Key = IpAddr;

    fn extract(&self, request: &Parts) -> Result<IpAddr, KeyError> {
        let peer = peer_ip::<T>(request)?;
        let client = self.client_of(peer, &request.headers);
        Ok(aggregate(client, self.ipv6_prefix))
    }
}

fn peer_ip<T: ConnectionAddr>(request: &Parts) -> Result<IpAddr, KeyError> {
    request
        .extensions
        .get::<T>()
        .and_then(ConnectionAddr::peer_ip)
        .ok_or_else(|| KeyError::no_connection_info(std::any::type_name::<T>()))
}

fn check_prefix(bits: u8) -> Result<u8, PrefixError> {
    if bits > 128 {
        return Err(PrefixError(bits));
    }
    Ok(bits)
}

/// `ip` canonical, and an IPv6 address cut to its first `prefix` bits.
pub(crate) fn aggregate(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) as the IPv4 network
/// it means, since addresses are matched in canonical form.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let (Some(v4), Some(len)) = (
            v6.network().to_ipv4_mapped(),
            v6.prefix_len().checked_sub(96),
        ) {
            if let Ok(v4) = Ipv4Net::new(v4, len) {
                return IpNet::V4(v4);
            }
        }
        return IpNet::V6(Ipv6Net::new(v6.network(), v6.prefix_len()).unwrap_or(v6));
    }
    net
}

/// One proxy-header entry: an address, `[v6]` or `[v6]:port`, `v4:port`,
/// with a zone or not; `None` for anything else.
pub(crate) fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    if entry.len() > MAX_ENTRY_LEN {
        return None;
    }
    let address = if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || is_port(after.strip_prefix(':')?)) {
            return None;
        }
        inside
    } else if entry.matches(':').count() == 1 {
        // IPv4 with a port; a bare IPv6 address has at least two colons.
        let (host, port) = entry.split_once(':')?;
        if !is_port(port) {
            return None;
        }
        host
    } else {
        entry
    };
    // A zone names an interface of the proxy's host: it is not part of who
    // the client is.
    let address = match address.split_once('%') {
        Some((address, zone)) if !zone.is_empty() && address.contains(':') => address,
        Some(_) => return None,
        None => address,
    };
    address.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

fn is_port(port: &str) -> bool {
    port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok()
}

/// The client in `X-Real-IP`, if exactly one readable address is there.
fn real_ip(headers: &HeaderMap) -> Option<IpAddr> {
    let mut lines = headers.get_all(X_REAL_IP).iter();
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    parse_entry(line.as_bytes())
}

/// The `for` node of each element of one `Forwarded` line, left to right:
/// `None` for an element without a readable one.
fn forwarded_for(line: &[u8]) -> Vec<Option<IpAddr>> {
    split_unquoted(line, b',')
        .into_iter()
        .filter(|element| !element.trim_ascii().is_empty())
        .map(|element| {
            let mut node = None;
            for pair in split_unquoted(element, b';') {
                let equals = pair.iter().position(|&b| b == b'=')?;
                let (name, value) = (&pair[..equals], &pair[equals + 1..]);
                if name.trim_ascii().eq_ignore_ascii_case(b"for") {
                    if node.is_some() {
                        // Two `for` parameters: which one is true is unknowable.
                        return None;
                    }
                    node = Some(unquote(value.trim_ascii())?);
                }
            }
            parse_entry(node?)
        })
        .collect()
}

/// `value` without its quotes; `None` for an unterminated or escaped one
/// (no address needs an escape).
fn unquote(value: &[u8]) -> Option<&[u8]> {
    match value {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'"') && !inner.contains(&b'\\') => {
            Some(inner)
        }
        _ if value.contains(&b'"') => None,
        _ => Some(value),
    }
}

/// `input` split on `separator` outside double quotes.
fn split_unquoted(input: &[u8], separator: u8) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &byte) in input.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && byte == b'\\' {
            escaped = true;
        } else if byte == b'"' {
            quoted = !quoted;
        } else if byte == separator && !quoted {
            parts.push(&input[start..i]);
            start = i + 1;
        }
    }
    parts.push(&input[start..]);
    parts
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn forwarded_elements_respect_quotes() {
        let line = br#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711", for=unknown, proto=https, for="a,b""#;
        assert_eq!(
            forwarded_for(line),
            vec![
                Some(ip("192.0.2.60")),
                Some(ip("2001:db8:cafe::17")),
                None,
                None,
                None,
            ]
        );
        assert_eq!(forwarded_for(br#"for="1.2.3.4"#), vec![None]);
        assert_eq!(forwarded_for(b"for=1.2.3.4;for=5.6.7.8"), vec![None]);
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
}
