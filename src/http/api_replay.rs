//! Bulk replay through the operator API (docs/operations.md#replaying-in-bulk): a selection of
//! the request log, as `GET /api/requests` filters it, replayed oldest first through the
//! configuration in force, at a bounded rate, by a job the operator polls and may cancel.

mod job;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use job::ReplayJobs;

use super::AppState;
use super::api_error::{ApiError, ApiPath, ApiQuery};
use super::api_requests::{find, replay_refusal};
use super::hooks;
use super::request_query::RequestsQuery;
use crate::gateway::requests::{ListOrder, RequestFilter, RequestRecord};
use job::{Rate, ReplayJob};

/// The most requests one bulk replay (or its dry run) takes: a selection matching more is
/// refused, not cut, so that the operator narrows it knowingly.
pub const MAX_SELECTED: usize = 10_000;

/// How many records the selection reads from the log at a time.
const PAGE: u32 = 1000;

/// The body of `POST /api/requests/replay`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplayBody {
    /// The keys of `GET /api/requests`' query; `limit` does not apply (every match is taken).
    #[serde(default)]
    filter: RequestsQuery,
    /// Only count what would be replayed.
    #[serde(default)]
    dry_run: bool,
    /// Replays per second.
    rate: Option<u32>,
    /// Also replay the requests a replay of which was answered 2xx already.
    #[serde(default)]
    again: bool,
}

/// The requests a filter selects, split into those a replay can make and those it cannot.
#[derive(Default)]
struct Selection {
    /// Record ids, oldest first.
    replayable: Vec<String>,
    /// How many cannot be replayed, by why.
    refused: BTreeMap<String, usize>,
}

/// The answer of `POST /api/requests/replay`: what the filter selects, and the job replaying
/// it (none for a dry run).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplayPlan {
    ok: bool,
    dry_run: bool,
    /// The job's id, for `GET /api/requests/replays/{id}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// Requests the filter matched.
    matched: usize,
    /// Of those, the ones that are (or would be) replayed.
    replayable: usize,
    /// The others, grouped by why they cannot be replayed.
    not_replayable: Vec<NotReplayable>,
    /// Replays per second.
    rate: u32,
}

#[derive(Serialize)]
struct NotReplayable {
    reason: String,
    count: usize,
}

/// `POST /api/requests/replay` with `{"filter": {...}, "dryRun": bool, "rate": n, "again":
/// bool}`: selects the requests the filter matches (at most [`MAX_SELECTED`]), and with
/// `dryRun` answers how many it would replay and why the others cannot be; otherwise starts a
/// job replaying them, oldest first, and answers 202 with its id. 409 while another job runs.
/// The selection reads each captured request's record once, and the record of each of its
/// replays unless `again`.
pub async fn start(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let body: ReplayBody = serde_json::from_slice(&body)
        .map_err(|err| ApiError::Invalid(format!("invalid replay request: {err}")))?;
    let rate = Rate::parse(body.rate)?;
    let filter = body.filter.filter()?;
    if !body.dry_run {
        app.replays.idle()?;
    }
    let selection = select(&app, filter, body.again).await?;
    let matched = selection.replayable.len() + selection.refused.values().sum::<usize>();
    let replayable = selection.replayable.len();
    let not_replayable = selection
        .refused
        .into_iter()
        .map(|(reason, count)| NotReplayable { reason, count })
        .collect();
    let mut plan = ReplayPlan {
        ok: true,
        dry_run: body.dry_run,
        id: None,
        matched,
        replayable,
        not_replayable,
        rate: rate.get(),
    };
    if body.dry_run {
        return Ok(Json(plan).into_response());
    }
    let job = app.replays.start(&app, selection.replayable, rate)?;
    let location = format!("/api/requests/replays/{}", job.id);
    plan.id = Some(job.id.clone());
    let mut response = (StatusCode::ACCEPTED, Json(plan)).into_response();
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The parameters of `GET /api/requests/replays/{id}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressQuery {
    /// The counts only, without each request's replay.
    #[serde(default)]
    summary: bool,
}

/// `GET /api/requests/replays/{id}?summary=`: a job's progress, with each request's replay as
/// it is made unless `summary=true`.
pub async fn progress(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<ProgressQuery>,
) -> Result<Response, ApiError> {
    Ok(Json(job(&app, &id)?.view(!query.summary)).into_response())
}

/// `DELETE /api/requests/replays/{id}`: stops a job before its next replay and answers its
/// progress, counts only. The replay in flight is finished first: until it is, the job (and
/// this answer) says `running`, and only then `cancelled`.
pub async fn cancel(
    State(app): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let job = job(&app, &id)?;
    job.cancel();
    Ok(Json(job.view(false)).into_response())
}

/// The job of id `id`; 404 when this node has none (it never had, forgot it, or restarted).
fn job(app: &AppState, id: &str) -> Result<Arc<ReplayJob>, ApiError> {
    app.replays.get(id).ok_or(ApiError::NotFound("replay job"))
}

/// The requests `filter` selects, oldest first, read a page at a time; 400 past
/// [`MAX_SELECTED`].
async fn select(
    app: &AppState,
    mut filter: RequestFilter,
    again: bool,
) -> Result<Selection, ApiError> {
    filter.order = ListOrder::OldestFirst;
    filter.limit = PAGE;
    // A listing's paging does not page a selection: every match is taken.
    filter.cursor = None;
    let mut selection = Selection::default();
    let mut matched = 0;
    loop {
        let page = app.request_log.page(filter.clone()).await?;
        matched += page.len();
        if matched > MAX_SELECTED {
            return Err(ApiError::Invalid(format!(
                "the filter matches more than {MAX_SELECTED} requests: narrow it (since, until)"
            )));
        }
        for record in &page {
            match refusal(app, record, again).await? {
                None => selection.replayable.push(record.id.clone()),
                Some(reason) => *selection.refused.entry(reason).or_default() += 1,
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => filter.cursor = Some(last.id.clone()),
            _ => return Ok(selection),
        }
    }
}

/// Why `record`, as a listing has it (without its capture), cannot be replayed: the reasons of
/// `POST /api/requests/{id}/replay` (among them that it repeated an earlier request, whose
/// work answered it: a selection of both replays the original once), and two more: that it is
/// itself a replay (its original is the request to replay: replaying both would send the same
/// delivery twice), and, unless `again`, that a replay of it was answered 2xx already (its
/// record keeps its own status, so the filter that selected it once selects it again after a
/// fix). What the listing's record tells is asked before the capture is read.
async fn refusal(
    app: &AppState,
    record: &RequestRecord,
    again: bool,
) -> Result<Option<String>, ApiError> {
    if record.replay_of.is_some() {
        return Ok(Some("the request is itself a replay".into()));
    }
    if let Err(refused) = hooks::replayable(record) {
        return Ok(Some(refused.to_string()));
    }
    if !record.captured {
        // Nothing to read: the listing's record says all the single replay would.
        return Ok(replay_refusal(record));
    }
    let (record, replays) = match find(app, &record.id).await {
        Ok(found) => found,
        // Gone since the listing (retention): nothing left to replay.
        Err(ApiError::NotFound(_)) => {
            return Ok(Some("the request is no longer in the log".into()));
        }
        Err(err) => return Err(err),
    };
    if let Some(refused) = replay_refusal(&record) {
        return Ok(Some(refused));
    }
    if !again && replayed_successfully(app, &replays).await? {
        return Ok(Some("the request was already replayed successfully".into()));
    }
    Ok(None)
}

/// Whether one of `replays` (record ids) was answered 2xx; reads their records until one was.
async fn replayed_successfully(app: &AppState, replays: &[String]) -> Result<bool, ApiError> {
    for id in replays {
        let found = app.request_log.find(id).await?;
        if found.is_some_and(|(replay, _)| (200..300).contains(&replay.status)) {
            return Ok(true);
        }
    }
    Ok(false)
}
