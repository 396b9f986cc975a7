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

use super::{Cluster, ClusterError, Fact};
use crate::gateway::{Store, StoreError};

/// Facts applied in one transaction at most.
const MAX_BATCH: usize = 512;

/// How long the projection waits before reading the stream again after an error.
const RETRY: Duration = Duration::from_secs(1);

const VIEW_SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS view_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);";

/// Opens this node's view of `cluster`'s stream in `state_dir`/`nats-<stream>`, starting it
/// afresh when it has applied more than the stream holds (the stream was deleted and created
/// again: the old view describes something that no longer exists).
pub async fn open_view(
    cluster: &Cluster,
    state_dir: &Path,
    commit_time: Option<Histogram>,
) -> Result<Store, StoreError> {
    let dir = state_dir.join(format!("nats-{}", cluster.names.stream));
    let (last, created) = cluster.stream_state().await?;
    let open = || async {
        let store = Store::open_copy(&dir, commit_time.clone())?;
        let (applied, of_stream) = store
            .write(move |conn| {
                conn.execute_batch(VIEW_SCHEMA)?;
                let of_stream = meta(conn, "stream_created")?;
                if of_stream.is_none() {
                    set_meta(conn, "stream_created", created)?;
                }
                Ok((meta(conn, "applied")?.unwrap_or(0), of_stream))
            })
            .await?;
        let applied = u64::try_from(applied).unwrap_or(0);
        Ok::<_, StoreError>((store, applied, of_stream))
    };
    let (mut store, mut applied, of_stream) = open().await?;
    if applied > last || of_stream.is_some_and(|c| c != created) {
        tracing::warn!(
            applied,
            last,
            "the view is of an earlier stream of this name, deleted since; rebuilding it"
        );
        store.close();
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.join(format!("{}{suffix}", crate::gateway::DB_FILE)));
        }
        (store, applied, _) = open().await?;
    }
    cluster.set_applied(applied);
    cluster
        .at_start
        .store(last, std::sync::atomic::Ordering::Relaxed);
    Ok(store)
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

async fn follow(cluster: &Cluster, view: &Store) -> Result<(), ClusterError> {
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
    let mut messages = ordered
        .messages()
        .await
        .map_err(|e| ClusterError::new("cannot follow the stream", e))?;
    let reconnection = cluster.reconnection();
    tokio::pin!(reconnection);
    loop {
        let mut batch = Vec::new();
        let first = tokio::select! {
            first = messages.next() => first,
            () = &mut reconnection => {
                tracing::info!("reconnected to NATS; following the stream again");
                return Ok(());
            }
        };
        let Some(first) = first else {
            return Ok(());
        };
        let mut next = Some(first);
        while let Some(message) = next.take() {
            let message = message.map_err(|e| ClusterError::new("stream read", e))?;
            let sequence = message
                .info()
                .map_err(|e| ClusterError::new("stream read", e))?
                .stream_sequence;
            batch.push((sequence, message.payload.clone()));
            if batch.len() < MAX_BATCH {
                // Whatever has already arrived joins this batch; nothing waits for more.
                next = tokio::time::timeout(Duration::ZERO, messages.next())
                    .await
                    .ok()
                    .flatten();
            }
        }
        let last = batch.last().map_or(0, |(sequence, _)| *sequence);
        view.write(move |conn| apply_batch(conn, &batch))
            .await
            .map_err(|e| ClusterError::new("cannot apply to the view", e))?;
        cluster.set_applied(last);
    }
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
    if let Some((last, _)) = batch.last() {
        set_meta(conn, "applied", i64::try_from(*last).unwrap_or(i64::MAX))?;
    }
    Ok(())
}
