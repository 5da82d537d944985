//! [`TokenBudgetService`]: admits a request on every budget, passes it on,
//! and hands the response's body what settles it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tollgate::Decision;
use tower_service::Service;

use super::config::Config;
use super::future::{Admitted, BudgetFuture};
use super::headers::{self, Item};
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
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    E: KeyExtractor,
{
    type Response = Response<super::BudgetBody<ResBody>>;
    type Error = S::Error;
    type Future = BudgetFuture<S::Future, E>;

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
        let decisions = match admit(config, &key, estimate) {
            Ok(decisions) => decisions,
            Err(response) => return BudgetFuture::rejected(*response),
        };
        let future = self.inner.call(Request::from_parts(parts, body));
        BudgetFuture::called(
            future,
            Admitted {
                config: Arc::clone(config),
                key,
                reserved: estimate,
                decisions,
            },
        )
    }
}

/// Admits a request of `estimate` tokens on every budget, or answers it.
///
/// Every budget is first asked without taking anything, for
/// `max(estimate, 1)` tokens: a refusal by any writes nothing. Then the
/// estimate, if any, is reserved in each, and given back to those already
/// reserved when one refuses (another request took the tokens meanwhile).
/// Returns each budget's decision, as the headers show it.
fn admit<E: KeyExtractor>(
    config: &Config<E>,
    key: &E::Key,
    estimate: u64,
) -> Result<Vec<Decision>, Box<Response<Full<Bytes>>>> {
    let need = estimate.max(1);
    let mut decisions = Vec::with_capacity(config.budgets.len());
    for budget in &config.budgets {
        match budget.backend.peek(key, need) {
            Ok(decision) => decisions.push(decision),
            Err(error) => {
                return Err(Box::new(too_large(
                    &budget.name,
                    error.cost(),
                    error.capacity(),
                )));
            }
        }
    }
    if decisions.iter().any(Decision::is_denied) {
        return Err(Box::new(refusal(config, key, decisions)));
    }
    for (i, budget) in config.budgets.iter().enumerate() {
        if estimate == 0 {
            // What the budget has, the request having taken nothing.
            if let Ok(now) = budget.backend.peek(key, 0) {
                decisions[i] = now;
            }
            continue;
        }
        match budget.backend.reserve(key, estimate) {
            Ok(decision) => {
                decisions[i] = decision;
                if decision.is_denied() {
                    give_back(config, key, estimate, i);
                    return Err(Box::new(refusal(config, key, decisions)));
                }
            }
            Err(error) => {
                give_back(config, key, estimate, i);
                return Err(Box::new(too_large(
                    &budget.name,
                    error.cost(),
                    error.capacity(),
                )));
            }
        }
    }
    Ok(decisions)
}

/// Gives the estimate back to the first `reserved` budgets.
fn give_back<E: KeyExtractor>(config: &Config<E>, key: &E::Key, estimate: u64, reserved: usize) {
    for budget in &config.budgets[..reserved] {
        let _after = budget.backend.refund(key, estimate);
    }
}

/// The `429` for `decisions`, at least one a denial: the binding one is
/// the denial with the longest wait. The budgets that would have admitted
/// show what they have (the request took nothing from them).
fn refusal<E: KeyExtractor>(
    config: &Config<E>,
    key: &E::Key,
    mut decisions: Vec<Decision>,
) -> Response<Full<Bytes>> {
    for (budget, decision) in config.budgets.iter().zip(decisions.iter_mut()) {
        if decision.is_denied() {
            continue;
        }
        if let Ok(now) = budget.backend.peek(key, 0) {
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
