//! The edge's side of docs/edge.md: a hook request is stored whole in the edge's queue
//! ([`accept`], in place of the hook routes) and answered `202` once that is durable; the
//! private node takes what is stored with `GET /edge/pull` and forgets it with
//! `POST /edge/ack`, both behind `edge.serve.pullToken`, which submits no hook.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Json;
use axum::extract::{ConnectInfo, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::AppState;
use super::auth::{presented_bearer, presented_token};
use super::body::read_limited;
use super::reply::{HookError, Refusal, json_error, retry_after_seconds};
use super::request::HookContext;
use super::signed::{self, Attempt};
use super::trace::Trace;
use crate::client::ClientKey;
use crate::config::EdgeServe;
use crate::gateway::edge_queue::{Delivery, EdgeQueue, EdgeStatus, PushError};
use crate::gateway::runtime_clock::now_ms;
use crate::hook::credentials::TOKEN_HEADERS;
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
        .map(|ConnectInfo(peer)| *peer)
        .ok_or_else(|| HookError::internal("no peer address"))?;
    let client = (context.settings.trusted_proxies).client_address(peer.ip(), &parts.headers);
    let hooks = context.hooks()?;
    let open = serve.routes.contains(name)
        && presented_token(&parts.headers).is_none()
        && mapping::signature_for(&hooks.mappings, name).is_none();
    let attempt = match open {
        true => None,
        false => {
            let counted = client.map(ClientKey::of);
            signed::authenticate(app, hooks, counted, &parts.headers, name)?
        }
    };
    let bytes = read_limited(
        &parts.headers,
        body,
        hooks.max_body_bytes,
        hooks.body_timeout,
        &context.settings.connections,
    )
    .await?;
    let by_token = !open && attempt.is_none();
    match attempt {
        // Verified here, claimed at the private node, which keeps the delivery ids.
        Some(Attempt::Signed(attempt)) => drop(signed::check_signature(
            app, context, attempt, &bytes, &trace,
        )?),
        // A form's origin rule admitted it; the private node applies the rule again.
        Some(Attempt::Form(_)) => trace.authenticated(),
        None if by_token => trace.authenticated(),
        None => {}
    }
    let delivery = Delivery {
        seq: 0,
        request_id: trace.record_id(),
        route: name.to_string(),
        received_ms: now_ms(),
        client,
        by_token,
        method: parts.method.to_string(),
        target: context.uri.to_string(),
        headers: stored_headers(&parts.headers),
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

/// The headers kept for the private node: all of them but those that carry the hook token or a
/// session ([`TOKEN_HEADERS`]), which whoever holds the pull token must not read. A request the
/// token admitted is marked so instead ([`Delivery::by_token`]).
fn stored_headers(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .filter(|(name, _)| !TOKEN_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect()
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
    pub deliveries: Vec<Delivery>,
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
/// to `wait` seconds for one when none is there (a long poll). The pull token is checked before
/// the query is read.
pub(super) async fn pull(
    State(app): State<AppState>,
    PullCredential(queue): PullCredential,
    Query(query): Query<PullQuery>,
) -> Response {
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
        deliveries: pulled,
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
/// queue's (the private node then starts over from this queue's start). The pull token is
/// checked before the body is read.
pub(super) async fn ack(
    State(app): State<AppState>,
    PullCredential(queue): PullCredential,
    Json(ack): Json<Ack>,
) -> Response {
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

/// Proof that the request presented this edge's pull token, with the edge's queue. An
/// extractor, so that it runs before the query or body is read: a request without the token is
/// answered `401` and counted toward the lockout however malformed the rest of it is.
pub(super) struct PullCredential(EdgeQueue);

impl FromRequestParts<AppState> for PullCredential {
    type Rejection = PullRefused;

    /// `404` on a node that is no edge; `429` (with `Retry-After`) for a client locked out
    /// after repeated failures, counted as the operator API counts them; `401` without the
    /// pull token.
    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, PullRefused> {
        PullCredential::check(parts, app).map_err(PullRefused)
    }
}

impl PullCredential {
    fn check(parts: &Parts, app: &AppState) -> Result<PullCredential, HookError> {
        let settings = app.config.current();
        let (Some(serve), Some(queue)) = (settings.edge.serve(), app.edge_queue.as_ref()) else {
            return Err(HookError::NotFound);
        };
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(peer)| *peer)
            .ok_or_else(|| HookError::internal("no peer address"))?;
        // A client whose proxy named no address is not counted: see `signed::authenticate`.
        let client = settings.trusted_proxies.client(peer.ip(), &parts.headers);
        let now = std::time::Instant::now();
        if let Some(client) = &client {
            app.api_limiter
                .check(client, now)
                .map_err(|retry_after| HookError::LockedOut { retry_after })?;
        }
        if serve.pull_token.matches(presented_bearer(&parts.headers)) {
            if let Some(client) = &client {
                app.api_limiter.clear(client);
            }
            return Ok(PullCredential(queue.clone()));
        }
        if let Some(client) = &client {
            app.api_limiter.record_failure(client, now);
        }
        Err(HookError::Unauthorized(Refusal::WrongToken))
    }
}

/// Why `/edge/pull` or `/edge/ack` was refused before anything else of it was read: JSON, as
/// the rest of the link's answers are (`{"ok":false,"error":"Unauthorized"}`), with
/// `Retry-After` once locked out.
pub(super) struct PullRefused(HookError);

impl IntoResponse for PullRefused {
    fn into_response(self) -> Response {
        let mut response = json_error(self.0.status(), &self.0.client_message());
        if let HookError::LockedOut { retry_after } = self.0 {
            let seconds = HeaderValue::from(retry_after_seconds(retry_after));
            response.headers_mut().insert(header::RETRY_AFTER, seconds);
        }
        response
    }
}
