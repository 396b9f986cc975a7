//! Authentication by hook token or, for mappings that declare one, by the provider's signature;
//! and replay protection for signed deliveries. The extractors of `credential` call these.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::presented_token;
use super::reply::{HookError, Refusal, json_error};
use super::request::HookContext;
use super::trace::Trace;
use crate::client::ClientKey;
use crate::config::HookSettings;
use crate::gateway::admission::replay::{Claim, RecordedAnswer};
use crate::gateway::requests::Repeat;
use crate::gateway::runtime_clock::now_ms;
use crate::hook::signature::{AdmittingSignature, Presented, SignatureError};
use crate::mapping::{self, FORM_SCHEME, FormRule, Mapping};

/// A request on a signed mapping's path whose credential headers were read and found fresh and
/// well-formed: the signature over the body decides, once the body has been read.
pub struct SignedAttempt {
    /// The mapping whose signature it presents, in the request's generation.
    mapping_id: String,
    presented: Presented,
    /// Whom its failures count against: the client on this mapping.
    failures: Option<SignatureFailureKey>,
}

/// How a request without the hook token may still be served, as its headers tell.
pub enum Attempt {
    /// Its signature over the body decides, once the body has been read.
    Signed(SignedAttempt),
    /// A form mapping's rule admitted it (docs/hooks.md#website-forms): it may run that
    /// mapping only, as a signature's request does.
    Form(AdmittingSignature),
}

/// Failed signatures count per client and mapping: junk sent to one mapping cannot lock its
/// provider out (it is another client), nor lock the sender out of other mappings.
pub type SignatureFailureKey = (ClientKey, String);

/// Step 4 of the pipeline, before the body is read.
///
/// The hook token: a locked-out client presenting a token is refused whatever it presents, the
/// right token included, so that 429 versus 200 cannot confirm a guess. A wrong or missing token
/// is refused at once unless the name belongs to a signed mapping; then the request's signature
/// headers must be present, well-formed and fresh (a GitLab token must match), or it is refused
/// before its body can hold the connection. A client whose forwarding proxy named no address is
/// not locked out: counting it under the proxy's address would lock out everyone behind it.
///
/// Without a token, on a form mapping's path (and no signed mapping's), the form rule decides:
/// a refusal there counts toward no lockout (the rule guards no secret to guess).
///
/// `client` is whom failures count against ([`TrustedProxies::client`]), `None` for none: a
/// request a private node pulled from its edge counts against no one, since its sender saw
/// only the edge's answer and learns nothing from this one.
///
/// `None` when the token admitted the request.
///
/// [`TrustedProxies::client`]: crate::client::TrustedProxies::client
pub fn authenticate(
    app: &AppState,
    hooks: &HookSettings,
    client: Option<ClientKey>,
    headers: &HeaderMap,
    name: &str,
) -> Result<Option<Attempt>, HookError> {
    let now = Instant::now();
    let token = presented_token(headers);
    let signed = mapping::signature_for(&hooks.mappings, name);
    let by_token = token.is_some() || signed.is_none();
    if let (Some(client), true) = (client, by_token)
        && let Err(retry_after) = app.limiter.check(&client, now)
    {
        return Err(HookError::LockedOut { retry_after });
    }
    if hooks.token.matches(token) {
        if let Some(client) = client {
            app.limiter.clear(&client);
        }
        return Ok(None);
    }
    if let (None, None, Some((mapping, rule))) =
        (token, &signed, mapping::form_for(&hooks.mappings, name))
    {
        return form_admission(mapping, rule, headers).map(Some);
    }
    if by_token {
        if let Some(client) = client {
            app.limiter.record_failure(&client, now);
        }
        log_client(client, "hook authentication failed");
    }
    let Some((mapping, rule)) = signed else {
        let refusal = match token {
            Some(_) => Refusal::WrongToken,
            None => Refusal::NoToken,
        };
        return Err(HookError::Unauthorized(refusal));
    };
    let failures = client.map(|client| (client, mapping.id.clone()));
    if let Some(key) = &failures
        && let Err(retry_after) = app.signature_limiter.check(key, now)
    {
        return Err(HookError::LockedOut { retry_after });
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(String::from)
    };
    match Presented::read(rule, &header, now_ms() / 1000) {
        Ok(presented) => Ok(Some(Attempt::Signed(SignedAttempt {
            mapping_id: mapping.id.clone(),
            presented,
            failures,
        }))),
        Err(reason) => Err(signature_refused(app, &failures, mapping, reason)),
    }
}

/// A request to form mapping `mapping` without the hook token: admitted for that mapping when
/// `rule` admits its `Origin` and `Content-Type`, else 401 with the reason for the record.
fn form_admission(
    mapping: &Mapping,
    rule: &FormRule,
    headers: &HeaderMap,
) -> Result<Attempt, HookError> {
    let header = |name| headers.get(name).map(HeaderValue::as_bytes);
    match rule.admits(header(header::ORIGIN), header(header::CONTENT_TYPE)) {
        Ok(()) => Ok(Attempt::Form(AdmittingSignature {
            mapping_id: mapping.id.clone(),
            scheme: FORM_SCHEME.into(),
            replay_key: None,
            secret: None,
        })),
        Err(why) => {
            tracing::info!(mapping = %mapping.id, %why, "form refused");
            Err(HookError::Unauthorized(Refusal::Form {
                mapping: mapping.id.clone(),
                why,
            }))
        }
    }
}

/// Checks a signed request's signature over the raw body, noting in `trace` the mapping, the
/// scheme and whether it checked out. On success returns the signature, with the delivery's
/// replay key; a failure counts toward the lockout and is a plain 401 to the client, its reason
/// kept for the request log.
pub fn check_signature(
    app: &AppState,
    context: &HookContext,
    attempt: SignedAttempt,
    body: &[u8],
    trace: &Trace,
) -> Result<AdmittingSignature, HookError> {
    let mapping = context.mapping(&attempt.mapping_id)?;
    let rule = mapping.signature.as_ref().ok_or_else(|| {
        HookError::internal(format!("mapping {} has no signature rule", mapping.id))
    })?;
    trace.mapping(&mapping.id);
    trace.signature_presented(rule.scheme.name());
    match attempt.presented.verify(rule, &mapping.id, body) {
        Ok(signature) => {
            if let Some(key) = &attempt.failures {
                app.signature_limiter.clear(key);
            }
            trace.admitted_by(&signature);
            Ok(signature)
        }
        Err(reason) => Err(signature_refused(app, &attempt.failures, mapping, reason)),
    }
}

fn signature_refused(
    app: &AppState,
    failures: &Option<SignatureFailureKey>,
    mapping: &Mapping,
    reason: SignatureError,
) -> HookError {
    if let Some(key) = failures {
        app.signature_limiter.record_failure(key, Instant::now());
    }
    match failures {
        Some((client, _)) => {
            tracing::info!(%client, mapping = %mapping.id, %reason, "signature refused")
        }
        None => tracing::info!(mapping = %mapping.id, %reason, "signature refused"),
    }
    HookError::Unauthorized(Refusal::Signature(reason))
}

fn log_client(client: Option<ClientKey>, message: &str) {
    match client {
        Some(client) => tracing::info!(%client, "{message}"),
        None => tracing::info!("{message} (the trusted proxy named no client)"),
    }
}

/// The error of a copy of a signed delivery that arrives while the first is processed.
const DELIVERY_IN_PROGRESS: &str = "delivery in progress";

/// Claims a signed delivery before it is processed. `Some(response)` when it must not be
/// processed: a redelivery gets the first answer, and a copy arriving while the first is still
/// in progress gets 409 (providers retry on it, and then get the first answer).
pub async fn claim(
    app: &AppState,
    key: &str,
    trace: &Trace,
) -> Result<Option<Response>, HookError> {
    let claim = app.runtime.claim_delivery(key).await?;
    Ok(match claim {
        Claim::Claimed => None,
        Claim::InProgress => {
            // A copy of the delivery, like a redelivery: a replay of it would run the delivery
            // a second time (its first copy is the one to replay).
            trace.repeat(Repeat::Redelivery);
            trace.answered_error(DELIVERY_IN_PROGRESS);
            Some(json_error(StatusCode::CONFLICT, DELIVERY_IN_PROGRESS))
        }
        Claim::Answered(answer) => {
            tracing::info!("redelivery answered from the replay record");
            trace.repeat(Repeat::Redelivery);
            for run_id in answered_runs(&answer.body) {
                trace.run(&run_id);
            }
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

/// The runs a recorded answer names: our own answers say `runId`, and a batch's all of them in
/// `runIds` too.
fn answered_runs(body: &[u8]) -> Vec<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Runs {
        run_id: Option<String>,
        #[serde(default)]
        run_ids: Vec<String>,
    }
    let Ok(runs) = serde_json::from_slice::<Runs>(body) else {
        // A transform's own answer, which names no run of ours.
        return Vec::new();
    };
    if runs.run_ids.is_empty() {
        runs.run_id.into_iter().collect()
    } else {
        runs.run_ids
    }
}

/// The key of a signed delivery claimed while serving a request: the extractor that claims it
/// fills it in, and [`settle_deliveries`] records the answer under it. One allocation per hook
/// request.
#[derive(Clone, Default)]
pub(super) struct DeliverySlot(Arc<Mutex<Option<String>>>);

impl DeliverySlot {
    /// Notes that the delivery `key` was claimed: its answer is to be recorded.
    pub fn claimed(&self, key: String) {
        *self.lock() = Some(key);
    }

    fn take(&self) -> Option<String> {
        self.lock().take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // A plain value, written whole: a panic elsewhere cannot leave it inconsistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The hook endpoints' step of replay protection: puts a [`DeliverySlot`] in the request, and
/// once `next` has answered a request whose delivery the handler claimed, records that answer
/// (or releases the claim on a server error; see [`settle`]).
pub(super) async fn settle_deliveries<Fut>(
    app: &AppState,
    mut request: Request,
    next: impl FnOnce(Request) -> Fut,
) -> Response
where
    Fut: Future<Output = Response>,
{
    let slot = DeliverySlot::default();
    request.extensions_mut().insert(slot.clone());
    let response = next(request).await;
    match slot.take() {
        Some(key) => settle(app, key, response).await,
        None => response,
    }
}

/// Records the answer to a claimed delivery and returns it unchanged; a server error releases
/// the claim instead, so that the provider's retry gets the chance to succeed.
async fn settle(app: &AppState, key: String, response: Response) -> Response {
    if response.status().is_server_error() {
        if let Err(err) = app.runtime.release_delivery(key).await {
            tracing::error!(%err, "cannot release a delivery claim");
        }
        return response;
    }
    let (parts, body) = response.into_parts();
    // Our own answers: small JSON or a transform's reply, bounded by its output limit.
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(err) => {
            // The trace layer, outside this one, records the request with this 500.
            tracing::error!(%err, "cannot buffer the response of a signed delivery");
            return json_error(StatusCode::INTERNAL_SERVER_ERROR, "internal error");
        }
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
