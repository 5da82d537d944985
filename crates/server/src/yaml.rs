//! Serde plumbing for the configuration file: validation run *inside* a
//! YAML mapping, so that serde_yaml_ng gives its error the mapping's line
//! and path. Used by [`crate::config`] and [`crate::tls`]; imports neither.

use std::fmt;

use serde::Deserialize;

/// Reads a mapping as `Y`, then validates it into `T` *within* the
/// mapping, so that serde_yaml_ng gives a validation error the mapping's
/// line and path (`#[serde(try_from)]` validates after the mapping is done,
/// and the error takes the line of whatever encloses it).
pub(crate) fn checked_mapping<'de, D, Y, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    Y: Deserialize<'de>,
    T: TryFrom<Y, Error = String>,
{
    use serde::de::DeserializeSeed as _;
    CheckedSeed(T::try_from, std::marker::PhantomData).deserialize(d)
}

/// A mapping read as `Y`, then turned into a `T` by a check run within the
/// mapping, so that its error has the mapping's line (see
/// [`checked_mapping`]).
pub(crate) struct CheckedSeed<Y, F>(pub(crate) F, pub(crate) std::marker::PhantomData<Y>);

impl<'de, Y, T, F> serde::de::DeserializeSeed<'de> for CheckedSeed<Y, F>
where
    Y: Deserialize<'de>,
    F: FnOnce(Y) -> Result<T, String>,
{
    type Value = T;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        struct Checked<Y, F>(F, std::marker::PhantomData<Y>);
        impl<'de, Y, T, F> serde::de::Visitor<'de> for Checked<Y, F>
        where
            Y: Deserialize<'de>,
            F: FnOnce(Y) -> Result<T, String>,
        {
            type Value = T;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                let yaml = Y::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                (self.0)(yaml).map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_map(Checked(self.0, std::marker::PhantomData))
    }
}

/// The longest quoted text an error message repeats (in characters).
const MAX_QUOTED: usize = 60;

/// `message` with every quoted string (serde's `string "…"`, escaped as
/// Rust's `{:?}`) cut to its first line and [`MAX_QUOTED`] characters: a
/// file that is not YAML reads as one string, and serde's "invalid type"
/// repeated the whole file in the error. The error's line
/// and column say where it is.
pub(crate) fn shorten_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(256));
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' {
            continue;
        }
        // Inside a quoted string: keep its start, up to a line break.
        let mut kept = 0;
        let mut cut = false;
        while let Some(c) = chars.next() {
            if c == '"' {
                break;
            }
            let escaped = if c == '\\' { chars.next() } else { None };
            if cut {
                continue;
            }
            if escaped == Some('n') || kept >= MAX_QUOTED {
                out.push('…');
                cut = true;
                continue;
            }
            out.push(c);
            out.extend(escaped);
            kept += 1;
        }
        out.push('"');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shorten_quoted;

    #[test]
    fn quoted_text_is_cut_to_its_first_line() {
        let message =
            r#"invalid type: string "hello world\nsecond line\nthird", expected struct FileYaml"#;
        assert_eq!(
            shorten_quoted(message),
            r#"invalid type: string "hello world…", expected struct FileYaml"#
        );
        let long = format!("unknown field \"{}\", expected one of", "x".repeat(100));
        let short = shorten_quoted(&long);
        assert_eq!(
            short,
            format!("unknown field \"{}…\", expected one of", "x".repeat(60))
        );
        assert_eq!(shorten_quoted(r#"a "q\"uote" b"#), r#"a "q\"uote" b"#);
        assert_eq!(shorten_quoted("no quotes"), "no quotes");
    }
}
