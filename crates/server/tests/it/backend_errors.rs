//! A backend that fails: no decision, so 503 / `UNAVAILABLE` on both APIs,
//! counted in `tollgate_backend_errors` (see the `metrics` module docs).

use std::sync::Arc;

use serde_json::json;
use tollgate_server::backend::DecideFuture;
use tollgate_server::rules::RuleSet;
use tollgate_server::{Backend, BackendError, Hit};

use crate::support::*;

/// Takes every rule set, decides nothing.
struct Down;

impl Backend for Down {
    fn install(&self, _rules: &RuleSet) -> Result<(), BackendError> {
        Ok(())
    }

    fn decide<'a>(&'a self, _hits: &'a [Hit<'a>]) -> DecideFuture<'a> {
        Box::pin(async { Err(BackendError::new("store down")) })
    }
}

#[tokio::test]
async fn a_failing_backend_is_unavailable_and_counted() {
    let server = start_on(Some(Arc::new(Down)), "", RULES).await;

    let mut client = server.grpc_client().await;
    let error = within(client.should_rate_limit(request("rl", vec![descriptor(&[("user", "a")])])))
        .await
        .expect_err("no decision");
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error}");

    let response = within(
        http_client()
            .post(server.url("/v1/check"))
            .json(&json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]}))
            .send(),
    )
    .await
    .expect("http");
    assert_eq!(response.status(), 503);

    // No rule matched: the backend is not asked, nothing fails.
    let answer =
        within(client.should_rate_limit(request("rl", vec![descriptor(&[("nobody", "a")])])))
            .await
            .expect("decided without the backend");
    assert_eq!(answer.into_inner().statuses.len(), 1);

    let text = server.metrics().await;
    assert_eq!(
        metric(&text, "tollgate_backend_errors_total"),
        2.0,
        "{text}"
    );
    server.stop().await;
}
