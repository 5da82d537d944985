//! What a decision reads and writes: the call's keys as a [`Store`], and
//! the numbers in stored values read as the scripts read them
//! ([`lua_number`]). Its own module so that the transitions and the
//! controls' markers both read through it, and not through each other.

/// A hash's fields and values.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// What a transition reads and writes: the call's keys, by index.
pub trait Store {
    /// The string at key `i`, borrowed until the store's next call (no
    /// copy: a decision reads it in place); `Err` if it holds another type.
    fn get(&mut self, i: usize) -> Result<Option<&[u8]>, String>;
    /// Sets key `i` to `value`, expiring in `ttl_ms`.
    fn set(&mut self, i: usize, value: &str, ttl_ms: i128);
    /// Deletes key `i`.
    fn del(&mut self, i: usize);
    /// Every field and value of the hash at key `i`.
    fn hgetall(&mut self, i: usize) -> Result<Fields, String>;
    /// Sets fields of the hash at key `i`.
    fn hset(&mut self, i: usize, fields: &[(&str, String)]);
    /// Deletes a field of the hash at key `i`.
    fn hdel(&mut self, i: usize, field: &str);
    /// Sets key `i` to expire in `ttl_ms`.
    fn pexpire(&mut self, i: usize, ttl_ms: i128);
    /// The string an allow list holds aside for key `i` (under
    /// `<key>!held`, written by `tollgate-redis`'s `controls.lua`); `Err` if
    /// it holds another type.
    fn get_held(&mut self, i: usize) -> Result<Option<Vec<u8>>, String>;
    /// The hash an allow list holds aside for key `i` (as
    /// [`get_held`](Self::get_held)).
    fn hgetall_held(&mut self, i: usize) -> Result<Fields, String>;
}

/// The states an allow list holds aside, read as the call's keys: what an
/// allow-listed key is answered on (`crate::transition::listed`). Read
/// only: a listed key counts nothing, so its answer writes nothing.
pub(crate) struct Held<'a> {
    store: &'a mut dyn Store,
    /// The string read last, lent by [`Store::get`].
    value: Option<Vec<u8>>,
}

impl<'a> Held<'a> {
    pub(crate) fn new(store: &'a mut dyn Store) -> Held<'a> {
        Held { store, value: None }
    }
}

impl Store for Held<'_> {
    fn get(&mut self, i: usize) -> Result<Option<&[u8]>, String> {
        self.value = self.store.get_held(i)?;
        Ok(self.value.as_deref())
    }
    fn hgetall(&mut self, i: usize) -> Result<Fields, String> {
        self.store.hgetall_held(i)
    }
    fn get_held(&mut self, i: usize) -> Result<Option<Vec<u8>>, String> {
        self.store.get_held(i)
    }
    fn hgetall_held(&mut self, i: usize) -> Result<Fields, String> {
        self.store.hgetall_held(i)
    }
    // A listed key's answer is a look: never a write.
    fn set(&mut self, _: usize, _: &str, _: i128) {
        debug_assert!(false, "a listed key's answer wrote");
    }
    fn del(&mut self, _: usize) {
        debug_assert!(false, "a listed key's answer wrote");
    }
    fn hset(&mut self, _: usize, _: &[(&str, String)]) {
        debug_assert!(false, "a listed key's answer wrote");
    }
    fn hdel(&mut self, _: usize, _: &str) {
        debug_assert!(false, "a listed key's answer wrote");
    }
    fn pexpire(&mut self, _: usize, _: i128) {
        debug_assert!(false, "a listed key's answer wrote");
    }
}

/// The number Lua 5.1's `tonumber` reads in `raw` (Redis's Lua): C's
/// `strtod` after optional spaces (decimal, exponent, `inf`, `nan`), or
/// a `0x` hexadecimal integer, then only spaces.
pub fn lua_number(raw: &[u8]) -> Option<f64> {
    // Plain digits (every state a decision writes): read as an integer,
    // which `strtod` would read to the same double (up to 19 digits the
    // integer is exact, and both round it to the nearest double); the
    // general reading below parses a float, several times slower.
    if let Some(value) = plain_integer(raw) {
        #[allow(clippy::cast_precision_loss)] // Rounded as `strtod` rounds.
        return Some(value as f64);
    }
    strtod_number(raw)
}

/// [`lua_number`]'s general reading.
fn strtod_number(raw: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(raw).ok()?;
    let text = text.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        // `strtoul` on the whole text: the sign applies modulo 2^64.
        let value = u64::from_str_radix(hex, 16).ok()?;
        let value = if negative {
            value.wrapping_neg()
        } else {
            value
        };
        #[allow(clippy::cast_precision_loss)] // Lua's own conversion.
        return Some(value as f64);
    }
    if body.is_empty() || body.starts_with(['+', '-']) {
        return None;
    }
    let value: f64 = body.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// `raw` as an integer if it is 1 to 19 decimal digits and nothing else
/// (no sign, no space): the states the module and the scripts write.
pub fn plain_integer(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 19 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in raw {
        let digit = b.wrapping_sub(b'0');
        if digit >= 10 {
            return None;
        }
        // 19 digits: below 10^19 < 2^64, no overflow.
        value = value * 10 + u64::from(digit);
    }
    Some(value)
}

/// Keys in memory, for the transitions' tests: strings with their TTL,
/// hashes, and what an allow list holds aside for each key.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Memory {
    pub(crate) strings: std::collections::HashMap<usize, (Vec<u8>, i128)>,
    pub(crate) hashes: std::collections::HashMap<usize, Vec<(String, String)>>,
    pub(crate) held: std::collections::HashMap<usize, Vec<u8>>,
    pub(crate) held_hashes: std::collections::HashMap<usize, Vec<(String, String)>>,
}

/// A hash of the test store as `HGETALL` answers it (empty if absent).
#[cfg(test)]
fn fields_of(hash: Option<&Vec<(String, String)>>) -> Fields {
    hash.map(|h| {
        h.iter()
            .map(|(f, v)| (f.clone().into_bytes(), v.clone().into_bytes()))
            .collect()
    })
    .unwrap_or_default()
}

#[cfg(test)]
impl Store for Memory {
    fn get(&mut self, i: usize) -> Result<Option<&[u8]>, String> {
        Ok(self.strings.get(&i).map(|(v, _)| v.as_slice()))
    }
    fn set(&mut self, i: usize, value: &str, ttl_ms: i128) {
        self.strings.insert(i, (value.as_bytes().to_vec(), ttl_ms));
    }
    fn del(&mut self, i: usize) {
        self.strings.remove(&i);
        self.hashes.remove(&i);
    }
    fn hgetall(&mut self, i: usize) -> Result<Fields, String> {
        Ok(fields_of(self.hashes.get(&i)))
    }
    fn hset(&mut self, i: usize, fields: &[(&str, String)]) {
        let hash = self.hashes.entry(i).or_default();
        for (f, v) in fields {
            hash.retain(|(g, _)| g != f);
            hash.push(((*f).to_owned(), v.clone()));
        }
    }
    fn hdel(&mut self, i: usize, field: &str) {
        if let Some(hash) = self.hashes.get_mut(&i) {
            hash.retain(|(g, _)| g != field);
        }
    }
    fn pexpire(&mut self, _i: usize, _ttl_ms: i128) {}
    fn get_held(&mut self, i: usize) -> Result<Option<Vec<u8>>, String> {
        Ok(self.held.get(&i).cloned())
    }
    fn hgetall_held(&mut self, i: usize) -> Result<Fields, String> {
        Ok(fields_of(self.held_hashes.get(&i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain digits read as an integer give the double the general
    /// (`strtod`) reading gives, up to 19 digits and past 2^53.
    #[test]
    fn plain_digits_read_as_strtod_reads_them() {
        let mut cases = vec![
            "0".to_owned(),
            "007".to_owned(),
            "9007199254740991".to_owned(),
            "9007199254740993".to_owned(),
            "9999999999999999999".to_owned(),
            "1234567890123456789".to_owned(),
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let digits = (x % 19 + 1) as usize;
            cases.push(format!("{x:019}")[19 - digits..].to_owned());
        }
        for case in cases {
            assert_eq!(
                lua_number(case.as_bytes()),
                strtod_number(case.as_bytes()),
                "{case}"
            );
        }
        for other in [
            "",
            " 1",
            "1 ",
            "+1",
            "-1",
            "1e3",
            "0x10",
            "12345678901234567890",
        ] {
            assert_eq!(plain_integer(other.as_bytes()), None, "{other}");
        }
    }
}
