//! The MCP endpoint (docs/mcp.md): `/mcp`, the Model Context Protocol over streamable HTTP,
//! stateless (every POST carries one message and is answered JSON), behind a credential of its
//! own (`mcp.tokens`). [`require_credential`] admits a request bearing one of those tokens and
//! nothing else (the gateway token and the hook token are refused like any wrong token), and
//! hands the handler the [`Caller`]; the tools ([`tools::TOOLS`]) are requests to the operator
//! API's own handlers ([`dispatch`]), and every call is recorded in the request log
//! ([`audit`]) under the credential's name. `hookgate mcp` carries stdio to this endpoint.

mod server;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use tower::ServiceExt;
use uuid::Uuid;

use super::AppState;
use super::api_error::ApiError;
use super::api_hooks::AgentCredential;
use super::auth::presented_bearer;
use super::reply::{HookError, Refusal};
use crate::client::ClientKey;
use crate::config::mcp::Scopes;
use crate::gateway::requests::RequestRecord;
use crate::gateway::runtime_clock::{now_ms, now_rfc3339};
use tools::ApiRequest;

/// The largest message `/mcp` takes: a dry run's candidate configuration is the largest.
const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// The `/mcp` route: the streamable HTTP transport behind [`require_credential`].
pub(super) fn routes(state: AppState) -> Router<AppState> {
    let app = state.clone();
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
        // The bearer credential is what guards the endpoint, wherever the server is reached
        // from (a DNS-rebinding page cannot present it): the Host check would refuse every
        // name but loopback's.
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || Ok(server::McpServer::new(app.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp", service)
        .route_layer(from_fn_with_state(state, require_credential))
}

/// Who made an MCP request: the credential's name and scopes, the client it came from, and
/// where it reached the server (the peer and `Host`, which a subscription's URL is built from
/// when `gateway.publicUrl` is unset).
#[derive(Debug, Clone)]
struct Caller {
    pub name: Arc<str>,
    pub scopes: Scopes,
    pub client: Option<ClientKey>,
    pub peer: SocketAddr,
    pub host: Option<HeaderValue>,
}

/// Admits a request bearing an `mcp.tokens` token, or answers 401 (429 when locked out) with
/// the operator API's JSON error. Failures count toward the operator API's lockout.
async fn require_credential(
    State(app): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer);
    let Some(peer) = peer else {
        return ApiError::from(HookError::internal("no peer address")).into_response();
    };
    let settings = app.config.current();
    let client = settings
        .trusted_proxies
        .client(peer.ip(), request.headers());
    let now = Instant::now();
    if let Some(client) = &client
        && let Err(retry_after) = app.api_limiter.check(client, now)
    {
        return ApiError::from(HookError::LockedOut { retry_after }).into_response();
    }
    let presented = presented_bearer(request.headers());
    let Some(credential) = settings.mcp.credential(presented) else {
        if let Some(client) = &client {
            app.api_limiter.record_failure(client, now);
        }
        let reason = refusal_reason(&settings, presented);
        audit(
            &app,
            &request_target(&request),
            None,
            client,
            401,
            Some(reason),
        );
        let refused = HookError::Unauthorized(Refusal::WrongToken);
        return ApiError::from(refused).into_response();
    };
    if let Some(client) = &client {
        app.api_limiter.clear(client);
    }
    let caller = Caller {
        name: Arc::from(credential.name.as_str()),
        scopes: credential.scopes,
        client,
        peer,
        host: request.headers().get(header::HOST).cloned(),
    };
    drop(settings);
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Why `/mcp` refused a credential, in the operator's words: the gateway token and the hook
/// token are named as such, so that a misconfigured agent is found at once.
fn refusal_reason(settings: &crate::config::Settings, presented: Option<&str>) -> String {
    if presented.is_none() {
        return "mcp: no token presented".into();
    }
    if settings
        .gateway_token
        .as_ref()
        .is_some_and(|t| t.matches(presented))
    {
        return "mcp: the gateway token is not an MCP credential".into();
    }
    if settings
        .hooks
        .as_ref()
        .is_some_and(|h| h.token.matches(presented))
    {
        return "mcp: the hook token is not an MCP credential".into();
    }
    "mcp: the token is not one of mcp.tokens".into()
}

fn request_target(request: &Request) -> String {
    request.uri().path().to_string()
}

/// Records an MCP call (or a refused credential) in the request log: `POST /mcp`, the status
/// the call amounts to, and in `reason` what was called by which credential (its name, never
/// its token). Never suppressed past the refusal bounds beyond what any 4xx is.
fn audit(
    app: &AppState,
    target: &str,
    error: Option<String>,
    client: Option<ClientKey>,
    status: u16,
    reason: Option<String>,
) {
    let id = Uuid::now_v7().to_string();
    let record = RequestRecord {
        request_id: id.clone(),
        id,
        at: now_rfc3339(),
        at_ms: now_ms(),
        client: client.map(|c| c.to_string()),
        method: "POST".into(),
        target: target.into(),
        status,
        error,
        reason,
        ..RequestRecord::default()
    };
    app.request_log.record(record, client, None);
}

/// What an operator API handler answered a tool's request: its status and its JSON.
struct ApiAnswer {
    pub status: StatusCode,
    pub json: Value,
}

/// Serves `request` with the operator API's own handlers, as if it came with the gateway
/// token: the tool's scope was checked before, and the handlers are the API's, so the answer
/// (its redactions included) is the API's. It carries the caller's peer and `Host`, and its
/// credential as an [`AgentCredential`], so that a subscription change is capped and audited
/// as the agent's.
async fn dispatch(app: &AppState, caller: &Caller, request: ApiRequest) -> ApiAnswer {
    let body = match &request.body {
        Some(json) => Body::from(json.to_string()),
        None => Body::empty(),
    };
    let mut built = axum::http::Request::builder()
        .method(request.method)
        .uri(request.target)
        .header(header::CONTENT_TYPE, "application/json")
        .extension(ConnectInfo(caller.peer))
        .extension(AgentCredential(caller.name.clone()));
    if let Some(host) = &caller.host {
        built = built.header(header::HOST, host);
    }
    let built = built.body(body);
    let response = match built {
        Ok(built) => match super::operator_routes()
            .with_state(app.clone())
            .oneshot(built)
            .await
        {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(_) => ApiError::Invalid("invalid arguments".into()).into_response(),
    };
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()));
    ApiAnswer { status, json }
}
