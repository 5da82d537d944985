//! [`BudgetFuture`]: the inner service's response with the budget headers
//! and a body that settles it, or the answer to a refusal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use http::header::CONTENT_TYPE;
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use tokio::runtime::Handle;
use tollgate::Decision;

use super::BudgetBody;
use super::backend::{Pending, Reservation};
use super::body::{Metered, MeteredBody, snapshot};
use super::config::Config;
use super::headers;
use super::meter::{Seen, Settled};
use super::scan::Scanner;
use super::service::items;
use crate::key::KeyExtractor;

/// An admitted request, waiting for its response.
pub(crate) struct Admitted<E: KeyExtractor> {
    pub(crate) config: Arc<Config<E>>,
    /// One per budget, in the budgets' order, each owning its key.
    pub(crate) reservations: Vec<Box<dyn Reservation>>,
    pub(crate) reserved: u64,
    /// Each budget's decision, for the headers.
    pub(crate) decisions: Vec<Decision>,
    /// Where a remote store's settle runs when the body is dropped outside
    /// the runtime.
    pub(crate) runtime: Option<Handle>,
}

/// A response that needed a remote store's answer first.
type SlowResponse<B, Er> =
    Pin<Box<dyn Future<Output = Result<Response<BudgetBody<B>>, Er>> + Send>>;

pin_project! {
    /// The future of [`TokenBudgetService`](super::TokenBudgetService).
    ///
    /// When the inner service fails (no response), or this future is
    /// dropped before the response comes (a client gone while the
    /// upstream thinks), the request keeps its reservation and is charged
    /// nothing more.
    pub struct BudgetFuture<F, E: KeyExtractor, B, Er> {
        #[pin]
        kind: Kind<F, E, B, Er>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E: KeyExtractor, B, Er> {
        // Admitted at once: the inner service's future.
        Called {
            #[pin]
            future: F,
            admitted: Option<Admitted<E>>,
        },
        // Answered at once.
        Rejected {
            response: Option<Response<Full<Bytes>>>,
        },
        // Decided by a remote store.
        Slow {
            future: SlowResponse<B, Er>,
        },
    }
}

impl<F, E: KeyExtractor, B, Er> BudgetFuture<F, E, B, Er> {
    pub(crate) fn called(future: F, admitted: Admitted<E>) -> Self {
        BudgetFuture {
            kind: Kind::Called {
                future,
                admitted: Some(admitted),
            },
        }
    }

    pub(crate) fn rejected(response: Response<Full<Bytes>>) -> Self {
        BudgetFuture {
            kind: Kind::Rejected {
                response: Some(response),
            },
        }
    }

    pub(crate) fn slow(future: SlowResponse<B, Er>) -> Self {
        BudgetFuture {
            kind: Kind::Slow { future },
        }
    }
}

impl<F, E, B, Er> Future for BudgetFuture<F, E, B, Er>
where
    F: Future<Output = Result<Response<B>, Er>>,
    E: KeyExtractor,
{
    type Output = Result<Response<BudgetBody<B>>, Er>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called { future, admitted } => {
                let response = ready!(future.poll(cx))?;
                let admitted = admitted
                    .take()
                    .expect("BudgetFuture polled after completion");
                Poll::Ready(Ok(metered(response, admitted)))
            }
            KindProj::Rejected { response } => {
                let response = response
                    .take()
                    .expect("BudgetFuture polled after completion");
                Poll::Ready(Ok(response.map(Either::Right)))
            }
            KindProj::Slow { future } => future.as_mut().poll(cx),
        }
    }
}

/// The response with the budget headers, its body metered and settling
/// `admitted` when done.
pub(crate) fn metered<B, E: KeyExtractor>(
    response: Response<B>,
    admitted: Admitted<E>,
) -> Response<BudgetBody<B>> {
    let (mut head, body) = response.into_parts();
    let config = &admitted.config;
    if config.headers_on_success {
        let binding = admitted
            .decisions
            .iter()
            .min_by_key(|decision| decision.remaining())
            .copied();
        if let Some(binding) = binding {
            headers::write(
                &items(config, &admitted.decisions),
                &binding,
                &mut head.headers,
            );
        }
    }
    let scanner = Scanner::for_content_type(head.headers.get(CONTENT_TYPE).map(|v| v.as_bytes()));
    let seen_head = snapshot(&head);
    let Admitted {
        config,
        reservations,
        reserved,
        runtime,
        ..
    } = admitted;
    let settle = Box::new(move |metered: Metered| {
        settle(config, reservations, reserved, runtime, &seen_head, metered);
    });
    Response::from_parts(head, Either::Left(MeteredBody::new(body, scanner, settle)))
}

/// Settles every budget's reservation with what the response cost; tells
/// the hook once every settle is done (a remote store's in a task of its
/// own: a body is dropped where nothing can wait).
fn settle<E: KeyExtractor>(
    config: Arc<Config<E>>,
    reservations: Vec<Box<dyn Reservation>>,
    reserved: u64,
    runtime: Option<Handle>,
    head: &http::response::Parts,
    metered: Metered,
) {
    let seen = Seen {
        head,
        usage: metered.usage.as_ref(),
        body_bytes: metered.bytes,
        complete: metered.complete,
        reserved,
    };
    let counted = match &config.meter {
        Some(meter) => meter(&seen),
        None => metered
            .usage
            .as_ref()
            .and_then(|usage| config.tokens.of(usage)),
    };
    let (tokens, fallback) = match counted {
        Some(tokens) => (tokens, false),
        None => (config.no_usage.tokens(&seen), true),
    };
    let mut settled = Settled {
        tokens,
        reserved,
        usage: metered.usage,
        fallback,
        complete: metered.complete,
        unrecorded: 0,
    };
    let mut later = Vec::new();
    for reservation in reservations {
        match reservation.settle(tokens) {
            Pending::Now(settlement) => {
                settled.unrecorded = settled.unrecorded.max(settlement.unrecorded);
            }
            Pending::Later(future) => later.push(future),
        }
    }
    if later.is_empty() {
        if let Some(hook) = &config.on_settled {
            hook(&settled);
        }
        return;
    }
    let remote = async move {
        for future in later {
            let settlement = future.await;
            settled.unrecorded = settled.unrecorded.max(settlement.unrecorded);
        }
        if let Some(hook) = &config.on_settled {
            hook(&settled);
        }
    };
    // Only a remote store answers later, and its reservation was made on a
    // runtime, whose handle `runtime` is: there is always one.
    if let Some(runtime) = Handle::try_current().ok().or(runtime) {
        drop(runtime.spawn(remote));
    }
}

impl<F, E: KeyExtractor, B, Er> fmt::Debug for BudgetFuture<F, E, B, Er> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetFuture").finish_non_exhaustive()
    }
}
