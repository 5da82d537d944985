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
use tollgate::Decision;

use super::BudgetBody;
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
    pub(crate) key: E::Key,
    pub(crate) reserved: u64,
    /// Each budget's decision, for the headers.
    pub(crate) decisions: Vec<Decision>,
}

pin_project! {
    /// The future of [`TokenBudgetService`](super::TokenBudgetService).
    ///
    /// When the inner service fails (no response), the request keeps its
    /// reservation and is charged nothing more.
    pub struct BudgetFuture<F, E: KeyExtractor> {
        #[pin]
        inner: Option<F>,
        admitted: Option<Admitted<E>>,
        refusal: Option<Response<Full<Bytes>>>,
    }
}

impl<F, E: KeyExtractor> BudgetFuture<F, E> {
    pub(crate) fn called(future: F, admitted: Admitted<E>) -> BudgetFuture<F, E> {
        BudgetFuture {
            inner: Some(future),
            admitted: Some(admitted),
            refusal: None,
        }
    }

    pub(crate) fn rejected(response: Response<Full<Bytes>>) -> BudgetFuture<F, E> {
        BudgetFuture {
            inner: None,
            admitted: None,
            refusal: Some(response),
        }
    }
}

impl<F, E, B, Er> Future for BudgetFuture<F, E>
where
    F: Future<Output = Result<Response<B>, Er>>,
    E: KeyExtractor,
{
    type Output = Result<Response<BudgetBody<B>>, Er>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            let response = this
                .refusal
                .take()
                .expect("BudgetFuture polled after completion");
            return Poll::Ready(Ok(response.map(Either::Right)));
        };
        let response = ready!(inner.poll(cx))?;
        let admitted = this
            .admitted
            .take()
            .expect("BudgetFuture polled after completion");
        Poll::Ready(Ok(metered(response, admitted)))
    }
}

/// The response with the budget headers, its body metered and settling
/// `admitted` when done.
fn metered<B, E: KeyExtractor>(
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
        key,
        reserved,
        ..
    } = admitted;
    let settle = Box::new(move |metered: Metered| {
        settle(&config, &key, reserved, &seen_head, metered);
    });
    Response::from_parts(head, Either::Left(MeteredBody::new(body, scanner, settle)))
}

/// Charges (or refunds) every budget what the response cost above (below)
/// its reservation.
fn settle<E: KeyExtractor>(
    config: &Config<E>,
    key: &E::Key,
    reserved: u64,
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
    for budget in &config.budgets {
        if tokens > reserved {
            let _after = budget.backend.charge(key, tokens - reserved);
        } else if tokens < reserved {
            let _after = budget.backend.refund(key, reserved - tokens);
        }
    }
    if let Some(hook) = &config.on_settled {
        hook(&Settled {
            tokens,
            reserved,
            usage: metered.usage,
            fallback,
            complete: metered.complete,
        });
    }
}

impl<F, E: KeyExtractor> fmt::Debug for BudgetFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetFuture").finish_non_exhaustive()
    }
}
