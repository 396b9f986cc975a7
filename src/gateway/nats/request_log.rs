//! The cluster's request log (docs/cluster.md#the-request-log-in-a-cluster): a stream of its
//! own, `<stream>-requests`, to which every node publishes the records its request log writes
//! (captures included), and from which every node indexes every node's records into its own
//! `requests.db`. A stream apart from the facts' one: its limits are the request log's
//! retention, not the runs', and no view applies it.
//!
//! A message is a JSON array of records, each the record as `GET /api/requests/{id}` shows it
//! with `atMs` and its `capture` beside it; its message id is its first record's id, so a
//! publish retried after a lost acknowledgement is stored once.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, DeliverPolicy};
use async_nats::jetstream::stream;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Cluster, ClusterError};
use crate::gateway::requests::RequestRecord;
use crate::hook::capture::Captured;

/// How long the stream remembers a message id: a publish retried within it is stored once.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The header naming the process that published a message: it skips its own messages when
/// it indexes the stream, since its writer wrote their records already.
const PUBLISHER: &str = "Hookgate-Publisher";

/// The operator's bounds on the request log (`gateway.retention.requests`,
/// `.requestsMaxBytes`), which the stream takes as its `max_age` and `max_bytes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamLimits {
    /// `None`: kept for good.
    pub max_age: Option<Duration>,
    /// `None`: no bound in bytes.
    pub max_bytes: Option<u64>,
}

/// The cluster's request stream, as one node publishes to it and follows it. Cheap to clone.
#[derive(Clone)]
pub struct RequestStream {
    cluster: Cluster,
    name: String,
    subject: String,
    /// This process, in the [`PUBLISHER`] header (a restarted node is another publisher, and
    /// indexes what it published before, which its file may have lost).
    publisher: String,
}

/// A record as a message carries it: the record's own serde form, with what that form skips.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Carried<R, C> {
    #[serde(flatten)]
    record: R,
    at_ms: i64,
    capture: Option<C>,
}

/// Records that no message can carry, even without their capture (counted, not published).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unsendable(pub u64);

impl RequestStream {
    /// Creates the stream `<stream>-requests` with `limits`, or sets them on the existing one
    /// (they are the operator's configuration, not a setting made by hand on the stream).
    pub async fn open(cluster: &Cluster, limits: StreamLimits) -> Result<Self, ClusterError> {
        let name = format!("{}-requests", cluster.names.stream);
        let stream = RequestStream {
            cluster: cluster.clone(),
            subject: format!("{name}.records"),
            name,
            publisher: uuid::Uuid::new_v4().to_string(),
        };
        stream.set_limits(limits).await?;
        Ok(stream)
    }

    /// The stream's name, which the log notes its indexed sequence under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets `limits` on the stream (creating it when missing): the oldest messages go first
    /// past either.
    pub async fn set_limits(&self, limits: StreamLimits) -> Result<(), ClusterError> {
        let max_age = limits.max_age.unwrap_or(Duration::ZERO);
        let config = stream::Config {
            name: self.name.clone(),
            subjects: vec![self.subject.clone()],
            description: Some("hookgate: every node's request log records".into()),
            storage: stream::StorageType::File,
            num_replicas: self.cluster.names.replicas,
            max_age,
            max_bytes: limits
                .max_bytes
                .map_or(-1, |bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
            discard: stream::DiscardPolicy::Old,
            // The server refuses a window longer than the messages live.
            duplicate_window: if max_age.is_zero() {
                DUPLICATE_WINDOW
            } else {
                DUPLICATE_WINDOW.min(max_age)
            },
            ..Default::default()
        };
        self.cluster
            .js
            .create_or_update_stream(config)
            .await
            .map(drop)
            .map_err(|e| ClusterError::new(format!("cannot create stream {}", self.name), e))
    }

    /// Publishes `records` in as few messages as the servers' `max_payload` allows, each once
    /// acknowledged (up to 5 s each, retries included). Returns the records no message could
    /// carry. Costs a JSON encoding of each record and its capture, on a blocking thread.
    pub async fn publish(&self, records: Arc<[RequestRecord]>) -> Result<Unsendable, ClusterError> {
        // Headers and the subject take a little room of their own.
        let limit = self.cluster.max_payload().saturating_sub(1024);
        let (messages, unsendable) = tokio::task::spawn_blocking(move || encode(&records, limit))
            .await
            .map_err(|e| ClusterError::new("cannot encode request records", e))?;
        for (msg_id, payload) in messages {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id.as_str());
            headers.insert(PUBLISHER, self.publisher.as_str());
            self.cluster
                .publish_payload(self.subject.clone(), payload.into(), headers)
                .await?;
        }
        Ok(unsendable)
    }

    /// The stream's last sequence.
    pub async fn last_sequence(&self) -> Result<u64, ClusterError> {
        let mut stream = self.stream().await?;
        let info = stream
            .info()
            .await
            .map_err(|e| ClusterError::new("cannot read the request stream", e))?;
        Ok(info.state.last_sequence)
    }

    /// Follows the stream from the message after sequence `after` (from its first when 0),
    /// through an ordered consumer of this node's own (made again by the client when it
    /// misses a message).
    pub async fn follow(&self, after: u64) -> Result<Follower, ClusterError> {
        let deliver_policy = match after {
            0 => DeliverPolicy::All,
            after => DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
        };
        let ordered = self
            .stream()
            .await?
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| ClusterError::new("cannot follow the request stream", e))?;
        let messages = ordered
            .messages()
            .await
            .map_err(|e| ClusterError::new("cannot follow the request stream", e))?;
        Ok(Follower {
            messages,
            publisher: self.publisher.clone(),
        })
    }

    /// Resolves on the next reconnection to the servers (see [`Cluster::reconnection`]).
    pub fn reconnection(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.cluster.reconnection()
    }

    async fn stream(&self) -> Result<stream::Stream, ClusterError> {
        self.cluster
            .js
            .get_stream(&self.name)
            .await
            .map_err(|e| ClusterError::new("cannot open the request stream", e))
    }
}

/// A node's reading of the stream, in order.
pub struct Follower {
    messages: consumer::pull::Ordered,
    /// This process's messages, skipped.
    publisher: String,
}

/// Messages read in one go: their records, and the sequence of the last.
pub struct Read {
    pub records: Vec<RequestRecord>,
    pub last: u64,
}

impl Follower {
    /// Waits for the next message, then takes those that have already arrived behind it, up
    /// to `max` in all, and decodes them off the async threads (a message may hold a MiB of
    /// captures). This process's own messages, and one that holds no records (logged), are
    /// skipped. `None` when the consumer ended.
    pub async fn next(&mut self, max: usize) -> Option<Result<Read, ClusterError>> {
        let mut payloads = Vec::new();
        let mut last = 0;
        let mut taken = 0;
        let mut next = Some(self.messages.next().await?);
        while let Some(message) = next.take() {
            let read = message
                .map_err(|e| ClusterError::new("request stream read", e))
                .and_then(|message| {
                    let info = message
                        .info()
                        .map_err(|e| ClusterError::new("request stream read", e))?;
                    Ok((info.stream_sequence, message))
                });
            let (sequence, message) = match read {
                Ok(read) => read,
                Err(err) => return Some(Err(err)),
            };
            last = sequence;
            taken += 1;
            let own = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(PUBLISHER))
                .is_some_and(|publisher| publisher.as_str() == self.publisher);
            if !own {
                payloads.push((sequence, message.payload.clone()));
            }
            if taken < max {
                // Whatever has already arrived joins this read; nothing waits for more.
                next = tokio::time::timeout(Duration::ZERO, self.messages.next())
                    .await
                    .ok()
                    .flatten();
            }
        }
        let decoded = tokio::task::spawn_blocking(move || decode_all(&payloads)).await;
        let records = decoded.map_err(|e| ClusterError::new("request stream read", e));
        Some(records.map(|records| Read { records, last }))
    }
}

/// The records of `payloads`, each with its stream sequence.
fn decode_all(payloads: &[(u64, bytes::Bytes)]) -> Vec<RequestRecord> {
    let mut records = Vec::new();
    for (sequence, payload) in payloads {
        match decode_records(payload) {
            Ok((decoded, 0)) => records.extend(decoded),
            Ok((decoded, unreadable)) => {
                // Written by a newer node, with a value this version does not know.
                tracing::warn!(
                    sequence,
                    unreadable,
                    "skipping request records this version cannot read"
                );
                records.extend(decoded);
            }
            Err(err) => {
                tracing::warn!(sequence, %err, "skipping a request stream message that is not records")
            }
        }
    }
    records
}

/// An element of a message: a record this version reads, or one it does not (a newer node's,
/// with a value this version does not know), which is skipped alone, not with its message.
#[derive(Deserialize)]
#[serde(untagged)]
enum Element {
    Record(Box<Carried<RequestRecord, Captured>>),
    Unreadable(serde::de::IgnoredAny),
}

/// The records of one message of the stream, with their `at_ms` and captures, and how many of
/// its elements were not records this version reads.
fn decode_records(payload: &[u8]) -> Result<(Vec<RequestRecord>, usize), serde_json::Error> {
    let elements: Vec<Element> = serde_json::from_slice(payload)?;
    let mut unreadable = 0;
    let records = elements
        .into_iter()
        .filter_map(|element| match element {
            Element::Record(carried) => {
                let mut record = carried.record;
                record.at_ms = carried.at_ms;
                record.capture = carried.capture;
                Some(record)
            }
            Element::Unreadable(_) => {
                unreadable += 1;
                None
            }
        })
        .collect();
    Ok((records, unreadable))
}

/// `records` as messages of at most `limit` bytes each, with their message ids: JSON arrays of
/// as many records as fit. A record that fits in no message goes without its capture (it is
/// then shown as not captured on the other nodes); one that fits in none even so is left out
/// and counted.
fn encode(records: &[RequestRecord], limit: usize) -> (Vec<(String, Vec<u8>)>, Unsendable) {
    let mut messages = Vec::new();
    let mut unsendable = Unsendable::default();
    let mut current: Option<(String, Vec<u8>)> = None;
    for record in records {
        let Some(encoded) = encode_one(record, limit.saturating_sub(2)) else {
            unsendable.0 += 1;
            continue;
        };
        if let Some((_, payload)) = &current
            && payload.len() + 1 + encoded.len() + 1 > limit
        {
            messages.extend(current.take().map(close));
        }
        match &mut current {
            Some((_, payload)) => {
                payload.push(b',');
                payload.extend_from_slice(&encoded);
            }
            None => {
                let mut payload = Vec::with_capacity(limit.min(64 * 1024));
                payload.push(b'[');
                payload.extend_from_slice(&encoded);
                current = Some((record.id.clone(), payload));
            }
        }
    }
    messages.extend(current.map(close));
    (messages, unsendable)
}

fn close((msg_id, mut payload): (String, Vec<u8>)) -> (String, Vec<u8>) {
    payload.push(b']');
    (msg_id, payload)
}

/// One record's JSON in at most `limit` bytes: with its capture, else without it, else `None`.
fn encode_one(record: &RequestRecord, limit: usize) -> Option<Vec<u8>> {
    let carried = Carried {
        record,
        at_ms: record.at_ms,
        capture: record.capture.as_ref(),
    };
    // Plain data: strings, numbers and byte strings as base64 always serialise.
    let encoded = serde_json::to_vec(&carried).ok()?;
    if encoded.len() <= limit {
        return Some(encoded);
    }
    let bare = RequestRecord {
        capture: None,
        captured: false,
        ..record.clone()
    };
    let carried = Carried::<_, Captured> {
        record: &bare,
        at_ms: bare.at_ms,
        capture: None,
    };
    serde_json::to_vec(&carried)
        .ok()
        .filter(|encoded| encoded.len() <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, body: usize) -> RequestRecord {
        RequestRecord {
            id: id.to_string(),
            at_ms: 1_800_000_000_000,
            method: "POST".into(),
            target: "/hooks/github".into(),
            status: 200,
            run_ids: vec!["r1".into()],
            captured: body > 0,
            capture: (body > 0).then(|| Captured {
                headers: vec![("x-github-event".into(), "issues".into())],
                query: None,
                body: Some(vec![0xff; body]),
                note: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn records_come_back_as_they_went_with_time_and_capture() {
        let records = vec![record("a", 10), record("b", 0)];
        let (messages, unsendable) = encode(&records, 1 << 20);
        assert_eq!(unsendable, Unsendable(0));
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].0, "a", "the first record's id is the message's");
        assert_eq!(decode_records(&messages[0].1).unwrap(), (records, 0));
    }

    #[test]
    fn messages_stay_within_the_limit_and_a_capture_too_large_for_any_is_left_out() {
        let records = vec![
            record("a", 300),
            record("b", 300),
            record("c", 5000),
            record("d", 0),
        ];
        let (messages, unsendable) = encode(&records, 1000);
        assert_eq!(unsendable, Unsendable(0));
        assert!(messages.iter().all(|(_, m)| m.len() <= 1000));
        let decoded: Vec<RequestRecord> = messages
            .iter()
            .flat_map(|(_, m)| decode_records(m).unwrap().0)
            .collect();
        let ids: Vec<&str> = decoded.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(decoded[0], records[0]);
        assert!(!decoded[2].captured && decoded[2].capture.is_none());
        let (_, unsendable) = encode(&records, 50);
        assert_eq!(unsendable, Unsendable(4), "no record fits in 50 bytes");
    }

    #[test]
    fn a_record_this_version_cannot_read_is_skipped_alone() {
        let (messages, _) = encode(&[record("a", 0), record("b", 0)], 1 << 20);
        let text = String::from_utf8(messages[0].1.clone()).unwrap();
        let from_a_newer_node =
            text.replacen("\"outcome\":null", "\"outcome\":\"from-the-future\"", 1);
        assert_ne!(text, from_a_newer_node);
        let (records, unreadable) = decode_records(from_a_newer_node.as_bytes()).unwrap();
        assert_eq!(unreadable, 1);
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b"]);
    }
}
