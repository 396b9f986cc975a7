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
use crate::gateway::requests::{RequestRecord, SignatureTrace, TransformTrace, TransformVerdict};
use crate::gateway::runtime_clock::now_ms;

/// One hook request's record in the making.
pub(super) struct Trace {
    record: RequestRecord,
    started: Instant,
    client: Option<ClientKey>,
    /// Kept only when some capture is on: what the record may keep of the request.
    headers: Option<HeaderMap>,
    body: Option<Bytes>,
}

impl Trace {
    /// Begins the record of a request from `client`; `keep_headers` when a capture may want
    /// them.
    pub fn begin(
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        client: Option<ClientKey>,
        keep_headers: bool,
    ) -> Trace {
        let at_ms = now_ms();
        Trace {
            record: RequestRecord {
                id: Uuid::now_v7().to_string(),
                at: crate::gateway::runtime_clock::now_rfc3339(),
                at_ms,
                client: client.map(|c| c.to_string()),
                method: method.as_str().to_string(),
                target: uri.to_string(),
                ..RequestRecord::default()
            },
            started: Instant::now(),
            client,
            headers: keep_headers.then(|| headers.clone()),
            body: None,
        }
    }

    /// The record's id, answered as `X-Request-Id`.
    pub fn id(&self) -> &str {
        &self.record.id
    }

    pub fn hook(&mut self, name: &str) {
        self.record.hook = Some(name.to_string());
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

    pub fn replay_of(&mut self, id: &str) {
        self.record.replay_of = Some(id.to_string());
    }

    /// The finished record, with the answer's `status` and `error` text, and what `hooks`
    /// captures of it; and the client it counts under.
    pub fn finish(
        mut self,
        hooks: Option<&HookSettings>,
        status: StatusCode,
        error: Option<String>,
    ) -> (RequestRecord, Option<ClientKey>) {
        self.record.status = status.as_u16();
        self.record.error = error;
        self.record.duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        if let Some(hooks) = hooks {
            let mapping_id = self.record.mapping_id.as_deref();
            let policy = hooks.capture_for(mapping_id);
            if policy.enabled {
                let credential = mapping_id
                    .and_then(|id| hooks.mappings.iter().find(|m| m.id == id))
                    .and_then(|m| m.signature.as_ref())
                    .and_then(|rule| rule.scheme.credential_header());
                let headers = self
                    .headers
                    .iter()
                    .flat_map(|headers| headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())));
                let body = self.body.as_deref().unwrap_or_default();
                self.record.capture = Some(policy.capture(headers, credential, body));
                self.record.captured = true;
            }
        }
        (self.record, self.client)
    }
}
