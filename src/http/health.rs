//! Liveness and readiness, without authentication, for load balancers and orchestrators.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::reply::json_error;

/// `GET /livez`: 200 while the server is serving at all.
pub async fn livez() -> Json<serde_json::Value> {
    Json(json!({"ok": true}))
}

/// `GET /readyz`: 200 when a configuration is loaded and the store commits a write, else 503.
pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.store.probe().await {
        Ok(()) => Json(json!({"ok": true})).into_response(),
        Err(err) => {
            tracing::warn!(%err, "readiness probe: store not writable");
            json_error(StatusCode::SERVICE_UNAVAILABLE, "store not writable")
        }
    }
}
