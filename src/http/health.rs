//! Liveness and readiness, without authentication, for load balancers and orchestrators.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use super::reply::json_error;
use crate::gateway::{Store, StoreError};

/// How long a write that succeeded answers for: `/readyz` needs no credential, so however often
/// it is asked, a writable store syncs for it at most once in this long.
const PROBE_FOR: Duration = Duration::from_secs(1);

/// When the store last took a probe's write. Probes that arrive while one is being made wait
/// for it, and share it when it succeeded; a failure is not remembered, so that the probe after
/// it sees a store that recovered at once.
#[derive(Default)]
pub struct WriteProbe(tokio::sync::Mutex<Option<Instant>>);

/// What a write probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probed {
    Writable,
    /// [`StoreError::Full`].
    Full,
    NotWritable,
}

impl WriteProbe {
    /// What `store` answers to a write now, unless it took one less than [`PROBE_FOR`] ago.
    async fn check(&self, store: &Store) -> Probed {
        let mut last_written = self.0.lock().await;
        if last_written.is_some_and(|at| at.elapsed() < PROBE_FOR) {
            return Probed::Writable;
        }
        match store.probe().await {
            Ok(()) => {
                *last_written = Some(Instant::now());
                Probed::Writable
            }
            // The store's writer logs a full disk, once a minute at most: not per probe here.
            Err(StoreError::Full) => Probed::Full,
            Err(err) => {
                tracing::warn!(%err, "readiness probe: store not writable");
                Probed::NotWritable
            }
        }
    }
}

/// The answer of a probe that passed: `{"ok": true}`.
#[derive(Serialize)]
pub struct Healthy {
    ok: bool,
}

const HEALTHY: Healthy = Healthy { ok: true };

/// `GET /livez`: 200 while the server is serving at all.
pub async fn livez() -> Json<Healthy> {
    Json(HEALTHY)
}

/// `GET /readyz`: 200 when a configuration is loaded, the store commits a write (on a NATS
/// store: the view does, the cluster is connected, and the view has caught up with what the
/// stream held when the node started) and every runtime worker is alive; else 503 saying which
/// is not (`store full` when the state directory's file system has no room). Costs one small
/// synced write (`Store::probe`) a second at most while the store is writable.
pub async fn readyz(State(app): State<AppState>) -> Response {
    match app.write_probe.check(&app.store).await {
        Probed::Writable => {}
        Probed::Full => return json_error(StatusCode::SERVICE_UNAVAILABLE, "store full"),
        Probed::NotWritable => {
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
    Json(HEALTHY).into_response()
}
