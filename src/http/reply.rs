//! Every way a hook request can be refused, with the exact status and body of docs/http-contract.md.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::hook::signature::SignatureError;
use crate::hook::{LimitReached, Rejected};
use crate::mapping::TooLarge;
use crate::transform::TransformFailure;

/// `Retry-After` of an answer refused because the store is full. Space comes back when someone
/// frees it, not in a second: a pause that keeps clients from hammering a store that refuses
/// them.
pub(super) const STORE_FULL_RETRY_AFTER_SECONDS: u64 = 10;

/// The text of the refusal of a token in the query string.
pub const QUERY_TOKEN_MESSAGE: &str = "Hook token must be provided via Authorization: Bearer <token> or X-Service-Token header (query parameters are not allowed).";

/// A refused request. Turning it into a response never exposes internals, nor logs: the cause of
/// a [`HookError::Internal`], why a request was unauthorized and why its mapping failed go to the
/// log where they happen and to the request log ([`HookError::reason`]); the client gets the
/// generic answer.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("token in query string")]
    QueryToken,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("unauthorized")]
    Unauthorized(Refusal),
    #[error("locked out after repeated authentication failures")]
    LockedOut { retry_after: Duration },
    /// A mapping's lane or a budget refused the run: a JSON 429 with `Retry-After`.
    #[error(transparent)]
    LimitReached(LimitReached),
    #[error("not found")]
    NotFound,
    #[error("payload too large")]
    PayloadTooLarge,
    #[error("request body timeout")]
    BodyTimeout,
    #[error("{0}")]
    Invalid(String),
    /// A mapping's templates would render past the request's bound
    /// ([`crate::mapping::RenderLimit`]): a 400 naming the bound, found before the bytes past
    /// it were allocated.
    #[error(transparent)]
    TemplatesTooLarge(#[from] TooLarge),
    /// The body is not JSON: a 400 whose text is the parser's message, the parser's error kept.
    #[error(transparent)]
    Json(serde_json::Error),
    /// A mapped hook's body of a type it cannot read (multipart): 415.
    #[error("{}", crate::hook::form::MULTIPART_REFUSED)]
    UnsupportedMediaType,
    /// A mapping's transform failed or is not loaded: the cause kept, logged where it happened.
    #[error("hook mapping failed")]
    MappingFailed(#[source] MappingFailure),
    /// Every transform call slot stayed taken for as long as a call may wait for one.
    #[error("transforms busy")]
    TransformsBusy,
    /// The store's file system is full: nothing was committed, and the same request succeeds
    /// once space is freed (the store's writer logs it, once a minute at most).
    #[error("store full")]
    StoreFull,
    /// An edge's bound on what waits for its private node is reached (docs/edge.md#bounds):
    /// nothing was stored; the same request is stored once the private node has drained some.
    #[error("edge full")]
    EdgeFull(crate::gateway::edge_queue::Full),
    /// Our own failure, its source kept: the client is told `internal error`, the request log
    /// keeps the source's text. Made by [`HookError::internal`], which logs it.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why a request was refused as unauthorized. The client is told `Unauthorized` whatever it is
/// (which check failed would help a forger); the operator reads it in the request log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no token presented")]
    NoToken,
    #[error("the token does not match")]
    WrongToken,
    #[error("signature refused: {0}")]
    Signature(SignatureError),
    /// A signature admits its own mapping, and those that check signatures as it does, only.
    #[error("signed for mapping {signed}, but the payload matched mapping {matched}")]
    SignedForAnother { signed: String, matched: String },
    #[error("mapping {0} accepts its signature only, not the hook token")]
    TokenRefused(String),
    /// No token, on a form mapping's path, and its rule refused the request.
    #[error("no token, and mapping {mapping}'s form rule refused it: {why}")]
    Form {
        mapping: String,
        why: crate::mapping::FormRefusal,
    },
}

/// Why a mapping produced no action, a server-side failure: the client is told `hook mapping
/// failed` whatever it is, the operator reads [`MappingFailure::text`] in the request log.
#[derive(Debug, thiserror::Error)]
pub enum MappingFailure {
    /// The mapping names a transform module the current configuration did not load.
    #[error("transform {module} is not loaded")]
    NotLoaded { module: String },
    /// The transform was called and failed (never [`TransformFailure::Busy`], which is
    /// [`HookError::TransformsBusy`]).
    #[error(transparent)]
    Transform(#[from] TransformFailure),
}

impl MappingFailure {
    /// The request log's reason: a transform's failure in its own bounded words
    /// ([`TransformFailure::text`]), else this failure described.
    pub fn text(&self) -> String {
        match self {
            MappingFailure::Transform(failure) => failure.text(),
            other => other.to_string(),
        }
    }
}

impl From<crate::gateway::StoreError> for HookError {
    /// The store failing is our problem, not the client's: a 500, the cause in the log. A full
    /// disk is a 503 to retry, and a request too large for the NATS servers' messages is the
    /// client's: a 413.
    fn from(err: crate::gateway::StoreError) -> Self {
        use crate::gateway::StoreError;
        match err {
            StoreError::Full => HookError::StoreFull,
            StoreError::TooLarge { size, limit } => {
                tracing::info!(size, limit, "request too large for a NATS message");
                HookError::PayloadTooLarge
            }
            err => HookError::internal(err),
        }
    }
}

impl From<Rejected> for HookError {
    fn from(rejected: Rejected) -> Self {
        HookError::Invalid(rejected.0)
    }
}

/// The body of every JSON refusal, the operator API's included: `{"ok":false,"error":message}`.
#[derive(Serialize)]
struct ErrorBody<'a> {
    ok: bool,
    error: &'a str,
}

/// `{"ok":false,"error":message}` with `status`.
pub fn json_error(status: StatusCode, message: &str) -> Response {
    let body = ErrorBody {
        ok: false,
        error: message,
    };
    (status, Json(body)).into_response()
}

/// Whole seconds, rounded up, at least 1.
pub(super) fn retry_after_seconds(left: Duration) -> u64 {
    left.as_secs_f64().ceil().max(1.0) as u64
}

impl HookError {
    /// Our own failure, logged here, where it becomes the request's answer: once, and never by
    /// the response it turns into.
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> HookError {
        let source = source.into();
        tracing::error!(cause = %source, "hook request failed");
        HookError::Internal(source)
    }

    /// The text the client is answered with (and the request log records). Borrowed but for
    /// a body that is not JSON, whose parser's message is written out here, and templates
    /// rendering past their bound, whose bound is.
    pub fn client_message(&self) -> Cow<'_, str> {
        Cow::Borrowed(match self {
            HookError::QueryToken => QUERY_TOKEN_MESSAGE,
            HookError::MethodNotAllowed => "Method Not Allowed",
            HookError::Unauthorized(_) => "Unauthorized",
            HookError::LockedOut { .. } => "Too Many Requests",
            HookError::LimitReached(limit) => limit.message,
            HookError::NotFound => "Not Found",
            HookError::PayloadTooLarge => "payload too large",
            HookError::BodyTimeout => "request body timeout",
            HookError::Invalid(message) => message,
            HookError::TemplatesTooLarge(err) => return Cow::Owned(err.to_string()),
            HookError::Json(err) => return Cow::Owned(err.to_string()),
            HookError::UnsupportedMediaType => crate::hook::form::MULTIPART_REFUSED,
            HookError::MappingFailed(_) => "hook mapping failed",
            HookError::TransformsBusy => "transforms busy; retry",
            HookError::StoreFull => "store full; retry",
            HookError::EdgeFull(_) => "edge full; retry",
            HookError::Internal(_) => "internal error",
        })
    }

    /// Why, in more words than the client got, for the request log: the reason of an
    /// unauthorized request, the cause of a failed mapping or of our own failure.
    pub fn reason(&self) -> Option<String> {
        match self {
            HookError::Unauthorized(refusal) => Some(refusal.to_string()),
            HookError::MappingFailed(failure) => Some(failure.text()),
            HookError::LimitReached(limit) => Some(limit.reason.clone()),
            HookError::Internal(source) => Some(source.to_string()),
            HookError::EdgeFull(bound) => {
                Some(format!("edge.serve bound reached: {}", bound.as_str()))
            }
            _ => None,
        }
    }

    /// The status the client is answered with.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            HookError::QueryToken
            | HookError::Invalid(_)
            | HookError::TemplatesTooLarge(_)
            | HookError::Json(_) => StatusCode::BAD_REQUEST,
            HookError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            HookError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            HookError::LockedOut { .. } | HookError::LimitReached(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            HookError::NotFound => StatusCode::NOT_FOUND,
            HookError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            HookError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            HookError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            HookError::MappingFailed(_) | HookError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            HookError::TransformsBusy | HookError::StoreFull | HookError::EdgeFull(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

/// The refusal an answer was made from, in the answer's extensions: the hooks router's trace
/// layer records it (the client's text and the reason), and a replay tells a full store from
/// other refusals by it. Never sent.
#[derive(Debug, Clone)]
pub(super) struct Refused(pub Arc<HookError>);

impl IntoResponse for HookError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = self.client_message();
        let mut response = match &self {
            // The gateway's own refusals before a hook is known are plain text, as OpenClaw's.
            HookError::QueryToken
            | HookError::MethodNotAllowed
            | HookError::Unauthorized(_)
            | HookError::LockedOut { .. }
            | HookError::NotFound => (
                status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                message.into_owned(),
            )
                .into_response(),
            _ => json_error(status, &message),
        };
        let headers = response.headers_mut();
        match &self {
            HookError::MethodNotAllowed => {
                headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            HookError::LockedOut { retry_after }
            | HookError::LimitReached(LimitReached { retry_after, .. }) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_seconds(*retry_after)),
                );
            }
            HookError::TransformsBusy => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            HookError::StoreFull | HookError::EdgeFull(_) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(STORE_FULL_RETRY_AFTER_SECONDS),
                );
            }
            HookError::PayloadTooLarge | HookError::BodyTimeout => {
                // The connection is not reused after a body we did not read to its end.
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response.extensions_mut().insert(Refused(Arc::new(self)));
        response
    }
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

    #[tokio::test]
    async fn a_reached_limit_is_a_json_429_that_keeps_its_reason_from_the_client() {
        let refused = HookError::LimitReached(LimitReached {
            kind: crate::hook::LimitKind::Lane,
            message: "run queue full; retry later",
            reason: "mapping github: runs.maxQueued (2) reached".into(),
            retry_after: Duration::from_millis(1500),
        });
        assert_eq!(
            refused.reason().as_deref(),
            Some("mapping github: runs.maxQueued (2) reached")
        );
        let response = refused.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "2");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            &body[..],
            br#"{"ok":false,"error":"run queue full; retry later"}"#
        );
    }
}
