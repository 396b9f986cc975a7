//! `GET /api/outbound` and `POST /api/outbound/{id}/retry`: the callbacks and lifecycle webhooks
//! in the outbox, and sending a failed one again (docs/outbound.md, docs/http-contract.md).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api_error::{ApiError, ApiPath, ApiQuery};
use super::query_params::limit;
use crate::gateway::outbound_api::{self, OutboundRecord, OutboundStatus, Resent};

/// The parameters of `GET /api/outbound`; another name is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundQuery {
    status: Option<String>,
    limit: Option<String>,
}

/// The answer of `GET /api/outbound`.
#[derive(Serialize)]
struct Messages {
    messages: Vec<OutboundRecord>,
}

/// `GET /api/outbound?status=&limit=`: the newest messages first, of `status` only when given.
pub async fn list(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<OutboundQuery>,
) -> Result<Response, ApiError> {
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(
            OutboundStatus::from_wire(text)
                .ok_or_else(|| ApiError::Invalid(OutboundStatus::EXPECTED.into()))?,
        ),
    };
    let limit = limit(query.limit.as_deref())?;
    let messages = outbound_api::list(&app.store, status, limit).await?;
    Ok(Json(Messages { messages }).into_response())
}

/// The answer of `POST /api/outbound/{id}/retry`.
#[derive(Serialize)]
struct Retried {
    ok: bool,
    id: i64,
}

/// `POST /api/outbound/{id}/retry`: a failed message pending again, with the same
/// `webhook-id`; 404 for no such message, 409 for one that is not failed.
pub async fn retry(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let id: i64 = id.parse().map_err(|_| ApiError::NotFound("message"))?;
    match app.runtime.retry_outbound(id).await? {
        Resent::Resent => Ok(Json(Retried { ok: true, id }).into_response()),
        Resent::NotFound => Err(ApiError::NotFound("message")),
        Resent::NotFailed => Err(ApiError::Conflict("the message has not failed".into())),
    }
}
