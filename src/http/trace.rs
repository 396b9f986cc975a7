//! What the request log records of one hook request, filled in as the pipeline goes
//! (docs/operations.md#the-request-log): each step that learns something (the mapping, the
//! signature, the transform's outcome, the run or event made) writes it here, and the
//! dispatcher hands the finished record to the log once the answer is known.

use std::time::Instant;

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use bytes::Bytes;
use uuid::Uuid;

use crate::client::ClientKey;
use crate::config::HookSettings;
use crate::gateway::EventOutcome;
use crate::gateway::requests::{
    Repeat, RequestRecord, SignatureTrace, TransformTrace, TransformVerdict, recorded_method,
    recorded_path,
};
use crate::gateway::runtime_clock::now_ms;
use crate::hook::capture::CaptureJob;

use super::reply::HookError;
use super::request_id::RequestId;

/// One hook request's record in the making.
pub(super) struct Trace {
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

impl Trace {
    /// Begins the record of request `id` from `client`; `keep_headers` when a capture may want
    /// them. The record takes the request's id as its own when it is ours (so `X-Request-Id`
    /// finds it), and a fresh one when the client chose it.
    pub fn begin(
        id: &RequestId,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client: Option<ClientKey>,
        keep_headers: bool,
    ) -> Trace {
        let at_ms = now_ms();
        Trace {
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
        }
    }

    /// The record's id.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    /// The token or a verified signature admitted the request.
    pub fn authenticated(&mut self) {
        self.authenticated = true;
    }

    /// The request was refused with `err`: the text the client got, and why in the operator's
    /// words (which the client never gets).
    pub fn refused(&mut self, err: &HookError) {
        self.record.error = Some(err.client_message().to_string());
        self.record.reason = err.reason();
    }

    pub fn hook(&mut self, name: &str) {
        self.record.hook = Some(recorded_path(name));
    }

    pub fn mapping(&mut self, id: &str) {
        self.record.mapping_id = Some(id.to_string());
    }

    pub fn body(&mut self, body: &Bytes) {
        self.body = Some(body.clone());
    }

    /// A signature was presented under `scheme`; `verified` once it checked out.
    pub fn signature(&mut self, scheme: &str, verified: bool) {
        self.record.signature = Some(SignatureTrace {
            scheme: scheme.to_string(),
            verified,
        });
    }

    /// One transform call. A `forEach` mapping calls its transform once per element: the
    /// times add up, and the last outcome (or the failure) stands.
    pub fn transform(
        &mut self,
        outcome: TransformVerdict,
        started: Instant,
        failure: Option<&str>,
    ) {
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        let before = self
            .record
            .transform
            .as_ref()
            .map_or(0.0, |t| t.duration_ms);
        self.record.transform = Some(TransformTrace {
            outcome,
            duration_ms: before + elapsed,
            failure: failure.map(String::from),
        });
    }

    pub fn run(&mut self, run_id: &str) {
        self.record.run_ids.push(run_id.to_string());
    }

    pub fn event(&mut self, outcome: EventOutcome) {
        // A batch's wakes answer `queued` when any of them was.
        if self.record.event_outcome != Some(EventOutcome::Queued) {
            self.record.event_outcome = Some(outcome);
        }
    }

    /// The request repeated an earlier one and was answered with its work.
    pub fn repeat(&mut self, repeat: Repeat) {
        self.record.repeat = Some(repeat);
    }

    pub fn replay_of(&mut self, id: &str) {
        self.record.replay_of = Some(id.to_string());
    }

    /// The finished record, with the answer's `status`; the client it counts under; and, for an
    /// authenticated request that `hooks` captures, the material of its capture.
    pub fn finish(
        mut self,
        hooks: &HookSettings,
        status: StatusCode,
    ) -> (RequestRecord, Option<ClientKey>, Option<CaptureJob>) {
        self.record.status = status.as_u16();
        self.record.duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        let policy = hooks.capture_for(
            self.record.mapping_id.as_deref(),
            self.record.hook.as_deref(),
        );
        let job = (self.authenticated && policy.enabled).then(|| {
            let headers = self
                .headers
                .iter()
                .flat_map(|headers| headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
            policy.job(
                headers,
                &hooks.credentials,
                self.query.as_deref(),
                self.body.take().unwrap_or_default(),
            )
        });
        (self.record, self.client, job)
    }
}
