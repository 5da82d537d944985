//! What a request costs: one permit by default, or a function of its parts.
//!
//! # Decisions
//!
//! - The cost is known before the body is read, from the request's parts:
//!   a route's weight, or the declared `Content-Length`.
//! - A body of unknown length (chunked, HTTP/2 without `content-length`)
//!   cannot dodge a size-based cost: it pays the cost given for unknown
//!   sizes, which should be the largest body accepted.
//! - A cost of 0 takes nothing (the request only looks), and a cost above
//!   the quota's capacity can never be admitted: it is answered `413`
//!   (see [`Rejection`](crate::Rejection)).
//!
//! Charging the real cost after the response (bytes sent, tokens generated)
//! is [`settle`](crate::settle) mode; the cost here is then the reservation.

use std::num::NonZeroU64;

use http::header::CONTENT_LENGTH;
use http::request::Parts;

/// A request's cost in permits, from its parts.
pub(crate) type CostFn = Box<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// One permit per started `bytes_per_permit` of declared body (at least
/// one permit), and `unknown` permits when the length is not declared or
/// unreadable.
///
/// ```
/// use std::num::NonZeroU64;
/// use tollgate_tower::cost::by_content_length;
///
/// // One permit per started KiB; an undeclared length pays for 1 MiB.
/// let cost = by_content_length(NonZeroU64::new(1024).unwrap(), 1024);
/// let parts = |len: &str| {
///     http::Request::post("/").header("content-length", len).body(()).unwrap().into_parts().0
/// };
/// assert_eq!(cost(&parts("0")), 1);
/// assert_eq!(cost(&parts("1025")), 2);
/// assert_eq!(cost(&parts("lots")), 1024);
/// ```
pub fn by_content_length(
    bytes_per_permit: NonZeroU64,
    unknown: u64,
) -> impl Fn(&Parts) -> u64 + Send + Sync + 'static {
    move |parts: &Parts| {
        let mut lengths = parts.headers.get_all(CONTENT_LENGTH).iter();
        let declared = match (lengths.next(), lengths.next()) {
            (Some(length), None) => length
                .to_str()
                .ok()
                .and_then(|length| length.trim().parse::<u64>().ok()),
            // None, or several (a smuggling attempt): unknown.
            _ => None,
        };
        match declared {
            Some(bytes) => bytes.div_ceil(bytes_per_permit.get()).max(1),
            None => unknown,
        }
    }
}
