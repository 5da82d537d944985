//! [`RateLimitService`]: decides in `call`, passes readiness through.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::{Either, Full};
use tokio::time::Instant;
use tower_service::Service;

use crate::backend::{Backend, Decided};
use crate::config::{Config, OnMissingKey};
use crate::future::{ResponseBody, ResponseFuture, Success, admitted};
use crate::key::KeyExtractor;
use crate::response::{Rejection, is_grpc, reject};
use crate::settle::Settlement;
use tollgate::Decision;

/// The shortest sleep between two decisions in the wait mode.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Rate-limits the requests of an inner service: made by
/// [`RateLimitLayer`](crate::RateLimitLayer).
///
/// Clones share the layer's configuration and backend.
pub struct RateLimitService<S, E: KeyExtractor, L> {
    inner: S,
    config: Arc<Config<E, L>>,
}

impl<S, E: KeyExtractor, L> RateLimitService<S, E, L> {
    pub(crate) fn new(inner: S, config: Arc<Config<E, L>>) -> RateLimitService<S, E, L> {
        RateLimitService { inner, config }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, E: KeyExtractor, L> Clone for RateLimitService<S, E, L> {
    fn clone(&self) -> RateLimitService<S, E, L> {
        RateLimitService {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor, L> fmt::Debug for RateLimitService<S, E, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, E, L, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, E, L>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    E: KeyExtractor,
    L: Backend<E::Key>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    /// The inner service's readiness, and nothing else: no permit is taken
    /// here (see [Readiness](crate::guide::readiness)).
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let RateLimitService { inner, config } = self;
        let (mut parts, body) = request.into_parts();
        if config.skip_methods.contains(&parts.method) {
            return ResponseFuture::called(
                inner.call(Request::from_parts(parts, body)),
                None,
                None,
            );
        }
        let key = match config.extractor.extract(&parts) {
            Ok(key) => key,
            Err(error) => match &config.on_missing_key {
                OnMissingKey::Reject if !config.dry_run => {
                    return rejected(config, &Rejection::NoKey(error), &parts);
                }
                OnMissingKey::Reject => {
                    // Dry-run: never answered here.
                    return ResponseFuture::called(
                        inner.call(Request::from_parts(parts, body)),
                        None,
                        None,
                    );
                }
                OnMissingKey::Allow => {
                    return ResponseFuture::called(
                        inner.call(Request::from_parts(parts, body)),
                        None,
                        None,
                    );
                }
                OnMissingKey::Use(key) => key.clone(),
            },
        };
        let cost = config.cost.as_ref().map_or(1, |cost| cost(&parts));
        let decision = match config.backend.decide(&key, cost) {
            Decided::Now(Ok(decision)) => decision,
            Decided::Now(Err(_)) if config.dry_run => {
                return ResponseFuture::called(
                    inner.call(Request::from_parts(parts, body)),
                    None,
                    None,
                );
            }
            Decided::Now(Err(error)) => {
                return rejected(config, &Rejection::Backend(error), &parts);
            }
            later @ Decided::Later(_) => {
                return slow(
                    inner,
                    config,
                    Request::from_parts(parts, body),
                    key,
                    cost,
                    later,
                );
            }
        };
        if decision.is_allowed() || config.dry_run {
            report(config, &key, cost, &decision);
            let (success, settlement) = let_through(config, decision, key, cost);
            // The handler can read it (axum: `Extension<Decision>`).
            parts.extensions.insert(decision);
            return ResponseFuture::called(
                inner.call(Request::from_parts(parts, body)),
                success,
                settlement,
            );
        }
        if config
            .max_delay
            .is_some_and(|max_delay| decision.retry_after() <= max_delay)
        {
            let first = Decided::Now(Ok(decision));
            return slow(
                inner,
                config,
                Request::from_parts(parts, body),
                key,
                cost,
                first,
            );
        }
        report(config, &key, cost, &decision);
        rejected(config, &Rejection::Limited(decision), &parts)
    }
}

/// Reports a decision the layer acts on to its observer, if any.
fn report<E: KeyExtractor, L>(config: &Config<E, L>, key: &E::Key, cost: u64, decision: &Decision) {
    if let Some(observed) = &config.observed {
        observed.report(key, cost, decision, config.dry_run);
    }
}

/// What an admitted request (or, in dry-run, a refused one let through)
/// carries: its headers, and its settlement (only if admitted: a refusal
/// counted nothing, so there is nothing to settle).
fn let_through<E, L>(
    config: &Arc<Config<E, L>>,
    decision: Decision,
    key: E::Key,
    cost: u64,
) -> (Option<Success>, Option<Settlement>)
where
    E: KeyExtractor,
    L: Backend<E::Key>,
{
    if decision.is_denied() {
        let shadow = Success {
            decision,
            policy: Arc::clone(&config.policy),
            shadow: true,
        };
        return (Some(shadow), None);
    }
    let success = config.headers_on_success.then(|| Success {
        decision,
        policy: Arc::clone(&config.policy),
        shadow: false,
    });
    (success, settlement(config, key, cost))
}

/// In settle mode, what charges `key` for the response once its body is
/// done: what the settle function says it cost above the `reserved` cost.
fn settlement<E, L>(config: &Arc<Config<E, L>>, key: E::Key, reserved: u64) -> Option<Settlement>
where
    E: KeyExtractor,
    L: Backend<E::Key>,
{
    config.settle.as_ref()?;
    let config = Arc::clone(config);
    Some(Box::new(move |head, bytes| {
        if let Some(settler) = &config.settle {
            let actual = (settler.actual)(head, bytes);
            if actual > reserved {
                (settler.charge)(&config.backend, &key, actual - reserved);
            }
        }
    }))
}

fn rejected<F, B, Er, E: KeyExtractor, L>(
    config: &Config<E, L>,
    rejection: &Rejection,
    parts: &Parts,
) -> ResponseFuture<F, B, Er> {
    ResponseFuture::rejected(answer(config, rejection, parts))
}

fn answer<E: KeyExtractor, L>(
    config: &Config<E, L>,
    rejection: &Rejection,
    parts: &Parts,
) -> Response<Full<Bytes>> {
    let grpc = config.grpc && is_grpc(&parts.headers);
    reject(
        rejection,
        grpc,
        &config.policy,
        config.on_rejection.as_ref(),
    )
}

/// Finishes in a future: the inner service that was made ready goes with
/// the request, and a clone takes its place, to be made ready by the next
/// `poll_ready` (the usual tower pattern for services that await before
/// calling).
fn slow<S, E, L, ReqBody, ResBody>(
    inner: &mut S,
    config: &Arc<Config<E, L>>,
    request: Request<ReqBody>,
    key: E::Key,
    cost: u64,
    first: Decided,
) -> ResponseFuture<S::Future, ResBody, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    E: KeyExtractor,
    L: Backend<E::Key>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    let clone = inner.clone();
    let ready = std::mem::replace(inner, clone);
    let config = Arc::clone(config);
    ResponseFuture::slow(Box::pin(decide_then_call(
        config, ready, request, key, cost, first,
    )))
}

/// Awaits the decision; while denied and the wait fits in the budget
/// (`max_delay`), sleeps for `retry_after` and asks again; then calls the
/// inner service or rejects.
async fn decide_then_call<S, E, L, ReqBody, ResBody>(
    config: Arc<Config<E, L>>,
    mut inner: S,
    request: Request<ReqBody>,
    key: E::Key,
    cost: u64,
    mut decided: Decided,
) -> Result<Response<ResponseBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    E: KeyExtractor,
    L: Backend<E::Key>,
{
    let deadline = config
        .max_delay
        .and_then(|max_delay| Instant::now().checked_add(max_delay));
    let (mut parts, body) = request.into_parts();
    loop {
        let result = match decided {
            Decided::Now(result) => result,
            Decided::Later(future) => future.await,
        };
        let decision = match result {
            Ok(decision) => decision,
            Err(_) if config.dry_run => {
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(admitted(response, None, None));
            }
            Err(error) => {
                let response = answer(&config, &Rejection::Backend(error), &parts);
                return Ok(response.map(Either::Right));
            }
        };
        if decision.is_allowed() || config.dry_run {
            report(&config, &key, cost, &decision);
            let (success, settlement) = let_through(&config, decision, key, cost);
            parts.extensions.insert(decision);
            // `inner` was ready when it was taken: it must accept this call.
            let response = inner.call(Request::from_parts(parts, body)).await?;
            return Ok(admitted(response, success, settlement));
        }
        // A denial that names no wait (a remote backend's bug) must not
        // spin: ask again no sooner than a millisecond later.
        let wait = decision.retry_after().max(MIN_WAIT);
        let fits = deadline.is_some_and(|deadline| {
            Instant::now()
                .checked_add(wait)
                .is_some_and(|ready_at| ready_at <= deadline)
        });
        if !fits {
            report(&config, &key, cost, &decision);
            let response = answer(&config, &Rejection::Limited(decision), &parts);
            return Ok(response.map(Either::Right));
        }
        tokio::time::sleep(wait).await;
        decided = config.backend.decide(&key, cost);
    }
}
