//! The HTTP surface: the router (a table of contents of every endpoint), the state handlers share,
//! and the headers every response carries.

mod api;
mod auth;
mod body;
mod health;
mod hooks;
mod mapped;
mod observe;
mod operator;
mod reply;
mod request;
mod serve;
mod signed;
mod submit;
mod write_deadline;

use std::sync::Arc;

use axum::Router;
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
}

/// Every route of the server. Hooks live under a configurable, reloadable prefix, so they are
/// served by the fallback, which checks the prefix of the configuration in force.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::readyz))
        .route("/api/sessions/main/events", get(api::main_session_events))
        .route("/api/runs", get(api::runs))
        .route(
            "/api/sessions/main/route",
            get(api::main_route)
                .put(api::set_main_route)
                .delete(api::set_main_route),
        )
        .route("/api/runs/{run_id}", get(api::run))
        .route("/api/runs/{run_id}/retry", post(api::retry_run))
        .route("/api/config", get(api::config_status))
        .route("/metrics", get(api::metrics))
        .fallback(hooks::dispatch)
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(from_fn_with_state(state.clone(), observe::observe))
        .layer(map_response(security_headers))
        .with_state(state)
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
