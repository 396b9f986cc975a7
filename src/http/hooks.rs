//! The hook endpoint: the request pipeline of docs/http-contract.md, in its order, then `/wake` and `/agent`.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::AppState;
use super::body::{parse_json, read_limited};
use super::reply::HookError;
use super::request::{HookRequest, Signed};
use super::request_id::RequestId;
use super::signed::{self, Credential};
use super::trace::Trace;
use super::{mapped, submit};
use crate::config::{HookSettings, Settings};
use crate::gateway::requests::{self, RequestRecord};
use crate::hook::payload;

/// Serves every path the router does not know: hooks under the configured prefix, 404 elsewhere.
/// Every request under the prefix is recorded in the request log and answered with its record's
/// id as `X-Request-Id`.
pub async fn dispatch(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let settings = app.config.current();
    let (Some(hooks), Some(label)) = (
        settings.hooks.as_ref(),
        HookLabel::of(&settings, request.uri().path()),
    ) else {
        return HookError::NotFound.into_response();
    };
    let client = settings
        .trusted_proxies
        .client(peer.ip(), request.headers());
    let id = request
        .extensions()
        .get::<RequestId>()
        .cloned()
        .unwrap_or_default();
    let mut trace = Trace::begin(
        &id,
        request.method(),
        request.uri(),
        request.headers(),
        client,
        hooks.captures_any(),
    );
    let answer = handle(&app, &settings, hooks, peer, request, &mut trace).await;
    let mut response = record(&app, hooks, trace, answer);
    response.extensions_mut().insert(label);
    response
}

/// Turns a pipeline's answer into its response and hands the request's record to the log.
fn record(
    app: &AppState,
    hooks: &HookSettings,
    mut trace: Trace,
    answer: Result<Response, HookError>,
) -> Response {
    let response = answered(answer, &mut trace);
    let (record, client, capture) = trace.finish(hooks, response.status());
    app.request_log.record(record, client, capture);
    response
}

/// The response to a pipeline's answer; a refusal is noted in the trace on the way.
fn answered(answer: Result<Response, HookError>, trace: &mut Trace) -> Response {
    answer.unwrap_or_else(|err| {
        trace.refused(&err);
        err.into_response()
    })
}

/// Sends a recorded request through the pipeline again, from step 6 (the body as JSON), with
/// the operator's authority in place of its credential, through the mappings in force now. A
/// replay admits no more than the original was admitted for: a request refused for its
/// authentication is not replayed, and one that a signature admitted may run only the mapping
/// whose signature it was. Its record links to `original` and is committed before this
/// returns. Returns the answer and the new record's id.
pub(super) async fn replay(
    app: &AppState,
    original: &RequestRecord,
    headers: HeaderMap,
    query: Option<&str>,
    body: Bytes,
) -> Result<(Response, String), ReplayError> {
    replayable(original)?;
    let settings = app.config.current();
    let hooks = settings.hooks.as_ref().ok_or(ReplayError::HooksOff)?;
    let signed = match &original.signature {
        Some(signature) if signature.verified => {
            let mapping = original
                .mapping_id
                .as_deref()
                .and_then(|id| hooks.mappings.iter().find(|m| m.id == id))
                .ok_or(ReplayError::SignedMappingGone)?;
            Some((Signed { mapping, key: None }, &signature.scheme))
        }
        _ => None,
    };
    let target = match query {
        Some(query) => format!("{}?{query}", original.target),
        None => original.target.clone(),
    };
    let uri: Uri = target.parse().map_err(|_| ReplayError::Gone)?;
    let rest = under_prefix(uri.path(), &hooks.path).ok_or(ReplayError::Gone)?;
    let name = hook_name(rest).to_string();
    let mut request = axum::http::Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    let (parts, ()) = request.into_parts();
    let mut trace = Trace::begin(
        &RequestId::new(),
        &parts.method,
        &parts.uri,
        &parts.headers,
        None,
        true,
    );
    trace.replay_of(&original.id);
    trace.hook(&name);
    trace.body(&body);
    trace.authenticated();
    if let Some((_, scheme)) = signed {
        // The replay carries its original's admission, so a replay of it is held to it too.
        trace.signature(scheme, true);
    }
    let id = trace.id().to_string();
    let signed = signed.map(|(signed, _)| signed);
    let answer = route(app, hooks, &name, &parts, &body, signed, &mut trace).await;
    let store_full = matches!(answer, Err(HookError::StoreFull));
    let response = answered(answer, &mut trace);
    let (record, _, capture) = trace.finish(hooks, response.status());
    app.request_log.record_replay(record, capture).await;
    if store_full {
        return Err(ReplayError::StoreFull);
    }
    Ok((response, id))
}

/// Whether `original` may be replayed at all, before anything of it is read: not when it was
/// refused for its authentication (a replay would admit what the sender was refused).
pub(super) fn replayable(original: &RequestRecord) -> Result<(), ReplayError> {
    if original.status == StatusCode::UNAUTHORIZED.as_u16() {
        return Err(ReplayError::Unauthenticated);
    }
    if requests::is_cut(&original.target) {
        return Err(ReplayError::Cut);
    }
    Ok(())
}

/// Why a recorded request cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the request was refused for its authentication, so it cannot be replayed")]
    Unauthenticated,
    #[error("hooks are disabled")]
    HooksOff,
    #[error("the request's path was too long to be recorded whole")]
    Cut,
    #[error("the request's path is no longer under hooks.path")]
    Gone,
    #[error(
        "the mapping whose signature admitted the request is no longer configured, and a replay runs no other"
    )]
    SignedMappingGone,
    /// The replay was recorded, but what it became could not be: the store is full.
    #[error("store full; retry")]
    StoreFull,
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
    hooks: &HookSettings,
    peer: SocketAddr,
    request: Request,
    trace: &mut Trace,
) -> Result<Response, HookError> {
    let (parts, body) = request.into_parts();
    let rest = under_prefix(parts.uri.path(), &hooks.path).ok_or(HookError::NotFound)?;
    if query_names_token(parts.uri.query()) {
        return Err(HookError::QueryToken);
    }
    if parts.method != Method::POST {
        return Err(HookError::MethodNotAllowed);
    }
    let name = hook_name(rest);
    if !name.is_empty() {
        trace.hook(name);
    }
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
    trace.body(&bytes);
    let attempt = match credential {
        Credential::Token => {
            trace.authenticated();
            return route(app, hooks, name, &parts, &bytes, None, trace).await;
        }
        Credential::Signature(attempt) => attempt,
    };
    let mapping = attempt.mapping;
    trace.mapping(&mapping.id);
    let scheme = attempt.scheme();
    trace.signature(scheme, false);
    let key = signed::check_signature(app, attempt, &bytes)?;
    trace.signature(scheme, true);
    trace.authenticated();
    if let Some(answer) = signed::claim(app, &key, trace).await? {
        return Ok(answer);
    }
    let signed_request = Signed {
        mapping,
        key: Some(&key),
    };
    let answer = route(
        app,
        hooks,
        name,
        &parts,
        &bytes,
        Some(signed_request),
        trace,
    )
    .await;
    // Answered here, not by the dispatcher, since the replay protection records the response
    // itself.
    let response = answered(answer, trace);
    Ok(signed::settle(app, key.clone(), response).await)
}

/// Steps 6 and 7: the body as JSON, then the hook it names.
async fn route(
    app: &AppState,
    hooks: &HookSettings,
    name: &str,
    parts: &Parts,
    bytes: &Bytes,
    signed: Option<Signed<'_>>,
    trace: &mut Trace,
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
            submit::wake(app, hooks, wake, "hook:wake".into(), trace).await
        }
        "agent" => {
            let agent = payload::agent_request(&payload)?;
            submit::agent(app, hooks, &request, agent, trace).await
        }
        _ => mapped::mapped(app, hooks, &request, trace).await,
    }
}

/// The hook a path names (what follows the prefix): leading `/`s stripped and one trailing `/`
/// ignored, so `/hooks/wake/` is `/hooks/wake` (docs/http-contract.md, step 5).
fn hook_name(rest: &str) -> &str {
    let name = rest.trim_start_matches('/');
    name.strip_suffix('/').unwrap_or(name)
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
