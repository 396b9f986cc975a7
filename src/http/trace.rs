//! What the request log records of one hook request, filled in as the pipeline goes
//! (docs/operations.md#the-request-log): the hooks router's outermost layer ([`record`]) begins
//! it and hands it to the steps as a request extension; each step that learns something (the
//! mapping, the signature, the transform's outcome, the run or event made) writes it there, and
//! the layer hands the finished record to the log once the answer is known.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use uuid::Uuid;

use crate::client::ClientKey;
use crate::config::HookSettings;
use crate::gateway::EventOutcome;
use crate::gateway::requests::{
    Repeat, RequestOutcome, RequestRecord, SignatureTrace, TransformTrace, TransformVerdict,
    VerifiedBy, recorded_method, recorded_path,
};
use crate::gateway::runtime_clock::now_ms;
use crate::hook::capture::CaptureJob;
use crate::hook::signature::{AdmittingSignature, SecretUsed};

use super::AppState;
use super::reply::{HookError, Refused};
use super::request::{HookContext, Origin, extension};
use super::request_id::RequestId;

/// The hook endpoints' outermost step: begins the request's record and puts it in the request's
/// extensions as a [`Trace`], answers with what `next` makes of the request, and once the
/// answer is known, notes a refusal (the answer's [`Refused`] extension), finishes the record,
/// tells a refusal to the endpoints subscribed to `request.refused` (without waiting for it)
/// and hands the record to the request log. A replay's record is committed before its answer is
/// returned, so that the answer's id finds it.
pub(super) async fn record<F, Fut>(
    app: &AppState,
    context: &HookContext,
    mut request: Request,
    next: F,
) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let hooks = match context.hooks() {
        Ok(hooks) => hooks,
        Err(err) => return err.into_response(),
    };
    let id = request
        .extensions()
        .get::<RequestId>()
        .cloned()
        .unwrap_or_default();
    let (client, keep_headers) = match &context.origin {
        // A replay counts under no client, and its headers are the ones captured already.
        Origin::Replay(_) => (None, true),
        Origin::Sender | Origin::EdgePull | Origin::Test => {
            let peer = request.extensions().get::<ConnectInfo<SocketAddr>>();
            let client = peer.and_then(|ConnectInfo(peer)| {
                context
                    .settings
                    .trusted_proxies
                    .client(peer.ip(), request.headers())
            });
            (client, hooks.captures_any())
        }
    };
    let trace = Trace::begin(
        &id,
        request.method(),
        &context.uri,
        request.headers(),
        client,
        keep_headers,
    );
    if let Some(replay) = context.origin.replay() {
        trace.replay_of(&replay.of);
    }
    request.extensions_mut().insert(trace.clone());
    let response = next(request).await;
    let refused = match response.extensions().get::<Refused>() {
        Some(Refused(err)) => {
            trace.refused(err);
            true
        }
        None => false,
    };
    let (record, client, capture) = trace.finish(hooks, response.status());
    // With no endpoint subscribed, a refusal costs nothing more.
    let outbound = &context.settings.outbound;
    if refused && outbound.refusals_wanted && tells_refusal(&context.origin, &record) {
        app.runtime.refused(outbound, &record);
    }
    match &context.origin {
        Origin::Replay(_) => app.request_log.record_replay(record, capture).await,
        _ => app.request_log.record(record, client, capture),
    }
    response
}

/// Whether the finished `record` of a refused request from `origin` is told to the endpoints
/// subscribed to `request.refused`: only a sender's own request (not an edge's, whose sender the
/// edge answered, nor an operator's replay or test), and only when it made no run and no event
/// (an answer that failed after its work was committed, such as a completion that could not be
/// read, refused nothing).
fn tells_refusal(origin: &Origin, record: &RequestRecord) -> bool {
    matches!(origin, Origin::Sender) && record.run_ids.is_empty() && record.event_outcome.is_none()
}

/// One hook request's record in the making, shared by the layer that begins and finishes it
/// and every step that adds to it. Cloning costs an `Arc` increment; each note takes a lock
/// for as long as it writes a field, never across an await.
#[derive(Clone)]
pub(super) struct Trace(Arc<Mutex<Draft>>);

struct Draft {
    record: RequestRecord,
    started: Instant,
    client: Option<ClientKey>,
    /// Kept only when some capture is on: what the record may keep of the request.
    headers: Option<HeaderMap>,
    query: Option<String>,
    body: Option<Bytes>,
    /// Whether the token or a signature admitted it: only then is anything of it captured (a
    /// forged request's body is neither stored nor replayable).
    authenticated: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Trace {
    type Rejection = HookError;

    /// The trace [`record`] put in the request; its absence is our bug.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, HookError> {
        extension(parts, "a hook request outside the trace layer")
    }
}

impl Trace {
    /// Begins the record of request `id` from `client`; `keep_headers` when a capture may want
    /// them. The record takes the request's id as its own when it is ours (so `X-Request-Id`
    /// finds it), and a fresh one when the client chose it.
    fn begin(
        id: &RequestId,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client: Option<ClientKey>,
        keep_headers: bool,
    ) -> Trace {
        let at_ms = now_ms();
        Trace(Arc::new(Mutex::new(Draft {
            record: RequestRecord {
                id: if id.is_unique() {
                    id.as_str().to_string()
                } else {
                    Uuid::now_v7().to_string()
                },
                request_id: id.as_str().to_string(),
                at: crate::gateway::runtime_clock::now_rfc3339(),
                at_ms,
                client: client.map(|c| c.to_string()),
                method: recorded_method(method.as_str()),
                // The path only: a query may carry a secret (it is captured, with a `token`
                // redacted, when the request is). Bounded: a refused request's path is the
                // sender's to choose.
                target: recorded_path(uri.path()),
                ..RequestRecord::default()
            },
            started: Instant::now(),
            client,
            headers: keep_headers.then(|| headers.clone()),
            query: uri.query().map(String::from),
            body: None,
            authenticated: false,
        })))
    }

    fn draft(&self) -> MutexGuard<'_, Draft> {
        // Each note writes whole fields: a panic elsewhere cannot leave the draft half-written.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The token or a verified signature admitted the request.
    pub fn authenticated(&self) {
        self.draft().authenticated = true;
    }

    /// The request was refused with `err`: the text the client got, and why in the operator's
    /// words (which the client never gets).
    pub fn refused(&self, err: &HookError) {
        let mut draft = self.draft();
        draft.record.error = Some(err.client_message().into_owned());
        draft.record.reason = err.reason();
        if let HookError::LimitReached(limit) = err {
            draft.record.outcome = Some(limit.kind.into());
        }
    }

    /// The request was answered with the error `text` without a [`HookError`] (a copy of a
    /// signed delivery still in progress).
    pub fn answered_error(&self, text: &str) {
        self.draft().record.error = Some(text.to_string());
    }

    /// How the request ended when its status alone does not say, as admission decided it.
    pub fn outcome(&self, outcome: RequestOutcome) {
        self.draft().record.outcome = Some(outcome);
    }

    /// Mappings matched the request's path and none's conditions held: `reason` names each
    /// with the condition it found unmet.
    pub fn filtered(&self, reason: String) {
        let mut draft = self.draft();
        draft.record.outcome = Some(RequestOutcome::Filtered);
        draft.record.reason = Some(reason);
    }

    /// The record's id: what an edge stores a request under, and its private node's record
    /// names as its `requestId` (docs/edge.md#what-the-operator-sees).
    pub fn record_id(&self) -> String {
        self.draft().record.id.clone()
    }

    pub fn hook(&self, name: &str) {
        self.draft().record.hook = Some(recorded_path(name));
    }

    pub fn mapping(&self, id: &str) {
        self.draft().record.mapping_id = Some(id.to_string());
    }

    pub fn body(&self, body: &Bytes) {
        self.draft().body = Some(body.clone());
    }

    /// A signature was presented under `scheme`, not (yet) verified.
    pub fn signature_presented(&self, scheme: &str) {
        self.draft().record.signature = Some(SignatureTrace {
            scheme: scheme.to_string(),
            verified: false,
            secret: None,
        });
    }

    /// `signature` admitted the request (or, for an operator's replay, its original).
    pub fn admitted_by(&self, signature: &AdmittingSignature) {
        let secret = signature.secret.map(|used| match used {
            SecretUsed::Current => VerifiedBy::Current,
            SecretUsed::Previous => VerifiedBy::Previous,
        });
        self.draft().record.signature = Some(SignatureTrace {
            scheme: signature.scheme.clone(),
            verified: true,
            secret,
        });
    }

    /// One transform call. A `forEach` mapping calls its transform once per element: the
    /// times add up, and the last outcome (or the failure) stands.
    pub fn transform(&self, outcome: TransformVerdict, started: Instant, failure: Option<&str>) {
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        let mut draft = self.draft();
        let before = draft
            .record
            .transform
            .as_ref()
            .map_or(0.0, |t| t.duration_ms);
        draft.record.transform = Some(TransformTrace {
            outcome,
            duration_ms: before + elapsed,
            failure: failure.map(String::from),
        });
    }

    pub fn run(&self, run_id: &str) {
        self.draft().record.run_ids.push(run_id.to_string());
    }

    pub fn event(&self, outcome: EventOutcome) {
        let mut draft = self.draft();
        // A batch's wakes answer `queued` when any of them was.
        if draft.record.event_outcome != Some(EventOutcome::Queued) {
            draft.record.event_outcome = Some(outcome);
        }
    }

    /// The request repeated an earlier one and was answered with its work.
    pub fn repeat(&self, repeat: Repeat) {
        self.draft().record.repeat = Some(repeat);
    }

    pub fn replay_of(&self, id: &str) {
        self.draft().record.replay_of = Some(id.to_string());
    }

    /// The finished record, with the answer's `status`; the client it counts under; and, for an
    /// authenticated request that `hooks` captures, the material of its capture. The record is
    /// taken out: called once, by [`record`], when nothing adds to it any more.
    fn finish(
        &self,
        hooks: &HookSettings,
        status: StatusCode,
    ) -> (RequestRecord, Option<ClientKey>, Option<CaptureJob>) {
        let mut draft = self.draft();
        let draft = &mut *draft;
        draft.record.status = status.as_u16();
        draft.record.duration_ms = draft.started.elapsed().as_secs_f64() * 1000.0;
        let policy = hooks.capture_for(
            draft.record.mapping_id.as_deref(),
            draft.record.hook.as_deref(),
        );
        let job = (draft.authenticated && policy.enabled).then(|| {
            let headers = draft
                .headers
                .iter()
                .flat_map(|headers| headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
            policy.job(
                headers,
                &hooks.credentials,
                draft.query.as_deref(),
                draft.body.take().unwrap_or_default(),
            )
        });
        (std::mem::take(&mut draft.record), draft.client, job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::Replay;

    /// A refusal is told only of a sender's own request, and only when it committed nothing.
    #[test]
    fn only_a_senders_request_that_made_nothing_is_told_refused() {
        let refused = RequestRecord {
            status: 500,
            ..RequestRecord::default()
        };
        assert!(tells_refusal(&Origin::Sender, &refused));
        let replay = Origin::Replay(Replay {
            of: "r-1".into(),
            signed: None,
        });
        for origin in [Origin::EdgePull, Origin::Test, replay] {
            assert!(!tells_refusal(&origin, &refused));
        }
        // Its run committed, its completion unread: a 500 that refused nothing.
        let ran = RequestRecord {
            run_ids: vec!["run-1".into()],
            ..RequestRecord::default()
        };
        assert!(!tells_refusal(&Origin::Sender, &ran));
        let woke = RequestRecord {
            event_outcome: Some(EventOutcome::Queued),
            ..RequestRecord::default()
        };
        assert!(!tells_refusal(&Origin::Sender, &woke));
    }
}
