//! JSON log lines shaped as envoyproxy/ratelimit writes them with
//! `LOG_FORMAT=json`: logrus' `JSONFormatter` with its field map
//! (`src/service_cmd/runner/runner.go`), so that a log pipeline keyed on
//! its names keeps working when tollgate replaces it.
//!
//! One object per line, keys in name order (Go's `encoding/json` sorts a
//! map's keys):
//!
//! ```text
//! {"@message":"…","@timestamp":"2026-11-29T01:02:03.456789Z","grpc":"0.0.0.0:8081","level":"info"}
//! ```
//!
//! - `@message`: the event's message; `@timestamp`: RFC 3339 with
//!   nanoseconds, trailing zeros dropped (Go's `time.RFC3339Nano`), in UTC;
//!   `level`: logrus' names (`trace`, `debug`, `info`, `warning`, `error`).
//! - Every other field of the event is a key of its own (numbers and
//!   booleans as JSON numbers and booleans, anything else as text). A field
//!   named as one of the three is written `fields.<name>`, as logrus'
//!   `prefixFieldClashes` does.
//! - Spans are not written: logrus has none.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct Logrus;

/// logrus' name of `level`.
pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warning",
        Level::ERROR => "error",
    }
}

/// `time.RFC3339Nano` of `at`, in UTC.
pub fn rfc3339_nano(at: std::time::SystemTime) -> String {
    // humantime writes all nine digits; Go drops the trailing zeros (and
    // the dot when nothing is left).
    let text = humantime::format_rfc3339_nanos(at).to_string();
    let Some(stamp) = text.strip_suffix('Z') else {
        return text;
    };
    match stamp.split_once('.') {
        Some((seconds, fraction)) => {
            let fraction = fraction.trim_end_matches('0');
            if fraction.is_empty() {
                format!("{seconds}Z")
            } else {
                format!("{seconds}.{fraction}Z")
            }
        }
        None => text,
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, Value>);

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

/// The three keys logrus writes itself.
const RESERVED: [&str; 3] = ["@message", "@timestamp", "level"];

/// One line for an event at `level` with `fields` (its message under
/// `message`), stamped `at`.
pub fn line(level: Level, fields: BTreeMap<String, Value>, at: std::time::SystemTime) -> String {
    let mut object = serde_json::Map::new();
    let mut message = Value::String(String::new());
    for (name, value) in fields {
        if name == "message" {
            message = value;
        } else if RESERVED.contains(&name.as_str()) {
            object.insert(format!("fields.{name}"), value);
        } else {
            object.insert(name, value);
        }
    }
    object.insert("@message".to_owned(), message);
    object.insert("@timestamp".to_owned(), Value::String(rfc3339_nano(at)));
    object.insert(
        "level".to_owned(),
        Value::String(level_name(level).to_owned()),
    );
    // serde_json's map is sorted by key (no `preserve_order`), as Go's.
    Value::Object(object).to_string()
}

impl<S, N> FormatEvent<S, N> for Logrus
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let text = line(
            *event.metadata().level(),
            fields.0,
            std::time::SystemTime::now(),
        );
        writeln!(writer, "{text}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn writes_logrus_json_formatter_lines_with_lyfts_field_map() {
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 120_000_000);
        let fields = [
            ("message", Value::from("serving")),
            ("port", Value::from(8081)),
            ("level", Value::from("mine")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(
            line(Level::WARN, fields, at),
            r#"{"@message":"serving","@timestamp":"2023-11-14T22:13:20.12Z","fields.level":"mine","level":"warning","port":8081}"#
        );
        assert_eq!(
            rfc3339_nano(UNIX_EPOCH + Duration::from_secs(1)),
            "1970-01-01T00:00:01Z"
        );
    }
}
