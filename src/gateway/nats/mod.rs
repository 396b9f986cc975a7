//! The NATS JetStream store: several hookgate nodes share one stream and a few key-value buckets.
//!
//! Everything a node would commit to its SQLite file is published to the stream instead, as a
//! [`Fact`], and a hook is answered 200 only once the stream has acknowledged it (so once a
//! majority of its replicas has stored it). Each node then applies the stream, in order, to a
//! local SQLite file of the same schema as the embedded store: the *view*, which the operator API
//! reads. Since every node applies the same facts in the same order, every view holds the same
//! events and runs, with the same sequence numbers; a view can always be rebuilt from the stream.
//!
//! Work is shared through durable pull consumers with explicit acks (see [`work`]): a run,
//! a heartbeat or a delivery is handed to one node at a time, and to another if that node stops
//! acknowledging. What must be decided once for the whole cluster, an idempotency key, a signed
//! delivery's id, a session key's run in progress, a chat message's send, is decided by an atomic
//! create in a key-value bucket.

mod batches;
mod claims;
mod consumers;
mod dispatch;
mod fact;
pub(crate) mod held;
mod intake;
mod lanes;
mod projection;
mod request_log;
pub(crate) mod run;
mod session_lock;
pub(crate) mod webhooks;
mod work;
mod workers;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, kv, stream};
use tokio::sync::watch;

use crate::config::store::NatsSettings;

pub use batches::Batches;
use consumers::Consumer;
pub(crate) use fact::Fact;
pub use request_log::{Follower, Read, RequestStream, StreamLimits};

/// Added to the run timeout to make the ack wait: a node that stops acknowledging a run's
/// message for this long past the longest a run may take is taken to be gone.
const ACK_MARGIN: Duration = Duration::from_secs(5);

/// How long a publish may take, retries included, before the request is answered 500.
const PUBLISH_DEADLINE: Duration = Duration::from_secs(5);

/// A failure to reach or use JetStream. The message is for the log and for `hookgate check`;
/// it includes its cause, so [`std::error::Error::source`] is `None` (a chain printer shows the
/// cause once) and the typed cause is [`ClusterError::cause`].
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The client, the servers or this node's view failed at what `context` says hookgate was
    /// doing; `cause` is their own error.
    #[error("nats: {context}: {cause}")]
    Failed {
        context: String,
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A fact larger than the servers take in one message (`max_payload`, 1 MiB by default).
    #[error("nats: a {size}-byte message is over the servers' limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
}

impl ClusterError {
    /// `source`, the typed error of the client or the view, failed at `context`.
    fn new(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        ClusterError::Failed {
            context: context.into(),
            cause: source.into(),
        }
    }

    /// The error of the client or the view that this failure's message ends with, for code
    /// that needs its type; `None` for [`ClusterError::TooLarge`], which has no other cause.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            ClusterError::Failed { cause, .. } => Some(cause.as_ref()),
            ClusterError::TooLarge { .. } => None,
        }
    }
}

/// Why a publish's last attempt got no acknowledgement.
#[derive(Debug, thiserror::Error)]
enum Unacknowledged {
    /// The client or the stream refused the publish or its acknowledgement.
    #[error(transparent)]
    Refused(jetstream::context::PublishError),
    /// The acknowledgement did not come before the publish's deadline.
    #[error("no acknowledgement in time")]
    Late,
}

impl From<ClusterError> for super::store::StoreError {
    fn from(err: ClusterError) -> Self {
        use super::store::StoreError;
        match err {
            ClusterError::TooLarge { size, limit } => StoreError::TooLarge { size, limit },
            err @ ClusterError::Failed { .. } => StoreError::Cluster(Box::new(err)),
        }
    }
}

/// The key-value buckets, each with the time-to-live of what it remembers.
#[derive(Clone)]
pub struct Buckets {
    /// Idempotency fingerprint → run id, for the idempotency window.
    pub idempotency: kv::Store,
    /// Signed delivery id → claim or recorded answer, for the replay window.
    pub replay: kv::Store,
    /// Session key → the run in progress, for twice the ack wait (refreshed while it runs).
    pub locks: kv::Store,
    /// Delivery job → `sending` or `retry`, so that no chat message is sent twice.
    pub sends: kv::Store,
    /// Mapping and session key → its batch, open or last closed (`batches`), for two days:
    /// longer than the longest window.
    pub batches: kv::Store,
    /// A webhook's attempt → the node sending it (`webhooks`), for [`webhooks::CLAIM_TTL`].
    pub webhooks: kv::Store,
}

/// A connection to the cluster's stream and buckets. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
    pub names: Names,
    pub buckets: Buckets,
    /// How long a consumer waits for an ack before handing a message to another node.
    pub ack_wait: Duration,
    /// The last stream sequence this node's view has applied.
    applied: std::sync::Arc<watch::Sender<u64>>,
    /// Changes on every reconnection to the servers.
    connections: watch::Receiver<u64>,
    /// The stream's last sequence when this node opened its view.
    at_start: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Whether the view has once read everything there was to read.
    drained: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The messages this node is working on.
    pub in_flight: work::InFlight,
}

/// What hookgate calls its things on the cluster.
#[derive(Debug, Clone)]
pub struct Names {
    pub stream: String,
    pub bucket: String,
    pub replicas: usize,
}

impl Names {
    /// The subject of `suffix` in this stream: `<stream>.<suffix>`.
    pub fn subject(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.stream)
    }
}

impl Cluster {
    /// Connects to `settings.url` and makes sure the stream, buckets and consumers exist with
    /// the settings this configuration needs (creating or updating them). `run_timeout` sets
    /// the consumers' ack wait. Fails within about ten seconds when the servers are unreachable.
    pub async fn connect(
        settings: &NatsSettings,
        run_timeout: Duration,
    ) -> Result<Cluster, ClusterError> {
        let servers = settings
            .url
            .split(',')
            .map(|url| url.trim().parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            // The URL may carry credentials: it is never part of a message.
            .map_err(|e| ClusterError::new("gateway.store.url is not a NATS URL", e))?;
        // Any one of the servers will do; the client learns the rest of the cluster from it and
        // reconnects to whichever is up, for as long as the process runs.
        let (connected, connections) = watch::channel(0u64);
        let client = async_nats::ConnectOptions::new()
            .name(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
            .event_callback(move |event| {
                if matches!(event, async_nats::Event::Connected) {
                    connected.send_modify(|count| *count += 1);
                }
                std::future::ready(())
            })
            .connection_timeout(Duration::from_secs(5))
            .connect(servers)
            .await
            .map_err(|e| ClusterError::new("cannot connect", e))?;
        let js = jetstream::new(client.clone());
        let names = Names {
            stream: settings.stream.clone(),
            bucket: settings.bucket.clone(),
            replicas: settings.replicas,
        };
        let ack_wait = run_timeout.saturating_add(ACK_MARGIN);
        ensure_stream(&js, &names, ack_wait).await?;
        let buckets = ensure_buckets(&js, &names, ack_wait).await?;
        ensure_consumers(&js, &names, ack_wait).await?;
        Ok(Cluster {
            client,
            js,
            names,
            buckets,
            ack_wait,
            applied: std::sync::Arc::new(watch::channel(0).0),
            connections,
            at_start: std::sync::Arc::default(),
            drained: std::sync::Arc::default(),
            in_flight: work::InFlight::default(),
        })
    }

    /// The stream's last sequence number: what a view must reach to be current.
    pub async fn last_sequence(&self) -> Result<u64, ClusterError> {
        Ok(self.stream_state().await?.last_sequence)
    }

    /// The stream's message count and first and last sequence numbers.
    pub async fn stream_state(&self) -> Result<stream::State, ClusterError> {
        let mut stream = self
            .js
            .get_stream(&self.names.stream)
            .await
            .map_err(|e| ClusterError::new("cannot read the stream", e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| ClusterError::new("cannot read the stream", e))?;
        Ok(info.state.clone())
    }

    /// The payload of the stream's message `sequence`, `None` when there is none (never
    /// written, deleted, or trimmed by a limit).
    pub async fn message(&self, sequence: u64) -> Result<Option<bytes::Bytes>, ClusterError> {
        let stream = self
            .js
            .get_stream_no_info(&self.names.stream)
            .await
            .map_err(|e| ClusterError::new("cannot read the stream", e))?;
        match stream.get_raw_message(sequence).await {
            Ok(message) => Ok(Some(message.payload)),
            Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(err) => Err(ClusterError::new("cannot read the stream", err)),
        }
    }

    /// Resolves on the next reconnection to the servers after this call. A pull in flight when
    /// the connection dropped is lost with it: the client would notice only at the pull's own
    /// timeout, so the workers and the projection pull again at once instead.
    pub fn reconnection(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut connections = self.connections.clone();
        connections.mark_unchanged();
        async move {
            if connections.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Lets the work in hand finish for a moment, hands what is left back to the servers for
    /// another node to take at once, and flushes what is still to be sent. For a stopping node.
    pub async fn stop(&self) {
        let limit = work::FINISH_GRACE + Duration::from_secs(1);
        self.in_flight.hand_back(limit).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), self.client.flush()).await;
    }

    /// Whether the client is connected now.
    pub fn connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// Publishes `fact` under `msg_id` and returns its stream sequence once the stream has
    /// acknowledged it. A publish whose acknowledgement does not come is sent again with the
    /// same id, which the stream drops if the first one did land (within its duplicate window).
    pub async fn publish(&self, fact: &Fact, msg_id: &str) -> Result<u64, ClusterError> {
        let subject = self.names.subject(&fact.subject());
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, msg_id);
        self.publish_payload(subject, fact.to_bytes(), headers)
            .await
    }

    /// Publishes `payload` to `subject` (of any stream) with `headers` (a `Nats-Msg-Id` among
    /// them), as [`Cluster::publish`] publishes a fact: sent again alike until acknowledged,
    /// for up to 5 s.
    async fn publish_payload(
        &self,
        subject: String,
        payload: bytes::Bytes,
        headers: async_nats::HeaderMap,
    ) -> Result<u64, ClusterError> {
        // Headers and the subject take a little room of their own.
        let limit = self.max_payload().saturating_sub(1024);
        if payload.len() > limit {
            return Err(ClusterError::TooLarge {
                size: payload.len(),
                limit,
            });
        }
        let deadline = tokio::time::Instant::now() + PUBLISH_DEADLINE;
        let mut last_error = Unacknowledged::Late;
        while tokio::time::Instant::now() < deadline {
            let attempt = async {
                let ack = self
                    .js
                    .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                    .await?;
                ack.await
            };
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(ack)) => return Ok(ack.sequence),
                Ok(Err(err)) => last_error = Unacknowledged::Refused(err),
                Err(_) => last_error = Unacknowledged::Late,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(ClusterError::new(
            format!("publish not acknowledged: {subject}"),
            last_error,
        ))
    }

    /// The largest message the servers take.
    pub fn max_payload(&self) -> usize {
        self.client.server_info().max_payload
    }

    /// Waits until this node's view has applied `sequence`, for at most `limit`; whether it has.
    pub async fn wait_applied(&self, sequence: u64, limit: Duration) -> bool {
        let mut applied = self.applied.subscribe();
        tokio::time::timeout(limit, applied.wait_for(|at| *at >= sequence))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The last sequence this node's view applied.
    pub fn applied(&self) -> u64 {
        *self.applied.borrow()
    }

    /// Whether this node's view has applied everything the stream held when the node started:
    /// until then its operator API shows an older state.
    pub fn caught_up(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.applied() >= self.at_start.load(Relaxed) || self.drained.load(Relaxed)
    }

    fn set_applied(&self, sequence: u64) {
        self.applied.send_replace(sequence);
    }

    /// Consumer `name`, created again (with every other) if it is missing: a stream deleted and
    /// created again under a running node loses its consumers.
    async fn consumer(&self, name: Consumer) -> Result<consumer::PullConsumer, ClusterError> {
        let get = || {
            self.js
                .get_consumer_from_stream(name.durable_name(), &self.names.stream)
        };
        if let Ok(consumer) = get().await {
            return Ok(consumer);
        }
        ensure_consumers(&self.js, &self.names, self.ack_wait).await?;
        get()
            .await
            .map_err(|e| ClusterError::new(format!("cannot open consumer {name}"), e))
    }

    /// How often a worker tells the server that it is still on a message: often enough for
    /// the ack wait this node set, and for a shorter one another node's configuration may have
    /// set since (every node sets the consumers' ack wait from its own run timeout).
    pub fn progress_every(&self) -> Duration {
        (self.ack_wait / 3).clamp(Duration::from_millis(500), Duration::from_secs(2))
    }
}

/// Creates the stream, or updates what hookgate relies on in an existing one (its subjects,
/// duplicate window and replicas) and keeps the rest as it is, limits an operator set included.
async fn ensure_stream(
    js: &jetstream::Context,
    names: &Names,
    ack_wait: Duration,
) -> Result<(), ClusterError> {
    let context = format!("cannot create stream {}", names.stream);
    let existing = match js.get_stream(&names.stream).await {
        Ok(mut stream) => {
            let info = stream.info().await;
            let info = info.map_err(|e| ClusterError::new(&context, e))?;
            Some(info.config.clone())
        }
        Err(err) if is_not_found(&err) => None,
        // Anything else is not an answer: updating with defaults would undo what an operator
        // set on the stream.
        Err(err) => return Err(ClusterError::new(context, err)),
    };
    let mut config = existing.unwrap_or_else(|| stream::Config {
        name: names.stream.clone(),
        storage: stream::StorageType::File,
        description: Some("hookgate: accepted hooks and every change of a run".into()),
        ..Default::default()
    });
    config.subjects = vec![names.subject(">")];
    config.num_replicas = names.replicas;
    // A retried publish of a run is dropped within the idempotency window, so that an
    // idempotent retry answered from the bucket never stores the run twice; and a step
    // repeated by the node that takes over after an ack wait (plus the progress interval) is
    // dropped too.
    config.duplicate_window = crate::hook::idempotency::WINDOW.max(ack_wait.saturating_mul(2));
    if !config.max_age.is_zero() {
        // The server refuses a window longer than the messages live.
        config.duplicate_window = config.duplicate_window.min(config.max_age);
    }
    js.create_or_update_stream(config)
        .await
        .map(drop)
        .map_err(|e| ClusterError::new(context, e))
}

fn is_not_found(err: &jetstream::context::GetStreamError) -> bool {
    matches!(
        err.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

async fn ensure_buckets(
    js: &jetstream::Context,
    names: &Names,
    ack_wait: Duration,
) -> Result<Buckets, ClusterError> {
    let day = Duration::from_secs(86_400);
    Ok(Buckets {
        idempotency: bucket(js, names, "idempotency", crate::hook::idempotency::WINDOW).await?,
        replay: bucket(js, names, "replay", super::admission::replay::REPLAY_WINDOW).await?,
        // Longer than the ack wait: a dead node's run is handed over (and takes its lock over)
        // before the lock expires and lets another run of its session in first.
        locks: bucket(js, names, "locks", ack_wait.saturating_mul(2)).await?,
        sends: bucket(js, names, "sends", day).await?,
        batches: bucket(js, names, "batches", day.saturating_mul(2)).await?,
        webhooks: bucket(js, names, "webhooks", webhooks::CLAIM_TTL).await?,
    })
}

/// Creates or updates bucket `<bucket>-<suffix>`, whose keys expire `max_age` after their last
/// write. The bucket's stream is made here, as the key-value layer would make it, because the
/// client's own bucket creation first queries account details that 2.9 servers describe
/// differently.
pub(crate) async fn bucket(
    js: &jetstream::Context,
    names: &Names,
    suffix: &str,
    max_age: Duration,
) -> Result<kv::Store, ClusterError> {
    let name = format!("{}-{suffix}", names.bucket);
    let config = stream::Config {
        name: format!("KV_{name}"),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_age,
        storage: stream::StorageType::File,
        num_replicas: names.replicas,
        allow_rollup: true,
        deny_delete: true,
        // Reads from the stream's leader only: a direct read may be answered by a replica that
        // has not yet seen the create another node just made.
        allow_direct: false,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    };
    let context = format!("bucket {name}");
    js.create_or_update_stream(config)
        .await
        .map_err(|e| ClusterError::new(&context, e))?;
    js.get_key_value(&name)
        .await
        .map_err(|e| ClusterError::new(context, e))
}

async fn ensure_consumers(
    js: &jetstream::Context,
    names: &Names,
    ack_wait: Duration,
) -> Result<(), ClusterError> {
    for name in Consumer::ALL {
        let config = name.config(names, ack_wait);
        let stream = js
            .get_stream_no_info(&names.stream)
            .await
            .map_err(|e| ClusterError::new("cannot open the stream", e))?;
        // The server updates an existing durable consumer whose configuration differs (another
        // run timeout gives another ack wait) in the ways it allows, and refuses the others.
        stream
            .create_consumer(config)
            .await
            .map_err(|e| ClusterError::new(format!("cannot create consumer {name}"), e))?;
    }
    Ok(())
}

/// `hookgate check` for a NATS store: connects, creates or updates what is missing, and
/// describes what it found.
pub async fn check(settings: &NatsSettings, run_timeout: Duration) -> Result<String, ClusterError> {
    let cluster = Cluster::connect(settings, run_timeout).await?;
    let last = cluster.last_sequence().await?;
    let consumers = Consumer::ALL.map(Consumer::durable_name).join(", ");
    Ok(format!(
        "nats: stream {} (last sequence {}, {} replica(s)), buckets {}-{{idempotency,replay,locks,sends,batches,webhooks}}, consumers {consumers} (ack wait {} s)",
        settings.stream,
        last,
        settings.replicas,
        settings.bucket,
        cluster.ack_wait.as_secs()
    ))
}

pub use projection::{open_view, project};

/// A bucket key for any text: keys allow only a few characters, so they are digests.
fn key_of(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}
pub use workers::start_workers;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_says_what_failed_and_keeps_its_cause_typed() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = ClusterError::new("cannot connect", cause);
        assert_eq!(err.to_string(), "nats: cannot connect: refused");
        let cause = err.cause().expect("a cause");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }

    /// The message includes the cause, so the chain of sources does not repeat it: an
    /// `anyhow` chain (`{:#}`) of the error, or of the store's error made of it, says it once.
    #[test]
    fn a_chain_of_a_failure_says_its_cause_once() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = ClusterError::new("cannot connect", cause);
        assert_eq!(
            format!("{:#}", anyhow::Error::from(err)),
            "nats: cannot connect: refused"
        );
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let store =
            crate::gateway::store::StoreError::from(ClusterError::new("stream read", cause));
        assert_eq!(
            format!("{:#}", anyhow::Error::from(store)),
            "nats: stream read: refused"
        );
    }

    #[test]
    fn an_unacknowledged_publish_says_so_as_before() {
        let err = ClusterError::new("publish not acknowledged: s.run", Unacknowledged::Late);
        assert_eq!(
            err.to_string(),
            "nats: publish not acknowledged: s.run: no acknowledgement in time"
        );
    }
}
