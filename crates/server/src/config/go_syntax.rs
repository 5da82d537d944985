//! Go's value syntax, as envoyproxy/ratelimit reads its variables
//! (`strconv.ParseBool`, `time.ParseDuration`): one reader for every front
//! door that takes them (the environment, telemetry, xDS, the Redis key
//! layout).

use std::time::Duration;

/// Go's `strconv.ParseBool`: `1 t T TRUE true True` and
/// `0 f F FALSE false False`; anything else is `None`.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers, each with a
/// unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `1h30m` or
/// `1.5s`; `0` alone is zero. A negative duration is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("'{text}' is not a duration (such as 300ms, 10s, 1h30m)");
    let mut rest = text.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return Err(invalid());
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number: f64 = rest[..number_end].parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_end..];
        total += number * nanos_per_unit;
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(format!("'{text}' is too long"));
    }
    // Whole nanoseconds, as Go counts them.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Duration::from_nanos(total.round() as u64))
}
