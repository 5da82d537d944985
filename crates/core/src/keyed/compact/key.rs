//! [`FixedKey`]: the key types a compact table stores inline, as the 32-bit
//! words of their value.

use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

mod sealed {
    pub trait Sealed {}
}

/// A key of a fixed size, stored whole in a
/// [`CompactKeyedLimiter`](super::CompactKeyedLimiter)'s slot: `u32`, `u64`,
/// `u128`, [`Ipv4Addr`], [`Ipv6Addr`] and `[u8; 16]`.
///
/// Sealed: the slot layout (the key's words, then the 8-byte state) is the
/// table's. An [`IpAddr`](std::net::IpAddr) is not one: its two kinds are
/// distinct values that a 16-byte slot could only tell apart with a 17th
/// byte; a server with both kinds keeps one limiter for each (or maps IPv4
/// to IPv6 itself, if it means them to be one key).
pub trait FixedKey: sealed::Sealed + Copy + Eq + Hash + Send + Sync + 'static {
    /// The 32-bit words the key takes in a slot (1 to 4).
    #[doc(hidden)]
    const WORDS: usize;

    /// The key as words; only the first [`WORDS`](Self::WORDS) are stored.
    #[doc(hidden)]
    fn to_words(&self) -> [u32; 4];

    /// The key whose first [`WORDS`](Self::WORDS) words are `words`.
    #[doc(hidden)]
    fn from_words(words: [u32; 4]) -> Self;
}

impl sealed::Sealed for u32 {}
impl FixedKey for u32 {
    const WORDS: usize = 1;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        [*self, 0, 0, 0]
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> u32 {
        words[0]
    }
}

impl sealed::Sealed for u64 {}
impl FixedKey for u64 {
    const WORDS: usize = 2;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        [*self as u32, (*self >> 32) as u32, 0, 0]
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> u64 {
        u64::from(words[0]) | (u64::from(words[1]) << 32)
    }
}

impl sealed::Sealed for u128 {}
impl FixedKey for u128 {
    const WORDS: usize = 4;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        [
            *self as u32,
            (*self >> 32) as u32,
            (*self >> 64) as u32,
            (*self >> 96) as u32,
        ]
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> u128 {
        words
            .iter()
            .rev()
            .fold(0u128, |value, &word| (value << 32) | u128::from(word))
    }
}

impl sealed::Sealed for [u8; 16] {}
impl FixedKey for [u8; 16] {
    const WORDS: usize = 4;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        u128::from_le_bytes(*self).to_words()
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> [u8; 16] {
        u128::from_words(words).to_le_bytes()
    }
}

impl sealed::Sealed for Ipv4Addr {}
impl FixedKey for Ipv4Addr {
    const WORDS: usize = 1;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        u32::from(*self).to_words()
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> Ipv4Addr {
        Ipv4Addr::from(words[0])
    }
}

impl sealed::Sealed for Ipv6Addr {}
impl FixedKey for Ipv6Addr {
    const WORDS: usize = 4;

    #[inline(always)]
    fn to_words(&self) -> [u32; 4] {
        u128::from(*self).to_words()
    }

    #[inline(always)]
    fn from_words(words: [u32; 4]) -> Ipv6Addr {
        Ipv6Addr::from(u128::from_words(words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<K: FixedKey + std::fmt::Debug>(key: K) {
        let words = key.to_words();
        assert!(words[K::WORDS..].iter().all(|&w| w == 0), "{key:?}");
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
    }
}
