//! The response body that holds the request's slot until it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tollgate::concurrency::Permit;

use crate::BoxError;

pin_project! {
    /// The inner service's body (or a refusal's), with the request's slot
    /// (`H`: a [`Permit`] in memory, a Redis permit on Redis): released at
    /// the body's last frame, its first error, or its drop, whichever comes
    /// first.
    pub struct ConcurrencyBody<B, H = Permit> {
        #[pin]
        inner: Either<B, Full<Bytes>>,
        permit: Option<H>,
    }
}

impl<B, H> ConcurrencyBody<B, H> {
    pub(crate) fn admitted(inner: B, permit: H) -> ConcurrencyBody<B, H> {
        ConcurrencyBody {
            inner: Either::Left(inner),
            permit: Some(permit),
        }
    }

    pub(crate) fn refused(body: Full<Bytes>) -> ConcurrencyBody<B, H> {
        ConcurrencyBody {
            inner: Either::Right(body),
            permit: None,
        }
    }

    /// Whether the body still holds its slot.
    pub fn holds_slot(&self) -> bool {
        self.permit.is_some()
    }
}

impl<B, H> Body for ConcurrencyBody<B, H>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            // The body is over: the request no longer runs.
            this.permit.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B, H> std::fmt::Debug for ConcurrencyBody<B, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyBody")
            .field("holds_slot", &self.permit.is_some())
            .finish_non_exhaustive()
    }
}
