//! The operator's credential: every request under `/api` passes [`require_operator`] (a layer),
//! and `/metrics` takes [`Operator`] when it is not public. Both admit only a request bearing
//! `Authorization: Bearer <gateway.auth.token>`; with no gateway token configured, nothing opens
//! the API. Failures count toward a lockout of their own, as for hooks, and a locked-out client is
//! refused whatever it presents.

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::api_error::ApiError;
use super::auth::presented_bearer;
use super::reply::{HookError, Refusal};

/// Proof that the request carried the gateway token.
pub struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = HookError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, HookError> {
        Operator::authorize(parts, app)
    }
}

/// The layer in front of the operator API: the gateway token, or a JSON 401 (429 when locked
/// out), before any handler runs.
pub async fn require_operator(
    State(app): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if let Err(refused) = Operator::authorize(&parts, &app) {
        return ApiError::from(refused).into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

impl Operator {
    /// The check the extractor makes, for a handler that needs it only sometimes (`/metrics`
    /// when it is not public): a failure counts toward the lockout only when the check is made.
    pub fn authorize(parts: &Parts, app: &AppState) -> Result<Operator, HookError> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer)
            .ok_or_else(|| HookError::internal("no peer address"))?;
        let settings = app.config.current();
        // A client whose proxy named no address is not counted: see `signed::authenticate`.
        let client = settings.trusted_proxies.client(peer.ip(), &parts.headers);
        let now = Instant::now();
        // Locked out means refused whatever is presented: 429 versus 200 confirms no guess.
        if let Some(client) = &client {
            app.api_limiter
                .check(client, now)
                .map_err(|retry_after| HookError::LockedOut { retry_after })?;
        }
        match &settings.gateway_token {
            Some(expected) if expected.matches(presented_bearer(&parts.headers)) => {
                if let Some(client) = &client {
                    app.api_limiter.clear(client);
                }
                Ok(Operator)
            }
            _ => {
                if let Some(client) = &client {
                    app.api_limiter.record_failure(client, now);
                }
                Err(HookError::Unauthorized(Refusal::WrongToken))
            }
        }
    }
}
