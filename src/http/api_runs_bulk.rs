//! Runs in bulk through the operator API (docs/operations.md#runs-in-bulk): `POST
//! /api/runs/release`, `/cancel` and `/retry` with a `filter` of `GET /api/runs`' keys, counted
//! first (`dryRun`), then applied to each run the filter selects, oldest first, as the single
//! run's operation applies it.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::api_error::ApiError;
use super::run_query::RunsQuery;
use crate::gateway::admission::budget::HeldError;
use crate::gateway::{RetryError, RunFilter, RunRecord, RunStatus};

/// The most runs one bulk operation (or its dry run) takes: a selection matching more is
/// refused, not cut, so that the operator narrows it knowingly (as a bulk replay's).
pub const MAX_SELECTED: usize = 10_000;

/// How many runs the selection reads from the store at a time.
const PAGE: u32 = 1000;

/// What a bulk operation does to each run it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// Starts a held run (`POST /api/runs/<runId>/release`).
    Release,
    /// A held run never runs (`POST /api/runs/<runId>/cancel`).
    Cancel,
    /// Recovers what failed of a run (`POST /api/runs/<runId>/retry`).
    Retry,
}

crate::hook::wire::wire_names!(BulkAction {
    Release => "release",
    Cancel => "cancel",
    Retry => "retry",
});

/// The body of `POST /api/runs/release|cancel|retry`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct BulkBody {
    /// The keys of `GET /api/runs`' query but `before` and `limit` (every match is taken).
    #[serde(default)]
    filter: RunsQuery,
    /// Only count what would be done.
    #[serde(default)]
    dry_run: bool,
}

/// The answer: what the filter selected and what became of each run, counted.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BulkAnswer {
    ok: bool,
    dry_run: bool,
    action: BulkAction,
    /// Runs the filter matched.
    matched: usize,
    /// Of those, the ones the action was applied to (in a dry run: would be).
    applied: usize,
    /// The others, grouped by why the action does not apply (`not held`, ...).
    skipped: Vec<Skipped>,
    /// Runs whose operation failed (the store refused it): each with why.
    failed: Vec<FailedRun>,
}

#[derive(Serialize)]
struct Skipped {
    reason: String,
    count: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FailedRun {
    run_id: String,
    error: String,
}

/// `POST /api/runs/release`.
pub async fn release(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    bulk(&app, BulkAction::Release, &body).await
}

/// `POST /api/runs/cancel`.
pub async fn cancel(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    bulk(&app, BulkAction::Cancel, &body).await
}

/// `POST /api/runs/retry`.
pub async fn retry(State(app): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    bulk(&app, BulkAction::Retry, &body).await
}

/// Selects the runs `body`'s filter matches (at most [`MAX_SELECTED`]; a release or a cancel
/// takes the `held` ones unless the filter names a status), and with `dryRun` answers how many
/// `action` applies to and why not to the others; otherwise applies it to each, oldest first,
/// one after the other, and answers what became of them. A run that changed since it was
/// selected (released by another operator, say) is skipped as the single operation's 409
/// would say. Costs one read of the store per [`PAGE`] runs, then the single operation's cost
/// per run.
async fn bulk(app: &AppState, action: BulkAction, body: &Bytes) -> Result<Response, ApiError> {
    let body: BulkBody = serde_json::from_slice(body).map_err(|err| {
        ApiError::Invalid(format!("invalid bulk {} body: {err}", action.as_str()))
    })?;
    if body.filter.pages() {
        return Err(ApiError::Invalid(
            "filter: before and limit do not apply: every run the filter matches is taken".into(),
        ));
    }
    let defaults_to_held = action != BulkAction::Retry && !body.filter.has_status();
    let mut filter = body.filter.filter()?;
    if defaults_to_held {
        filter.status = Some(RunStatus::Held);
    }
    let selected = select(app, filter).await?;
    let mut answer = BulkAnswer {
        ok: true,
        dry_run: body.dry_run,
        action,
        matched: selected.len(),
        applied: 0,
        skipped: Vec::new(),
        failed: Vec::new(),
    };
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for run in selected {
        let outcome = match not_applicable(app, action, &run) {
            Some(reason) => Outcome::Skipped(reason.into()),
            None if body.dry_run => Outcome::Applied,
            None => apply(app, action, &run.run.run_id).await,
        };
        match outcome {
            Outcome::Applied => answer.applied += 1,
            Outcome::Skipped(reason) => *skipped.entry(reason).or_default() += 1,
            Outcome::Failed(error) => answer.failed.push(FailedRun {
                run_id: run.run.run_id,
                error,
            }),
        }
    }
    answer.skipped = skipped
        .into_iter()
        .map(|(reason, count)| Skipped { reason, count })
        .collect();
    if !body.dry_run {
        tracing::info!(
            action = action.as_str(),
            matched = answer.matched,
            applied = answer.applied,
            failed = answer.failed.len(),
            "runs changed in bulk by the operator"
        );
    }
    Ok(Json(answer).into_response())
}

/// What became of one run.
enum Outcome {
    Applied,
    /// The action does not apply to it, as the single operation's 404 or 409 says.
    Skipped(String),
    /// The store failed.
    Failed(String),
}

/// Why `action` does not apply to `run` as selected, if it does not: a release or a cancel
/// takes held runs only, a retry runs with something failed that this backend retries.
fn not_applicable(app: &AppState, action: BulkAction, run: &RunRecord) -> Option<&'static str> {
    match action {
        BulkAction::Release | BulkAction::Cancel => {
            (run.status != RunStatus::Held).then_some("not held")
        }
        BulkAction::Retry => app
            .runtime
            .retry_offered(run)
            .is_none()
            .then_some("nothing of it failed that a retry recovers"),
    }
}

/// Applies `action` to run `run_id` as its single operation does.
async fn apply(app: &AppState, action: BulkAction, run_id: &str) -> Outcome {
    let held = match action {
        BulkAction::Release => app.runtime.release_held(run_id).await.map(|_| ()),
        BulkAction::Cancel => app.runtime.cancel_held(run_id).await.map(|_| ()),
        BulkAction::Retry => {
            return match app.runtime.retry_run(run_id).await {
                Ok(_) => Outcome::Applied,
                Err(RetryError::NotFound) => Outcome::Skipped("no longer stored".into()),
                Err(err @ RetryError::NothingFailed) => Outcome::Skipped(err.to_string()),
                Err(RetryError::Store(err)) => Outcome::Failed(err.to_string()),
            };
        }
    };
    match held {
        Ok(()) => Outcome::Applied,
        Err(HeldError::NotFound) => Outcome::Skipped("no longer stored".into()),
        Err(HeldError::NotHeld(_)) => Outcome::Skipped("not held".into()),
        Err(HeldError::Store(err)) => Outcome::Failed(err.to_string()),
    }
}

/// The runs `filter` selects, oldest first, read a page at a time; 400 past [`MAX_SELECTED`].
async fn select(app: &AppState, mut filter: RunFilter) -> Result<Vec<RunRecord>, ApiError> {
    filter.limit = PAGE;
    filter.before = None;
    let mut runs = Vec::new();
    loop {
        let page = app.store.runs(filter.clone()).await?;
        let full = page.len() == PAGE as usize;
        let last = page.last().map(|(_, cursor)| *cursor);
        runs.extend(page.into_iter().map(|(run, _)| run));
        if runs.len() > MAX_SELECTED {
            return Err(ApiError::Invalid(format!(
                "the filter matches more than {MAX_SELECTED} runs: narrow it (mapping, since)"
            )));
        }
        match last {
            Some(cursor) if full => filter.before = Some(cursor),
            _ => break,
        }
    }
    // The store lists newest first: the oldest is released (and so started) first.
    runs.reverse();
    Ok(runs)
}
