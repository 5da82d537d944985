//! Finding the OpenAI-schema `usage` object in a response body while it is
//! passed on, piece by piece, without buffering it.
//!
//! # Model
//!
//! - **A JSON body** (`application/json` and anything not an event stream)
//!   is one document; the value of its top-level `"usage"` member is what
//!   the upstream reports. A byte-level state machine tracks strings,
//!   escapes and nesting, so a `"usage"` inside a message's text or inside
//!   a nested object is never mistaken for it; only the bytes of that one
//!   value are copied, and parsed with `serde_json` when it ends.
//! - **An event stream** (`text/event-stream`, OpenAI's `stream: true`)
//!   is a sequence of events; the `data:` lines of each are one JSON
//!   document, scanned as above (`data: [DONE]` is not an object and holds
//!   nothing). The final chunk of a stream sent with
//!   `stream_options.include_usage` carries the usage; the others carry
//!   `"usage": null`, which is skipped.
//! - **The last usage seen wins**: a provider that reports cumulative
//!   counts in several events is charged the last.
//!
//! # Bounds
//!
//! Memory is constant whatever the body: a member name is compared on its
//! first 8 bytes, a usage value is copied up to [`MAX_USAGE_BYTES`] (a
//! real one is a few hundred bytes, details included) and dropped beyond.
//! Nothing here can panic on any input: a malformed, truncated, escaped or
//! oversized value is simply not found, and the caller charges its
//! fallback (see [`NoUsage`](super::NoUsage)), never nothing.

use serde::Deserialize;

/// The most bytes of a `usage` value copied for parsing.
pub const MAX_USAGE_BYTES: usize = 4096;

/// The token counts an OpenAI-compatible response reports in `usage`.
///
/// Each count is optional: a provider may send only some of them.
/// `input_tokens` and `output_tokens` (OpenAI's Responses API, Anthropic)
/// are read as `prompt_tokens` and `completion_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Tokens of the prompt (`prompt_tokens`, or `input_tokens`).
    #[serde(default, alias = "input_tokens")]
    pub prompt_tokens: Option<u64>,
    /// Tokens generated (`completion_tokens`, or `output_tokens`), reasoning
    /// tokens included.
    #[serde(default, alias = "output_tokens")]
    pub completion_tokens: Option<u64>,
    /// Both (`total_tokens`).
    #[serde(default)]
    pub total_tokens: Option<u64>,
}

impl Usage {
    /// A usage with all three counts, total = prompt + completion
    /// (saturating).
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens: Some(prompt_tokens),
            completion_tokens: Some(completion_tokens),
            total_tokens: Some(prompt_tokens.saturating_add(completion_tokens)),
        }
    }
}

/// Where the top-level object of a document stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Outside the root object, or within a value that is not `usage`.
    Elsewhere,
    /// In the root object, before a member name.
    ExpectKey,
    /// Reading a member name of the root object.
    Key,
    /// After a member name, before its `:`.
    AfterKey,
}

/// One JSON document's top-level `usage`, fed in pieces.
#[derive(Debug)]
pub(crate) struct JsonUsage {
    depth: u32,
    in_string: bool,
    escaped: bool,
    at: At,
    /// The member name so far (first 8 bytes), and whether it can still be
    /// `usage` (no escape, not longer).
    key: [u8; 8],
    key_len: usize,
    key_plain: bool,
    /// The `usage` value being copied, and whether it is a container (ends
    /// when its bracket closes) or a scalar (ends at `,` or `}`).
    capture: Option<Vec<u8>>,
    capture_container: Option<bool>,
    overflow: bool,
    /// The last usage parsed.
    found: Option<Usage>,
}

impl Default for JsonUsage {
    fn default() -> JsonUsage {
        JsonUsage {
            depth: 0,
            in_string: false,
            escaped: false,
            at: At::Elsewhere,
            key: [0; 8],
            key_len: 0,
            key_plain: true,
            capture: None,
            capture_container: None,
            overflow: false,
            found: None,
        }
    }
}

impl JsonUsage {
    /// Scans `bytes`, the next piece of the document.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    /// The last usage found so far.
    pub(crate) fn found(&self) -> Option<Usage> {
        self.found
    }

    /// Starts a new document, keeping what was found.
    fn restart(&mut self) {
        *self = JsonUsage {
            found: self.found,
            ..JsonUsage::default()
        };
    }

    fn byte(&mut self, byte: u8) {
        if let Some(capture) = &mut self.capture {
            if capture.len() < MAX_USAGE_BYTES {
                capture.push(byte);
            } else {
                self.overflow = true;
            }
            if self.capture_container.is_none() && !byte.is_ascii_whitespace() {
                self.capture_container = Some(byte == b'{' || byte == b'[');
            }
        }
        if self.in_string {
            self.string_byte(byte);
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.at == At::ExpectKey {
                    self.at = At::Key;
                    self.key_len = 0;
                    self.key_plain = true;
                }
            }
            b'{' | b'[' => {
                self.depth = self.depth.saturating_add(1);
                if self.depth == 1 {
                    self.at = if byte == b'{' {
                        At::ExpectKey
                    } else {
                        At::Elsewhere
                    };
                }
            }
            b'}' | b']' => {
                if self.depth == 1 && self.capture_container == Some(false) {
                    // `"usage": 3}`: the scalar ends before the root's brace.
                    self.finish_capture(true);
                }
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 1 && self.capture_container == Some(true) {
                    self.finish_capture(false);
                }
            }
            b':' if self.depth == 1 && self.at == At::AfterKey => {
                self.at = At::Elsewhere;
                if self.key_plain && self.key[..self.key_len] == *b"usage" {
                    self.capture = Some(Vec::with_capacity(256));
                    self.capture_container = None;
                    self.overflow = false;
                }
            }
            b',' if self.depth == 1 => {
                if self.capture_container == Some(false) {
                    self.finish_capture(true);
                }
                if self.capture.is_none() {
                    self.at = At::ExpectKey;
                }
            }
            _ => {}
        }
    }

    fn string_byte(&mut self, byte: u8) {
        let in_key = self.depth == 1 && self.at == At::Key;
        if self.escaped {
            self.escaped = false;
            if in_key {
                self.key_plain = false;
            }
        } else if byte == b'\\' {
            self.escaped = true;
            if in_key {
                self.key_plain = false;
            }
        } else if byte == b'"' {
            self.in_string = false;
            if in_key {
                self.at = At::AfterKey;
            }
        } else if in_key {
            if self.key_len < self.key.len() {
                self.key[self.key_len] = byte;
                self.key_len += 1;
            } else {
                self.key_plain = false;
            }
        }
    }

    /// The `usage` value is complete: parse it (its last byte dropped when
    /// it was the delimiter that ended a scalar).
    fn finish_capture(&mut self, drop_last: bool) {
        let Some(mut capture) = self.capture.take() else {
            return;
        };
        self.capture_container = None;
        self.at = At::ExpectKey;
        if std::mem::take(&mut self.overflow) {
            return;
        }
        if drop_last {
            capture.pop();
        }
        // `null` (every chunk but the last of a stream) and anything
        // malformed leave the last usage found in place.
        if let Ok(Some(usage)) = serde_json::from_slice::<Option<Usage>>(&capture) {
            self.found = Some(usage);
        }
    }
}

/// An event stream's usage: the `data:` lines of each event are one JSON
/// document.
#[derive(Debug, Default)]
pub(crate) struct SseUsage {
    json: JsonUsage,
    /// At the start of a line.
    line_start: bool,
    /// Reading the field name (before `:`).
    in_field: bool,
    field: [u8; 8],
    field_len: usize,
    field_long: bool,
    /// In a `data` line's value; `skip_space` before its first byte.
    in_data: bool,
    skip_space: bool,
    /// The last byte was `\r` (a `\n` right after it ends nothing more).
    after_cr: bool,
    started: bool,
}

impl SseUsage {
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.started {
            self.started = true;
            self.line_start = true;
        }
        let mut data_from: Option<usize> = None;
        for (i, &byte) in bytes.iter().enumerate() {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            if byte == b'\n' || byte == b'\r' {
                if let Some(from) = data_from.take() {
                    self.json.feed(&bytes[from..i]);
                }
                self.end_line();
                self.after_cr = byte == b'\r';
                continue;
            }
            if self.line_start {
                self.line_start = false;
                self.in_field = true;
                self.field_len = 0;
                self.field_long = false;
            }
            if self.in_field {
                if byte == b':' {
                    self.in_field = false;
                    self.in_data = self.is_data();
                    self.skip_space = true;
                } else if self.field_len < self.field.len() {
                    self.field[self.field_len] = byte;
                    self.field_len += 1;
                } else {
                    self.field_long = true;
                }
                continue;
            }
            if self.in_data {
                if std::mem::take(&mut self.skip_space) && byte == b' ' {
                    continue;
                }
                data_from.get_or_insert(i);
            }
        }
        if let Some(from) = data_from {
            self.json.feed(&bytes[from..]);
        }
    }

    fn is_data(&self) -> bool {
        !self.field_long && self.field[..self.field_len] == *b"data"
    }

    fn end_line(&mut self) {
        if self.line_start {
            // A blank line: the event is complete.
            self.json.restart();
        } else if self.in_data || (self.in_field && self.is_data()) {
            // Data lines of one event are joined by a line feed.
            self.json.feed(b"\n");
        }
        self.line_start = true;
        self.in_field = false;
        self.in_data = false;
    }

    pub(crate) fn found(&self) -> Option<Usage> {
        self.json.found()
    }
}

/// A body's usage scanner, by the response's content type.
#[derive(Debug)]
pub(crate) enum Scanner {
    Json(JsonUsage),
    Sse(SseUsage),
}

impl Scanner {
    /// The scanner for a response whose `Content-Type` is `content_type`.
    pub(crate) fn for_content_type(content_type: Option<&[u8]>) -> Scanner {
        let sse = content_type.is_some_and(|value| {
            value.len() >= 17 && value[..17].eq_ignore_ascii_case(b"text/event-stream")
        });
        if sse {
            Scanner::Sse(SseUsage::default())
        } else {
            Scanner::Json(JsonUsage::default())
        }
    }

    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        match self {
            Scanner::Json(json) => json.feed(bytes),
            Scanner::Sse(sse) => sse.feed(bytes),
        }
    }

    pub(crate) fn found(&self) -> Option<Usage> {
        match self {
            Scanner::Json(json) => json.found(),
            Scanner::Sse(sse) => sse.found(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(body: &str) -> Option<Usage> {
        let mut scanner = JsonUsage::default();
        scanner.feed(body.as_bytes());
        scanner.found()
    }

    fn sse(body: &str) -> Option<Usage> {
        let mut scanner = SseUsage::default();
        scanner.feed(body.as_bytes());
        scanner.found()
    }

    const COMPLETION: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"the \"usage\": {\"total_tokens\": 1} is text"},"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":5,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":0}},"system_fingerprint":null}"#;

    #[test]
    fn finds_the_top_level_usage_and_not_one_in_text_or_nested() {
        assert_eq!(json(COMPLETION), Some(Usage::new(13, 5)));
        assert_eq!(json(r#"{"choices":[{"usage":{"total_tokens":9}}]}"#), None);
        assert_eq!(json(r#"{"meta":{"usage":{"total_tokens":9}}}"#), None);
        assert_eq!(json(r#"{"usage":null}"#), None);
        assert_eq!(
            json(r#"{"usage":{"input_tokens":7,"output_tokens":2}}"#),
            Some(Usage {
                prompt_tokens: Some(7),
                completion_tokens: Some(2),
                total_tokens: None
            })
        );
        // A member named by a longer or escaped name is another member.
        assert_eq!(json(r#"{"usages":{"total_tokens":9}}"#), None);
        assert_eq!(json(r#"{"usag\u0065":{"total_tokens":9}}"#), None);
    }

    #[test]
    fn malformed_and_oversized_usage_is_not_found() {
        assert_eq!(json(r#"{"usage":{"total_tokens":-3}}"#), None);
        assert_eq!(json(r#"{"usage":{"total_tokens":1e400}}"#), None);
        assert_eq!(
            json(r#"{"usage":{"total_tokens":99999999999999999999999}}"#),
            None
        );
        assert_eq!(json(r#"{"usage":"lots"}"#), None);
        assert_eq!(json(r#"{"usage":{"total_tokens":5"#), None);
        let padding = " ".repeat(MAX_USAGE_BYTES);
        assert_eq!(
            json(&format!(r#"{{"usage":{{{padding}"total_tokens":5}}}}"#)),
            None
        );
        // A later good one is still found after an oversized one.
        assert_eq!(
            json(&format!(
                r#"{{"usage":{{{padding}"total_tokens":5}},"usage":{{"total_tokens":6}}}}"#
            )),
            Some(Usage {
                total_tokens: Some(6),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn a_scalar_usage_ends_at_its_delimiter() {
        assert_eq!(
            json(r#"{"usage":null,"x":{"usage":{"total_tokens":1}}}"#),
            None
        );
        assert_eq!(
            json(r#"{"a":1,"usage":{"total_tokens":4},"b":[1,{"usage":null}]}"#),
            Some(Usage {
                total_tokens: Some(4),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn a_stream_s_final_chunk_carries_the_usage() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n",
            ": keep-alive comment\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\r\n\r\n",
            "data: {\"choices\":[],\r\ndata: \"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n",
            "data: [DONE]\n\n",
        );
        assert_eq!(sse(stream), Some(Usage::new(9, 2)));
        // Not a data field: ignored.
        assert_eq!(sse("event: {\"usage\":{\"total_tokens\":3}}\n\n"), None);
        assert_eq!(sse("datum: {\"usage\":{\"total_tokens\":3}}\n\n"), None);
        // An unterminated last event still counts what it showed.
        assert_eq!(
            sse("data:{\"usage\":{\"total_tokens\":3}}"),
            Some(Usage {
                total_tokens: Some(3),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn content_types() {
        assert!(matches!(
            Scanner::for_content_type(Some(b"text/event-stream; charset=utf-8")),
            Scanner::Sse(_)
        ));
        assert!(matches!(
            Scanner::for_content_type(Some(b"Text/Event-Stream")),
            Scanner::Sse(_)
        ));
        assert!(matches!(
            Scanner::for_content_type(Some(b"application/json")),
            Scanner::Json(_)
        ));
        assert!(matches!(Scanner::for_content_type(None), Scanner::Json(_)));
    }

    fn pieces(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (body.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut from = 0;
        for cut in cuts {
            out.push(body[from..cut].to_vec());
            from = cut;
        }
        out.push(body[from..].to_vec());
        out
    }

    proptest::proptest! {
        /// However a body is cut into pieces, the same usage is found.
        #[test]
        fn the_cuts_do_not_matter(cuts in proptest::collection::vec(0usize..10_000, 0..12)) {
            let stream = format!(
                "data: {}\r\n\r\ndata: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}}}\n\ndata: [DONE]\n\n",
                COMPLETION.replace("\"usage\":{", "\"usage\":null,\"u\":{"),
            );
            let mut whole = SseUsage::default();
            whole.feed(stream.as_bytes());
            let mut cut = SseUsage::default();
            for piece in pieces(stream.as_bytes(), &cuts) {
                cut.feed(&piece);
            }
            proptest::prop_assert_eq!(whole.found(), Some(Usage::new(4, 3)));
            proptest::prop_assert_eq!(cut.found(), whole.found());

            let mut json = JsonUsage::default();
            for piece in pieces(COMPLETION.as_bytes(), &cuts) {
                json.feed(&piece);
            }
            proptest::prop_assert_eq!(json.found(), Some(Usage::new(13, 5)));
        }

        /// Any bytes, cut anywhere: no panic, and pieces agree with the whole.
        #[test]
        fn any_bytes_are_safe(
            bytes in proptest::collection::vec(proptest::sample::select(
                b"{}[]\":,\\ usage0123456789nul\r\ndata:".to_vec()), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            for sse in [false, true] {
                let mut whole = if sse { Scanner::Sse(SseUsage::default()) } else { Scanner::Json(JsonUsage::default()) };
                whole.feed(&bytes);
                let mut cut = if sse { Scanner::Sse(SseUsage::default()) } else { Scanner::Json(JsonUsage::default()) };
                for piece in pieces(&bytes, &cuts) {
                    cut.feed(&piece);
                }
                proptest::prop_assert_eq!(cut.found(), whole.found());
            }
        }
    }
}
