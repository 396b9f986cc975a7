//! The view: a node's SQLite copy of the stream, which the operator API and the workers read.
//!
//! One ordered consumer reads the stream from the sequence after the last one applied; each batch
//! of facts is applied in one transaction together with that sequence, so a node that stops and
//! starts again goes on where its view ended, and applies nothing twice.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::consumer::{self, DeliverPolicy};
use futures_util::StreamExt;
use prometheus_client::metrics::histogram::Histogram;
use rusqlite::{Connection, OptionalExtension};

use super::work::RETRY;
use super::{Cluster, ClusterError, Fact};
use crate::gateway::store::{Store, StoreError};

/// Facts applied in one transaction at most.
const MAX_BATCH: usize = 512;

/// How often an idle projection makes sure that its stream is still the one it follows.
const CHECK: Duration = Duration::from_secs(2);

const VIEW_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS view_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);";

/// Opens this node's view of `cluster`'s stream in `state_dir`/`nats-<stream>`, emptied first
/// when it was built from an earlier stream of this name (see [`verify`]).
pub async fn open_view(
    cluster: &Cluster,
    state_dir: &Path,
    commit_time: Option<Histogram>,
) -> Result<Store, StoreError> {
    let dir = state_dir.join(format!("nats-{}", cluster.names.stream));
    let store = Store::open_copy(&dir, commit_time)?;
    let applied = store
        .write(|conn| {
            conn.execute_batch(VIEW_SCHEMA)?;
            meta(conn, "applied")
        })
        .await?;
    cluster.set_applied(u64::try_from(applied.unwrap_or(0)).unwrap_or(0));
    verify(cluster, &store).await?;
    let state = cluster.stream_state().await?;
    // Until its view holds this much, a starting node is not ready (see `Cluster::caught_up`).
    let at_start = if state.messages == 0 {
        0
    } else {
        state.last_sequence
    };
    cluster
        .at_start
        .store(at_start, std::sync::atomic::Ordering::Relaxed);
    Ok(store)
}

/// Empties the view when it was built from another stream of this name (deleted and created
/// again since): when it has applied more than the stream holds, or the stream's message at
/// the view's last applied sequence is not the one it applied. (The stream's creation time
/// cannot tell: a 2.9 server reports a new one after an update and a restart.) A message
/// trimmed by the stream's limits cannot be compared; the view is then kept.
async fn verify(cluster: &Cluster, view: &Store) -> Result<(), ClusterError> {
    if !of_this_stream(cluster, view).await? {
        tracing::warn!(
            applied = cluster.applied(),
            "the view is of an earlier stream of this name, deleted since; rebuilding it"
        );
        view.write(|conn| conn.execute_batch(RESET))
            .await
            .map_err(|e| ClusterError::new("cannot empty the view", e))?;
        cluster.set_applied(0);
    }
    Ok(())
}

/// Whether the view was built from the stream that now has this name (see [`verify`]).
async fn of_this_stream(cluster: &Cluster, view: &Store) -> Result<bool, ClusterError> {
    let applied = cluster.applied();
    if applied == 0 {
        return Ok(true);
    }
    if applied > cluster.stream_state().await?.last_sequence {
        return Ok(false);
    }
    let recorded = view
        .read(|conn| meta(conn, "applied_digest"))
        .await
        .map_err(|e| ClusterError::new("cannot read the view", e))?;
    Ok(match cluster.message(applied).await {
        Ok(Some(payload)) => recorded == Some(digest(&payload)),
        Ok(None) => true,
        Err(err) => {
            tracing::warn!(%err, "cannot compare the view with the stream; keeping it");
            true
        }
    })
}

/// Every row of the view, and the numbering of its events.
const RESET: &str = "DELETE FROM events; DELETE FROM runs; DELETE FROM idempotency;
    DELETE FROM outbox; DELETE FROM routes; DELETE FROM deliveries; DELETE FROM view_meta;
    DELETE FROM sqlite_sequence;";

/// What a view records of the last fact it applied, to recognise its stream by.
fn digest(payload: &[u8]) -> i64 {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(payload);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    i64::from_be_bytes(first)
}

fn meta(conn: &Connection, key: &str) -> rusqlite::Result<Option<i64>> {
    conn.query_row("SELECT value FROM view_meta WHERE key = ?1", [key], |row| {
        row.get(0)
    })
    .optional()
}

fn set_meta(conn: &Connection, key: &str, value: i64) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO view_meta (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        rusqlite::params![key, value],
    )?;
    Ok(())
}

/// Applies the stream to `view` until the process ends, publishing each applied sequence to
/// [`Cluster::wait_applied`].
pub async fn project(cluster: Cluster, view: Store) {
    loop {
        match follow(&cluster, &view).await {
            // A reconnection: follow again at once (a short pause so that a consumer that ends
            // at once cannot spin).
            Ok(()) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(err) => {
                tracing::warn!(%err, "the view stopped following the stream; resuming");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Follows the stream from the sequence after the last one applied, applying what arrives in
/// batches, until the connection is made again, the stream's order changes or the stream is no
/// longer the one the view was built from: then `Ok`, to be called again.
async fn follow(cluster: &Cluster, view: &Store) -> Result<(), ClusterError> {
    // The stream may have been deleted and created again under this running node.
    verify(cluster, view).await?;
    let mut messages = ordered_from_applied(cluster).await?;
    let reconnection = cluster.reconnection();
    tokio::pin!(reconnection);
    // A stream deleted and created again does not end the consumer (it follows the new stream
    // from where it was): looked for now and then while idle.
    let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + CHECK, CHECK);
    let mut received = 0u64;
    loop {
        let first = tokio::select! {
            first = messages.next() => first,
            () = &mut reconnection => {
                tracing::info!("reconnected to NATS; following the stream again");
                return Ok(());
            }
            _ = checks.tick() => {
                if of_this_stream(cluster, view).await? {
                    continue;
                }
                return Ok(());
            }
        };
        let Some(first) = first else {
            return Ok(());
        };
        let Some(batch) = read_batch(cluster, first, &mut messages, &mut received).await? else {
            return Ok(());
        };
        apply_to_view(cluster, view, batch).await?;
    }
}

/// An ordered consumer of the stream from the sequence after the last one applied.
async fn ordered_from_applied(cluster: &Cluster) -> Result<consumer::pull::Ordered, ClusterError> {
    let stream = cluster
        .js
        .get_stream_no_info(&cluster.names.stream)
        .await
        .map_err(|e| ClusterError::new("cannot open the stream", e))?;
    let ordered = stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: cluster.applied() + 1,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| ClusterError::new("cannot follow the stream", e))?;
    ordered
        .messages()
        .await
        .map_err(|e| ClusterError::new("cannot follow the stream", e))
}

/// Facts read in one go, by stream sequence, and whether they were all the stream had.
struct Batch {
    facts: Vec<(u64, bytes::Bytes)>,
    drained: bool,
}

/// `first` and whatever has already arrived after it, up to [`MAX_BATCH`]; `None` when the
/// consumer started over or went back, and the view must be verified before anything of it is
/// applied. `received` counts the messages of this consumer.
async fn read_batch(
    cluster: &Cluster,
    first: Result<async_nats::jetstream::Message, consumer::pull::OrderedError>,
    messages: &mut consumer::pull::Ordered,
    received: &mut u64,
) -> Result<Option<Batch>, ClusterError> {
    let mut batch = Batch {
        facts: Vec::new(),
        drained: false,
    };
    let mut next = Some(first);
    while let Some(message) = next.take() {
        let message = message.map_err(|e| ClusterError::new("stream read", e))?;
        let info = message
            .info()
            .map_err(|e| ClusterError::new("stream read", e))?;
        let sequence = info.stream_sequence;
        let behind = batch
            .facts
            .last()
            .map_or(cluster.applied(), |(last, _)| *last);
        let restarted = *received > 0 && info.consumer_sequence == 1;
        if sequence <= behind || restarted {
            // The consumer started over by itself, or went back: the stream may be another
            // one now. Nothing of this batch is applied before the view is verified.
            tracing::info!(sequence, "the stream's order changed; verifying the view");
            return Ok(None);
        }
        *received += 1;
        batch.drained = info.pending == 0;
        batch.facts.push((sequence, message.payload.clone()));
        if batch.facts.len() < MAX_BATCH {
            // Whatever has already arrived joins this batch; nothing waits for more.
            next = tokio::time::timeout(Duration::ZERO, messages.next())
                .await
                .ok()
                .flatten();
        }
    }
    Ok(Some(batch))
}

/// Applies `batch` to the view in one transaction and publishes its last sequence.
async fn apply_to_view(cluster: &Cluster, view: &Store, batch: Batch) -> Result<(), ClusterError> {
    let Batch { facts, drained } = batch;
    let last = facts.last().map_or(0, |(sequence, _)| *sequence);
    view.write(move |conn| apply_batch(conn, &facts))
        .await
        .map_err(|e| ClusterError::new("cannot apply to the view", e))?;
    cluster.set_applied(last);
    if drained {
        // Nothing more to read now: caught up, even when messages the view started from
        // were trimmed away since (its `applied` then never reaches the start's last).
        cluster
            .drained
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

/// Applies each fact in a savepoint of its own (one that cannot be applied is logged and
/// skipped: it must not stop the view), then records the last sequence.
fn apply_batch(conn: &Connection, batch: &[(u64, bytes::Bytes)]) -> rusqlite::Result<()> {
    for (sequence, payload) in batch {
        let fact: Fact = match serde_json::from_slice(payload) {
            Ok(fact) => fact,
            Err(err) => {
                tracing::warn!(sequence, %err, "skipping a stream message that is not a fact");
                continue;
            }
        };
        conn.execute_batch("SAVEPOINT fact")?;
        match fact.apply(conn) {
            Ok(()) => conn.execute_batch("RELEASE fact")?,
            // A fact the schema refuses is refused on every node alike: skipping it keeps the
            // views equal. Anything else (a full disk, an I/O error) fails the batch, which is
            // applied again from the stream, so that this view does not drift from the others.
            Err(err)
                if err.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) =>
            {
                tracing::error!(sequence, %err, "a fact the view refuses; skipped");
                conn.execute_batch("ROLLBACK TO fact; RELEASE fact")?;
            }
            Err(err) => return Err(err),
        }
    }
    if let Some((last, payload)) = batch.last() {
        set_meta(conn, "applied", i64::try_from(*last).unwrap_or(i64::MAX))?;
        set_meta(conn, "applied_digest", digest(payload))?;
    }
    Ok(())
}
