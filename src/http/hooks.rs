//! The hook endpoint: the request pipeline of behaviour §2, in its order, then `/wake` and `/agent`.

use std::net::SocketAddr;
use std::time::Instant;

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::AppState;
use super::body::{parse_json, read_limited};
use super::reply::HookError;
use super::signed::{self, Credential};
use crate::config::{HookSettings, Settings};
use crate::gateway::RunQueued;
use crate::gateway::runtime_clock::now_rfc3339;
use crate::hook::{AgentRequest, WakeRequest, idempotency, payload};
use crate::intake::{self, AgentOrigin};
use crate::mapping::{self, FinishedAction, Mapping, TemplateContext};
use crate::metrics::{FailureLabels, MappingLabels};
use crate::transform::{CallOutcome, Reply, TransformInput};

/// Serves every path the router does not know: hooks under the configured prefix, 404 elsewhere.
pub async fn dispatch(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let settings = app.config.current();
    let label = HookLabel::of(&settings, request.uri().path());
    let mut response = match handle(&app, &settings, peer, request).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    };
    if let Some(label) = label {
        response.extensions_mut().insert(label);
    }
    response
}

/// The metrics labels of a request under the hook prefix, as the handler decided them: the
/// route template and the hook name. Names no route or mapping knows are `<unknown>`, so a
/// client cannot create new time series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookLabel {
    pub route: String,
    pub hook: String,
}

impl HookLabel {
    fn of(settings: &Settings, path: &str) -> Option<HookLabel> {
        let hooks = settings.hooks.as_ref()?;
        let name = hook_name(under_prefix(path, &hooks.path)?);
        let known = matches!(name, "wake" | "agent")
            || hooks.mappings.iter().any(|m| m.path() == Some(name));
        let hook = if known { name } else { "<unknown>" };
        Some(HookLabel {
            route: format!("{}/{hook}", hooks.path),
            hook: hook.to_string(),
        })
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
    let name = hook_name(rest);
    let credential = signed::authenticate(app, settings, hooks, peer, &parts.headers, name)?;
    if name.is_empty() {
        return Err(HookError::NotFound);
    }
    let bytes = read_limited(
        &parts.headers,
        body,
        hooks.max_body_bytes,
        hooks.body_timeout,
        &settings.connections,
    )
    .await?;
    let attempt = match credential {
        Credential::Token => return route(app, settings, hooks, name, &parts, &bytes, None).await,
        Credential::Signature(attempt) => attempt,
    };
    let mapping = attempt.mapping;
    let key = signed::check_signature(app, attempt, &bytes)?;
    if let Some(answer) = signed::claim(app, &key).await? {
        return Ok(answer);
    }
    let signed_request = Signed { mapping, key: &key };
    let response = route(
        app,
        settings,
        hooks,
        name,
        &parts,
        &bytes,
        Some(signed_request),
    )
    .await
    .unwrap_or_else(IntoResponse::into_response);
    Ok(signed::settle(app, key.clone(), response).await)
}

/// A request authenticated by a mapping's signature: it may run that mapping and nothing else.
#[derive(Clone, Copy)]
struct Signed<'a> {
    mapping: &'a Mapping,
    /// The replay key; doubles as the idempotency key of the run it makes.
    key: &'a str,
}

/// Steps 6 and 7: the body as JSON, then the hook it names.
async fn route(
    app: &AppState,
    settings: &Settings,
    hooks: &HookSettings,
    name: &str,
    parts: &Parts,
    bytes: &Bytes,
    signed: Option<Signed<'_>>,
) -> Result<Response, HookError> {
    let payload = parse_json(bytes)?;
    let request = HookRequest {
        name,
        parts,
        body: bytes,
        payload: &payload,
        signed,
    };
    match name {
        "wake" => {
            let wake = payload::wake_request(&payload)?;
            commit_wake(app, settings, wake, "hook:wake".into()).await
        }
        "agent" => {
            let agent = payload::agent_request(&payload)?;
            queue_agent(app, hooks, &request, agent, AgentOrigin::Direct).await
        }
        _ => mapped(app, settings, hooks, &request).await,
    }
}

/// The hook a path names (what follows the prefix): leading `/`s stripped and one trailing `/`
/// ignored, so `/hooks/wake/` is `/hooks/wake` (behaviour §2, step 5).
fn hook_name(rest: &str) -> &str {
    let name = rest.trim_start_matches('/');
    name.strip_suffix('/').unwrap_or(name)
}

/// One authenticated hook request with its body read.
struct HookRequest<'a> {
    name: &'a str,
    parts: &'a Parts,
    body: &'a Bytes,
    payload: &'a Value,
    /// Set when a signature, not the token, admitted the request.
    signed: Option<Signed<'a>>,
}

/// `POST {prefix}/<name>`: the first matching mapping's action, through its transform if any.
async fn mapped(
    app: &AppState,
    settings: &Settings,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
) -> Result<Response, HookError> {
    let mapping =
        mapping::find(&hooks.mappings, request.name, request.payload).ok_or(HookError::NotFound)?;
    // A signature admits its own mapping only: a payload steering the request (by `source`) to
    // another mapping of the same name needs the hook token.
    if let Some(signed) = request.signed {
        if !std::ptr::eq(signed.mapping, mapping) {
            tracing::info!(signed = %signed.mapping.id, matched = %mapping.id, "signed request matched another mapping");
            return Err(HookError::Unauthorized);
        }
    }
    let now = now_rfc3339();
    let credential = mapping
        .signature
        .as_ref()
        .and_then(|rule| rule.scheme.credential_header());
    let headers = transform_headers(&request.parts.headers, credential);
    let query = query_pairs(request.parts.uri.query());
    let ctx = TemplateContext {
        name: request.name,
        now: &now,
        headers: &headers,
        query: &query,
        payload: request.payload,
    };
    let mut action = mapping.render(&ctx);
    if let Some(spec) = &mapping.transform {
        let input = TransformInput {
            name: request.name.to_string(),
            headers,
            query,
            body: request.body.to_vec(),
            mapping_id: mapping.id.clone(),
            config: spec.config.clone(),
        };
        match run_transform(app, hooks, mapping, &spec.module, input).await? {
            CallOutcome::Run(decided) => action = action.overlay(decided),
            CallOutcome::Keep => {}
            CallOutcome::Skip => return Ok(StatusCode::NO_CONTENT.into_response()),
            CallOutcome::Respond(reply) => return Ok(own_reply(reply)),
        }
    }
    match action.finish()? {
        FinishedAction::Wake(wake) => {
            commit_wake(app, settings, wake, format!("hook:{}", request.name)).await
        }
        FinishedAction::Agent(agent) => {
            queue_agent(app, hooks, request, agent, AgentOrigin::Mapped(mapping)).await
        }
    }
}

async fn run_transform(
    app: &AppState,
    hooks: &HookSettings,
    mapping: &Mapping,
    module: &str,
    input: TransformInput,
) -> Result<CallOutcome, HookError> {
    let loaded = hooks.transforms.get().and_then(|set| set.get(module));
    let Some(loaded) = loaded else {
        tracing::error!(mapping = %mapping.id, %module, "transform not loaded");
        return Err(HookError::MappingFailed);
    };
    let started = Instant::now();
    let outcome = app
        .transforms
        .engine()
        .call(&loaded, input, hooks.limits_for(mapping))
        .await;
    app.metrics
        .transform_duration
        .get_or_create(&MappingLabels {
            mapping: mapping.id.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    match outcome {
        Ok(outcome) => {
            tracing::debug!(mapping = %mapping.id, elapsed = ?started.elapsed(), "transform answered");
            Ok(outcome)
        }
        Err(failure) => {
            app.metrics
                .transform_failures
                .get_or_create(&FailureLabels {
                    mapping: mapping.id.clone(),
                    cause: failure.cause(),
                })
                .inc();
            tracing::error!(mapping = %mapping.id, %module, cause = failure.cause(), %failure, "transform failed");
            Err(HookError::MappingFailed)
        }
    }
}

fn own_reply(reply: Reply) -> Response {
    let content_type = HeaderValue::from_str(&reply.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    (status, [(header::CONTENT_TYPE, content_type)], reply.body).into_response()
}

/// Headers as transforms and templates see them: names lower-case (as `http` keeps them),
/// credentials removed: the hook token's carriers, cookies, and the mapping's own signature
/// credential (`credential`), such as GitLab's shared token.
fn transform_headers(headers: &HeaderMap, credential: Option<&str>) -> Vec<(String, String)> {
    const CREDENTIALS: &[&str] = &[
        "authorization",
        "x-service-token",
        "x-openclaw-token",
        "cookie",
        "proxy-authorization",
    ];
    headers
        .iter()
        .filter(|(name, _)| {
            !CREDENTIALS.contains(&name.as_str()) && Some(name.as_str()) != credential
        })
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

/// The part of `path` after `prefix` when `path` is the prefix or below it; case-sensitive and not
/// percent-decoded, so `/hooks%2Fwake` is not `/hooks/wake`.
fn under_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Whether a query parameter is named `token` (after percent-decoding): a token in a URL ends up
/// in proxy and server logs, so it is refused whatever its value.
fn query_names_token(query: Option<&str>) -> bool {
    query.is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "token"))
}

/// A wake: a durable, untrusted system event for the default agent's main session.
async fn commit_wake(
    app: &AppState,
    settings: &Settings,
    wake: WakeRequest,
    source: String,
) -> Result<Response, HookError> {
    let event = intake::wake_event(settings, &wake, source);
    let outcome = app.runtime.submit_wake(event, wake.mode).await?;
    Ok(Json(json!({
        "ok": true,
        "mode": wake.mode.as_str(),
        "eventOutcome": outcome.as_str(),
    }))
    .into_response())
}

/// An agent request admitted (see [`intake::admit_agent`]), then durably queued as a run.
async fn queue_agent(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    agent: AgentRequest,
    origin: AgentOrigin<'_>,
) -> Result<Response, HookError> {
    let headers = &request.parts.headers;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let keys = [
        header("idempotency-key"),
        header("x-idempotency-key"),
        header("x-openclaw-idempotency-key"),
        idempotency::body_key(request.payload),
        request.signed.map(|s| s.key),
    ];
    let admission = intake::admit_agent(hooks, agent, origin, keys, request.parts.uri.path())?;
    let queued = app
        .runtime
        .submit_run(
            admission.run,
            admission.claim,
            &admission.admitted,
            admission.idempotency_key.as_deref(),
        )
        .await?;
    let (RunQueued::New { run_id } | RunQueued::Replayed { run_id }) = queued;
    Ok(Json(json!({"ok": true, "runId": run_id})).into_response())
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
    fn token_query_parameter_is_recognised_after_decoding() {
        assert!(query_names_token(Some("token=x")));
        assert!(query_names_token(Some("a=1&token")));
        assert!(query_names_token(Some("%74oken=1")));
        assert!(!query_names_token(Some("tokens=1")));
        assert!(!query_names_token(Some("Token=1")));
        assert!(!query_names_token(None));
    }
}
