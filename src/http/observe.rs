//! Request metrics: latency by route template and status, and hook outcomes by hook name. Route
//! and hook labels come from the configuration, never from the raw URL, so a client cannot
//! create new time series.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;
use crate::config::Settings;

/// Times the request and counts hook outcomes.
pub async fn observe(State(app): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let matched = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    let hook = match &matched {
        Some(_) => None,
        None => hook_label(&app.config.current(), request.uri().path()),
    };
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let route = match (&matched, &hook) {
        (Some(path), _) => path.clone(),
        (None, Some((route, _))) => route.clone(),
        (None, None) => "<unmatched>".to_string(),
    };
    app.metrics
        .observe_request(route, status, started.elapsed());
    if let Some((_, name)) = hook {
        app.metrics.count_hook(name, status);
    }
    response
}

/// For a path under the hook prefix: the route template and the hook name label. Names that no
/// route or mapping knows are `<unknown>`.
fn hook_label(settings: &Settings, path: &str) -> Option<(String, String)> {
    let hooks = settings.hooks.as_ref()?;
    let rest = path.strip_prefix(&hooks.path)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let name = rest.trim_start_matches('/');
    let known =
        matches!(name, "wake" | "agent") || hooks.mappings.iter().any(|m| m.path() == Some(name));
    let label = if known { name } else { "<unknown>" };
    Some((format!("{}/{label}", hooks.path), label.to_string()))
}
