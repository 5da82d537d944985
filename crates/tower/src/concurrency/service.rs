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
use tollgate::concurrency::{Denied, Permit, Reason};
use tower_service::Service;

use super::body::ConcurrencyBody;
use super::layer::Config;
use super::response::{is_grpc, no_key, refused};
use crate::{BoxError, KeyExtractor};

/// The service of [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
pub struct ConcurrencyLimitService<S, E: KeyExtractor> {
    inner: S,
    config: Arc<Config<E>>,
}

impl<S, E: KeyExtractor> ConcurrencyLimitService<S, E> {
    pub(crate) fn new(inner: S, config: Arc<Config<E>>) -> Self {
        ConcurrencyLimitService { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, E: KeyExtractor> Clone for ConcurrencyLimitService<S, E> {
    fn clone(&self) -> Self {
        ConcurrencyLimitService {
            inner: self.inner.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: fmt::Debug, E: KeyExtractor> fmt::Debug for ConcurrencyLimitService<S, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type WaitFuture = Pin<Box<dyn Future<Output = Result<Permit, Denied>> + Send>>;

pin_project! {
    /// The response future of [`ConcurrencyLimitService`]: holds the
    /// request's permit until the response body takes it over.
    #[project = StateProj]
    enum State<F, S, Req> {
        Waiting { wait: WaitFuture, inner: Option<S>, request: Option<Req>, grpc: bool },
        Running { #[pin] future: F, permit: Option<Permit> },
        Answered { response: Option<Response<http_body_util::Full<Bytes>>> },
    }
}

pin_project! {
    /// The response future of [`ConcurrencyLimitService`].
    pub struct ConcurrencyFuture<F, S, Req> {
        #[pin]
        state: State<F, S, Req>,
        refusal: super::Refusal,
    }
}

impl<F, S, Req> fmt::Debug for ConcurrencyFuture<F, S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyFuture").finish_non_exhaustive()
    }
}

impl<S, E, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimitService<S, E>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    E: KeyExtractor,
    E::Key: Hash + Eq,
    ResBody: Body<Data = Bytes>,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ConcurrencyBody<ResBody>>;
    type Error = S::Error;
    type Future = ConcurrencyFuture<S::Future, S, Request<ReqBody>>;

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
        match config.limiter.try_acquire_as(&key, 1, priority) {
            Ok(permit) => ConcurrencyFuture {
                state: State::Running {
                    future: self.inner.call(request),
                    permit: Some(permit),
                },
                refusal,
            },
            Err(denied) if config.wait && waitable(&denied) => {
                let limiter = config.limiter.clone();
                let wait: WaitFuture =
                    Box::pin(async move { limiter.acquire(&key, 1, priority).await });
                // The inner service made ready for this call goes with it;
                // a clone takes its place (tower's `ready-cache` idiom).
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
            Err(_) => answered(refused(refusal, grpc)),
        }
    }
}

/// Whether waiting could help a refusal.
fn waitable(denied: &Denied) -> bool {
    matches!(denied.reason(), Reason::Full | Reason::Queued)
}

impl<F, S, ReqBody, ResBody, Error> Future for ConcurrencyFuture<F, S, Request<ReqBody>>
where
    F: Future<Output = Result<Response<ResBody>, Error>>,
    S: Service<Request<ReqBody>, Future = F, Response = Response<ResBody>, Error = Error>,
{
    type Output = Result<Response<ConcurrencyBody<ResBody>>, Error>;

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
