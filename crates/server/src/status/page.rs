//! The page's static files, served without the token (see the
//! [module docs](super)): `/status`, `/status/status.js`,
//! `/status/status.css`, routed by [`crate::http::router`].

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

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

/// `GET /status`: the page.
pub async fn page() -> Response {
    file("text/html; charset=utf-8", PAGE)
}

/// `GET /status/status.js`: its script.
pub async fn script() -> Response {
    file("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /status/status.css`: its style sheet.
pub async fn style() -> Response {
    file("text/css; charset=utf-8", STYLE)
}
