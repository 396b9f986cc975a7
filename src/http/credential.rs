//! Authentication as extractors, as the operator API's `Operator` is: [`Credential`] is step 4 of
//! the pipeline (docs/http-contract.md), everything that can be decided before the body is read;
//! [`Authenticated`] adds step 6 (the body read and parsed) and, for a signed request, between
//! the two, the signature over those bytes and the claim of its delivery.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use super::AppState;
use super::body::{parse_json, parse_mapped, read_limited};
use super::edge_link::FromEdge;
use super::reply::HookError;
use super::request::{HookContext, HookRequest, extension};
use super::signed::{self, Attempt, DeliverySlot, SignedAttempt};
use super::trace::Trace;
use crate::config::HookSettings;
use crate::hook::signature::AdmittingSignature;

/// How a hook request may be served, as far as its headers tell. Extracting it notes the hook's
/// name in the trace, then refuses with 401 or 429 (docs/http-contract.md, step 4).
pub(super) enum Credential {
    /// It presented the hook token.
    Token,
    /// It did not, but its name belongs to a signed mapping whose credential headers it
    /// presents: the signature over the body decides, once the body has been read.
    Signature(SignedAttempt),
    /// An operator's replay, with the signature that admitted its original when one did.
    Replay(Option<AdmittingSignature>),
    /// No token, on a form mapping's path, and its form rule admitted it: that mapping only.
    Form(AdmittingSignature),
}

impl FromRequestParts<AppState> for Credential {
    type Rejection = HookError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, HookError> {
        let context = HookContext::from_request_parts(parts, app).await?;
        let trace = Trace::from_request_parts(parts, app).await?;
        if !context.name.is_empty() {
            trace.hook(&context.name);
        }
        if let Some(replay) = context.origin.replay() {
            return Ok(Credential::Replay(replay.signed.clone()));
        }
        let client = match parts.extensions.get::<FromEdge>() {
            // Its edge took the hook token (and left it out of what it stored).
            Some(FromEdge { by_token: true }) => return Ok(Credential::Token),
            // Its sender saw only the edge's answer: its failures lock no one out here, where
            // a forged delivery would otherwise hold up the genuine ones queued behind it.
            Some(FromEdge { by_token: false }) => None,
            None => {
                let peer = parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|ConnectInfo(peer)| *peer)
                    .ok_or_else(|| HookError::internal("no peer address"))?;
                context
                    .settings
                    .trusted_proxies
                    .client(peer.ip(), &parts.headers)
            }
        };
        let hooks = context.hooks()?;
        let attempt = signed::authenticate(app, hooks, client, &parts.headers, &context.name)?;
        Ok(match attempt {
            None => Credential::Token,
            Some(Attempt::Signed(attempt)) => Credential::Signature(attempt),
            Some(Attempt::Form(admitted)) => Credential::Form(admitted),
        })
    }
}

/// A hook request authenticated with its body read: the token admitted it, or a signature
/// checked over the body did (its delivery then claimed, so that a redelivery is answered as
/// the first was), or it is an operator's replay.
pub(super) struct Authenticated {
    context: HookContext,
    /// The request's head, with the URI as the client sent it.
    parts: Parts,
    body: Bytes,
    /// The body as JSON (docs/http-contract.md, step 6).
    pub payload: Value,
    /// The signature that admitted it, when one did (its original's, for a replay).
    signed: Option<AdmittingSignature>,
}

/// Why a request was not [`Authenticated`]: a refusal, or for a signed delivery answered
/// before or still in progress, that answer.
pub(super) enum NotAdmitted {
    Refused(HookError),
    Answered(Response),
}

impl From<HookError> for NotAdmitted {
    fn from(err: HookError) -> Self {
        NotAdmitted::Refused(err)
    }
}

impl IntoResponse for NotAdmitted {
    fn into_response(self) -> Response {
        match self {
            NotAdmitted::Refused(err) => err.into_response(),
            NotAdmitted::Answered(answer) => answer,
        }
    }
}

impl FromRequest<AppState> for Authenticated {
    type Rejection = NotAdmitted;

    async fn from_request(request: Request, app: &AppState) -> Result<Self, NotAdmitted> {
        let (mut parts, body) = request.into_parts();
        let credential = Credential::from_request_parts(&mut parts, app).await?;
        let context = HookContext::from_request_parts(&mut parts, app).await?;
        let trace = Trace::from_request_parts(&mut parts, app).await?;
        let bytes = match credential {
            // A replay's body is the one captured: the limits were applied when it came in.
            Credential::Replay(_) => axum::body::to_bytes(body, usize::MAX)
                .await
                .map_err(|_| HookError::Invalid("request body could not be read".into()))?,
            _ => {
                let hooks = context.hooks()?;
                read_limited(
                    &parts.headers,
                    body,
                    hooks.max_body_bytes,
                    hooks.body_timeout,
                    &context.settings.connections,
                )
                .await?
            }
        };
        trace.body(&bytes);
        let signed = match credential {
            Credential::Token => {
                trace.authenticated();
                None
            }
            Credential::Form(admitted) => {
                trace.authenticated();
                trace.admitted_by(&admitted);
                Some(admitted)
            }
            Credential::Replay(signature) => {
                trace.authenticated();
                // The replay carries its original's admission, so a replay of it is held to it
                // too.
                signature.inspect(|signature| trace.admitted_by(signature))
            }
            Credential::Signature(attempt) => {
                Some(claimed(app, &context, &parts, attempt, &bytes, &trace).await?)
            }
        };
        let payload = match context.name.as_str() {
            "wake" | "agent" => parse_json(&bytes)?,
            _ => parse_mapped(&parts.headers, &bytes)?,
        };
        parts.uri = context.uri.clone();
        Ok(Authenticated {
            context,
            parts,
            body: bytes,
            payload,
            signed,
        })
    }
}

/// Checks a signed request's signature over its body and claims its delivery, for the layer
/// that settles it. A delivery answered before, or still in progress, is answered here.
async fn claimed(
    app: &AppState,
    context: &HookContext,
    parts: &Parts,
    attempt: SignedAttempt,
    body: &[u8],
    trace: &Trace,
) -> Result<AdmittingSignature, NotAdmitted> {
    let slot: DeliverySlot = extension(parts, "a signed request outside the delivery layer")?;
    let signature = signed::check_signature(app, context, attempt, body, trace)?;
    trace.authenticated();
    if let Some(key) = &signature.replay_key {
        if let Some(answer) = signed::claim(app, key, trace).await? {
            return Err(NotAdmitted::Answered(answer));
        }
        slot.claimed(key.clone());
    }
    Ok(signature)
}

impl Authenticated {
    /// The hook settings of the request's generation.
    pub fn hooks(&self) -> Result<&HookSettings, HookError> {
        self.context.hooks()
    }

    /// How long a run of the request's generation may take (`runtime.runTimeoutSeconds`).
    pub fn run_timeout(&self) -> std::time::Duration {
        self.context.settings.runtime.run_timeout
    }

    /// The request as the mapped and direct paths take it.
    pub fn request(&self) -> HookRequest<'_> {
        HookRequest {
            name: &self.context.name,
            parts: &self.parts,
            body: &self.body,
            payload: &self.payload,
            signed: self.signed.as_ref(),
        }
    }
}
