//! The optional bearer token, checked on both APIs.
//!
//! HTTP: `Authorization: Bearer <token>` on every route but `/healthz`,
//! `/readyz` (probes carry no secrets) and the status page's static files
//! (its data, `/status.json`, is guarded: see [`crate::status`]); 401
//! otherwise. gRPC: the same in the
//! `authorization` metadata; `UNAUTHENTICATED` otherwise. The comparison
//! takes the same time wherever the first difference is.

use std::path::Path;
use std::sync::Arc;

/// Whether `given` is `expected`, in time independent of where they differ.
pub fn token_matches(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The token from the settings: inline, or read from a file.
///
/// # Errors
///
/// The file cannot be read, or holds an empty token.
pub fn load_token(
    inline: Option<&str>,
    file: Option<&Path>,
) -> Result<Option<Arc<str>>, std::io::Error> {
    if let Some(token) = inline {
        return Ok(Some(token.into()));
    }
    let Some(file) = file else { return Ok(None) };
    let text = std::fs::read_to_string(file)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: the bearer token file is empty", file.display()),
        ));
    }
    Ok(Some(token.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        assert!(token_matches("secret", "secret"));
        assert!(!token_matches("secreT", "secret"));
        assert!(!token_matches("secret1", "secret"));
        assert!(!token_matches("", "secret"));
    }
}
