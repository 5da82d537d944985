//! [`FixedKey`]: the key types a compact table stores inline, as the 32-bit
//! words of their value, and [`ShortKey`], a short string as such a key.

use std::fmt;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

mod sealed {
    pub trait Sealed {}
}

/// A key of a fixed size, stored whole in a
/// [`CompactKeyedLimiter`](super::CompactKeyedLimiter)'s slot: `u32`, `u64`,
/// `u128`, [`Ipv4Addr`], [`Ipv6Addr`], `[u8; 16]` and [`ShortKey`].
///
/// Sealed: the slot layout (the key's words, then the 8-byte state) is the
/// table's. An [`IpAddr`](std::net::IpAddr) is not one: its two kinds are
/// distinct values that a 16-byte slot could only tell apart with a 17th
/// byte; a server with both kinds keeps one limiter for each (or maps IPv4
/// to IPv6 itself, if it means them to be one key).
pub trait FixedKey: sealed::Sealed + Copy + Eq + Hash + Send + Sync + 'static {
    /// The key's words as stored: `[u32; n]`, `n` from 1 to 7.
    #[doc(hidden)]
    type Words: Copy + Default + AsRef<[u32]> + AsMut<[u32]>;

    /// The 32-bit words the key takes in a slot: those of
    /// [`Words`](Self::Words).
    #[doc(hidden)]
    const WORDS: usize = std::mem::size_of::<Self::Words>() / 4;

    /// The key as the words stored.
    #[doc(hidden)]
    fn to_words(&self) -> Self::Words;

    /// The key whose words are `words`.
    #[doc(hidden)]
    fn from_words(words: Self::Words) -> Self;
}

impl sealed::Sealed for u32 {}
impl FixedKey for u32 {
    type Words = [u32; 1];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        [*self]
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> u32 {
        words[0]
    }
}

impl sealed::Sealed for u64 {}
impl FixedKey for u64 {
    type Words = [u32; 2];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        [*self as u32, (*self >> 32) as u32]
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> u64 {
        u64::from(words[0]) | (u64::from(words[1]) << 32)
    }
}

impl sealed::Sealed for u128 {}
impl FixedKey for u128 {
    type Words = [u32; 4];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        [
            *self as u32,
            (*self >> 32) as u32,
            (*self >> 64) as u32,
            (*self >> 96) as u32,
        ]
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> u128 {
        words
            .iter()
            .rev()
            .fold(0u128, |value, &word| (value << 32) | u128::from(word))
    }
}

impl sealed::Sealed for [u8; 16] {}
impl FixedKey for [u8; 16] {
    type Words = [u32; 4];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        u128::from_le_bytes(*self).to_words()
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> [u8; 16] {
        u128::from_words(words).to_le_bytes()
    }
}

impl sealed::Sealed for Ipv4Addr {}
impl FixedKey for Ipv4Addr {
    type Words = [u32; 1];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        [u32::from(*self)]
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> Ipv4Addr {
        Ipv4Addr::from(words[0])
    }
}

impl sealed::Sealed for Ipv6Addr {}
impl FixedKey for Ipv6Addr {
    type Words = [u32; 4];

    #[inline(always)]
    fn to_words(&self) -> Self::Words {
        u128::from(*self).to_words()
    }

    #[inline(always)]
    fn from_words(words: Self::Words) -> Ipv6Addr {
        Ipv6Addr::from(u128::from_words(words))
    }
}

/// A string (or any bytes) of at most [`ShortKey::CAPACITY`] bytes, as a
/// [`FixedKey`]: a compact table stores it whole, exactly, in 28 bytes (a
/// byte of length, then the bytes, zero-padded), so a slot is 36 bytes and
/// a key about 41 at the table's 7/8 load, where a `String` key in a
/// `KeyedLimiter` or in governor takes 70 of heap and 87 resident (15
/// bytes, 10^7 keys: `BENCHMARKS.md`).
///
/// 27 bytes is more than a `CompactString` holds inline (24): user and
/// account ids, API keys of the usual lengths, `tenant:id` pairs. A longer
/// key is refused with [`KeyTooLong`], never cut or hashed, so that two
/// keys never share a state; it belongs in a
/// [`KeyedLimiter`](crate::KeyedLimiter).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShortKey {
    /// `bytes[0]` is the length; the key follows, then zeros.
    bytes: [u8; 28],
}

impl ShortKey {
    /// The longest key, in bytes.
    pub const CAPACITY: usize = 27;

    /// `key` as a short key, or [`KeyTooLong`] past
    /// [`CAPACITY`](Self::CAPACITY) bytes.
    pub fn new(key: &str) -> Result<ShortKey, KeyTooLong> {
        ShortKey::from_bytes(key.as_bytes())
    }

    /// As [`new`](Self::new), for a key of any bytes.
    pub fn from_bytes(key: &[u8]) -> Result<ShortKey, KeyTooLong> {
        if key.len() > ShortKey::CAPACITY {
            return Err(KeyTooLong { len: key.len() });
        }
        let mut bytes = [0; 28];
        bytes[0] = key.len() as u8;
        bytes[1..=key.len()].copy_from_slice(key);
        Ok(ShortKey { bytes })
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[1..=usize::from(self.bytes[0])]
    }
}

impl TryFrom<&str> for ShortKey {
    type Error = KeyTooLong;

    fn try_from(key: &str) -> Result<ShortKey, KeyTooLong> {
        ShortKey::new(key)
    }
}

impl fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ShortKey({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

/// A key longer than [`ShortKey::CAPACITY`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyTooLong {
    /// The key's length in bytes.
    pub len: usize,
}

impl fmt::Display for KeyTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a key of {} bytes is longer than a ShortKey's {}: keep it in a KeyedLimiter",
            self.len,
            ShortKey::CAPACITY
        )
    }
}

impl std::error::Error for KeyTooLong {}

impl sealed::Sealed for ShortKey {}
impl FixedKey for ShortKey {
    type Words = [u32; 7];

    #[inline(always)]
    fn to_words(&self) -> [u32; 7] {
        let mut words = [0; 7];
        for (word, bytes) in words.iter_mut().zip(self.bytes.chunks_exact(4)) {
            *word = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        words
    }

    #[inline(always)]
    fn from_words(words: [u32; 7]) -> ShortKey {
        let mut bytes = [0; 28];
        for (bytes, word) in bytes.chunks_exact_mut(4).zip(words) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        ShortKey { bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<K: FixedKey + std::fmt::Debug>(key: K) {
        let words = key.to_words();
        assert_eq!(words.as_ref().len(), K::WORDS, "{key:?}");
        assert_eq!(K::from_words(words), key);
    }

    #[test]
    fn every_key_type_round_trips_through_its_words() {
        for value in [
            0u128,
            1,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            round_trip(value as u32);
            round_trip(value as u64);
            round_trip(value);
            round_trip(value.to_be_bytes());
            round_trip(Ipv4Addr::from(value as u32));
            round_trip(Ipv6Addr::from(value));
        }
        for key in [
            "",
            "a",
            "a\0",
            "user:0000001234",
            "exactly-twenty-seven-bytes!",
        ] {
            round_trip(ShortKey::new(key).unwrap());
            assert_eq!(ShortKey::new(key).unwrap().as_bytes(), key.as_bytes());
        }
    }

    #[test]
    fn a_short_key_is_its_bytes_and_their_length_and_a_long_one_is_refused() {
        // A trailing zero byte is a different key: the length tells.
        assert_ne!(ShortKey::new("a").unwrap(), ShortKey::new("a\0").unwrap());
        assert_ne!(ShortKey::new("").unwrap(), ShortKey::new("\0").unwrap());
        let long = "twenty-eight bytes, one over";
        assert_eq!(long.len(), 28);
        assert_eq!(ShortKey::new(long), Err(KeyTooLong { len: 28 }));
        assert_eq!(
            ShortKey::try_from(&long[..27]).unwrap().as_bytes().len(),
            27
        );
        assert!(
            KeyTooLong { len: 28 }
                .to_string()
                .contains("longer than a ShortKey's 27")
        );
        assert_eq!(
            format!("{:?}", ShortKey::new("id:7").unwrap()),
            "ShortKey(\"id:7\")"
        );
    }
}
