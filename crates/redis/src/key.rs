//! Redis key names: collision-free, bounded, one hash slot per user key.
//!
//! # Layout
//!
//! ```text
//! <prefix>{<escaped limiter name>|<escaped key>}<limit tag>
//! ```
//!
//! - The part between the braces is the **hash tag**: every limit of one
//!   (limiter, key) pair hashes to the same cluster slot, so that the script
//!   can decide them all-or-nothing in one call (no cross-slot command).
//! - **Escaping** makes the encoding injective over arbitrary bytes: `%`,
//!   `{`, `}`, `|` and `#` are written `%XX`, every other byte as itself. The
//!   tag therefore contains no `}` (so it ends at our brace) and exactly one
//!   unescaped `|` (so the name and the key split one way only).
//! - **Long keys** (escaped key longer than [`MAX_INLINE_KEY`] bytes) are
//!   replaced by `#<length>:<sha256 hex>`. A `#` never appears unescaped in an
//!   inline key, so a hashed key cannot equal an inline one; two hashed keys
//!   collide only if SHA-256 does. Every key name is thereby bounded
//!   (prefix + name + 96 bytes + descriptor).
//! - The **limit tag** names the algorithm and its exact quota in 6 bytes:
//!   36 bits of the SHA-256 of the limit spelled out (`g:10/1000000000/3`),
//!   in URL-safe base64. A limiter whose quota changes has new keys: built
//!   with [`carry_from`](crate::RedisLimiterBuilder::carry_from) it carries
//!   each key's state into them by a [`Carry`](tollgate::Carry) rule on the
//!   key's first decision (see [`carry`](crate::carry)); without, its keys
//!   start afresh (the core's [`Carry::Reset`](tollgate::Carry::Reset)).
//!   The old keys expire by their TTL. Two limits of one limiter name share a tag with
//!   probability 2^-36; the scripts then read the other's state as any state
//!   (within their own checks: a foreign or out-of-range value reads as
//!   none), never as an error, until it expires. Short tags keep the bytes
//!   per key in Redis low (see `BENCHMARKS.md`): a quota spelled out cost
//!   up to 40 bytes in every key.
//! - Every map the client holds per key (deny cache, leases, local
//!   fallback) is keyed by the same bounded form of the user key
//!   (`BoundedKey`, at most [`MAX_INLINE_KEY`] bytes), so that their memory
//!   is bounded in bytes whatever the keys' length.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Escaped user keys longer than this are hashed.
pub const MAX_INLINE_KEY: usize = 128;
/// The longest limiter name (escaped).
pub const MAX_NAME: usize = 128;
/// The longest key prefix.
pub const MAX_PREFIX: usize = 64;

/// Appends `b` escaped (see the [module docs](self)).
fn escape_byte(out: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    if matches!(b, b'%' | b'{' | b'}' | b'|' | b'#') {
        out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
    } else {
        out.push(b);
    }
}

/// Appends `bytes` escaped.
fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        escape_byte(out, b);
    }
}

fn escaped(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 8);
    escape_into(&mut out, bytes);
    out
}

/// Why a prefix or a limiter name is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The prefix contains `{` or `}`, which would move the hash tag.
    BraceInPrefix,
    /// The prefix is longer than [`MAX_PREFIX`] bytes.
    PrefixTooLong,
    /// The limiter name is empty or longer than [`MAX_NAME`] bytes escaped.
    BadName,
}

impl std::fmt::Display for NameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NameError::BraceInPrefix => f.write_str("the key prefix must not contain '{' or '}'"),
            NameError::PrefixTooLong => {
                write!(f, "the key prefix must be at most {MAX_PREFIX} bytes")
            }
            NameError::BadName => write!(
                f,
                "the limiter name must be 1 to {MAX_NAME} bytes (escaped)"
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Builds the Redis keys of one limiter: its prefix, name and limits.
#[derive(Clone, Debug)]
pub struct KeyCodec {
    /// `<prefix>{<escaped name>|`.
    head: Vec<u8>,
    /// `}<descriptor>`, one per limit.
    tails: Vec<Vec<u8>>,
}

impl KeyCodec {
    /// The codec for limiter `name` under `prefix`, with one descriptor per
    /// limit.
    pub fn new(prefix: &str, name: &str, descriptors: &[String]) -> Result<KeyCodec, NameError> {
        if prefix.contains(['{', '}']) {
            return Err(NameError::BraceInPrefix);
        }
        if prefix.len() > MAX_PREFIX {
            return Err(NameError::PrefixTooLong);
        }
        let name = escaped(name.as_bytes());
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(NameError::BadName);
        }
        let mut head = Vec::with_capacity(prefix.len() + name.len() + 2);
        head.extend_from_slice(prefix.as_bytes());
        head.push(b'{');
        head.extend_from_slice(&name);
        head.push(b'|');
        let tails = descriptors
            .iter()
            .map(|d| {
                let mut tail = vec![b'}'];
                tail.extend_from_slice(d.as_bytes());
                tail
            })
            .collect();
        Ok(KeyCodec { head, tails })
    }

    /// The hash-tagged part shared by every limit of `key`, without the
    /// closing brace: `<prefix>{<name>|<key or its hash>`.
    pub fn tagged(&self, key: &[u8]) -> Vec<u8> {
        self.tagged_bounded(&BoundedKey::new(key))
    }

    fn tagged_bounded(&self, key: &BoundedKey) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + key.0.len());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&key.0);
        out
    }

    /// The limiter's registry of listed keys (see
    /// [`controls`](crate::controls)): `<prefix>{<name>|#}lists`. No user
    /// key's tag ends in a bare `#` (an inline `#` is escaped, a hashed key
    /// is `#<length>:…`), so it names no user key's state.
    pub fn registry(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        out.extend_from_slice(b"#}lists");
        out
    }

    /// The limiter's registry of penalised keys (see
    /// [`carry`](crate::carry)): `<prefix>{<name>|#}penalties`, in the same
    /// slot as [`registry`](Self::registry).
    pub fn penalty_registry(&self) -> Vec<u8> {
        let mut out = self.head.clone();
        out.extend_from_slice(b"#}penalties");
        out
    }

    /// The Redis keys of every limit of `key`, in the limits' order.
    pub fn keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        self.keys_of(&BoundedKey::new(key))
    }

    /// [`keys`](Self::keys) of a key already bounded.
    pub(crate) fn keys_of(&self, key: &BoundedKey) -> Vec<Vec<u8>> {
        let tagged = self.tagged_bounded(key);
        self.tails
            .iter()
            .map(|tail| {
                let mut k = Vec::with_capacity(tagged.len() + tail.len());
                k.extend_from_slice(&tagged);
                k.extend_from_slice(tail);
                k
            })
            .collect()
    }
}

/// A user key as the limiter holds it, in Redis and locally: escaped, or
/// `#<length>:<sha256 hex>` when the escaped key is longer than
/// [`MAX_INLINE_KEY`] bytes (see the [module docs](self)). Injective up to
/// SHA-256 collisions, and at most [`MAX_INLINE_KEY`] bytes whatever the
/// caller passes: the deny cache, the leases and the local fallback are keyed
/// by it, so that their memory is bounded in bytes, not only in entries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BoundedKey(Box<[u8]>);

impl BoundedKey {
    pub(crate) fn new(key: &[u8]) -> BoundedKey {
        let mut out = Vec::with_capacity(key.len().min(MAX_INLINE_KEY) + 3);
        for &b in key {
            escape_byte(&mut out, b);
            if out.len() > MAX_INLINE_KEY {
                return BoundedKey::hashed(key);
            }
        }
        BoundedKey(out.into_boxed_slice())
    }

    fn hashed(key: &[u8]) -> BoundedKey {
        let digest = Sha256::digest(key);
        let mut hashed = format!("#{}:", key.len());
        for byte in digest {
            // Writing to a String cannot fail.
            let _ = write!(hashed, "{byte:02x}");
        }
        BoundedKey(hashed.into_bytes().into_boxed_slice())
    }

    /// A key read back from Redis (a member of the lists' registry, which
    /// holds bounded keys).
    pub(crate) fn stored(bytes: &[u8]) -> BoundedKey {
        BoundedKey(bytes.into())
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The hash tag of a Redis key as Redis Cluster reads it: between the first
/// `{` and the first `}` after it, when non-empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codec(name: &str) -> KeyCodec {
        KeyCodec::new("tg", name, &["g:1/2/3".into(), "f:4/5".into()]).unwrap()
    }

    #[test]
    fn layout_and_shared_tag() {
        let keys = codec("api").keys(b"user:42");
        assert_eq!(keys[0], b"tg{api|user:42}g:1/2/3");
        assert_eq!(keys[1], b"tg{api|user:42}f:4/5");
        assert_eq!(hash_tag(&keys[0]), hash_tag(&keys[1]));
    }

    #[test]
    fn special_bytes_cannot_forge_another_pair() {
        // ("a|b", "c") and ("a", "b|c") would collide without escaping.
        let one = codec("a|b").keys(b"c");
        let two = codec("a").keys(b"b|c");
        assert_ne!(one, two);
        // A closing brace in the key cannot end the tag early.
        let key = codec("api").keys(b"x}y{z");
        assert_eq!(hash_tag(&key[0]), b"api|x%7Dy%7Bz");
    }

    #[test]
    fn escaping_is_injective_on_all_short_byte_strings() {
        let mut seen = std::collections::HashSet::new();
        let alphabet = [b'a', b'%', b'{', b'}', b'|', b'#', 0, 0xff];
        for &a in &alphabet {
            assert!(seen.insert(escaped(&[a])));
            for &b in &alphabet {
                assert!(seen.insert(escaped(&[a, b])));
            }
        }
    }

    #[test]
    fn long_keys_are_hashed_and_bounded() {
        let c = codec("api");
        let long = vec![b'k'; 10_000];
        let tagged = c.tagged(&long);
        assert!(tagged.len() < 100);
        assert!(tagged.windows(7).any(|w| w == b"#10000:"));
        let mut other = long.clone();
        other[5_000] = b'j';
        assert_ne!(c.tagged(&other), tagged);
        // An inline key cannot spell a hashed one: '#' is escaped.
        let forged = String::from_utf8(tagged[b"tg{api|".len()..].to_vec()).unwrap();
        assert_ne!(c.tagged(forged.as_bytes()), tagged);
    }

    /// Bug: the local maps were keyed by the caller's bytes, so
    /// 1,000 keys of 64 KiB held 64 MiB. The bounded key is at most
    /// `MAX_INLINE_KEY` bytes whatever the input, and the same as the part
    /// of the Redis key between `|` and `}`.
    #[test]
    fn bounded_keys_are_short_and_match_the_redis_key() {
        let c = codec("api");
        for len in [0, 1, 42, 127, 128, 129, 200, 65_536] {
            for fill in [b'k', b'%'] {
                let key = vec![fill; len];
                let bounded = BoundedKey::new(&key);
                assert!(bounded.as_bytes().len() <= MAX_INLINE_KEY, "{len}");
                let redis = &c.keys(&key)[0];
                let tag = hash_tag(redis);
                assert_eq!(&tag[b"api|".len()..], bounded.as_bytes(), "{len} {fill}");
            }
        }
        assert_eq!(BoundedKey::new(b"a{b").as_bytes(), b"a%7Bb");
    }

    #[test]
    fn bad_prefixes_and_names_are_refused() {
        assert_eq!(
            KeyCodec::new("a{b", "n", &[]).unwrap_err(),
            NameError::BraceInPrefix
        );
        assert_eq!(KeyCodec::new("p", "", &[]).unwrap_err(), NameError::BadName);
        assert!(KeyCodec::new(&"p".repeat(65), "n", &[]).is_err());
    }
}
