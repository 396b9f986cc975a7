//! Liveness and readiness, without authentication, for load balancers and orchestrators.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::reply::json_error;
use crate::gateway::StoreError;

/// `GET /livez`: 200 while the server is serving at all.
pub async fn livez() -> Json<serde_json::Value> {
    Json(json!({"ok": true}))
}

/// `GET /readyz`: 200 when a configuration is loaded, the store commits a write (on a NATS
/// store: the view does, the cluster is connected, and the view has caught up with what the
/// stream held when the node started) and every runtime worker is alive; else 503 saying which
/// is not (`store full` when the state directory's file system has no room). Costs one small
/// synced write (`Store::probe`).
pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.store.probe().await {
        Ok(()) => {}
        // The store's writer logs a full disk, once a minute at most: not once per probe here.
        Err(StoreError::Full) => return json_error(StatusCode::SERVICE_UNAVAILABLE, "store full"),
        Err(err) => {
            tracing::warn!(%err, "readiness probe: store not writable");
            return json_error(StatusCode::SERVICE_UNAVAILABLE, "store not writable");
        }
    }
    if let Some(cluster) = app.runtime.cluster() {
        if !cluster.connected() {
            tracing::warn!("readiness probe: not connected to NATS");
            return json_error(StatusCode::SERVICE_UNAVAILABLE, "store not reachable");
        }
        if !cluster.caught_up() {
            return json_error(StatusCode::SERVICE_UNAVAILABLE, "view catching up");
        }
    }
    let dead = app.runtime.dead_workers();
    if !dead.is_empty() {
        tracing::error!(?dead, "readiness probe: runtime workers stopped");
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("runtime workers stopped: {}", dead.join(", ")),
        );
    }
    Json(json!({"ok": true})).into_response()
}
