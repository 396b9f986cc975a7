//! The operator API: read access to the main session and to runs, behind the gateway token.

use axum::Json;
use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::auth::{presented_bearer, token_matches};
use super::client::client_address;
use super::reply::{HookError, json_error};

/// Events returned when `limit` is not given.
const DEFAULT_LIMIT: u32 = 100;
/// The most events one call returns.
const MAX_LIMIT: u32 = 1000;

/// Only `Authorization: Bearer <gateway.auth.token>` opens the API; with no gateway token
/// configured, nothing does. Failures count toward a lockout of their own, as for hooks.
fn authorize(app: &AppState, peer: SocketAddr, headers: &HeaderMap) -> Result<(), HookError> {
    let settings = app.config.current();
    let client = client_address(peer.ip(), headers, &settings.trusted_proxies);
    let now = Instant::now();
    match &settings.gateway_token {
        Some(expected) if token_matches(presented_bearer(headers), expected) => {
            app.api_limiter.clear(client);
            Ok(())
        }
        _ => {
            app.api_limiter
                .check(client, now)
                .map_err(|retry_after| HookError::LockedOut { retry_after })?;
            app.api_limiter.record_failure(client, now);
            Err(HookError::Unauthorized)
        }
    }
}

/// `GET /api/sessions/main/events?after=<seq>&limit=<n>`: the default agent's main session, in
/// commit order.
pub async fn main_session_events(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, HookError> {
    authorize(&app, peer, &headers)?;
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
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(run_id): Path<String>,
) -> Result<Response, HookError> {
    authorize(&app, peer, &headers)?;
    let run = app.store.run(&run_id).await?;
    Ok(match run {
        Some(run) => Json(run).into_response(),
        None => json_error(StatusCode::NOT_FOUND, "run not found"),
    })
}

/// `GET /api/config`: which configuration generation is in force and why the last change, if
/// any, was refused.
pub async fn config_status(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, HookError> {
    authorize(&app, peer, &headers)?;
    let mut status = serde_json::to_value(app.config.status()).unwrap_or_default();
    status["transforms"] = serde_json::to_value(app.transforms.status()).unwrap_or_default();
    Ok(Json(status).into_response())
}

/// `GET /api/runs?status=<s>&limit=<n>`: runs, newest first.
pub async fn runs(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, HookError> {
    authorize(&app, peer, &headers)?;
    let mut status = None;
    let mut limit = DEFAULT_LIMIT;
    for (name, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match &*name {
            "status" => status = Some(value.into_owned()),
            "limit" => limit = parse_limit(&value).map_err(HookError::Invalid)?,
            _ => {}
        }
    }
    let runs = app.store.runs(status, limit).await?;
    Ok(Json(json!({"runs": runs})).into_response())
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, HookError> {
    if !app.config.current().metrics_public {
        authorize(&app, peer, &headers)?;
    }
    if let Ok((by_status, waiting)) = app.store.gauges().await {
        // Statuses with no runs left drop out of the query: start from an empty family.
        app.metrics.runs.clear();
        for (status, count) in by_status {
            app.metrics
                .runs
                .get_or_create(&crate::metrics::StatusLabels { status })
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
