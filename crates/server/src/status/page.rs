//! The page's static files, served without the token (see the
//! [module docs](super)): `/status`, `/status/status.js`,
//! `/status/status.css`.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{CSP, PAGE, SCRIPT, STYLE};

fn file(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The routes of the page's files, for any router state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/status",
            get(|| async { file("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/status/status.js",
            get(|| async { file("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/status/status.css",
            get(|| async { file("text/css; charset=utf-8", STYLE) }),
        )
}
