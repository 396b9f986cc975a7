//! `/api/hooks` (subscriptions: list, create, show, delete, test, pause, resume, rotate) and
//! `/api/audit` (who changed them, when, what): thin handlers over
//! [`crate::subscription::Subscriptions`] (docs/subscriptions.md, docs/http-contract.md).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

use super::AppState;
use super::api_error::{ApiPath, ApiQuery};
use super::request::Origin;
use crate::gateway::requests::RequestRecord;
use crate::subscription::record::{Spec, View};
use crate::subscription::{Actor, AuditEntry, DEFAULT_ROTATION_WINDOW, SubscriptionError, sample};

/// A refused subscription request: JSON `{"ok": false, "error": ..., "problems": [...]}`.
pub struct HooksApiError(SubscriptionError);

impl From<SubscriptionError> for HooksApiError {
    fn from(err: SubscriptionError) -> Self {
        HooksApiError(err)
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    ok: bool,
    error: String,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    problems: &'a [String],
}

impl IntoResponse for HooksApiError {
    fn into_response(self) -> Response {
        let status = match &self.0 {
            SubscriptionError::Invalid(_) | SubscriptionError::Refused(_) => {
                StatusCode::BAD_REQUEST
            }
            SubscriptionError::NotFound(_) => StatusCode::NOT_FOUND,
            SubscriptionError::Forbidden(_) => StatusCode::FORBIDDEN,
            SubscriptionError::Exists(_)
            | SubscriptionError::NoSecretsKey
            | SubscriptionError::HooksDisabled
            | SubscriptionError::Conflict(_) => StatusCode::CONFLICT,
            SubscriptionError::Store(e) => {
                tracing::error!(cause = %e, "subscription request failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        let problems = match &self.0 {
            SubscriptionError::Refused(problems) => problems.as_slice(),
            _ => &[],
        };
        let error = match &self.0 {
            SubscriptionError::Store(_) => "internal error".to_string(),
            other => other.to_string(),
        };
        let body = ErrorBody {
            ok: false,
            error,
            problems,
        };
        (status, Json(body)).into_response()
    }
}

type Answer = Result<Response, HooksApiError>;

/// An agent's call through the MCP credential named so: what an MCP tool's request to these
/// handlers carries (`mcp::dispatch`), never a request from the network.
#[derive(Debug, Clone)]
pub struct AgentCredential(pub Arc<str>);

/// The caller as the audit names it: the gateway token (the one credential the operator API
/// takes), or the MCP credential of an agent's call; and the client it came from.
fn actor(
    app: &AppState,
    peer: SocketAddr,
    headers: &HeaderMap,
    agent: Option<Extension<AgentCredential>>,
) -> Actor {
    let settings = app.config.current();
    let client = settings
        .trusted_proxies
        .client(peer.ip(), headers)
        .map(|c| c.to_string());
    match agent {
        Some(Extension(AgentCredential(name))) => Actor::agent(&name, client),
        None => Actor {
            credential: "gateway-token".into(),
            client,
        },
    }
}

/// The address the caller reached the API at, for URLs when `gateway.publicUrl` is unset.
fn base(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

#[derive(Serialize)]
struct Listing {
    hooks: Vec<View>,
}

/// `GET /api/hooks`.
pub async fn list(State(app): State<AppState>, headers: HeaderMap) -> Answer {
    let hooks = app.subscriptions.list(&base(&headers)).await?;
    Ok(Json(Listing { hooks }).into_response())
}

/// `POST /api/hooks`: 201 with the subscription and its secret, shown this once.
pub async fn create(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    agent: Option<Extension<AgentCredential>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let spec: Spec = serde_json::from_slice(&body)
        .map_err(|e| SubscriptionError::Invalid(format!("invalid body: {e}")))?;
    let by = actor(&app, peer, &headers, agent);
    let issued = app.subscriptions.create(spec, &by, &base(&headers)).await?;
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

/// `GET /api/hooks/{name}`.
pub async fn show(
    State(app): State<AppState>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
) -> Answer {
    Ok(Json(app.subscriptions.show(&name, &base(&headers)).await?).into_response())
}

#[derive(Serialize)]
struct Deleted {
    ok: bool,
    deleted: String,
}

/// `DELETE /api/hooks/{name}`.
pub async fn delete(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    agent: Option<Extension<AgentCredential>>,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
) -> Answer {
    let by = actor(&app, peer, &headers, agent);
    app.subscriptions.delete(&name, &by).await?;
    Ok(Json(Deleted {
        ok: true,
        deleted: name,
    })
    .into_response())
}

/// What `POST /api/hooks/{name}/{action}` does.
#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Test,
    Pause,
    Resume,
    Rotate,
}

/// `POST /api/hooks/{name}/rotate`'s body, all optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Rotation {
    /// How long the current secret keeps verifying; 24 hours unless given.
    window_seconds: Option<u64>,
    /// The provider's new secret, when it makes its own.
    secret: Option<String>,
}

/// `POST /api/hooks/{name}/{test,pause,resume,rotate}`.
pub async fn act(
    State(app): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    agent: Option<Extension<AgentCredential>>,
    ApiPath((name, action)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let action: Action = serde_json::from_value(action.into()).map_err(|_| {
        SubscriptionError::Invalid("the action must be test, pause, resume or rotate".into())
    })?;
    let by = actor(&app, peer, &headers, agent);
    let base = base(&headers);
    let subscriptions = &app.subscriptions;
    match action {
        Action::Pause | Action::Resume => {
            let paused = matches!(action, Action::Pause);
            let view = subscriptions.set_paused(&name, paused, &by, &base).await?;
            Ok(Json(view).into_response())
        }
        Action::Rotate => {
            let rotation: Rotation = if body.is_empty() {
                Rotation::default()
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| SubscriptionError::Invalid(format!("invalid body: {e}")))?
            };
            let window = rotation
                .window_seconds
                .map_or(DEFAULT_ROTATION_WINDOW, Duration::from_secs);
            let issued = subscriptions
                .rotate(&name, window, rotation.secret.as_deref(), &by, &base)
                .await?;
            Ok(Json(issued).into_response())
        }
        Action::Test => test(&app, &name, peer, &by).await,
    }
}

/// What a test delivery became.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tested {
    /// The event type the sample carried.
    event: String,
    /// The status the sender would have been answered with, and the answer.
    status: u16,
    answer: serde_json::Value,
    /// The request's id in the request log.
    request_id: Option<String>,
    /// The request's record: what it became, or why it was filtered or refused.
    record: Option<RequestRecord>,
}

/// Sends a signed sample of the provider's own to the subscription's hook, through the very
/// router senders reach, and reports what it became.
async fn test(app: &AppState, name: &str, peer: SocketAddr, by: &Actor) -> Answer {
    let (subscription, secret) = app.subscriptions.signing_secret(name, by).await?;
    let now = chrono::Utc::now().timestamp();
    let delivery = sample::delivery(subscription.provider, &subscription.events, &secret, now);
    let path = app
        .config
        .current()
        .hooks
        .as_ref()
        .map_or("/hooks".into(), |h| h.path.clone());
    let mut request = axum::http::Request::post(format!("{path}/{name}"));
    for (key, value) in &delivery.headers {
        request = request.header(key, value);
    }
    let mut request = request
        .body(Body::from(delivery.body))
        .map_err(|e| SubscriptionError::Invalid(e.to_string()))?;
    request.extensions_mut().insert(ConnectInfo(peer));
    // An operator's test: its refusal is told to no `request.refused` endpoint.
    request.extensions_mut().insert(Origin::Test);
    let response = super::router(app.clone())
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    let status = response.status().as_u16();
    let request_id = response
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let answer = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    let record = match &request_id {
        Some(id) => recorded(app, id).await,
        None => None,
    };
    let outcome = match record.as_ref() {
        Some(r) => became(status, r),
        None => format!("{status}"),
    };
    app.subscriptions.record_test(name, by, outcome).await;
    Ok(Json(Tested {
        event: delivery.event,
        status,
        answer,
        request_id,
        record,
    })
    .into_response())
}

/// The record of request `id`, once the request log has it (a few seconds at most).
async fn recorded(app: &AppState, id: &str) -> Option<RequestRecord> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some((record, _))) = app.request_log.find(id).await {
            return Some(record);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A test's outcome in a few words, for the audit.
fn became(status: u16, record: &RequestRecord) -> String {
    let reason = record.reason.as_deref().or(record.error.as_deref());
    match reason {
        Some(reason) => format!("{status}: {reason}"),
        None => format!("{status}"),
    }
}

#[derive(Deserialize)]
pub struct AuditQuery {
    limit: Option<usize>,
}

#[derive(Serialize)]
struct AuditPage {
    entries: Vec<AuditEntry>,
}

/// `GET /api/audit`: the newest changes first (`limit`, default 100, at most 1000).
pub async fn audit(State(app): State<AppState>, ApiQuery(query): ApiQuery<AuditQuery>) -> Answer {
    let limit = query.limit.unwrap_or(100).clamp(1, 1000);
    let entries = app.subscriptions.audit(limit).await?;
    Ok(Json(AuditPage { entries }).into_response())
}
