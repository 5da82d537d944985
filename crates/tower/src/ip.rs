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
//! - **`Forwarded` is split from the right too**, element by element, on
//!   commas outside quoted strings, each line scanned from its right end.
//!   What a client writes is a prefix; what a trusted proxy appends
//!   (`, for=192.0.2.7`) is a well-formed suffix, read the same whatever
//!   the prefix holds: a quote the client leaves open (`for="x`) reaches
//!   at most to the left end of its line, so it makes the client's own
//!   element unreadable and never swallows an element a proxy appended.
//! - **The walk is lazy:** it costs the hops walked, not the header's
//!   length. `X-Forwarded-For` entries and `Forwarded` elements are read
//!   one at a time from the right, and a `Forwarded` element longer than
//!   1 KiB (empty elements on the way included) is unreadable.
//! - **Unreadable or too many hops stop the walk** at the last address
//!   read, which a trusted hop vouched for: garbage, `unknown`, obfuscated
//!   identifiers (`_hidden`), entries over 64 bytes, or more than
//!   [`max_hops`](ClientIp::max_hops) trusted hops.
//! - **A trusted peer that vouches for no client** (no header, an
//!   unreadable entry before any untrusted one, `max_hops` reached)
//!   leaves only a trusted proxy's address. By default the request is
//!   keyed by it ([`Unvouched::LastProxy`]): the proxy's own requests
//!   (health checks) get a bucket, and so does everything that proxy
//!   forwards without a readable entry: one bucket shared by all of them.
//!   [`ClientIp::unvouched`]`(`[`Unvouched::MissingKey`]`)` makes it a
//!   missing key instead, answered by the layer's
//!   [`OnMissingKey`](crate::OnMissingKey) (`400` by default) or taken
//!   over by an [`Or`](crate::Or) fallback.
//! - **Addresses are canonical:** IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is
//!   IPv4, zone identifiers (`fe80::1%eth0`) and ports are dropped, before
//!   matching trusted networks and before keying.
//! - **IPv6 clients are keyed by prefix**, `/64` by default: one subscriber
//!   usually holds a whole /64 and can rotate addresses within it at will.

use std::fmt;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::header::{FORWARDED, HeaderName};
use http::request::Parts;
use http::{HeaderMap, HeaderValue};
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

/// What [`ClientIp`] does when a trusted peer vouches for no client: it
/// sent no proxy header, the entry it appended is unreadable (`unknown`, an
/// obfuscated `_hidden`, garbage), or the walk met
/// [`max_hops`](ClientIp::max_hops) trusted hops.
///
/// There is then no client address to key by: only the address of the
/// last trusted proxy reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unvouched {
    /// Key the request by that proxy's address. Every such request through
    /// the same proxy then shares one bucket: right for the proxy's own
    /// requests (health checks), and harmless for a proxy that always
    /// appends, but a proxy that forwards some requests without a readable
    /// entry puts all of those clients in one bucket. The default.
    #[default]
    LastProxy,
    /// Treat the key as missing ([`KeyErrorKind::Missing`](crate::KeyErrorKind)):
    /// the layer answers as [`OnMissingKey`](crate::OnMissingKey) says
    /// (`400` by default), and [`Or`](crate::Or) falls back to its second
    /// extractor.
    MissingKey,
}

/// Where a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// An address a trusted hop vouched for (or the untrusted peer).
    Client(IpAddr),
    /// A trusted proxy that vouched for no client.
    Unvouched(IpAddr),
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
    unvouched: Unvouched,
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
            unvouched: Unvouched::default(),
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
            unvouched: self.unvouched,
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

    /// What a request is keyed by when a trusted peer vouches for no
    /// client (see [`Unvouched`]). By default, [`Unvouched::LastProxy`]:
    /// the last trusted proxy's address.
    pub fn unvouched(mut self, unvouched: Unvouched) -> ClientIp<T> {
        self.unvouched = unvouched;
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

    /// The client's full address, given the peer's and the headers; when a
    /// trusted proxy vouches for no client, the last trusted address (see
    /// [`Unvouched::LastProxy`]), whatever [`unvouched`](Self::unvouched)
    /// says.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        match self.find(peer, headers) {
            Found::Client(ip) | Found::Unvouched(ip) => ip,
        }
    }

    /// The client's full address, given the peer's and the headers, or
    /// `None` when a trusted proxy vouches for no client (see
    /// [`Unvouched`]).
    pub fn vouched_client_of(&self, peer: IpAddr, headers: &HeaderMap) -> Option<IpAddr> {
        match self.find(peer, headers) {
            Found::Client(ip) => Some(ip),
            Found::Unvouched(_) => None,
        }
    }

    fn find(&self, peer: IpAddr, headers: &HeaderMap) -> Found {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return Found::Client(peer);
        }
        match self.header {
            ProxyHeader::XRealIp => real_ip(headers).map_or(Found::Unvouched(peer), Found::Client),
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
                let lines = headers
                    .get_all(FORWARDED)
                    .iter()
                    .rev()
                    .map(HeaderValue::as_bytes);
                self.walk(peer, ForwardedHops::new(lines))
            }
        }
    }

    /// Steps left from the trusted `peer` over `hops` (right to left, `None`
    /// for an unreadable one) while they are trusted.
    fn walk(&self, peer: IpAddr, hops: impl Iterator<Item = Option<IpAddr>>) -> Found {
        let mut hops = hops.peekable();
        let mut client = peer;
        let mut walked = 0;
        while let Some(Some(hop)) = hops.next_if(|hop| hop.is_some() && walked < self.max_hops) {
            walked += 1;
            client = hop;
            if !self.is_trusted(hop) {
                return Found::Client(hop);
            }
        }
        if walked > 0 && hops.peek().is_none() {
            // The leftmost entry, trusted, written by the trusted hop to its
            // right: a client inside the trusted networks.
            Found::Client(client)
        } else {
            // No entry, an unreadable one, or `max_hops` reached: the walk
            // stopped on a trusted proxy.
            Found::Unvouched(client)
        }
    }
}

impl<T> Clone for ClientIp<T> {
    fn clone(&self) -> ClientIp<T> {
        ClientIp {
            trusted: self.trusted.clone(),
            header: self.header,
            max_hops: self.max_hops,
            ipv6_prefix: self.ipv6_prefix,
            unvouched: self.unvouched,
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
            .field("unvouched", &self.unvouched)
            .finish()
    }
}

impl<T: ConnectionAddr> KeyExtractor for ClientIp<T> {
    type Key = IpAddr;

    fn extract(&self, request: &Parts) -> Result<IpAddr, KeyError> {
        let peer = peer_ip::<T>(request)?;
        let client = match (self.find(peer, &request.headers), self.unvouched) {
            (Found::Client(ip), _) | (Found::Unvouched(ip), Unvouched::LastProxy) => ip,
            (Found::Unvouched(_), Unvouched::MissingKey) => {
                return Err(KeyError::missing(
                    "a client address vouched for by the trusted proxy",
                ));
            }
        };
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

/// The longest `Forwarded` element read, in bytes, with the empty
/// elements and whitespace scanned on the way to it: a `for`, `by`, `proto`
/// and a 253-byte `host` fit. A longer one is unreadable and stops the walk,
/// so a walk reads at most this much per hop.
const MAX_ELEMENT_LEN: usize = 1024;

/// The `for` node of each element of the `Forwarded` header lines, **right
/// to left** (last line first), lazily: `None` for an element without a
/// readable one, after which nothing more is read.
///
/// Each line is split on commas outside quoted strings, scanned from its
/// right end. A proxy appends a well-formed element (`, for=…`, `, for="…"`)
/// to the right of whatever the client wrote, so the scan reads that
/// element exactly whatever the prefix holds: a quote the client left open
/// reaches at most to the left end of the line and makes only the client's
/// own element unreadable, never one a proxy appended.
struct ForwardedHops<'a, I> {
    /// The lines not yet started, last first.
    lines: I,
    /// What is left of the current line: the part not yet scanned.
    rest: &'a [u8],
    /// Set after an unreadable element: the walk stops there.
    done: bool,
}

impl<'a, I: Iterator<Item = &'a [u8]>> ForwardedHops<'a, I> {
    fn new(lines_last_first: I) -> Self {
        ForwardedHops {
            lines: lines_last_first,
            rest: &[],
            done: false,
        }
    }
}

impl<'a, I: Iterator<Item = &'a [u8]>> Iterator for ForwardedHops<'a, I> {
    type Item = Option<IpAddr>;

    fn next(&mut self) -> Option<Option<IpAddr>> {
        if self.done {
            return None;
        }
        // Bytes scanned since the last element yielded, empty ones included.
        let mut scanned = 0;
        loop {
            while self.rest.is_empty() {
                self.rest = self.lines.next()?;
            }
            match last_element(self.rest, MAX_ELEMENT_LEN - scanned) {
                Some((element, before)) => {
                    scanned += self.rest.len() - before.len();
                    self.rest = before;
                    if !element.trim_ascii().is_empty() {
                        let node = forwarded_node(element);
                        self.done = node.is_none();
                        return Some(node);
                    }
                }
                None => {
                    self.done = true;
                    return Some(None);
                }
            }
        }
    }
}

/// The last element of `line` (after its last comma outside quotes) and
/// what precedes it, that comma excluded (empty for the first element), or
/// `None` if no comma or start of line is found within `budget` bytes.
fn last_element(line: &[u8], budget: usize) -> Option<(&[u8], &[u8])> {
    let mut quoted = false;
    let mut i = line.len();
    while i > 0 {
        if line.len() - i >= budget {
            return None;
        }
        i -= 1;
        match line[i] {
            b'"' if quoted => {
                // Inside a quoted string, `\"` is an escaped quote when an
                // odd number of backslashes precede it. Counted within what
                // is left of the budget: a longer run ends the walk inside
                // it (`None`) before its parity could matter.
                let left = budget - (line.len() - i);
                let backslashes = line[..i]
                    .iter()
                    .rev()
                    .take(left)
                    .take_while(|&&b| b == b'\\')
                    .count();
                if backslashes % 2 == 0 {
                    quoted = false;
                }
            }
            b'"' => quoted = true,
            b',' if !quoted => return Some((&line[i + 1..], &line[..i])),
            _ => {}
        }
    }
    if line.len() > budget {
        return None;
    }
    Some((line, &[]))
}

/// The address in one element's `for` parameter; `None` if there is none,
/// two, or it is unreadable.
fn forwarded_node(element: &[u8]) -> Option<IpAddr> {
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
}
