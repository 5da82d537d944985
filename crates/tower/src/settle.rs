//! Reserve, then settle: charging what a request really cost once its
//! response has been sent (bytes sent, tokens generated).
//!
//! With [`Builder::settle`](crate::Builder::settle), a request is admitted
//! on its reserved cost (the layer's [`cost`](crate::Builder::cost), 1 by
//! default); when the response body has been sent (or dropped: a client
//! that goes away still pays for what it got), the settle function is
//! asked what the request cost in all, from the response head and the
//! body bytes sent, and the backend is charged the difference.
//!
//! ```
//! use std::num::NonZeroU64;
//! use tollgate::{Gcra, KeyedLimiter, Quota};
//! use tollgate_tower::{HeaderKey, RateLimitLayer, settle};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 1 MiB per minute per API key, charged by the bytes each response sent.
//! let per_key = KeyedLimiter::new(Gcra::new(Quota::per_minute(1024)?)?);
//! let api_key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
//! let layer = RateLimitLayer::builder(api_key, per_key)
//!     .settle(settle::by_body_bytes(NonZeroU64::new(1024).unwrap()))
//!     .build();
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
//!
//! # Decisions
//!
//! - **The reservation is the least a request costs.** Settling charges
//!   what the request cost above it and never refunds: a refund cannot be
//!   exact once later requests have been decided on the reserved state, and
//!   an inexact one would let a client borrow against it. Reserve 1 (the
//!   default) unless a request is sure to cost more.
//! - **A charge is never refused** (the work is done), so a request can take
//!   its key past the limit. What the backend then owes is the core's rule
//!   ([`tollgate::Limiter::charge`]): the excess is a debt in every
//!   algorithm, a GCRA key waiting until it is paid at its rate, a window
//!   carrying it into the windows that follow.
//! - **Settled once, when the body is done**: at its end, at an error from
//!   it, or when it is dropped unfinished, whichever comes first. A
//!   response the layer answered itself (a rejection) is never settled.
//! - **Local backends only**: [`tollgate::KeyedLimiter`] and
//!   [`tollgate::Limiter`] ([`Charge`](crate::Charge)), whose charge is
//!   synchronous. A charge on Redis is a script call to await: the token
//!   budget layer ([`budget`](crate::budget)) settles on Redis. A shaper's
//!   slots are handed out before the cost is known.

use std::fmt;
use std::num::NonZeroU64;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Buf;
use http::response::Parts;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// What a response really cost, in permits: from its head and the body
/// bytes sent.
pub(crate) type SettleFn = Box<dyn Fn(&Parts, u64) -> u64 + Send + Sync>;

/// A cost a handler reports on its response, in permits: insert it into the
/// response's extensions and settle with [`spent`].
///
/// ```
/// use tollgate_tower::settle::Spent;
///
/// let mut response = http::Response::new("42 tokens later");
/// response.extensions_mut().insert(Spent(42));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Spent(pub u64);

/// One permit per started `bytes_per_permit` of response body sent (a
/// response with an empty body costs 0 above its reservation).
pub fn by_body_bytes(
    bytes_per_permit: NonZeroU64,
) -> impl Fn(&Parts, u64) -> u64 + Send + Sync + 'static {
    move |_: &Parts, bytes: u64| bytes.div_ceil(bytes_per_permit.get())
}

/// The [`Spent`] the handler put in the response's extensions; a response
/// without one cost its reservation only.
pub fn spent() -> impl Fn(&Parts, u64) -> u64 + Send + Sync + 'static {
    |head: &Parts, _: u64| head.extensions.get::<Spent>().map_or(0, |spent| spent.0)
}

/// The settlement of one admitted request, waiting for its body: told the
/// head and the bytes sent, it charges what is due.
pub(crate) type Settlement = Box<dyn FnOnce(&Parts, u64) + Send>;

/// A settlement and what it needs, carried by the body.
struct Pending {
    settle: Settlement,
    head: Parts,
    bytes: u64,
}

pin_project! {
    /// The inner service's response body, unchanged; in settle mode it
    /// counts the bytes sent and settles the request when it is done.
    pub struct AdmittedBody<B> {
        #[pin]
        inner: B,
        pending: Option<Pending>,
    }

    impl<B> PinnedDrop for AdmittedBody<B> {
        fn drop(this: Pin<&mut Self>) {
            // Dropped unfinished (a client gone): it pays for what was sent.
            settle(this.project().pending);
        }
    }
}

impl<B> AdmittedBody<B> {
    /// A body that is only passed through.
    pub(crate) fn plain(inner: B) -> AdmittedBody<B> {
        AdmittedBody {
            inner,
            pending: None,
        }
    }

    /// A body that settles `settle` with `head` once done.
    pub(crate) fn settling(inner: B, head: Parts, settle: Settlement) -> AdmittedBody<B> {
        AdmittedBody {
            inner,
            pending: Some(Pending {
                settle,
                head,
                bytes: 0,
            }),
        }
    }
}

fn settle(pending: &mut Option<Pending>) {
    if let Some(Pending {
        settle,
        head,
        bytes,
    }) = pending.take()
    {
        settle(&head, bytes);
    }
}

impl<B: Body> Body for AdmittedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        match (&frame, this.pending.as_mut()) {
            (_, None) => {}
            (Some(Ok(frame)), Some(pending)) => {
                if let Some(data) = frame.data_ref() {
                    pending.bytes = pending.bytes.saturating_add(data.remaining() as u64);
                }
            }
            // The end, or an error: nothing more will be sent.
            (None | Some(Err(_)), Some(_)) => settle(this.pending),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for AdmittedBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmittedBody")
            .field("settling", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}
