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

mod header;

pub(crate) use header::parse_entry;
use header::{ForwardedHops, real_ip};

/// The default IPv6 prefix length that is one client.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;
/// The default most trusted hops walked in a proxy header.
pub const DEFAULT_MAX_HOPS: usize = 16;
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

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
/// Its key type is [`IpAddr`]: the client's address, canonical (an
/// IPv4-mapped IPv6 address is its IPv4 address), an IPv6 client aggregated
/// to its [`ipv6_prefix`](ClientIp::ipv6_prefix) (`/64` by default: the
/// rest of the address is zeros). A limiter behind it is a
/// `KeyedLimiter<IpAddr, _>`:
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::{Gcra, KeyedLimiter, Quota};
/// use tollgate_tower::{ClientIp, RateLimitLayer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_client: KeyedLimiter<IpAddr, Gcra> =
///     KeyedLimiter::new(Gcra::new(Quota::per_second(10)?)?);
/// let layer = RateLimitLayer::new(ClientIp::trusting(["10.0.0.0/8"])?, per_client);
/// # let _ = layer;
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

#[cfg(test)]
mod tests;
