//! [`TokenBudgetService`]: admits a request on every budget, passes it on,
//! and hands the response's body what settles it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use tollgate::Decision;
use tower_service::Service;

use super::backend::Reservation;
use super::config::Config;
use super::future::{Admitted, BudgetFuture, metered};
use super::headers::{self, Item};
use crate::backend::BackendError;
use crate::key::KeyExtractor;

/// The service a [`TokenBudgetLayer`](super::TokenBudgetLayer) wraps
/// around `S`.
pub struct TokenBudgetService<S, E: KeyExtractor> {
    inner: S,
    config: Arc<Config<E>>,
}

impl<S, E: KeyExtractor> TokenBudgetService<S, E> {
    pub(crate) fn new(inner: S, config: Arc<Config<E>>) -> TokenBudgetService<S, E> {
        TokenBudgetService { inner, config }
    }
}

impl<S: Clone, E: KeyExtractor> Clone for TokenBudgetService<S, E> {
    fn clone(&self) -> TokenBudgetService<S, E> {
        TokenBudgetService {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor> fmt::Debug for TokenBudgetService<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBudgetService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for TokenBudgetService<S, E>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    E: KeyExtractor,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<super::BudgetBody<ResBody>>;
    type Error = S::Error;
    type Future = BudgetFuture<S::Future, E, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &self.config;
        let (parts, body) = request.into_parts();
        let key = match config.extractor.extract(&parts) {
            Ok(key) => key,
            Err(error) => {
                let response = headers::error(
                    error.status(),
                    &error.to_string(),
                    "invalid_request_error",
                    "missing_rate_limit_key",
                );
                return BudgetFuture::rejected(response);
            }
        };
        let estimate = config
            .estimate
            .as_ref()
            .map_or(0, |estimate| estimate(&parts));
        let request = Request::from_parts(parts, body);
        // Local budgets answer on the first poll: the request is decided
        // here, as the inner service expects after `poll_ready`. A remote
        // one (Redis) leaves it pending: then the ready service goes with
        // the request into a future and a clone takes its place (the usual
        // tower pattern for services that await before calling).
        let mut admission = Box::pin(admit(Arc::clone(config), key, estimate));
        match admission
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(Ok(admitted)) => BudgetFuture::called(self.inner.call(request), admitted),
            Poll::Ready(Err(response)) => BudgetFuture::rejected(*response),
            Poll::Pending => {
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                BudgetFuture::slow(Box::pin(async move {
                    match admission.await {
                        Ok(admitted) => {
                            // `ready` was ready when taken: it accepts this call.
                            let response = ready.call(request).await?;
                            Ok::<_, S::Error>(metered(response, admitted))
                        }
                        Err(response) => Ok((*response).map(Either::Right)),
                    }
                }))
            }
        }
    }
}

/// An admission, or the answer to a refusal.
type Admission<E> = Result<Admitted<E>, Box<Response<Full<Bytes>>>>;

/// Admits a request of `estimate` tokens on every budget, or answers it.
///
/// With several budgets, or none of the estimate (check, then charge),
/// every budget is first asked without taking anything, for
/// `max(estimate, 1)` tokens: a refusal by any writes nothing. Then the
/// estimate is reserved in each (one operation of its store); when one
/// refuses (another request took the tokens meanwhile), the reservations
/// already made are settled at 0, which gives them back.
async fn admit<E: KeyExtractor>(
    config: Arc<Config<E>>,
    key: E::Key,
    estimate: u64,
) -> Admission<E> {
    let budgets = &config.budgets;
    if estimate == 0 || budgets.len() > 1 {
        let need = estimate.max(1);
        let mut decisions = Vec::with_capacity(budgets.len());
        for budget in budgets {
            match budget.backend.peek(&key, need).get().await {
                Ok(decision) => decisions.push(decision),
                Err(error) => return Err(Box::new(failed(&budget.name, &error))),
            }
        }
        if decisions.iter().any(Decision::is_denied) {
            return Err(Box::new(refusal(&config, &key, decisions).await));
        }
    }
    let mut reservations: Vec<Box<dyn Reservation>> = Vec::with_capacity(budgets.len());
    for budget in budgets {
        match budget.backend.reserve(&key, estimate).get().await {
            Ok(reservation) if reservation.decision().is_allowed() => {
                reservations.push(reservation);
            }
            Ok(refused) => {
                let mut decisions: Vec<Decision> =
                    reservations.iter().map(|r| r.decision()).collect();
                decisions.push(refused.decision());
                give_back(reservations).await;
                // The budgets not asked yet show what they have.
                for later in &budgets[decisions.len()..] {
                    decisions.push(
                        later
                            .backend
                            .peek(&key, 0)
                            .get()
                            .await
                            .unwrap_or_else(|_| refused.decision()),
                    );
                }
                return Err(Box::new(refusal(&config, &key, decisions).await));
            }
            Err(error) => {
                give_back(reservations).await;
                return Err(Box::new(failed(&budget.name, &error)));
            }
        }
    }
    let decisions = reservations.iter().map(|r| r.decision()).collect();
    Ok(Admitted {
        config,
        reservations,
        reserved: estimate,
        decisions,
        runtime: tokio::runtime::Handle::try_current().ok(),
    })
}

/// Gives back the reservations of a request another budget refused.
async fn give_back(reservations: Vec<Box<dyn Reservation>>) {
    for reservation in reservations {
        let _back = reservation.settle(0).get().await;
    }
}

/// The answer to a backend that could not decide: `413` for an estimate
/// the budget can never hold, `503` for a store that could not answer.
fn failed(name: &str, error: &BackendError) -> Response<Full<Bytes>> {
    match error {
        BackendError::Cost(error) => too_large(name, error.cost(), error.capacity()),
        BackendError::Unavailable(_) => headers::error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("The token budget ({name}) could not be read: {error}"),
            "server_error",
            "budget_unavailable",
        ),
    }
}

/// The `429` for `decisions`, at least one a denial: the binding one is
/// the denial with the longest wait. The budgets that would have admitted
/// show what they have (the request took nothing from them).
async fn refusal<E: KeyExtractor>(
    config: &Config<E>,
    key: &E::Key,
    mut decisions: Vec<Decision>,
) -> Response<Full<Bytes>> {
    for (budget, decision) in config.budgets.iter().zip(decisions.iter_mut()) {
        if decision.is_denied() {
            continue;
        }
        if let Ok(now) = budget.backend.peek(key, 0).get().await {
            *decision = now;
        }
    }
    let binding = decisions
        .iter()
        .enumerate()
        .filter(|(_, decision)| decision.is_denied())
        .max_by_key(|(i, decision)| (decision.retry_after(), std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i);
    let items = items(config, &decisions);
    headers::refused(&config.budgets[binding].name, &items, &decisions[binding])
}

/// Each budget's RateLimit item for its decision.
pub(crate) fn items<'a, E: KeyExtractor>(
    config: &'a Config<E>,
    decisions: &[Decision],
) -> Vec<Item<'a>> {
    config
        .budgets
        .iter()
        .zip(decisions)
        .map(|(budget, decision)| Item {
            policy: &budget.policy,
            decision: *decision,
        })
        .collect()
}

/// An estimate no budget of this size can ever admit.
fn too_large(name: &str, cost: u64, capacity: u64) -> Response<Full<Bytes>> {
    let message = format!(
        "Request too large for tokens ({name}): limit {capacity}, requested {cost}. Lower the request's size or max_tokens."
    );
    headers::error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &message,
        "tokens",
        "request_too_large",
    )
}
