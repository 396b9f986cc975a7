//! `POST /api/requests/dry-run` (docs/operations.md#trying-a-change-on-recorded-traffic): a
//! candidate configuration, checked as `hookgate check` checks a file, tried on the recorded
//! requests a filter selects, oldest first, at most [`MAX_REQUESTS`]. Each captured request
//! goes through the candidate's mappings, templates, transforms and policies as the live path
//! would take it ([`super::evaluate`], [`crate::intake::preview`]), and nothing of it is
//! stored: no event, no run, no delivery, no idempotency key, no lockout, no request record.

mod report;
mod trial;

use std::borrow::Cow;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::report::{Then, Totals, Trial, Untried};
use self::trial::Captured;
use super::AppState;
use super::api_error::ApiError;
use super::api_requests::{find, header_map};
use super::request_query::RequestsQuery;
use crate::config::{self, ConfigError, EnvLookup, Settings};
use crate::gateway::requests::{self, ListOrder, RequestRecord};

/// The most requests one dry run tries; the answer's `next` continues past them.
pub const MAX_REQUESTS: usize = 10_000;

/// How many records are read from the log at a time.
const PAGE: u32 = 500;

/// The body of `POST /api/requests/dry-run`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DryRunBody {
    /// The whole candidate file's text, JSON5.
    config: String,
    /// Replaces the candidate's `hooks.transformsDir` (confined as that key is).
    transforms_dir: Option<String>,
    /// The keys of `GET /api/requests`, but `before`.
    #[serde(default)]
    filter: RequestsQuery,
    /// Continues a dry run that stopped at this request (its answer's `next`).
    after: Option<String>,
}

/// Tries the candidate of the body on the selected requests; answers each request's then and
/// now, and the totals. 400 for a body, filter or candidate that is invalid, the candidate's
/// problems listed as `hookgate check` lists them (keys named, values never shown). Costs one
/// read of the log per captured request and, per request, what the live path costs before
/// admission commits (transform calls included); transforms the candidate names are compiled
/// (or found in the compile cache) once per dry run.
pub async fn dry_run(State(app): State<AppState>, body: Bytes) -> Result<Response, DryRunError> {
    let body: DryRunBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::Invalid(format!("invalid dry-run body: {e}")))?;
    if body.filter.continues_a_listing() {
        return Err(ApiError::Invalid(
            "filter.before: a dry run takes requests oldest first; continue one with after".into(),
        )
        .into());
    }
    let mut filter = body.filter.filter()?;
    filter.order = ListOrder::OldestFirst;
    filter.cursor = body.after;
    filter.limit = PAGE;
    let candidate = candidate(&app, body.config, body.transforms_dir).await?;
    let hooks = candidate.hooks.as_ref().ok_or_else(|| {
        DryRunError::Candidate(vec![ConfigError::invalid(
            "hooks.enabled",
            "must be true for a dry run: a candidate without hooks answers nothing",
        )])
    })?;
    let mut totals = Totals::default();
    let mut trials = Vec::new();
    let next = loop {
        let page = app
            .request_log
            .page(filter.clone())
            .await
            .map_err(ApiError::from)?;
        let full = page.len() == PAGE as usize;
        for record in page {
            if trials.len() == MAX_REQUESTS {
                break;
            }
            let trial = try_record(&app, hooks, record).await?;
            totals.count(&trial);
            trials.push(trial);
        }
        let last = trials.last().map(|t: &Trial| t.id.clone());
        if trials.len() == MAX_REQUESTS {
            // `next` only when one more matched.
            let mut rest = filter.clone();
            rest.cursor = last.clone();
            rest.limit = 1;
            let more = app.request_log.page(rest).await.map_err(ApiError::from)?;
            break last.filter(|_| !more.is_empty());
        }
        if !full {
            break None;
        }
        filter.cursor = last;
    };
    Ok(Json(DryRun {
        ok: true,
        totals,
        requests: trials,
        next,
    })
    .into_response())
}

/// The answer of `POST /api/requests/dry-run`.
#[derive(Serialize)]
struct DryRun {
    ok: bool,
    totals: Totals,
    requests: Vec<Trial>,
    /// When more requests matched than one dry run tries: the `after` that continues.
    next: Option<String>,
}

/// The candidate `text`, validated, with its transforms loaded apart from those in force. Its
/// `${NAME}` references read its own `env.vars` and never the server's environment (any other
/// name reads `[env NAME]`): a dry run checks no signature and sends nothing, so it needs no
/// real secret, and its answer shows what the candidate's strings hold. Runs on a blocking
/// thread: loading may compile components.
async fn candidate(
    app: &AppState,
    text: String,
    transforms_dir: Option<String>,
) -> Result<Settings, DryRunError> {
    let config_dir = config::config_dir(app.config.path());
    let registry = Arc::clone(&app.transforms);
    let loaded = tokio::task::spawn_blocking(move || {
        let text = with_transforms_dir(&text, transforms_dir.as_deref());
        let settings = config::load_text(&text, EnvLookup::Sealed, &config_dir)?;
        config::candidate_transforms(&registry, &settings)?;
        Ok::<_, Vec<ConfigError>>(settings)
    })
    .await
    .map_err(|e| ApiError::Internal(Box::new(e)))?;
    loaded.map_err(DryRunError::Candidate)
}

/// `text` with its `hooks.transformsDir` replaced by `dir`; `text` itself when there is no
/// `dir`, or when it is not JSON5 (its validation then says why).
fn with_transforms_dir<'t>(text: &'t str, dir: Option<&str>) -> Cow<'t, str> {
    let Some(dir) = dir else {
        return Cow::Borrowed(text);
    };
    let Ok(mut document) = json5::from_str::<Value>(text) else {
        return Cow::Borrowed(text);
    };
    if let Some(root) = document.as_object_mut() {
        let hooks = root
            .entry("hooks")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(hooks) = hooks.as_object_mut() {
            hooks.insert("transformsDir".into(), Value::from(dir));
        }
    }
    Cow::Owned(document.to_string())
}

/// What `record` became then and would become now under `hooks`.
async fn try_record(
    app: &AppState,
    hooks: &config::HookSettings,
    record: RequestRecord,
) -> Result<Trial, ApiError> {
    let mut runs = Vec::with_capacity(record.run_ids.len());
    for run_id in &record.run_ids {
        runs.extend(app.store.run(run_id).await?);
    }
    let then = Then::of(&record, &runs);
    let now = if record.status == StatusCode::UNAUTHORIZED.as_u16() {
        Err(Untried::Unauthenticated)
    } else if requests::is_cut(&record.target) {
        Err(Untried::PathCut)
    } else if !record.captured {
        Err(Untried::NotCaptured)
    } else {
        now_of(app, hooks, &record).await?
    };
    let (now, untried) = match now {
        Ok(now) => (Some(now), None),
        Err(untried) => (None, Some(untried)),
    };
    let differs = now.as_ref().is_some_and(|now| now.differs_from(&then));
    let captured = record.captured && untried != Some(Untried::NotCaptured);
    let mut trial = Trial {
        id: record.id,
        at: record.at,
        hook: record.hook,
        captured,
        then,
        now,
        untried,
        differs,
    };
    trial.cut_for_answer();
    Ok(trial)
}

/// What `record` would become under `hooks`, or why it was not tried.
async fn now_of(
    app: &AppState,
    hooks: &config::HookSettings,
    record: &RequestRecord,
) -> Result<Result<report::Now, Untried>, ApiError> {
    let found = match find(app, &record.id).await {
        Ok((found, _)) => found,
        // Pruned since the page was read (retention): there is nothing left to try.
        Err(ApiError::NotFound(_)) => return Ok(Err(Untried::Gone)),
        Err(err) => return Err(err),
    };
    let Some(capture) = found.capture else {
        return Ok(Err(Untried::NotCaptured));
    };
    let Some(body) = capture.body else {
        return Ok(Err(Untried::NotCaptured));
    };
    let headers = header_map(&capture.headers);
    let Some(captured) = Captured::new(record, headers, capture.query.as_deref(), body) else {
        return Ok(Err(Untried::NotCaptured));
    };
    Ok(trial::try_on(app.transforms.engine(), hooks, &captured).await)
}

/// Why a dry run was refused.
#[derive(Debug)]
pub enum DryRunError {
    /// The body or the filter, or the log or store failing.
    Api(ApiError),
    /// The candidate configuration, with every problem `hookgate check` would report.
    Candidate(Vec<ConfigError>),
}

impl From<ApiError> for DryRunError {
    fn from(err: ApiError) -> Self {
        DryRunError::Api(err)
    }
}

/// A refused candidate: `{ok: false, error, problems: [...]}`, each problem naming its key.
#[derive(Serialize)]
struct CandidateRefused {
    ok: bool,
    error: &'static str,
    problems: Vec<String>,
}

impl IntoResponse for DryRunError {
    fn into_response(self) -> Response {
        match self {
            DryRunError::Api(err) => err.into_response(),
            DryRunError::Candidate(problems) => (
                StatusCode::BAD_REQUEST,
                Json(CandidateRefused {
                    ok: false,
                    error: "the candidate configuration is invalid",
                    problems: problems.iter().map(ToString::to_string).collect(),
                }),
            )
                .into_response(),
        }
    }
}
