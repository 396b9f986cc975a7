//! Every way the operator API refuses a request: always JSON, `{"ok": false, "error": ...}`,
//! 401 and 404 included, so a script reading the API never has to parse anything else.

use std::time::Duration;

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::hooks::ReplayError;
use super::reply::{HookError, STORE_FULL_RETRY_AFTER_SECONDS, json_error};
use crate::gateway::StoreError;

/// A refused operator API request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("unauthorized")]
    Unauthorized,
    #[error("too many failed attempts; retry later")]
    LockedOut { retry_after: Duration },
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The store has no room to commit (a full disk): logged by the store's writer, once a
    /// minute at most, not here.
    #[error("store full; retry")]
    StoreFull,
    /// Our own failure, its source kept: logged where it became the answer, never by the
    /// response, which says `internal error` only.
    #[error("internal error")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::LockedOut { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Invalid(_) => StatusCode::BAD_REQUEST,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::StoreFull => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut response = json_error(status, &self.to_string());
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::LockedOut { retry_after } => {
                let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            ApiError::StoreFull => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(STORE_FULL_RETRY_AFTER_SECONDS),
                );
            }
            _ => {}
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Full => ApiError::StoreFull,
            other => {
                // Logged here, where it becomes the answer; the response does not log.
                tracing::error!(cause = %other, "operator API request failed");
                ApiError::Internal(Box::new(other))
            }
        }
    }
}

impl From<HookError> for ApiError {
    /// The shared steps (the credential check, a JSON body) refuse with hook errors.
    fn from(err: HookError) -> Self {
        match err {
            HookError::Unauthorized(_) => ApiError::Unauthorized,
            HookError::LockedOut { retry_after } => ApiError::LockedOut { retry_after },
            // Logged where it was made (`HookError::internal`).
            HookError::Internal(source) => ApiError::Internal(source),
            HookError::StoreFull => ApiError::StoreFull,
            other => ApiError::Invalid(other.client_message().into_owned()),
        }
    }
}

impl From<ReplayError> for ApiError {
    /// A replay that cannot be made conflicts with its record, but for a full store.
    fn from(err: ReplayError) -> Self {
        match err {
            ReplayError::StoreFull => ApiError::StoreFull,
            other => ApiError::Conflict(other.to_string()),
        }
    }
}

/// A query string read into `T`, refused as a JSON 400 naming what is wrong.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::try_from_uri(&parts.uri)
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError::Invalid(rejection.body_text()))
    }
}

/// Path parameters read into `T`, refused as a JSON 400 (an id that is not UTF-8, say).
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::from_request_parts(parts, state)
            .await
            .map(|Path(value)| ApiPath(value))
            .map_err(|rejection| ApiError::Invalid(rejection.body_text()))
    }
}

/// The API's answer to a path it does not have.
pub async fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("endpoint")
}

/// The API's answer to a method a path does not take.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
