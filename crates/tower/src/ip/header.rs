//! Reading proxy headers: one `X-Forwarded-For` entry, `X-Real-IP`, and
//! the `Forwarded` elements walked from the right (the rules are in the
//! [parent module's docs](super)).

use std::net::IpAddr;

use http::HeaderMap;
use http::header::HeaderName;

/// The longest proxy-header entry read, in bytes (a bracketed IPv6 address
/// with a zone and a port fits).
const MAX_ENTRY_LEN: usize = 64;

const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

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
pub(super) fn real_ip(headers: &HeaderMap) -> Option<IpAddr> {
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
pub(super) const MAX_ELEMENT_LEN: usize = 1024;

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
pub(super) struct ForwardedHops<'a, I> {
    /// The lines not yet started, last first.
    lines: I,
    /// What is left of the current line: the part not yet scanned.
    pub(super) rest: &'a [u8],
    /// Set after an unreadable element: the walk stops there.
    done: bool,
}

impl<'a, I: Iterator<Item = &'a [u8]>> ForwardedHops<'a, I> {
    pub(super) fn new(lines_last_first: I) -> Self {
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
pub(super) fn last_element(line: &[u8], budget: usize) -> Option<(&[u8], &[u8])> {
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
pub(super) fn forwarded_node(element: &[u8]) -> Option<IpAddr> {
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
