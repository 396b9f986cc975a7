//! Every way a hook request can be refused, with the exact status and body of docs/endpoints.md.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::hook::Rejected;

/// The text of the refusal of a token in the query string.
pub const QUERY_TOKEN_MESSAGE: &str = "Hook token must be provided via Authorization: Bearer <token> or X-Service-Token header (query parameters are not allowed).";

/// A refused request. Turning it into a response never exposes internals: the cause of a
/// [`HookError::Internal`] goes to the log, the client gets a generic 500.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("token in query string")]
    QueryToken,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("unauthorized")]
    Unauthorized,
    #[error("locked out after repeated authentication failures")]
    LockedOut { retry_after: Duration },
    #[error("not found")]
    NotFound,
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("request body timeout")]
    BodyTimeout,
    #[error("{0}")]
    Invalid(String),
    /// A mapping's transform failed (its cause is logged where it happened).
    #[error("hook mapping failed")]
    MappingFailed,
    /// Every transform call slot stayed taken for as long as a call may wait for one.
    #[error("transforms busy")]
    TransformsBusy,
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<crate::gateway::StoreError> for HookError {
    /// The store failing is our problem, not the client's: a 500, the cause in the log. Only a
    /// request too large for the NATS servers' messages is the client's: a 413.
    fn from(err: crate::gateway::StoreError) -> Self {
        use crate::gateway::StoreError;
        match err {
            StoreError::TooLarge { size, limit } => {
                tracing::info!(size, limit, "request too large for a NATS message");
                HookError::PayloadTooLarge
            }
            err => HookError::Internal(err.to_string()),
        }
    }
}

impl From<Rejected> for HookError {
    fn from(rejected: Rejected) -> Self {
        HookError::Invalid(rejected.0)
    }
}

/// `{"ok":false,"error":message}` with `status`.
pub fn json_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"ok": false, "error": message}))).into_response()
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Whole seconds, rounded up, at least 1.
fn retry_after_seconds(left: Duration) -> u64 {
    left.as_secs_f64().ceil().max(1.0) as u64
}

impl IntoResponse for HookError {
    fn into_response(self) -> Response {
        match self {
            HookError::QueryToken => text(StatusCode::BAD_REQUEST, QUERY_TOKEN_MESSAGE),
            HookError::MethodNotAllowed => {
                let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                response
            }
            HookError::Unauthorized => text(StatusCode::UNAUTHORIZED, "Unauthorized"),
            HookError::LockedOut { retry_after } => {
                let mut response = text(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests");
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_seconds(retry_after)),
                );
                response
            }
            HookError::NotFound => text(StatusCode::NOT_FOUND, "Not Found"),
            HookError::PayloadTooLarge => closing(json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload too large",
            )),
            HookError::BodyTimeout => closing(json_error(
                StatusCode::REQUEST_TIMEOUT,
                "request body timeout",
            )),
            HookError::Invalid(message) => json_error(StatusCode::BAD_REQUEST, &message),
            HookError::MappingFailed => {
                json_error(StatusCode::INTERNAL_SERVER_ERROR, "hook mapping failed")
            }
            HookError::TransformsBusy => {
                let mut response =
                    json_error(StatusCode::SERVICE_UNAVAILABLE, "transforms busy; retry");
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                response
            }
            HookError::Internal(cause) => {
                tracing::error!(%cause, "hook request failed");
                json_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }
}

/// The connection is not reused after a body we did not read to its end.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_rounded_up_and_at_least_one() {
        assert_eq!(retry_after_seconds(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(0)), 1);
        assert_eq!(retry_after_seconds(Duration::from_millis(59_001)), 60);
    }
}
