//! `POST /api/requests/dry-run` (docs/operations.md#trying-a-change-on-recorded-traffic): a
//! candidate configuration, checked as `hookgate check` checks a file, tried on the recorded
//! requests a filter selects, oldest first, at most [`MAX_REQUESTS`] and for at most
//! [`TIME_LIMIT`], one dry run at a time, off the async workers. Each captured request
//! goes through the candidate's mappings, templates, transforms and policies as the live path
//! would take it ([`super::evaluate`], [`crate::intake::preview`]), and nothing of it is
//! stored: no event, no run, no delivery, no idempotency key, no lockout, no request record.

mod gate;
mod report;
mod trial;

use std::borrow::Cow;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use self::gate::DryRunGate;
use self::gate::{Admitted, Busy, TIME_LIMIT};
use self::report::{Then, Totals, Trial, Untried};
use self::trial::Captured;
use super::AppState;
use super::api_error::ApiError;
use super::api_requests::{find, header_map};
use super::hooks::repeat_of_record;
use super::reply::json_error;
use super::request_query::RequestsQuery;
use crate::config::{self, ConfigError, HookSettings, Settings};
use crate::gateway::requests::{self, ListOrder, RequestFilter, RequestRecord};
use crate::mapping::RenderLimit;
use crate::transform::TransformLimits;

/// The most requests one dry run tries; the answer's `next` continues past them.
pub const MAX_REQUESTS: usize = 10_000;

/// How many records are read from the log at a time.
const PAGE: u32 = 500;

/// The body of `POST /api/requests/dry-run`. Its JSON Schema is what the MCP tool `dry_run`
/// shows an agent.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(in crate::http) struct DryRunBody {
    /// The whole candidate configuration file's text, JSON5 (as `hookgate.json5` holds it).
    config: String,
    /// Replaces the candidate's `hooks.transformsDir` (confined as that key is).
    transforms_dir: Option<String>,
    /// Which recorded requests to try, oldest first: the filters of the request log, but
    /// `before`.
    #[serde(default)]
    filter: RequestsQuery,
    /// Continues a dry run that stopped at this request (its answer's `next`).
    after: Option<String>,
    /// Stop trying requests sooner than the server's limit (30 s), in milliseconds.
    time_limit_ms: Option<u64>,
}

impl DryRunBody {
    /// How long this dry run may try requests: its `timeLimitMs`, at most [`TIME_LIMIT`].
    fn time_limit(&self) -> Result<Duration, ApiError> {
        let Some(ms) = self.time_limit_ms else {
            return Ok(TIME_LIMIT);
        };
        let limit = Duration::from_millis(ms);
        if ms == 0 || limit > TIME_LIMIT {
            return Err(ApiError::Invalid(format!(
                "timeLimitMs: must be 1 to {}",
                TIME_LIMIT.as_millis()
            )));
        }
        Ok(limit)
    }
}

/// Tries the candidate of the body on the selected requests; answers each request's then and
/// now, and the totals. 400 for a body, filter or candidate that is invalid, the candidate's
/// problems listed as `hookgate check` lists them (keys named, values never shown); 429 with
/// `Retry-After` while another dry run runs ([`gate`]). Its transform calls are held to the
/// bounds the configuration in force grants ([`HookSettings::grantable_limits`]), and it
/// stops trying requests at its time limit, its answer saying so. Runs on a blocking thread,
/// never on the async workers: loading may compile components, and rendering and transform
/// calls take CPU. Costs one read of the log per captured request and, per request, what the
/// live path costs before admission commits (transform calls included); transforms the
/// candidate names are compiled (or found in the compile cache) once per dry run.
pub async fn dry_run(State(app): State<AppState>, body: Bytes) -> Result<Response, DryRunError> {
    let body: DryRunBody = serde_json::from_slice(&body)
        .map_err(|e| ApiError::Invalid(format!("invalid dry-run body: {e}")))?;
    let time_limit = body.time_limit()?;
    if body.filter.continues_a_listing() {
        return Err(ApiError::Invalid(
            "filter.before: a dry run takes requests oldest first; continue one with after".into(),
        )
        .into());
    }
    let mut filter = body.filter.filter()?;
    filter.order = ListOrder::OldestFirst;
    filter.cursor = body.after.clone();
    filter.limit = PAGE;
    let admitted = app.dry_runs.admit(time_limit)?;
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let candidate = candidate(&app, &body.config, body.transforms_dir.as_deref())?;
        runtime.block_on(trials(&app, candidate, filter, &admitted))
    })
    .await
    .map_err(|e| ApiError::Internal(Box::new(e)))?
}

/// Why a dry run stopped before the last request its filter selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
enum Stopped {
    /// It tried [`MAX_REQUESTS`].
    Requests,
    /// It ran for its time limit.
    TimeLimit,
}

/// Tries `candidate` on the requests `filter` selects, until they end, [`MAX_REQUESTS`] are
/// tried or `admitted`'s deadline passes: a request still being tried then is dropped, its
/// transform call with it (a call's future owns its store and instance), and left to `next`.
async fn trials(
    app: &AppState,
    candidate: Settings,
    mut filter: RequestFilter,
    admitted: &Admitted,
) -> Result<Response, DryRunError> {
    let hooks = candidate.hooks.as_ref().ok_or_else(|| {
        DryRunError::Candidate(vec![ConfigError::invalid(
            "hooks.enabled",
            "must be true for a dry run: a candidate without hooks answers nothing",
        )])
    })?;
    let mut totals = Totals::default();
    let mut trials = Vec::new();
    let mut stopped = None;
    'pages: loop {
        let page = app
            .request_log
            .page(filter.clone())
            .await
            .map_err(ApiError::from)?;
        let full = page.len() == PAGE as usize;
        for record in page {
            stopped = if trials.len() == MAX_REQUESTS {
                Some(Stopped::Requests)
            } else if Instant::now() >= admitted.deadline {
                Some(Stopped::TimeLimit)
            } else {
                None
            };
            if stopped.is_some() {
                break 'pages;
            }
            let left = admitted.deadline.saturating_duration_since(Instant::now());
            let Ok(trial) = tokio::time::timeout(left, try_record(app, hooks, record)).await else {
                stopped = Some(Stopped::TimeLimit);
                break 'pages;
            };
            let trial = trial?;
            totals.count(&trial);
            trials.push(trial);
        }
        if !full {
            break;
        }
        filter.cursor = trials.last().map(|t: &Trial| t.id.clone());
    }
    // A stop leaves a request untried: the answer continues after the last one tried.
    let next = stopped.and(trials.last().map(|t| t.id.clone()).or(filter.cursor));
    if stopped == Some(Stopped::TimeLimit) {
        tracing::info!(tried = trials.len(), "dry run stopped at its time limit");
    }
    Ok(Json(DryRun {
        ok: true,
        totals,
        requests: trials,
        next,
        stopped,
    })
    .into_response())
}

/// The answer of `POST /api/requests/dry-run`.
#[derive(Serialize)]
struct DryRun {
    ok: bool,
    totals: Totals,
    requests: Vec<Trial>,
    /// When more requests matched than this dry run tried: the `after` that continues.
    next: Option<String>,
    /// Why it stopped before the last request that matched, when it did.
    stopped: Option<Stopped>,
}

/// The candidate `text`, validated, with its transforms loaded apart from those in force and
/// their bounds, and its render bound, held to what the configuration in force grants (a
/// candidate's larger `hooks.maxBodyBytes` renders no more than the live one admits). Its
/// `${NAME}` references read its own `env.vars` and never the server's environment (any other
/// name reads `[env NAME]`): a dry run checks no signature and sends nothing, so it needs no
/// real secret, and its answer shows what the candidate's strings hold. Its secret files are confined to the configuration
/// directory (`config::load_candidate`). Blocks: loading may compile components.
fn candidate(
    app: &AppState,
    text: &str,
    transforms_dir: Option<&str>,
) -> Result<Settings, DryRunError> {
    let config_dir = config::config_dir(app.config.path());
    let text = with_transforms_dir(text, transforms_dir);
    let mut settings =
        config::load_candidate(&text, &config_dir).map_err(DryRunError::Candidate)?;
    config::candidate_transforms(&app.transforms, &settings).map_err(DryRunError::Candidate)?;
    let live = app.config.current();
    let ceiling = live
        .hooks
        .as_ref()
        .map_or_else(TransformLimits::default, HookSettings::grantable_limits);
    let render_ceiling = live
        .hooks
        .as_ref()
        .map_or(RenderLimit::FLOOR, |hooks| hooks.render_limit);
    if let Some(hooks) = settings.hooks.as_mut() {
        hooks.hold_limits_within(&ceiling);
        hooks.render_limit = hooks.render_limit.within(render_ceiling);
    }
    Ok(settings)
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
    hooks: &HookSettings,
    record: RequestRecord,
) -> Result<Trial, ApiError> {
    let mut runs = Vec::with_capacity(record.run_ids.len());
    for run_id in &record.run_ids {
        runs.extend(app.store.run(run_id).await?);
    }
    let then = Then::of(&record, &runs);
    let now = if record.status == StatusCode::UNAUTHORIZED.as_u16() {
        Err(Untried::Unauthenticated)
    } else if repeat_of_record(&record).is_some() {
        Err(Untried::Repeat)
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
    hooks: &HookSettings,
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
    /// Another dry run is running.
    Busy(Busy),
}

impl From<Busy> for DryRunError {
    fn from(busy: Busy) -> Self {
        DryRunError::Busy(busy)
    }
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
            DryRunError::Busy(Busy { retry_after }) => {
                let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
                let mut response = json_error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "a dry run is running; retry later",
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                response
            }
        }
    }
}
