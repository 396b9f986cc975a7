//! The edge's side of docs/edge.md: a hook request is stored whole in the edge's queue
//! ([`accept`], in place of the hook routes) and answered `202` once that is durable; the
//! private node takes what is stored with `GET /edge/pull` and forgets it with
//! `POST /edge/ack`, both behind `edge.serve.pullToken`, which submits no hook.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::{presented_bearer, presented_token};
use super::body::read_limited;
use super::reply::{HookError, json_error};
use super::request::HookContext;
use super::signed::{self, Attempt};
use super::trace::Trace;
use crate::config::EdgeServe;
use crate::gateway::edge_queue::{Delivery, EdgeQueue, EdgeStatus, PushError};
use crate::gateway::runtime_clock::now_ms;
use crate::mapping;

/// The longest a pull waits for a request to arrive.
const MAX_PULL_WAIT: Duration = Duration::from_secs(30);
/// The most requests one pull answers with.
const MAX_PULL_BATCH: usize = 512;

/// The edge's answer to a stored request.
#[derive(Serialize)]
struct Stored {
    ok: bool,
    /// Its place in the edge's queue.
    stored: i64,
}

/// Stores a hook request for the private node, in place of the hook routes on an edge: `POST`
/// only; the hook token, or a provider signature where the edge has a signed mapping for the
/// name, or for a name of `edge.serve.routes` nothing (the private node verifies it); the body
/// within `hooks.maxBodyBytes`. `202` once stored and synced; `503` when a bound of
/// `edge.serve` is reached or the disk is full, storing nothing.
pub(super) async fn accept(
    app: &AppState,
    serve: &EdgeServe,
    context: &HookContext,
    request: Request,
) -> Response {
    match store(app, serve, context, request).await {
        Ok(seq) => (
            StatusCode::ACCEPTED,
            Json(Stored {
                ok: true,
                stored: seq,
            }),
        )
            .into_response(),
        Err(err) => err.into_response(),
    }
}

async fn store(
    app: &AppState,
    serve: &EdgeServe,
    context: &HookContext,
    request: Request,
) -> Result<i64, HookError> {
    let (parts, body) = request.into_parts();
    let trace = parts
        .extensions
        .get::<Trace>()
        .cloned()
        .ok_or_else(|| HookError::internal("an edge request outside the trace layer"))?;
    let name = context.name.as_str();
    if name.is_empty() {
        return Err(HookError::NotFound);
    }
    trace.hook(name);
    if parts.method != Method::POST {
        return Err(HookError::MethodNotAllowed);
    }
    let queue = app
        .edge_queue
        .as_ref()
        .ok_or_else(|| HookError::internal("an edge without its queue"))?;
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer);
    let hooks = context.hooks()?;
    let open = serve.routes.contains(name)
        && presented_token(&parts.headers).is_none()
        && mapping::signature_for(&hooks.mappings, name).is_none();
    let attempt = match (open, peer) {
        (true, _) => None,
        (false, Some(peer)) => {
            signed::authenticate(app, &context.settings, hooks, peer, &parts.headers, name)?
        }
        (false, None) => return Err(HookError::internal("no peer address")),
    };
    let bytes = read_limited(
        &parts.headers,
        body,
        hooks.max_body_bytes,
        hooks.body_timeout,
        &context.settings.connections,
    )
    .await?;
    match attempt {
        // Verified here, claimed at the private node, which keeps the delivery ids.
        Some(Attempt::Signed(attempt)) => drop(signed::check_signature(
            app, context, attempt, &bytes, &trace,
        )?),
        // A form's origin rule admitted it; the private node applies the rule again.
        Some(Attempt::Form(_)) => trace.authenticated(),
        None if !open => trace.authenticated(),
        None => {}
    }
    let delivery = Delivery {
        seq: 0,
        request_id: trace.record_id(),
        route: name.to_string(),
        received_ms: now_ms(),
        peer: peer.map(|p| p.to_string()),
        method: parts.method.to_string(),
        target: context.uri.to_string(),
        headers: headers_of(&parts.headers),
        body: bytes.to_vec(),
    };
    match queue.push(delivery).await {
        Ok(seq) => {
            app.metrics.edge.stored.inc();
            Ok(seq)
        }
        Err(PushError::Full(bound)) => {
            app.metrics.edge.refused(bound.as_str());
            tracing::warn!(
                bound = bound.as_str(),
                route = name,
                "edge full: request refused"
            );
            Err(HookError::EdgeFull(bound))
        }
        Err(PushError::Store(err)) => {
            app.metrics.edge.refused("store");
            Err(err.into())
        }
    }
}

fn headers_of(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect()
}

/// One stored request as `GET /edge/pull` sends it: its headers' values and its body in
/// base64, so that every byte arrives as it was received.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireDelivery {
    pub seq: i64,
    pub request_id: String,
    pub route: String,
    pub received_ms: i64,
    pub peer: Option<String>,
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl From<Delivery> for WireDelivery {
    fn from(d: Delivery) -> Self {
        WireDelivery {
            seq: d.seq,
            request_id: d.request_id,
            route: d.route,
            received_ms: d.received_ms,
            peer: d.peer,
            method: d.method,
            target: d.target,
            headers: d
                .headers
                .into_iter()
                .map(|(name, value)| (name, BASE64.encode(value)))
                .collect(),
            body: BASE64.encode(d.body),
        }
    }
}

/// The link as the edge sees it, in every pull's answer and the overview.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LinkView {
    pub connected: bool,
    pub backlog: u64,
    pub oldest_waiting_ms: i64,
    pub last_acked: i64,
    pub last_acked_at_ms: i64,
}

impl From<EdgeStatus> for LinkView {
    fn from(s: EdgeStatus) -> Self {
        LinkView {
            connected: s.connected,
            backlog: s.backlog,
            oldest_waiting_ms: s.oldest_waiting_ms,
            last_acked: s.last_acked,
            last_acked_at_ms: s.last_acked_at_ms,
        }
    }
}

/// `GET /edge/pull`'s answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pulled {
    /// The edge's queue id: a private node's marks name the edge by it.
    pub edge_id: String,
    pub link: LinkView,
    pub deliveries: Vec<WireDelivery>,
}

/// `GET /edge/pull`'s query.
#[derive(Debug, Deserialize)]
pub(super) struct PullQuery {
    /// The last sequence number the caller has; it gets those after it.
    #[serde(default)]
    after: i64,
    /// Seconds to wait when nothing is there yet, at most 30.
    #[serde(default)]
    wait: u64,
    #[serde(default)]
    limit: Option<usize>,
}

/// `GET /edge/pull?after=&wait=&limit=`: the stored requests after `after`, in order; waits up
/// to `wait` seconds for one when none is there (a long poll).
pub(super) async fn pull(
    State(app): State<AppState>,
    parts: Parts,
    Query(query): Query<PullQuery>,
) -> Response {
    let queue = match pull_credential(&app, &parts) {
        Ok(queue) => queue,
        Err(refused) => return refused.into_response(),
    };
    let wait = Duration::from_secs(query.wait).min(MAX_PULL_WAIT);
    let limit = query
        .limit
        .unwrap_or(MAX_PULL_BATCH)
        .clamp(1, MAX_PULL_BATCH);
    let pulled = match queue.pull(query.after, limit, wait).await {
        Ok(pulled) => pulled,
        Err(err) => return HookError::from(err).into_response(),
    };
    let link = queue.status().await.unwrap_or_default();
    app.metrics.edge.show(&link);
    Json(Pulled {
        edge_id: queue.id().to_string(),
        link: link.into(),
        deliveries: pulled.into_iter().map(WireDelivery::from).collect(),
    })
    .into_response()
}

/// `POST /edge/ack`'s body.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub edge_id: String,
    /// Every request up to this sequence number is committed at the private node.
    pub up_to: i64,
}

/// `POST /edge/ack`'s answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Acked {
    pub ok: bool,
    pub acked: i64,
}

/// `POST /edge/ack`: forgets every stored request up to `upTo`; `409` when `edgeId` is not this
/// queue's (the private node then starts over from this queue's start).
pub(super) async fn ack(
    State(app): State<AppState>,
    parts: Parts,
    Json(ack): Json<Ack>,
) -> Response {
    let queue = match pull_credential(&app, &parts) {
        Ok(queue) => queue,
        Err(refused) => return refused.into_response(),
    };
    if *ack.edge_id != **queue.id() {
        return json_error(
            StatusCode::CONFLICT,
            "edge id differs: pull again from the start",
        );
    }
    match queue.ack(ack.up_to).await {
        Ok(acked) => {
            if let Ok(link) = queue.status().await {
                app.metrics.edge.show(&link);
            }
            Json(Acked { ok: true, acked }).into_response()
        }
        Err(err) => HookError::from(err).into_response(),
    }
}

/// The queue, when the request presents the pull token of this edge: 404 on a node that is no
/// edge, 401 (or 429 once locked out, counted as the operator API counts) otherwise.
fn pull_credential(app: &AppState, parts: &Parts) -> Result<EdgeQueue, PullRefused> {
    let headers = &parts.headers;
    let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().copied();
    let settings = app.config.current();
    let (Some(serve), Some(queue)) = (settings.edge.serve(), app.edge_queue.as_ref()) else {
        return Err(PullRefused::NotAnEdge);
    };
    let client =
        peer.and_then(|ConnectInfo(peer)| settings.trusted_proxies.client(peer.ip(), headers));
    let now = std::time::Instant::now();
    if let Some(client) = &client {
        if app.api_limiter.check(client, now).is_err() {
            return Err(PullRefused::LockedOut);
        }
    }
    if serve.pull_token.matches(presented_bearer(headers)) {
        return Ok(queue.clone());
    }
    if let Some(client) = &client {
        app.api_limiter.record_failure(client, now);
    }
    Err(PullRefused::Unauthorized)
}

/// Why `/edge/pull` or `/edge/ack` was refused before anything was read.
#[derive(Debug, Clone, Copy)]
enum PullRefused {
    /// This node is no edge: 404.
    NotAnEdge,
    /// The pull token was missing or wrong: 401.
    Unauthorized,
    /// Too many wrong pull tokens from this client: 429.
    LockedOut,
}

impl IntoResponse for PullRefused {
    fn into_response(self) -> Response {
        let (status, text) = match self {
            PullRefused::NotAnEdge => (StatusCode::NOT_FOUND, "Not Found"),
            PullRefused::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized"),
            PullRefused::LockedOut => (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests"),
        };
        json_error(status, text)
    }
}
