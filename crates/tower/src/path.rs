//! Request paths normalised before any rule matches them, so that a client
//! cannot spell a limited path another way (`/x/../api`, `/%61pi`,
//! `//api`) and reach it unlimited.
//!
//! # The model
//!
//! [`normalize`] takes a request target as a proxy forwards it (`/a/b?q`,
//! or the absolute form `http://host/a/b?q`) and returns the path as an
//! upstream resolves it, with the query string unchanged:
//!
//! 1. the absolute form's `scheme://authority` is dropped (nginx's
//!    `$request_uri` keeps it when the client sent it);
//! 2. percent-encodings of unreserved characters (`A–Z a–z 0–9 - . _ ~`,
//!    RFC 3986 §2.3) are decoded, every other one is kept with upper-case
//!    hex (`%3a` → `%3A`), as Envoy's `normalize_path` does;
//! 3. repeated slashes are merged (Envoy's `merge_slashes`), then
//! 4. dot segments are removed (RFC 3986 §5.2.4): `/a/./b/../c` → `/a/c`.
//!
//! Steps 3 then 4 is the order of nginx and Go's `path.Clean`:
//! `/a//../b` is `/b`.
//!
//! # The guarantee
//!
//! A path is answered only when every common way an upstream reads it
//! gives the same result, so a rule matches what the upstream serves:
//!
//! - **Ambiguous paths are refused**, never guessed: an upstream may or
//!   may not split segments at an encoded slash (`%2F`), an encoded or
//!   literal backslash (`%5C`, `\`), or treat `..;x` as `..` (Tomcat). The
//!   path is resolved both ways; where the two differ (`/x/..%2Fapi`,
//!   `/%2Fapi`, `/x\..\api`, `/x/..;/api`) it is [`PathError::Ambiguous`].
//!   Where they agree, the encoded separators are kept as sent
//!   (`/repos/group%2Fproject/issues` is one segment, as most routers read
//!   it).
//! - Encoded or raw control characters (NUL and the rest, `%00`–`%1F`,
//!   `%7F`) and broken percent-encodings (`%G1`, a trailing `%`) are
//!   refused.
//! - A target that is neither a path from `/` nor an `http(s)` URL (`*`,
//!   an empty string) is refused.
//! - `normalize` is idempotent: a normal path is returned unchanged
//!   ([`is_normal`]).
//!
//! # Examples
//!
//! ```
//! use tollgate_tower::path::{PathError, normalize};
//!
//! assert_eq!(normalize("/health/../api/x?debug=1").unwrap(), "/api/x?debug=1");
//! assert_eq!(normalize("/health/%2e%2e/%61pi//x").unwrap(), "/api/x");
//! assert_eq!(normalize("http://example.com/api").unwrap(), "/api");
//! assert_eq!(normalize("/x/..%2Fapi"), Err(PathError::Ambiguous));
//! ```

use std::borrow::Cow;
use std::fmt;

/// Why a request target cannot be normalised (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError {
    /// Neither a path from `/` nor an absolute `http(s)` URL.
    NotAPath,
    /// A `%` not followed by two hex digits.
    BadPercentEncoding,
    /// A control character, raw or percent-encoded (`%00`–`%1F`, `%7F`).
    ControlCharacter,
    /// Upstreams may resolve it to different paths: an encoded slash or a
    /// backslash, or a `..;` segment, that changes the path's segments.
    Ambiguous,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::NotAPath => "not a path from '/' nor an http(s) URL",
            PathError::BadPercentEncoding => "a '%' not followed by two hex digits",
            PathError::ControlCharacter => "a control character (raw or percent-encoded)",
            PathError::Ambiguous => {
                "an encoded slash, a backslash or a '..;' segment that upstreams resolve differently"
            }
        })
    }
}

impl std::error::Error for PathError {}

/// The request target `target` (path and query) with its path normalised
/// (see the module docs); borrowed when it is already normal.
///
/// # Errors
///
/// [`PathError`] when the path cannot be normalised unambiguously.
pub fn normalize(target: &str) -> Result<Cow<'_, str>, PathError> {
    let origin = origin_form(target)?;
    let (path, query) = match origin.find('?') {
        Some(at) => origin.split_at(at),
        None => (&*origin, ""),
    };
    let tokens = tokenize(path)?;
    let kept = resolve(&tokens, Split::LiteralSlash);
    let split = resolve(&tokens, Split::EverySeparator);
    if kept.replace(['\u{1}', '\u{2}', '\u{3}'], "/") != split {
        return Err(PathError::Ambiguous);
    }
    let kept = kept
        .replace('\u{1}', "%2F")
        .replace('\u{2}', "%5C")
        .replace('\u{3}', "\\");
    if kept == path && matches!(origin, Cow::Borrowed(o) if o.len() == target.len()) {
        return Ok(Cow::Borrowed(target));
    }
    Ok(Cow::Owned(kept + query))
}

/// Whether `target` is already normal: [`normalize`] returns it unchanged.
pub fn is_normal(target: &str) -> bool {
    matches!(normalize(target), Ok(Cow::Borrowed(_)))
}

/// The path and query of `target`, without an absolute form's
/// `scheme://authority`.
fn origin_form(target: &str) -> Result<Cow<'_, str>, PathError> {
    if target.starts_with('/') {
        return Ok(Cow::Borrowed(target));
    }
    let scheme = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest = if scheme.starts_with("http://") {
        &target[7..]
    } else if scheme.starts_with("https://") {
        &target[8..]
    } else {
        return Err(PathError::NotAPath);
    };
    // The authority ends at the first '/', '?' or '#' (RFC 3986 §3.2); an
    // empty path is `/`.
    Ok(match rest.find(['/', '?', '#']) {
        Some(at) if rest.as_bytes()[at] == b'/' => Cow::Borrowed(&rest[at..]),
        Some(at) => Cow::Owned(format!("/{}", &rest[at..])),
        None => Cow::Borrowed("/"),
    })
}

/// One piece of a path: text, or a character an upstream may split at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Text(String),
    /// `/`: every upstream splits here.
    Slash,
    /// `%2F`, `%5C` or `\`: some upstreams split here, most do not.
    MaybeSlash(char),
}

/// The path as text and separators, unreserved encodings decoded.
fn tokenize(path: &str) -> Result<Vec<Token>, PathError> {
    let bytes = path.as_bytes();
    let mut tokens = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    let flush = |text: &mut String, tokens: &mut Vec<Token>| {
        if !text.is_empty() {
            tokens.push(Token::Text(std::mem::take(text)));
        }
    };
    while i < bytes.len() {
        match bytes[i] {
            b'/' => {
                flush(&mut text, &mut tokens);
                tokens.push(Token::Slash);
                i += 1;
            }
            b'\\' => {
                flush(&mut text, &mut tokens);
                tokens.push(Token::MaybeSlash('\u{3}'));
                i += 1;
            }
            b'%' => {
                let hex = |b: u8| (b as char).to_digit(16);
                let (Some(hi), Some(lo)) = (
                    bytes.get(i + 1).copied().and_then(hex),
                    bytes.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathError::BadPercentEncoding);
                };
                let byte = (hi * 16 + lo) as u8;
                match byte {
                    b'/' => {
                        flush(&mut text, &mut tokens);
                        tokens.push(Token::MaybeSlash('\u{1}'));
                    }
                    b'\\' => {
                        flush(&mut text, &mut tokens);
                        tokens.push(Token::MaybeSlash('\u{2}'));
                    }
                    0..=0x1f | 0x7f => return Err(PathError::ControlCharacter),
                    b if is_unreserved(b) => text.push(b as char),
                    b => {
                        text.push('%');
                        text.push_str(&format!("{b:02X}"));
                    }
                }
                i += 3;
            }
            0..=0x1f | 0x7f => return Err(PathError::ControlCharacter),
            _ => {
                // A whole character: paths may carry raw UTF-8.
                let width = path[i..].chars().next().map_or(1, char::len_utf8);
                text.push_str(&path[i..i + width]);
                i += width;
            }
        }
    }
    flush(&mut text, &mut tokens);
    Ok(tokens)
}

/// RFC 3986 §2.3: ALPHA / DIGIT / "-" / "." / "_" / "~".
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// How an upstream splits a path into segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Split {
    /// At `/` only; the other separators stay in their segment (as the
    /// placeholder characters `\u{1}`–`\u{3}`, rendered back by the
    /// caller), and only `.` and `..` are dot segments.
    LiteralSlash,
    /// At every separator, and `..;x` is `..` (Tomcat's path parameters).
    EverySeparator,
}

/// The path read as `split` does: repeated slashes merged, dot segments
/// removed.
fn resolve(tokens: &[Token], split: Split) -> String {
    // The segments after the leading '/' (every path here starts with one).
    let mut segments: Vec<String> = vec![String::new()];
    for token in tokens {
        let current = segments.last_mut().expect("never empty");
        match token {
            Token::Text(text) => current.push_str(text),
            Token::Slash => segments.push(String::new()),
            Token::MaybeSlash(placeholder) => match split {
                Split::LiteralSlash => current.push(*placeholder),
                Split::EverySeparator => segments.push(String::new()),
            },
        }
    }
    // segments[0] is the empty text before the leading '/'.
    let last = segments.len() - 1;
    let mut out: Vec<&str> = Vec::with_capacity(segments.len());
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate().skip(1) {
        let dot = match split {
            Split::LiteralSlash => segment.as_str(),
            Split::EverySeparator => segment.split(';').next().unwrap_or(""),
        };
        // A trailing dot segment leaves a trailing slash: `/a/..` is `/`.
        trailing_slash = i == last && (segment.is_empty() || dot == "." || dot == "..");
        match dot {
            // Repeated slashes merge; a trailing one is kept by the flag.
            "" if segment.is_empty() => {}
            "." => {}
            ".." => {
                out.pop();
            }
            _ => out.push(segment),
        }
    }
    let mut path = String::with_capacity(tokens.len() * 4 + 1);
    for segment in &out {
        path.push('/');
        path.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        path.push('/');
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &str) -> String {
        normalize(target)
            .unwrap_or_else(|e| panic!("{target}: {e}"))
            .into_owned()
    }

    #[test]
    fn dot_segments_are_removed() {
        assert_eq!(ok("/health/../api/x"), "/api/x");
        assert_eq!(ok("/a/./b/../../c"), "/c");
        assert_eq!(ok("/../../api"), "/api");
        assert_eq!(ok("/a/.."), "/");
        assert_eq!(ok("/a/."), "/a/");
        assert_eq!(ok("/a/b/.."), "/a/");
        assert_eq!(ok("/."), "/");
        assert_eq!(ok("/..."), "/...");
        assert_eq!(ok("/a/..b/c"), "/a/..b/c");
    }

    #[test]
    fn unreserved_encodings_are_decoded_and_the_rest_upper_cased() {
        assert_eq!(ok("/health/%2e%2e/api/x"), "/api/x");
        assert_eq!(ok("/health/%2E./api"), "/api");
        assert_eq!(ok("/%61pi/%7Euser"), "/api/~user");
        assert_eq!(ok("/a%3ab%20c"), "/a%3Ab%20c");
        assert_eq!(ok("/caf%C3%a9"), "/caf%C3%A9");
    }

    #[test]
    fn repeated_slashes_merge_before_dot_segments() {
        assert_eq!(ok("//api///x"), "/api/x");
        assert_eq!(ok("/a//../b"), "/b");
        assert_eq!(ok("/api/"), "/api/");
        assert_eq!(ok("/api//"), "/api/");
    }

    #[test]
    fn the_query_is_kept_as_sent() {
        assert_eq!(ok("/x/../api?a=%2e%2e/&b"), "/api?a=%2e%2e/&b");
        assert_eq!(ok("/api?"), "/api?");
        assert_eq!(ok("/a/..?x=/../y"), "/?x=/../y");
    }

    #[test]
    fn the_absolute_form_loses_its_scheme_and_authority() {
        assert_eq!(ok("http://example.com/x/../api"), "/api");
        assert_eq!(ok("HTTPS://example.com:8443/api?q=1"), "/api?q=1");
        assert_eq!(ok("http://example.com"), "/");
        assert_eq!(ok("http://example.com?q=1"), "/?q=1");
    }

    #[test]
    fn encoded_separators_that_do_not_change_the_segments_are_kept() {
        assert_eq!(
            ok("/repos/group%2fproject/issues"),
            "/repos/group%2Fproject/issues"
        );
        assert_eq!(ok("/files/a%5Cb"), "/files/a%5Cb");
        assert_eq!(ok("/files/a\\b"), "/files/a\\b");
        assert_eq!(ok("/api;jsessionid=1/x"), "/api;jsessionid=1/x");
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        for target in [
            "/x/..%2Fapi",
            "/x/..%2fapi",
            "/%2Fapi",
            "/x%2F..%2F..%2Fapi",
            "/x/..%5Capi",
            "/x\\..\\api",
            "/x/..;/api",
            "/x/..;jsessionid=1/api",
            "/x/.;/api",
            "/api%2F%2Fx",
        ] {
            assert_eq!(normalize(target), Err(PathError::Ambiguous), "{target}");
        }
    }

    #[test]
    fn broken_encodings_and_control_characters_are_refused() {
        for (target, error) in [
            ("/a%", PathError::BadPercentEncoding),
            ("/a%2", PathError::BadPercentEncoding),
            ("/a%G1", PathError::BadPercentEncoding),
            ("/a%00b", PathError::ControlCharacter),
            ("/a%0d%0aSet-Cookie", PathError::ControlCharacter),
            ("/a%7f", PathError::ControlCharacter),
            ("/a\tb", PathError::ControlCharacter),
            ("*", PathError::NotAPath),
            ("", PathError::NotAPath),
            ("api/x", PathError::NotAPath),
            ("ftp://host/api", PathError::NotAPath),
        ] {
            assert_eq!(normalize(target), Err(error), "{target:?}");
        }
    }

    #[test]
    fn normal_paths_are_borrowed() {
        for target in ["/", "/api/x", "/api/x?y=1", "/a%3A", "/files/a%5Cb"] {
            assert!(is_normal(target), "{target}");
        }
        for target in ["/a/../b", "/%61", "//a", "/a%3a", "http://h/a"] {
            assert!(!is_normal(target), "{target}");
        }
    }

    /// RFC 3986 §5.2.4 as the RFC writes it, on a decoded path whose
    /// slashes are merged: the reference for paths without separators in
    /// disguise.
    fn reference(target: &str) -> String {
        let mut decoded = target.to_owned();
        for (from, to) in [("%2e", "."), ("%2E", "."), ("%61", "a")] {
            decoded = decoded.replace(from, to);
        }
        let mut input = String::new();
        for c in decoded.chars() {
            if !(c == '/' && input.ends_with('/')) {
                input.push(c);
            }
        }
        let mut output = String::new();
        while !input.is_empty() {
            if let Some(rest) = input.strip_prefix("../").or(input.strip_prefix("./")) {
                input = rest.to_owned();
            } else if input.starts_with("/./") {
                input.replace_range(..3, "/");
            } else if input == "/." {
                input = "/".into();
            } else if input.starts_with("/../") || input == "/.." {
                input = if input == "/.." {
                    "/".into()
                } else {
                    input[3..].to_owned()
                };
                output.truncate(output.rfind('/').unwrap_or(0));
            } else if input == "." || input == ".." {
                input.clear();
            } else {
                let start = usize::from(input.starts_with('/'));
                let end = input[start..]
                    .find('/')
                    .map_or(input.len(), |at| at + start);
                output.push_str(&input[..end]);
                input.replace_range(..end, "");
            }
        }
        output
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_rfc_and_is_idempotent(
            parts in proptest::collection::vec(
                proptest::sample::select(vec!["/", "a", "b", ".", "..", "%2e", "%2E", "%61", "//"]),
                0..12,
            )
        ) {
            let target = format!("/{}", parts.concat());
            let normal = ok(&target);
            proptest::prop_assert_eq!(&normal, &reference(&target), "{}", target);
            proptest::prop_assert!(is_normal(&normal), "{} -> {}", target, normal);
        }
    }
}
