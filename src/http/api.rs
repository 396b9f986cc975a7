//! The operator API (docs/operations.md#operator-api): the main session, runs and the
//! configuration in force, behind the gateway token (the `/api` router's layer). The request log's
//! endpoints are in `api_requests`.

use crate::gateway::outbound_api::{self, OutboundRecord};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::api_error::{ApiError, ApiPath, ApiQuery};
use super::operator::Operator;
use super::query_params::limit;
use super::reply::HookError;
use super::run_query::RunsQuery;
use crate::config::ReloadStatus;
use crate::config::runtime::Route;
use crate::gateway::{EventRecord, Retry, RetryError, RunRecord, RunStatus};
use crate::hook::Channel;
use crate::transform::{TransformFailure, TransformStatus};

/// `after` and `limit` of the main session's events, or `latest`. Numbers are read as text and
/// checked here, so that a refusal names the parameter and what it takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    after: Option<String>,
    limit: Option<String>,
    latest: Option<String>,
}

/// `GET /api/sessions/main/events?after=<seq>&limit=<n>`: the default agent's main session, in
/// commit order; with `latest=true` instead of `after`, its newest `limit` events.
pub async fn main_session_events(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let limit = limit(query.limit.as_deref())?;
    let after = match (query.after, query.latest.as_deref()) {
        (None, Some("true")) => None,
        (Some(_), Some(_)) => {
            return Err(ApiError::Invalid(
                "after and latest exclude each other".into(),
            ));
        }
        (_, Some(_)) => return Err(ApiError::Invalid("latest must be true".into())),
        (None, None) => Some(0),
        (Some(after), None) => Some(
            after
                .parse()
                .map_err(|_| ApiError::Invalid("after must be an integer".into()))?,
        ),
    };
    let agent = app.config.current().agents.default_id().to_string();
    let events = app.store.events(&agent, after, limit).await?;
    Ok(Json(Events { events }).into_response())
}

/// The answer of `GET /api/sessions/main/events`.
#[derive(Serialize)]
struct Events {
    events: Vec<EventRecord>,
}

/// `GET /api/runs/<runId>`: one run, 404 when unknown.
pub async fn run(
    State(app): State<AppState>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let run = app.store.run(&run_id).await?;
    let run = run.ok_or(ApiError::NotFound("run"))?;
    let mut view = RunView::of(&app, run);
    view.outbound = outbound_api::of_run(&app.store, run_id).await?;
    Ok(Json(view).into_response())
}

/// A run as the API shows it: the record, and what `POST /api/runs/<runId>/retry` would do to
/// it (null: nothing), so that a client offers a retry only where one is taken; one run's view
/// adds its callbacks and lifecycle webhooks, when it has any (docs/outbound.md).
#[derive(Serialize)]
struct RunView {
    #[serde(flatten)]
    run: RunRecord,
    retry: Option<Retry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    outbound: Vec<OutboundRecord>,
}

impl RunView {
    fn of(app: &AppState, run: RunRecord) -> RunView {
        RunView {
            retry: app.runtime.retry_offered(&run),
            run,
            outbound: Vec::new(),
        }
    }
}

/// The answer to a retry: what it did.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Retried {
    ok: bool,
    run_id: String,
    retried: Retry,
}

/// `GET /api/config`: which configuration generation is in force and why the last change, if
/// any, was refused; and each transform's load state.
pub async fn config_status(State(app): State<AppState>) -> Result<Response, ApiError> {
    let status = ConfigStatus {
        reload: app.config.status(),
        transforms: app.transforms.status(),
    };
    Ok(Json(status).into_response())
}

/// The answer of `GET /api/config`: the reload status's fields, then `transforms`.
#[derive(Serialize)]
struct ConfigStatus {
    #[serde(flatten)]
    reload: ReloadStatus,
    transforms: Vec<TransformStatus>,
}

/// `GET /api/runs?status=&hook=&mapping=&agent=&sessionKey=&since=&before=&limit=`: runs,
/// newest first, and `next`, the `before` of the next page (null on the last).
pub async fn runs(
    State(app): State<AppState>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<Response, ApiError> {
    let filter = query.filter()?;
    let full = filter.limit as usize;
    let page = app.store.runs(filter).await?;
    let next = (page.len() == full)
        .then(|| page.last().map(|(_, cursor)| cursor.to_string()))
        .flatten();
    let runs: Vec<_> = page
        .into_iter()
        .map(|(run, _)| RunView::of(&app, run))
        .collect();
    Ok(Json(RunsPage { runs, next }).into_response())
}

/// The answer of `GET /api/runs`: a page, and the cursor of the next one.
#[derive(Serialize)]
struct RunsPage {
    runs: Vec<RunView>,
    next: Option<String>,
}

/// `POST /api/runs/<runId>/retry`: recovers what failed of a run once the operator mended the
/// cause: a failed turn runs again, a relay the upstream refused or a delivery given up is sent
/// again. 404 for an unknown run, 409 when nothing of it failed.
pub async fn retry_run(
    State(app): State<AppState>,
    ApiPath(run_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    match app.runtime.retry_run(&run_id).await {
        Ok(retried) => Ok(Json(Retried {
            ok: true,
            run_id,
            retried,
        })
        .into_response()),
        Err(RetryError::NotFound) => Err(ApiError::NotFound("run")),
        Err(err @ RetryError::NothingFailed) => Err(ApiError::Conflict(err.to_string())),
        Err(RetryError::Store(err)) => Err(err.into()),
    }
}

/// `GET /api/sessions/main/route`: where `channel: last` replies and heartbeat replies go: the
/// route the operator set (`route`, null when none), else `channels.defaultRoute` (`default`).
pub async fn main_route(State(app): State<AppState>) -> Result<Response, ApiError> {
    let settings = app.config.current();
    let route = app
        .runtime
        .owner_route(settings.agents.default_id())
        .await?;
    let default = settings.runtime.channels.default_route.clone();
    Ok(Json(MainRoute { route, default }).into_response())
}

/// The answer of `GET /api/sessions/main/route`.
#[derive(Serialize)]
struct MainRoute {
    /// The route the operator set.
    route: Option<Route>,
    /// `channels.defaultRoute`.
    default: Option<Route>,
}

/// The answer of `PUT` and `DELETE /api/sessions/main/route`: the route now in force.
#[derive(Serialize)]
struct RouteSet {
    ok: bool,
    route: Option<Route>,
}

/// `PUT /api/sessions/main/route` with `{"channel": "<channel>", "to": "<recipient>"}` sets the
/// main session's route; `DELETE` clears it.
pub async fn set_main_route(
    State(app): State<AppState>,
    method: axum::http::Method,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let route = match method {
        axum::http::Method::DELETE => None,
        _ => Some(route_of(
            &super::body::parse_json(&body).map_err(ApiError::from)?,
        )?),
    };
    let agent = app.config.current().agents.default_id().to_string();
    app.runtime.set_owner_route(&agent, route.clone()).await?;
    Ok(Json(RouteSet { ok: true, route }).into_response())
}

/// A route from a request body: a channel other than `last`, and an optional recipient.
fn route_of(body: &Value) -> Result<Route, ApiError> {
    let invalid = |message: &str| ApiError::Invalid(message.into());
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

/// Shows at 0 the series of what the configuration names that the alert rules read: each
/// hook's failed requests, each transform's calls and failures. At each scrape, so that a
/// reload's new mappings show at the next one; a series once shown stays, like a counted one.
fn show_configured(app: &AppState) {
    let settings = app.config.current();
    let Some(hooks) = settings.hooks.as_ref() else {
        return;
    };
    for hook in ["wake", "agent"] {
        app.metrics.show_hook(hook);
    }
    for mapping in &hooks.mappings {
        if let Some(path) = mapping.path() {
            app.metrics.show_hook(path);
        }
        if mapping.transform.is_some() {
            app.metrics
                .show_transform(&mapping.id, &TransformFailure::CAUSES);
        }
    }
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
        // Every status, 0 when the query has none: an alert on the change of one
        // (contrib/prometheus-alerts.yml) then sees its first run too.
        for status in RunStatus::ALL {
            let count = by_status
                .iter()
                .find_map(|&(counted, count)| (counted == status).then_some(count));
            app.metrics
                .runs
                .get_or_create(&crate::metrics::StatusLabels {
                    status: status.as_str().to_string(),
                })
                .set(count.unwrap_or(0));
        }
        app.metrics.queue_depth.set(waiting);
    }
    show_configured(&app);
    if let Some(queue) = &app.edge_queue
        && let Ok(link) = queue.status().await
    {
        app.metrics.edge.show(&link);
    }
    if let Ok(by_mapping) = app.store.queued_by_mapping().await {
        // A mapping whose queue drained drops out of the query: start from an empty family.
        app.metrics.lane_queued.clear();
        for (mapping, queued) in by_mapping {
            app.metrics
                .lane_queued
                .get_or_create(&crate::metrics::MappingLabels { mapping })
                .set(queued);
        }
    }
    app.metrics.process.sample();
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response())
}
