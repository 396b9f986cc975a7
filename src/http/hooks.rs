//! The hook endpoint: the request pipeline of docs/endpoints.md, in its order, then `/wake` and `/agent`.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::AppState;
use super::body::{parse_json, read_limited};
use super::reply::HookError;
use super::request::{HookRequest, Signed};
use super::signed::{self, Credential};
use super::{mapped, submit};
use crate::config::{HookSettings, Settings};
use crate::hook::payload;

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
        Credential::Token => return route(app, hooks, name, &parts, &bytes, None).await,
        Credential::Signature(attempt) => attempt,
    };
    let mapping = attempt.mapping;
    let key = signed::check_signature(app, attempt, &bytes)?;
    if let Some(answer) = signed::claim(app, &key).await? {
        return Ok(answer);
    }
    let signed_request = Signed { mapping, key: &key };
    let response = route(app, hooks, name, &parts, &bytes, Some(signed_request))
        .await
        .unwrap_or_else(IntoResponse::into_response);
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
            submit::wake(app, hooks, wake, "hook:wake".into()).await
        }
        "agent" => {
            let agent = payload::agent_request(&payload)?;
            submit::agent(app, hooks, &request, agent).await
        }
        _ => mapped::mapped(app, hooks, &request).await,
    }
}

/// The hook a path names (what follows the prefix): leading `/`s stripped and one trailing `/`
/// ignored, so `/hooks/wake/` is `/hooks/wake` (docs/endpoints.md, step 5).
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
