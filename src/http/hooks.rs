//! The hook endpoint: the request pipeline of behaviour §2, in its order, then `/wake` and `/agent`.

use std::net::SocketAddr;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, request::Parts};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use uuid::Uuid;

use super::AppState;
use super::auth::{presented_token, token_matches};
use super::body::{parse_json, read_limited};
use super::client::client_address;
use super::reply::HookError;
use crate::config::{HookSettings, Settings};
use crate::gateway::{EventKind, IdempotencyClaim, NewEvent, NewRun, RunQueued};
use crate::hook::envelope::wrap_prompt;
use crate::hook::policy::KeyOrigin;
use crate::hook::{WakeMode, idempotency, payload};

/// Serves every path the router does not know: hooks under the configured prefix, 404 elsewhere.
pub async fn dispatch(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let settings = app.config.current();
    match handle(&app, &settings, peer, request).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn handle(
    app: &AppState,
    settings: &Settings,
    peer: SocketAddr,
    request: Request,
) -> Result<Response, HookError> {
    let hooks = settings.hooks.as_ref().ok_or(HookError::NotFound)?;
    let (parts, body) = request.into_parts();
    let rest = under_prefix(parts.uri.path(), &hooks.path).ok_or(HookError::NotFound)?;
    if query_names_token(parts.uri.query()) {
        return Err(HookError::QueryToken);
    }
    if parts.method != Method::POST {
        return Err(HookError::MethodNotAllowed);
    }
    authenticate(app, settings, hooks, peer, &parts.headers)?;
    let name = rest.trim_start_matches('/');
    if name.is_empty() {
        return Err(HookError::NotFound);
    }
    let bytes = read_limited(
        &parts.headers,
        body,
        hooks.max_body_bytes,
        hooks.body_timeout,
    )
    .await?;
    let payload = parse_json(&bytes)?;
    match name {
        "wake" => wake(app, settings, &payload).await,
        "agent" => agent(app, hooks, &parts, &payload).await,
        _ => Err(HookError::NotFound),
    }
}

/// The part of `path` after `prefix` when `path` is the prefix or below it; case-sensitive and not
/// percent-decoded, so `/hooks%2Fwake` is not `/hooks/wake`.
fn under_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Whether any query parameter is named `token` (decoded, any case): a token in a URL ends up in
/// proxy and server logs, so it is refused whatever its value.
fn query_names_token(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes())
            .any(|(name, _)| name.trim().eq_ignore_ascii_case("token"))
    })
}

fn authenticate(
    app: &AppState,
    settings: &Settings,
    hooks: &HookSettings,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<(), HookError> {
    let client = client_address(peer.ip(), headers, &settings.trusted_proxies);
    let now = Instant::now();
    if token_matches(presented_token(headers), &hooks.token) {
        app.limiter.clear(client);
        return Ok(());
    }
    if let Err(retry_after) = app.limiter.check(client, now) {
        return Err(HookError::LockedOut { retry_after });
    }
    app.limiter.record_failure(client, now);
    tracing::info!(%client, "hook authentication failed");
    Err(HookError::Unauthorized)
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn internal(err: impl std::fmt::Display) -> HookError {
    HookError::Internal(err.to_string())
}

/// `POST {prefix}/wake`: a durable system event for the default agent's main session.
async fn wake(app: &AppState, settings: &Settings, payload: &Value) -> Result<Response, HookError> {
    let wake = payload::wake_request(payload)?;
    let event = NewEvent {
        agent: settings.agents.default_id().to_string(),
        kind: EventKind::System,
        text: wake.text,
        trusted: false,
        source: "hook:wake".into(),
        at: now_rfc3339(),
    };
    let seq = app.store.append_event(event).await.map_err(internal)?;
    if wake.mode == WakeMode::Now {
        // The heartbeat scheduler of the gateway runtime picks this up; until then it is logged.
        tracing::debug!(seq, "immediate heartbeat requested");
    }
    Ok(Json(json!({"ok": true, "mode": wake.mode.as_str()})).into_response())
}

/// `POST {prefix}/agent`: an isolated agent run, durably queued.
async fn agent(
    app: &AppState,
    hooks: &HookSettings,
    parts: &Parts,
    payload: &Value,
) -> Result<Response, HookError> {
    let request = payload::agent_request(payload)?;
    let admitted = hooks.policy.admit(request, KeyOrigin::Request, false, || {
        format!("hook:{}", Uuid::new_v4())
    })?;
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let key = idempotency::choose_key([
        header("idempotency-key"),
        header("x-idempotency-key"),
        header("x-openclaw-idempotency-key"),
        idempotency::body_key(payload),
    ]);
    let claim = key.map(|key| IdempotencyClaim {
        fingerprint: idempotency::fingerprint(key, parts.uri.path(), &admitted),
        now_ms: unix_millis(),
        window: idempotency::WINDOW,
    });
    let run_id = Uuid::new_v4().to_string();
    let received = now_rfc3339();
    let prompt = if admitted.allow_unsafe_external_content {
        admitted.message.clone()
    } else {
        wrap_prompt(
            &admitted.name,
            &run_id,
            &received,
            admitted.source,
            &admitted.message,
        )
    };
    let run = NewRun::admitted(run_id, &admitted, prompt, received);
    let queued = app.store.queue_run(run, claim).await.map_err(internal)?;
    let (RunQueued::New { run_id } | RunQueued::Replayed { run_id }) = queued;
    Ok(Json(json!({"ok": true, "runId": run_id})).into_response())
}

fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_matching_is_exact_and_segment_wise() {
        assert_eq!(under_prefix("/hooks", "/hooks"), Some(""));
        assert_eq!(under_prefix("/hooks/wake", "/hooks"), Some("/wake"));
        assert_eq!(under_prefix("/hooksx/wake", "/hooks"), None);
        assert_eq!(under_prefix("/Hooks/wake", "/hooks"), None);
    }

    #[test]
    fn token_query_parameter_is_recognised_in_any_spelling() {
        assert!(query_names_token(Some("token=x")));
        assert!(query_names_token(Some("a=1&TOKEN")));
        assert!(query_names_token(Some("%74oken=1")));
        assert!(!query_names_token(Some("tokens=1")));
        assert!(!query_names_token(None));
    }
}
