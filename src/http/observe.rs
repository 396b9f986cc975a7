//! Request metrics: latency by route template and status, and hook outcomes by hook name. Route
//! and hook labels come from the configuration, never from the raw URL, so a client cannot
//! create new time series.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;
use super::hooks::HookLabel;

/// Times the request and counts hook outcomes, under the labels the hook handler decided.
pub async fn observe(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let matched = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let hook = response.extensions().get::<HookLabel>().cloned();
    let route = match (matched, &hook) {
        (Some(path), _) => path,
        (None, Some(label)) => label.route.clone(),
        (None, None) => "<unmatched>".to_string(),
    };
    app.metrics
        .observe_request(route, status, started.elapsed());
    if let Some(label) = hook {
        app.metrics.count_hook(label.hook, status);
    }
    response
}
