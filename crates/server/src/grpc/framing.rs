//! Checks the gRPC framing of a request before tonic sees it, so that a
//! malformed frame is the client's fault (`INVALID_ARGUMENT`), not a server
//! error.
//!
//! # Why a layer (decision)
//!
//! tonic answers framing errors itself, before any handler or codec runs,
//! and mostly with `INTERNAL`: a compressed flag (1) with no
//! `grpc-encoding`, flag bytes 2–255, a frame cut short ("Unexpected EOF"),
//! an empty body ("Missing request message"); and `OUT_OF_RANGE` for a
//! message above the size limit. Rewriting tonic's statuses afterwards would
//! mean recognising its error messages, which are not an API. Instead,
//! [`Framed`] sits between the token check and the generated server: it
//! buffers the body (at most the 5-byte prefix plus `max_request_bytes`:
//! the one message a unary call carries), checks it is exactly one
//! well-formed uncompressed frame, and answers a trailers-only
//! `INVALID_ARGUMENT` itself otherwise. The generated server then decodes
//! from the buffered bytes. Nothing is decided for a refused request.
//!
//! A request with a `grpc-encoding` other than `identity` is passed on
//! untouched: the server supports no compression, and gRPC's protocol
//! requires `UNIMPLEMENTED` (with `grpc-accept-encoding`) for an encoding it
//! does not support, which tonic answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use tonic::Status;
use tonic::codegen::{Body, BoxFuture, StdError};
use tonic::server::NamedService;

use crate::metrics::{Api, Refusal};
use crate::service::Service;

/// The length of the gRPC message prefix: a flag byte and a big-endian
/// `u32` length.
const PREFIX: usize = 5;

/// `S` behind a check of the request's gRPC framing (see the
/// [module docs](self)).
#[derive(Debug, Clone)]
pub struct Framed<S> {
    inner: S,
    max_bytes: usize,
    service: Arc<Service>,
}

impl<S> Framed<S> {
    /// `inner`, reached only by a request of one frame of at most
    /// `max_bytes` bytes; refusals are counted in `service`'s metrics.
    pub fn new(inner: S, max_bytes: usize, service: Arc<Service>) -> Framed<S> {
        Framed {
            inner,
            max_bytes,
            service,
        }
    }
}

impl<S: NamedService> NamedService for Framed<S> {
    const NAME: &'static str = S::NAME;
}

/// Why a body is not one well-formed gRPC frame; `Ok(())` if it is.
///
/// `max_bytes` bounds the message (the prefix excluded).
pub fn check_frame(body: &[u8], max_bytes: usize) -> Result<(), String> {
    if body.is_empty() {
        return Err("empty request body: a unary call carries one message".into());
    }
    let Some(mut prefix) = body.get(..PREFIX) else {
        return Err(format!(
            "truncated gRPC frame: {} bytes, the prefix alone is {PREFIX}",
            body.len()
        ));
    };
    let flag = prefix.get_u8();
    let length = prefix.get_u32();
    match flag {
        0 => {}
        1 => {
            return Err(
                "compressed gRPC frame (flag 1) without a grpc-encoding: compression is not supported"
                    .into(),
            );
        }
        _ => return Err(format!("gRPC frame flag {flag}: only 0 and 1 are defined")),
    }
    // `u32` to `usize` cannot fail on the platforms tokio supports; if it
    // did, the message would be above any limit anyway.
    let length = usize::try_from(length).unwrap_or(usize::MAX);
    if length > max_bytes {
        return Err(format!(
            "gRPC message of {length} bytes, at most {max_bytes} allowed"
        ));
    }
    let rest = body.len() - PREFIX;
    if rest < length {
        return Err(format!(
            "truncated gRPC frame: {rest} of {length} message bytes"
        ));
    }
    if rest > length {
        return Err(format!(
            "{} bytes after the gRPC message: a unary call carries one message",
            rest - length
        ));
    }
    Ok(())
}

/// Whether the request names a compression other than `identity`.
fn names_an_encoding<B>(request: &http::Request<B>) -> bool {
    request
        .headers()
        .get("grpc-encoding")
        .is_some_and(|encoding| encoding.as_bytes() != b"identity")
}

impl<S, B> tower::Service<http::Request<B>> for Framed<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The clone that was made ready is the one to call (tower's rule).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let max_bytes = self.max_bytes;
        let service = Arc::clone(&self.service);
        Box::pin(async move {
            if names_an_encoding(&request) {
                return inner.call(request.map(tonic::body::Body::new)).await;
            }
            let (parts, body) = request.into_parts();
            let limit = max_bytes.saturating_add(PREFIX);
            let refuse = |message: String| {
                tracing::debug!(%message, "grpc: malformed frame");
                service.metrics().refused(Api::Grpc, Refusal::Invalid);
                Ok(Status::invalid_argument(message).into_http())
            };
            let bytes = match Limited::new(body, limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(error) if error.is::<LengthLimitError>() => {
                    return refuse(format!(
                        "request body above {limit} bytes: a gRPC message may have at most {max_bytes}"
                    ));
                }
                Err(error) => return refuse(format!("request body: {error}")),
            };
            if let Err(message) = check_frame(&bytes, max_bytes) {
                return refuse(message);
            }
            let request =
                http::Request::from_parts(parts, tonic::body::Body::new(Full::new(bytes)));
            inner.call(request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::check_frame;

    fn frame(flag: u8, length: u32, message: &[u8]) -> Vec<u8> {
        let mut bytes = vec![flag];
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(message);
        bytes
    }

    #[test]
    fn one_uncompressed_frame_passes() {
        assert_eq!(check_frame(&frame(0, 3, b"abc"), 3), Ok(()));
        assert_eq!(check_frame(&frame(0, 0, b""), 3), Ok(()));
    }

    #[test]
    fn malformed_frames_are_refused() {
        for (name, body) in [
            ("empty", Vec::new()),
            ("short prefix", vec![0, 0, 0]),
            ("compressed", frame(1, 3, b"abc")),
            ("flag 2", frame(2, 3, b"abc")),
            ("flag 255", frame(255, 3, b"abc")),
            ("truncated", frame(0, 4, b"abc")),
            ("trailing bytes", frame(0, 2, b"abc")),
            ("above the limit", frame(0, 4, b"abcd")),
            ("length u32::MAX", frame(0, u32::MAX, b"abc")),
        ] {
            assert!(check_frame(&body, 3).is_err(), "{name}");
        }
    }
}
