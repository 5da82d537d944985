//! [`MeteredBody`]: the inner service's body, passed on frame by frame
//! unchanged, scanned for its `usage` on the way, and settled once done.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::scan::{Scanner, Usage};

/// What was seen of a body by its end.
pub(crate) struct Metered {
    pub(crate) usage: Option<Usage>,
    pub(crate) bytes: u64,
    pub(crate) complete: bool,
}

/// Charges what a body cost, once.
pub(crate) type Settle = Box<dyn FnOnce(Metered) + Send>;

pin_project! {
    /// A response body of a [`TokenBudgetLayer`](super::TokenBudgetLayer):
    /// the inner body unchanged. It settles the request once: at its end,
    /// at an error, or when dropped unfinished (a client gone pays for
    /// what it was sent).
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        scanner: Scanner,
        bytes: u64,
        settle: Option<Settle>,
    }

    impl<B> PinnedDrop for MeteredBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            finish(this.settle, this.scanner, *this.bytes, false);
        }
    }
}

impl<B> MeteredBody<B> {
    pub(crate) fn new(inner: B, scanner: Scanner, settle: Settle) -> MeteredBody<B> {
        MeteredBody {
            inner,
            scanner,
            bytes: 0,
            settle: Some(settle),
        }
    }
}

fn finish(settle: &mut Option<Settle>, scanner: &Scanner, bytes: u64, complete: bool) {
    if let Some(settle) = settle.take() {
        settle(Metered {
            usage: scanner.found(),
            bytes,
            complete,
        });
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body,
    B::Data: AsRef<[u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.as_ref();
                    *this.bytes = this.bytes.saturating_add(data.len() as u64);
                    if this.settle.is_some() {
                        this.scanner.feed(data);
                    }
                }
                if this.inner.is_end_stream() {
                    finish(this.settle, this.scanner, *this.bytes, true);
                }
            }
            None => finish(this.settle, this.scanner, *this.bytes, true),
            // Cut by an error: what was sent is what is known.
            Some(Err(_)) => finish(this.settle, this.scanner, *this.bytes, false),
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

impl<B> fmt::Debug for MeteredBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeteredBody")
            .field("bytes", &self.bytes)
            .field("settled", &self.settle.is_none())
            .finish_non_exhaustive()
    }
}

/// A copy of a response head for the meter: status, version, headers and
/// extensions.
pub(crate) fn snapshot(head: &http::response::Parts) -> http::response::Parts {
    let (mut copy, ()) = Response::new(()).into_parts();
    copy.status = head.status;
    copy.version = head.version;
    copy.headers = head.headers.clone();
    copy.extensions = head.extensions.clone();
    copy
}
