//! Authentication by hook token or, for mappings that declare one, by the provider's signature;
//! and replay protection for signed deliveries.

use std::net::SocketAddr;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::{presented_token, token_matches};
use super::client::client_address;
use super::reply::HookError;
use super::reply::json_error;
use crate::config::{HookSettings, Settings};
use crate::gateway::deliveries::{Claim, RecordedAnswer};
use crate::gateway::runtime_clock::now_ms;
use crate::hook::signature::{SignatureRule, verify};
use crate::mapping::{self, Mapping};

/// How a request may be served.
pub enum Credential<'a> {
    /// It presented the hook token.
    Token,
    /// It did not, but its name belongs to a signed mapping: its signature decides, once the
    /// body has been read.
    Signature {
        mapping: &'a Mapping,
        rule: &'a SignatureRule,
    },
}

/// Step 4 of the pipeline. A locked-out client is refused whatever it presents, the right token
/// included, so that 429 versus 200 cannot confirm a guess; otherwise a wrong or missing token is
/// refused at once unless the name belongs to a signed mapping.
pub fn authenticate<'a>(
    app: &AppState,
    settings: &Settings,
    hooks: &'a HookSettings,
    peer: SocketAddr,
    headers: &HeaderMap,
    name: &str,
) -> Result<Credential<'a>, HookError> {
    let client = client_address(peer.ip(), headers, &settings.trusted_proxies);
    let now = Instant::now();
    if let Err(retry_after) = app.limiter.check(client, now) {
        return Err(HookError::LockedOut { retry_after });
    }
    if token_matches(presented_token(headers), &hooks.token) {
        app.limiter.clear(client);
        return Ok(Credential::Token);
    }
    if let Some((mapping, rule)) = mapping::signature_for(&hooks.mappings, name) {
        return Ok(Credential::Signature { mapping, rule });
    }
    app.limiter.record_failure(client, now);
    tracing::info!(%client, "hook authentication failed");
    Err(HookError::Unauthorized)
}

/// Checks a signed request's signature over the raw body. On success returns the replay key
/// `<mapping id>:<delivery id>`; a failure counts toward the lockout and is a plain 401.
pub fn check_signature(
    app: &AppState,
    settings: &Settings,
    peer: SocketAddr,
    headers: &HeaderMap,
    mapping: &Mapping,
    rule: &SignatureRule,
    body: &[u8],
) -> Result<String, HookError> {
    let client = client_address(peer.ip(), headers, &settings.trusted_proxies);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    let now_unix = now_ms() / 1000;
    match verify(rule, &header, body, now_unix) {
        Ok(verified) => {
            app.limiter.clear(client);
            Ok(format!("{}:{}", mapping.id, verified.delivery_id))
        }
        Err(reason) => {
            app.limiter.record_failure(client, Instant::now());
            tracing::info!(%client, mapping = %mapping.id, %reason, "signature refused");
            Err(HookError::Unauthorized)
        }
    }
}

/// Claims a signed delivery before it is processed. `Some(response)` when it must not be
/// processed: a redelivery gets the first answer, and a copy arriving while the first is still
/// in progress gets 409 (providers retry on it, and then get the first answer).
pub async fn claim(app: &AppState, key: &str) -> Result<Option<Response>, HookError> {
    let claim = app.runtime.claim_delivery(key).await?;
    Ok(match claim {
        Claim::Claimed => None,
        Claim::InProgress => Some(json_error(StatusCode::CONFLICT, "delivery in progress")),
        Claim::Answered(answer) => {
            tracing::info!("redelivery answered from the replay record");
            let mut response = (
                StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK),
                answer.body,
            )
                .into_response();
            if let Some(value) = answer
                .content_type
                .and_then(|c| HeaderValue::from_str(&c).ok())
            {
                response.headers_mut().insert(header::CONTENT_TYPE, value);
            }
            Some(response)
        }
    })
}

/// Records the answer to a claimed delivery and returns it unchanged; a server error releases
/// the claim instead, so that the provider's retry gets the chance to succeed.
pub async fn settle(app: &AppState, key: String, response: Response) -> Response {
    if response.status().is_server_error() {
        if let Err(err) = app.runtime.release_delivery(key).await {
            tracing::error!(%err, "cannot release a delivery claim");
        }
        return response;
    }
    let (parts, body) = response.into_parts();
    // Our own answers: small JSON or a transform's reply, bounded by its output limit.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return HookError::Internal("cannot buffer the response".into()).into_response();
    };
    let answer = RecordedAnswer {
        status: parts.status.as_u16(),
        content_type: parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(String::from),
        body: bytes.to_vec(),
    };
    if let Err(err) = app.runtime.answer_delivery(key, answer).await {
        tracing::error!(%err, "cannot record a delivery for replay protection");
    }
    Response::from_parts(parts, Body::from(bytes))
}
