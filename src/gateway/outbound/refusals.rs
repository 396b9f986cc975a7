//! `request.refused`: a hook request refused (any 4xx or 5xx answer made of a refusal,
//! docs/http-contract.md) told to the endpoints that subscribe to it (docs/outbound.md). Its
//! messages are written in a transaction of their own once the answer is made, never in the
//! answer's way, and at most `outbound.endpoints[].refusedPerMinute` per endpoint and minute on
//! each node ([`RefusalGate`]): beyond it a refusal is counted, not written, and the next message
//! written says how many were left out, so that whoever reaches the hooks cannot make the store
//! write per request.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde::Serialize;

use super::outbox_rows::OutboxItem;
use super::webhooks::{Destination, Envelope, WebhookMessage};
use crate::config::outbound::{Endpoint, Event, OutboundSettings};
use crate::gateway::clock::rfc3339;
use crate::gateway::requests::{RequestRecord, cut};

/// The most of a refusal's text a message carries: a field rule's answer may name what the
/// sender sent (`model not allowed: …`), which is the sender's to make long.
const MAX_ERROR: usize = 256;

/// The `data` of a `request.refused` message: what the sender was answered and where it
/// knocked, never a credential, a header's value or the body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RefusedData<'a> {
    /// The `X-Request-Id` of the refusal's answer.
    request_id: &'a str,
    status: u16,
    /// The refusal's text as the sender got it, at most [`MAX_ERROR`] bytes.
    error: String,
    /// The mapping the refusal is attributed to, when one matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    mapping: Option<&'a str>,
    /// The path only, bounded as the request log keeps it.
    path: &'a str,
    method: &'a str,
    /// The client as the request log counts it (an IPv6 client by its /64).
    #[serde(skip_serializing_if = "Option::is_none")]
    client_address: Option<&'a str>,
    /// Refusals for this endpoint left out since its last message, beyond its bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    suppressed: Option<u64>,
}

/// One endpoint's count in the current minute.
#[derive(Debug, Default)]
struct Window {
    /// The minute (Unix ms / 60 000) of the refusals' records that `written` counts in.
    minute: i64,
    written: u32,
    /// Refusals counted, not written, since this endpoint's last message.
    suppressed: u64,
}

/// How often a failure to write refusals' messages is logged at most.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// The per-endpoint bound on `request.refused` messages written, on this node: a fixed
/// one-minute window per endpoint id, by the time each refusal was received (its record's), so
/// that which refusals a minute wrote follows from their records alone. Held for as long as a
/// refusal's messages take to build.
#[derive(Debug, Default)]
pub struct RefusalGate {
    windows: Mutex<HashMap<String, Window>>,
    /// When a failure to write was last logged, and the messages lost since.
    failures: Mutex<(Option<Instant>, u64)>,
}

/// A refusal's messages, and what each told, to be given back to the gate if they cannot be
/// written ([`RefusalGate::give_back`]).
#[derive(Debug, Default)]
pub struct RefusalMessages {
    pub messages: Vec<WebhookMessage>,
    told: Vec<Told>,
}

/// An endpoint's message: the refusals it tells of beside its own.
#[derive(Debug)]
struct Told {
    endpoint: String,
    suppressed: u64,
}

impl RefusalGate {
    /// The messages the refusal `record` (finished, with its status and error) makes: one to
    /// each endpoint subscribed ([`OutboundSettings::refused_subscribers`]) whose bound has room
    /// in the minute of the record's time (also the message's `timestamp`); each other endpoint
    /// counts it as suppressed. A suppressed refusal costs a map lookup and a count.
    pub fn messages(&self, outbound: &OutboundSettings, record: &RequestRecord) -> RefusalMessages {
        let mapping = record.mapping_id.as_deref();
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let mut timestamp = None;
        let mut made = RefusalMessages::default();
        for endpoint in outbound.refused_subscribers(mapping) {
            let admitted = match windows.get_mut(endpoint.id.as_str()) {
                Some(window) => admit(window, endpoint, record.at_ms),
                // An endpoint's first refusal: always within its bound (at least 1).
                None => admit(
                    windows.entry(endpoint.id.clone()).or_default(),
                    endpoint,
                    record.at_ms,
                ),
            };
            let Some(suppressed) = admitted else {
                continue;
            };
            let data = RefusedData {
                request_id: &record.request_id,
                status: record.status,
                error: cut(record.error.as_deref().unwrap_or_default(), MAX_ERROR),
                mapping,
                path: &record.target,
                method: &record.method,
                client_address: record.client.as_deref(),
                suppressed: (suppressed > 0).then_some(suppressed),
            };
            let body = Envelope {
                kind: Event::RequestRefused.as_str(),
                timestamp: timestamp.get_or_insert_with(|| rfc3339(record.at_ms)),
                data,
            };
            let body = serde_json::to_string(&body).unwrap_or_default();
            let to = Destination::Endpoint {
                id: endpoint.id.clone(),
            };
            made.messages.push(WebhookMessage::new(
                to,
                Event::RequestRefused.as_str(),
                body,
            ));
            made.told.push(Told {
                endpoint: endpoint.id.clone(),
                suppressed,
            });
        }
        made
    }

    /// `made`'s messages could not be written: each endpoint counts the refusals its message
    /// told of, and the refusal itself, as suppressed again, so that its next message tells
    /// of them. Logs the failure `err`, once a minute at most.
    pub fn give_back(&self, made: &RefusalMessages, err: &dyn std::fmt::Display) {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        for told in &made.told {
            let window = windows.entry(told.endpoint.clone()).or_default();
            window.suppressed += told.suppressed + 1;
        }
        drop(windows);
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (logged, lost) = &mut *failures;
        *lost += made.told.len() as u64;
        let now = Instant::now();
        if logged.is_some_and(|at| now.duration_since(at) < FAILURE_LOG_EVERY) {
            return;
        }
        tracing::error!(
            %err,
            lost = *lost,
            "cannot write request.refused messages: counted as suppressed (logged again at most \
             once a minute)"
        );
        *logged = Some(now);
        *lost = 0;
    }
}

/// Counts one refusal received at `at_ms` in `window`: `Some(suppressed)` (how many were left
/// out before it) when it is written, `None` when the endpoint's bound for its minute is
/// reached. A refusal of an earlier minute than the window's (one that took longer to answer
/// than the next) counts in the window's.
fn admit(window: &mut Window, endpoint: &Endpoint, at_ms: i64) -> Option<u64> {
    let minute = at_ms.div_euclid(60_000);
    if minute > window.minute {
        window.minute = minute;
        window.written = 0;
    }
    if window.written >= endpoint.refused_per_minute {
        window.suppressed += 1;
        return None;
    }
    window.written += 1;
    Some(std::mem::take(&mut window.suppressed))
}

/// Writes refusals' `messages`, pending, to the outbox. None is there already: each has a
/// fresh UUIDv7 id, and a NATS view applies a fact once (it commits the fact's sequence as
/// `applied` in the transaction that applies it, src/gateway/nats/projection.rs).
pub fn write(conn: &Connection, messages: &[WebhookMessage]) -> rusqlite::Result<()> {
    for message in messages {
        OutboxItem::Webhook(message.clone()).insert(conn, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(bound: u32) -> Endpoint {
        Endpoint {
            id: "ops".into(),
            url: "http://127.0.0.1/events".into(),
            secrets: Vec::new(),
            events: vec![Event::RequestRefused],
            mappings: None,
            agents: None,
            refused_per_minute: bound,
        }
    }

    #[test]
    fn beyond_the_bound_refusals_are_counted_and_told_with_the_next_message() {
        let (mut window, endpoint) = (Window::default(), endpoint(2));
        let minute = 60_000 * 1000;
        assert_eq!(admit(&mut window, &endpoint, minute), Some(0));
        assert_eq!(admit(&mut window, &endpoint, minute + 1), Some(0));
        assert_eq!(admit(&mut window, &endpoint, minute + 2), None);
        assert_eq!(admit(&mut window, &endpoint, minute + 3), None);
        // The next minute writes again, and its first message tells of the two left out.
        assert_eq!(admit(&mut window, &endpoint, minute + 60_000), Some(2));
        assert_eq!(admit(&mut window, &endpoint, minute + 60_001), Some(0));
        // A refusal received in the minute before, answered late: counted in this one.
        assert_eq!(admit(&mut window, &endpoint, minute + 59_999), None);
        assert_eq!(admit(&mut window, &endpoint, minute + 120_000), Some(1));
    }

    #[test]
    fn messages_that_cannot_be_written_are_told_as_suppressed_with_the_next() {
        let gate = RefusalGate::default();
        let endpoint = endpoint(1);
        let minute = 60_000 * 1000;
        let mut windows = gate.windows.lock().unwrap();
        let window = windows.entry("ops".into()).or_default();
        assert_eq!(admit(window, &endpoint, minute), Some(0));
        assert_eq!(admit(window, &endpoint, minute + 1), None);
        assert_eq!(admit(window, &endpoint, minute + 60_000), Some(1));
        drop(windows);
        // That message, telling of one, is lost: the next tells of it and of its refusal.
        let lost = RefusalMessages {
            messages: Vec::new(),
            told: vec![Told {
                endpoint: "ops".into(),
                suppressed: 1,
            }],
        };
        gate.give_back(&lost, &"disk full");
        let mut windows = gate.windows.lock().unwrap();
        let window = windows.get_mut("ops").unwrap();
        assert_eq!(admit(window, &endpoint, minute + 120_000), Some(2));
    }
}
