//! The operator API: read access to the main session and to runs, behind the gateway token.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use super::operator::Operator;
use super::reply::{HookError, json_error};
use crate::config::runtime::Route;
use crate::gateway::{RetryError, RunStatus};
use crate::hook::Channel;

/// Events returned when `limit` is not given.
const DEFAULT_LIMIT: u32 = 100;
/// The most events one call returns.
const MAX_LIMIT: u32 = 1000;

/// `GET /api/sessions/main/events?after=<seq>&limit=<n>`: the default agent's main session, in
/// commit order.
pub async fn main_session_events(
    _: Operator,
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, HookError> {
    let (after, limit) = page(query.as_deref()).map_err(HookError::Invalid)?;
    let agent = app.config.current().agents.default_id().to_string();
    let events = app.store.events(&agent, after, limit).await?;
    Ok(Json(json!({"events": events})).into_response())
}

fn page(query: Option<&str>) -> Result<(i64, u32), String> {
    let mut after = 0i64;
    let mut limit = DEFAULT_LIMIT;
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*name {
            "after" => {
                after = value
                    .parse()
                    .map_err(|_| "after must be an integer".to_string())?
            }
            "limit" => limit = parse_limit(&value)?,
            _ => {}
        }
    }
    Ok((after, limit))
}

/// `GET /api/runs/<runId>`: one run, 404 when unknown.
pub async fn run(
    _: Operator,
    State(app): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Response, HookError> {
    let run = app.store.run(&run_id).await?;
    Ok(match run {
        Some(run) => Json(run).into_response(),
        None => json_error(StatusCode::NOT_FOUND, "run not found"),
    })
}

/// `GET /api/config`: which configuration generation is in force and why the last change, if
/// any, was refused.
pub async fn config_status(
    _: Operator,
    State(app): State<AppState>,
) -> Result<Response, HookError> {
    let mut status = serde_json::to_value(app.config.status()).unwrap_or_default();
    status["transforms"] = serde_json::to_value(app.transforms.status()).unwrap_or_default();
    Ok(Json(status).into_response())
}

/// `GET /api/runs?status=<s>&limit=<n>`: runs, newest first.
pub async fn runs(
    _: Operator,
    State(app): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, HookError> {
    let mut status = None;
    let mut limit = DEFAULT_LIMIT;
    for (name, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match &*name {
            "status" => {
                status = Some(RunStatus::parse(&value).ok_or_else(|| {
                    let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
                    HookError::Invalid(format!("status must be one of: {}", known.join(", ")))
                })?)
            }
            "limit" => limit = parse_limit(&value).map_err(HookError::Invalid)?,
            _ => {}
        }
    }
    let runs = app.store.runs(status, limit).await?;
    Ok(Json(json!({"runs": runs})).into_response())
}

/// `POST /api/runs/<runId>/retry`: sends again what failed of a run (a relay the upstream
/// refused, a delivery given up), once the operator mended the cause. 404 for an unknown run,
/// 409 when nothing of it failed.
pub async fn retry_run(
    _: Operator,
    State(app): State<AppState>,
    Path(run_id): Path<String>,
) -> Result<Response, HookError> {
    match app.runtime.retry_run(&run_id).await {
        Ok(()) => Ok(Json(json!({"ok": true, "runId": run_id})).into_response()),
        Err(RetryError::NotFound) => Ok(json_error(StatusCode::NOT_FOUND, "run not found")),
        Err(err @ RetryError::NothingFailed) => {
            Ok(json_error(StatusCode::CONFLICT, &err.to_string()))
        }
        Err(RetryError::Store(err)) => Err(err.into()),
    }
}

/// `GET /api/sessions/main/route`: where `channel: last` replies and heartbeat replies go: the
/// route the operator set (`route`, null when none), else `channels.defaultRoute` (`default`).
pub async fn main_route(_: Operator, State(app): State<AppState>) -> Result<Response, HookError> {
    let settings = app.config.current();
    let route = app
        .runtime
        .owner_route(settings.agents.default_id())
        .await?;
    let default = settings.runtime.channels.default_route.clone();
    Ok(Json(json!({"route": route, "default": default})).into_response())
}

/// `PUT /api/sessions/main/route` with `{"channel": "<channel>", "to": "<recipient>"}` sets the
/// main session's route; `DELETE` clears it.
pub async fn set_main_route(
    _: Operator,
    State(app): State<AppState>,
    method: axum::http::Method,
    body: axum::body::Bytes,
) -> Result<Response, HookError> {
    let route = match method {
        axum::http::Method::DELETE => None,
        _ => Some(route_of(&super::body::parse_json(&body)?)?),
    };
    let agent = app.config.current().agents.default_id().to_string();
    app.runtime.set_owner_route(&agent, route.clone()).await?;
    Ok(Json(json!({"ok": true, "route": route})).into_response())
}

/// A route from a request body: a channel other than `last`, and an optional recipient.
fn route_of(body: &Value) -> Result<Route, HookError> {
    let invalid = |message: &str| HookError::Invalid(message.into());
    let channel = body["channel"]
        .as_str()
        .and_then(Channel::parse)
        .filter(|c| *c != Channel::Last)
        .ok_or_else(|| {
            invalid("channel must be whatsapp|telegram|discord|slack|mattermost|signal|imessage|msteams")
        })?;
    let to = match &body["to"] {
        Value::Null => None,
        Value::String(to) if !to.trim().is_empty() => Some(to.trim().to_string()),
        _ => return Err(invalid("to must be a non-blank string")),
    };
    Ok(Route { channel, to })
}

fn parse_limit(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_LIMIT).contains(n))
        .ok_or_else(|| format!("limit must be an integer from 1 to {MAX_LIMIT}"))
}

/// `GET /metrics`: the Prometheus text format; behind the gateway token unless
/// `gateway.metrics.public`.
pub async fn metrics(
    State(app): State<AppState>,
    request: axum::http::request::Parts,
) -> Result<Response, HookError> {
    if !app.config.current().metrics_public {
        Operator::authorize(&request, &app)?;
    }
    if let Ok((by_status, waiting)) = app.store.gauges().await {
        // Statuses with no runs left drop out of the query: start from an empty family.
        app.metrics.runs.clear();
        for (status, count) in by_status {
            app.metrics
                .runs
                .get_or_create(&crate::metrics::StatusLabels {
                    status: status.as_str().to_string(),
                })
                .set(count);
        }
        app.metrics.queue_depth.set(waiting);
    }
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response())
}
