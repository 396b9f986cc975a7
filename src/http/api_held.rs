//! `POST /api/runs/<runId>/release` and `/cancel`: the operator's say over a run a budget held
//! (docs/runtime.md#held-runs).

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use super::api_error::{ApiError, ApiPath};
use crate::gateway::RunStatus;
use crate::gateway::admission::budget::{HeldError, Settled};

/// The answer to a release or a cancel: the run's status now (`queued`, or `running` and on if
/// a runner took it already; `cancelled`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeldAnswer {
    ok: bool,
    run_id: String,
    status: RunStatus,
}

/// `POST /api/runs/<runId>/release`: starts a held run whatever its budget says; it counts
/// against the budget from now. 404 for an unknown run, 409 for one that is not held.
pub async fn release(
    State(app): State<AppState>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let Settled(status) = app.runtime.release_held(&run_id).await?;
    tracing::info!(%run_id, "held run released by the operator");
    Ok(answer(run_id, status))
}

/// `POST /api/runs/<runId>/cancel`: a held run never runs (status `cancelled`). 404 for an
/// unknown run, 409 for one that is not held.
pub async fn cancel(
    State(app): State<AppState>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let Settled(status) = app.runtime.cancel_held(&run_id).await?;
    tracing::info!(%run_id, "held run cancelled by the operator");
    Ok(answer(run_id, status))
}

fn answer(run_id: String, status: RunStatus) -> Response {
    Json(HeldAnswer {
        ok: true,
        run_id,
        status,
    })
    .into_response()
}

impl From<HeldError> for ApiError {
    fn from(err: HeldError) -> Self {
        match err {
            HeldError::NotFound => ApiError::NotFound("run"),
            err @ HeldError::NotHeld(_) => ApiError::Conflict(err.to_string()),
            HeldError::Store(err) => err.into(),
        }
    }
}
