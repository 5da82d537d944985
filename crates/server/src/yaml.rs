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
