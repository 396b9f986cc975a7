//! The HTTP surface: the router (a table of contents of every endpoint), the state handlers share,
//! and the headers every response carries.

mod api;
mod api_error;
mod api_held;
mod api_hooks;
mod api_outbound;
mod api_overview;
mod api_replay;
mod api_requests;
mod api_run_events;
mod api_runs_bulk;
mod api_spend;
mod auth;
mod body;
mod console;
mod credential;
mod dry_run;
pub mod edge;
pub mod edge_link;
mod evaluate;
mod filtered;
mod health;
mod hooks;
mod mapped;
mod mcp;
mod observe;
mod operator;
mod query_params;
mod reply;
mod request;
mod request_id;
mod request_query;
mod run_query;
mod serve;
mod signed;
mod submit;
mod trace;
mod write_deadline;

pub use api_runs_bulk::BulkAction;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{from_fn_with_state, map_response};
use axum::response::Response;
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;

pub use auth::AuthFailureLimiter;
/// Public so that the `payload` fuzz target reaches the very parsing every hook body goes through.
pub use body::parse_json;
pub use serve::serve;

use crate::config::LiveConfig;
use crate::gateway::{Runtime, Store};
use crate::metrics::Metrics;
use crate::request_log::RequestLog;
use crate::transform::TransformRegistry;

/// What every handler can reach: one pointer, cloned by every extractor and layer of every
/// request (an atomic increment; cloning the parts themselves was a tenth of intake's CPU).
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        AppState(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The parts of [`AppState`].
pub struct AppParts {
    pub config: LiveConfig,
    pub store: Store,
    /// Failed hook authentications.
    pub limiter: Arc<AuthFailureLimiter>,
    /// Failed operator API authentications, counted apart so neither locks out the other.
    pub api_limiter: Arc<AuthFailureLimiter>,
    /// Failed provider signatures, per client and mapping.
    pub signature_limiter: Arc<AuthFailureLimiter<signed::SignatureFailureKey>>,
    pub transforms: Arc<TransformRegistry>,
    /// Carries out what the hooks accept (or relays it, in forward mode).
    pub runtime: Arc<Runtime>,
    pub metrics: Metrics,
    /// Every hook request, accepted or not.
    pub request_log: RequestLog,
    /// One log line per request (`serve --access-log`).
    pub access_log: std::sync::atomic::AtomicBool,
    /// The store's last write probe, which `/readyz` shares for a second.
    pub write_probe: health::WriteProbe,
    /// Bulk replays, held in memory (docs/operations.md#replaying-in-bulk).
    pub replays: api_replay::ReplayJobs,
    /// The one dry run that may run at a time.
    pub dry_runs: dry_run::DryRunGate,
    /// An edge's queue (docs/edge.md); `None` on every other node.
    pub edge_queue: Option<crate::gateway::edge_queue::EdgeQueue>,
    /// A private node's view of its link to the edge; idle on every other node.
    pub edge_link: edge_link::LinkWatch,
    /// Mappings made at runtime (docs/subscriptions.md).
    pub subscriptions: Arc<crate::subscription::Subscriptions>,
}

/// Every route of the server. Hooks live under a configurable, reloadable prefix, so their
/// routes ([`hooks::routes`]) are served by the fallback, which takes off the prefix of the
/// configuration in force.
pub fn router(state: AppState) -> Router {
    let hooks = hooks::routes(state.clone());
    Router::new()
        .route("/livez", get(health::livez))
        .route("/healthz", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(api::metrics))
        .route("/console", get(console::page))
        .route("/console/console.js", get(console::script))
        .route("/console/replay.js", get(console::replay_script))
        .route("/console/runs_bulk.js", get(console::runs_bulk_script))
        .route("/console/overview.js", get(console::overview_script))
        .route("/console/console.css", get(console::style))
        .route("/console/overview.css", get(console::overview_style))
        .route("/console/hooks.js", get(console::hooks_script))
        .route("/console/outbound.js", get(console::outbound_script))
        .route("/edge/pull", get(edge::pull))
        .route("/edge/ack", post(edge::ack))
        .nest("/api", operator_api(state.clone()))
        .merge(mcp::routes(state.clone()))
        .fallback(move |State(app): State<AppState>, request: Request| {
            hooks::dispatch(app, hooks.clone(), request)
        })
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(state.clone(), observe::observe))
        .layer(map_response(security_headers))
        .with_state(state)
}

/// The operator API: every endpoint, and every path under `/api` it does not have, behind the
/// gateway token, with JSON errors.
fn operator_api(state: AppState) -> Router<AppState> {
    operator_routes()
        .fallback(api_error::no_such_endpoint)
        .method_not_allowed_fallback(api_error::method_not_allowed)
        .layer(from_fn_with_state(state, operator::require_operator))
}

/// The operator API's endpoints, without the credential in front of them: what the MCP tools
/// call (`mcp::dispatch`) once their own credential and scope are checked.
fn operator_routes() -> Router<AppState> {
    Router::new()
        .route("/requests", get(api_requests::requests))
        .route("/requests/dry-run", post(dry_run::dry_run))
        .route("/requests/{id}", get(api_requests::request))
        .route("/requests/{id}/replay", post(api_requests::replay))
        .route("/requests/replay", post(api_replay::start))
        .route(
            "/requests/replays/{id}",
            get(api_replay::progress).delete(api_replay::cancel),
        )
        .route("/runs", get(api::runs))
        .route("/runs/release", post(api_runs_bulk::release))
        .route("/runs/cancel", post(api_runs_bulk::cancel))
        .route("/runs/retry", post(api_runs_bulk::retry))
        .route("/runs/{run_id}", get(api::run))
        .route("/runs/{run_id}/retry", post(api::retry_run))
        .route("/runs/{run_id}/events", get(api_run_events::run_events))
        .route("/runs/{run_id}/release", post(api_held::release))
        .route("/runs/{run_id}/cancel", post(api_held::cancel))
        .route("/sessions/main/events", get(api::main_session_events))
        .route("/outbound", get(api_outbound::list))
        .route("/outbound/{id}/retry", post(api_outbound::retry))
        .route(
            "/sessions/main/route",
            get(api::main_route)
                .put(api::set_main_route)
                .delete(api::set_main_route),
        )
        .route("/config", get(api::config_status))
        .route("/spend", get(api_spend::spend))
        .route("/overview", get(api_overview::overview))
        .route("/hooks", get(api_hooks::list).post(api_hooks::create))
        .route(
            "/hooks/{name}",
            get(api_hooks::show).delete(api_hooks::delete),
        )
        .route("/hooks/{name}/{action}", post(api_hooks::act))
        .route("/audit", get(api_hooks::audit))
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    reply::json_error(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "internal error",
    )
}
