//! [`ResponseFuture`]: the inner service's response, or the rejection.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tollgate::Decision;

use crate::response::{HeaderPolicy, add_limit_headers};
use crate::settle::{AdmittedBody, Settlement};

/// The response body: the inner service's (settled when done, in settle
/// mode), or a rejection's.
pub type ResponseBody<B> = Either<AdmittedBody<B>, Full<Bytes>>;

/// A response that needs an async decision or a wait first.
pub(crate) type SlowResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// The RateLimit headers an admitted response gets.
pub(crate) struct Success {
    pub(crate) decision: Decision,
    pub(crate) policy: Arc<HeaderPolicy>,
    /// A refusal let through in dry-run: `Retry-After` too, as its `429`
    /// would have had.
    pub(crate) shadow: bool,
}

pin_project! {
    /// The future of [`RateLimitService`](crate::RateLimitService):
    /// the inner service's response (body on the left), or the answer to a
    /// rejection (on the right).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // Admitted at once: the inner service's future.
        Called {
            #[pin]
            future: F,
            success: Option<Success>,
            settlement: Option<Settlement>,
        },
        // Rejected at once.
        Rejected {
            response: Option<Response<Full<Bytes>>>,
        },
        // Decided by a remote backend, or waiting for a permit.
        Slow {
            future: SlowResponse<B, E>,
        },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn called(
        future: F,
        success: Option<Success>,
        settlement: Option<Settlement>,
    ) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Called {
                future,
                success,
                settlement,
            },
        }
    }

    pub(crate) fn rejected(response: Response<Full<Bytes>>) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }

    pub(crate) fn slow(future: SlowResponse<B, E>) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Slow { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called {
                future,
                success,
                settlement,
            } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(admitted(response, success.take(), settlement.take())))
            }
            KindProj::Rejected { response } => {
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(response.map(Either::Right)))
            }
            KindProj::Slow { future } => future.as_mut().poll(cx),
        }
    }
}

/// The inner service's response, with the RateLimit headers if asked, and
/// its body settling `settlement` when done.
pub(crate) fn admitted<B>(
    response: Response<B>,
    success: Option<Success>,
    settlement: Option<Settlement>,
) -> Response<ResponseBody<B>> {
    let (mut head, body) = response.into_parts();
    if let Some(success) = success {
        if success.shadow {
            add_limit_headers(&success.decision, &success.policy, &mut head.headers);
        } else {
            success.policy.write(&success.decision, &mut head.headers);
        }
    }
    let body = match settlement {
        None => AdmittedBody::plain(body),
        Some(settle) => AdmittedBody::settling(body, snapshot(&head), settle),
    };
    Response::from_parts(head, Either::Left(body))
}

/// A copy of a response head for the settle function: status, version,
/// headers and extensions.
fn snapshot(head: &http::response::Parts) -> http::response::Parts {
    let (mut copy, ()) = Response::new(()).into_parts();
    copy.status = head.status;
    copy.version = head.version;
    copy.headers = head.headers.clone();
    copy.extensions = head.extensions.clone();
    copy
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
