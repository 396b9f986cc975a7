//! The first layer every request meets: its id ([`RequestId`], answered as `X-Request-Id`), its
//! metrics, and with `--access-log` one log line. Metric labels come from the configuration,
//! never from the raw URL (route templates, known hook names), so a client cannot create new
//! time series.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;
use super::filtered::Filtered;
use super::hooks::HookLabel;
use super::reply::{HookError, Refused};
use super::request_id::{RequestId, X_REQUEST_ID};
use crate::metrics::HookOutcome;

/// Names the request, times it, counts hook outcomes under the labels the hook dispatcher
/// decided, and writes the access log line.
pub async fn observe(State(app): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = RequestId::of(request.headers());
    request.extensions_mut().insert(id.clone());
    let matched = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string());
    // Read only when the line is written: most servers run without it.
    let access = app.access_log.load(Ordering::Relaxed).then(|| {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer);
        let client = peer.and_then(|peer| {
            app.config
                .current()
                .trusted_proxies
                .client(peer.ip(), request.headers())
        });
        (
            request.method().clone(),
            request.uri().path().to_string(),
            client,
        )
    });
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(X_REQUEST_ID, id.header_value());
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    let hook = response.extensions().get::<HookLabel>().cloned();
    let route = match (matched, &hook) {
        (Some(path), _) => path,
        (None, Some(label)) => label.route.clone(),
        (None, None) => "<unmatched>".to_string(),
    };
    if let Some((method, path, client)) = access {
        // The path only: a query could carry what a log must not keep.
        let client = client.map_or_else(|| "-".to_string(), |c| c.to_string());
        tracing::info!(
            target: "hookgate::access",
            id = id.as_str(),
            %client,
            %method,
            %path,
            status,
            ms = elapsed.as_secs_f64() * 1000.0,
            "access"
        );
    }
    app.metrics.observe_request(route, status, elapsed);
    if let Some(label) = hook {
        app.metrics.count_hook(label.hook, hook_outcome(&response));
    }
    response
}

/// How a hook request ended: what its answer's extensions say (filtered, refused by a limit),
/// else what its status does.
fn hook_outcome(response: &Response) -> HookOutcome {
    let extensions = response.extensions();
    if extensions.get::<Filtered>().is_some() {
        return HookOutcome::Filtered;
    }
    if let Some(Refused(refusal)) = extensions.get::<Refused>()
        && matches!(**refusal, HookError::LimitReached(_))
    {
        return HookOutcome::Limited;
    }
    HookOutcome::of_status(response.status().as_u16())
}
