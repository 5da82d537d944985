//! [`ConcurrencyLimitService`] and its response future.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tollgate::concurrency::{KeyedConcurrencyLimiter, Permit};
use tower_service::Service;

use super::backend::{Acquire, AcquireFuture, ConcurrencyBackend, Refused};
use super::body::ConcurrencyBody;
use super::config::Config;
use super::response::{is_grpc, no_key, refused};
use crate::{BoxError, KeyExtractor};

/// The service of [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
pub struct ConcurrencyLimitService<
    S,
    E: KeyExtractor,
    B = KeyedConcurrencyLimiter<<E as KeyExtractor>::Key>,
> {
    inner: S,
    config: Arc<Config<E, B>>,
}

impl<S, E: KeyExtractor, B> ConcurrencyLimitService<S, E, B> {
    pub(crate) fn new(inner: S, config: Arc<Config<E, B>>) -> Self {
        ConcurrencyLimitService { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, E: KeyExtractor, B> Clone for ConcurrencyLimitService<S, E, B> {
    fn clone(&self) -> Self {
        ConcurrencyLimitService {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor, B> fmt::Debug for ConcurrencyLimitService<S, E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

pin_project! {
    /// The response future of [`ConcurrencyLimitService`]: holds the
    /// request's slot until the response body takes it over.
    #[project = StateProj]
    enum State<F, S, Req, H> {
        // Waiting for the backend (a round trip) or in its queue.
        Waiting { wait: AcquireFuture<H>, inner: Option<S>, request: Option<Req>, grpc: bool },
        Running { #[pin] future: F, permit: Option<H> },
        Answered { response: Option<Response<http_body_util::Full<Bytes>>> },
    }
}

pin_project! {
    /// The response future of [`ConcurrencyLimitService`].
    pub struct ConcurrencyFuture<F, S, Req, H = Permit> {
        #[pin]
        state: State<F, S, Req, H>,
        refusal: super::Refusal,
    }
}

impl<F, S, Req, H> fmt::Debug for ConcurrencyFuture<F, S, Req, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyFuture").finish_non_exhaustive()
    }
}

impl<S, E, B, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimitService<S, E, B>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    E: KeyExtractor,
    E::Key: Hash + Eq,
    B: ConcurrencyBackend<E::Key>,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ConcurrencyBody<ResBody, B::Held>>;
    type Error = S::Error;
    type Future = ConcurrencyFuture<S::Future, S, Request<ReqBody>, B::Held>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The slot is taken in `call`, per request and key: readiness is
        // the inner service's alone (see the rate-limit layer's
        // "Readiness").
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let config = &*self.config;
        let refusal = config.refusal;
        let (parts, body) = request.into_parts();
        let grpc = is_grpc(&parts.headers);
        let answered = |response| ConcurrencyFuture {
            state: State::Answered {
                response: Some(response),
            },
            refusal,
        };
        let key = match config.extractor.extract(&parts) {
            Ok(key) => key,
            Err(_) => return answered(no_key(grpc)),
        };
        let priority = config.priority(&parts);
        let request = Request::from_parts(parts, body);
        let wait = match config.limiter.acquire(&key, priority) {
            Acquire::Now(Ok(permit)) => {
                return ConcurrencyFuture {
                    state: State::Running {
                        future: self.inner.call(request),
                        permit: Some(permit),
                    },
                    refusal,
                };
            }
            Acquire::Now(Err(Refused::Full)) if config.wait => {
                match config.limiter.wait(key, priority) {
                    Some(wait) => wait,
                    None => return answered(refused(refusal, grpc)),
                }
            }
            Acquire::Now(Err(_)) => return answered(refused(refusal, grpc)),
            Acquire::Later(wait) => wait,
        };
        // The inner service made ready for this call goes with it; a clone
        // takes its place (tower's `ready-cache` idiom).
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        ConcurrencyFuture {
            state: State::Waiting {
                wait,
                inner: Some(inner),
                request: Some(request),
                grpc,
            },
            refusal,
        }
    }
}

impl<F, S, ReqBody, ResBody, Error, H> Future for ConcurrencyFuture<F, S, Request<ReqBody>, H>
where
    F: Future<Output = Result<Response<ResBody>, Error>>,
    S: Service<Request<ReqBody>, Future = F, Response = Response<ResBody>, Error = Error>,
{
    type Output = Result<Response<ConcurrencyBody<ResBody, H>>, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Answered { response } => {
                    let response = response
                        .take()
                        .expect("ConcurrencyFuture polled after completion");
                    return Poll::Ready(Ok(response.map(ConcurrencyBody::refused)));
                }
                StateProj::Running { future, permit } => {
                    let response = std::task::ready!(future.poll(cx));
                    let permit = permit
                        .take()
                        .expect("ConcurrencyFuture polled after completion");
                    // An error drops the permit here; a response hands it
                    // to its body.
                    return Poll::Ready(response.map(|response| {
                        response.map(|body| ConcurrencyBody::admitted(body, permit))
                    }));
                }
                StateProj::Waiting {
                    wait,
                    inner,
                    request,
                    grpc,
                } => {
                    let acquired = std::task::ready!(wait.as_mut().poll(cx));
                    let next = match acquired {
                        Ok(permit) => {
                            let (Some(mut inner), Some(request)) = (inner.take(), request.take())
                            else {
                                panic!("ConcurrencyFuture polled after completion");
                            };
                            State::Running {
                                future: inner.call(request),
                                permit: Some(permit),
                            }
                        }
                        Err(_) => State::Answered {
                            response: Some(refused(*this.refusal, *grpc)),
                        },
                    };
                    this.state.set(next);
                }
            }
        }
    }
}
