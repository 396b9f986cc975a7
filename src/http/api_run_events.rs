//! `GET /api/runs/{id}/events`: a run's status changes as server-sent events, for a page or a
//! caller waiting on it (docs/http-contract.md). The stream reads the run's record every
//! [`POLL`] (one indexed read), says its status at once and then each change, and ends after
//! a status the run does not leave (`ok`, `error`, `timeout`, `forwarded`, `cancelled`).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::Serialize;

use super::AppState;
use super::api_error::{ApiError, ApiPath};
use crate::gateway::RunStatus;
use crate::gateway::runtime_clock::now_rfc3339;

/// How often a followed run's record is read.
const POLL: Duration = Duration::from_millis(250);

/// One event: the run's status, with its reply or error once it ended.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusChange {
    run_id: String,
    status: RunStatus,
    at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Where a stream is: the run it follows and the status it said last.
struct Follow {
    app: AppState,
    run_id: String,
    said: Option<RunStatus>,
    ended: bool,
}

/// Whether a run stays in `status` for good.
fn is_final(status: RunStatus) -> bool {
    matches!(
        status,
        RunStatus::Ok
            | RunStatus::Error
            | RunStatus::Timeout
            | RunStatus::Forwarded
            | RunStatus::Cancelled
    )
}

/// `GET /api/runs/{id}/events`: 404 for an unknown run; else `text/event-stream` of `status`
/// events, ending after the run's last.
pub async fn run_events(
    State(app): State<AppState>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    if app.store.run(&run_id).await?.is_none() {
        return Err(ApiError::NotFound("run"));
    }
    let follow = Follow {
        app,
        run_id,
        said: None,
        ended: false,
    };
    let events = stream::unfold(follow, |mut follow| async move {
        let event = next(&mut follow).await?;
        Some((Ok::<Event, Infallible>(event), follow))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The next change of the followed run; `None` once its last was said, or when it is gone.
async fn next(follow: &mut Follow) -> Option<Event> {
    if follow.ended {
        return None;
    }
    loop {
        let record = follow.app.store.run(&follow.run_id).await.ok()??;
        if follow.said != Some(record.status) {
            follow.said = Some(record.status);
            follow.ended = is_final(record.status);
            let change = StatusChange {
                run_id: follow.run_id.clone(),
                status: record.status,
                at: now_rfc3339(),
                reply: record.reply,
                error: record.error,
            };
            return Event::default().event("status").json_data(change).ok();
        }
        tokio::time::sleep(POLL).await;
    }
}
