//! Batches on a NATS cluster (docs/runtime.md "Batches"), shared by every node. The open batch
//! of a mapping and session key is an entry of the `batches` bucket; joining it is an update
//! by revision, which gives each request its position atomically, and opening one a create
//! (or an update of a closed one). Each request is then published to the stream as an item,
//! which every view applies. Closing is a revision-checked update that marks the entry closed,
//! so that one node only closes a batch; that node publishes the run under its run id as the
//! message id, so that a node that closes it again after a crash never starts it twice.

use std::time::Duration;

use async_nats::jetstream::kv;
use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use super::claims::{ItemClaim, ItemClaims};
use super::key_of;
use super::{Cluster, ClusterError, Fact};
use crate::gateway::admission::batches::{self, Added, BatchItem, Joined};
use crate::gateway::clock::now_ms;
use crate::gateway::context::Context;
use crate::gateway::outbound::webhooks;
use crate::gateway::store::Store;

/// Attempts at an update by revision before the join gives up with an error: each failed
/// attempt means another node's request took a position in between.
const ATTEMPTS: usize = 64;

/// How long the closing node waits for its view to show every item of the batch: each was
/// published before its request was answered, within the publish deadline.
const ITEMS_WAIT: Duration = Duration::from_secs(10);

/// How long after its window a batch still open in a view is taken to have lost its closing
/// node, and is closed by whichever node sees it (its run published under its id, once).
const ORPHANED: Duration = Duration::from_secs(30);

/// How often a node's closer looks for batches whose window ended, at least.
const TICK: Duration = Duration::from_secs(1);

/// The open batch of a mapping and session key, as the `batches` bucket holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    run_id: String,
    closes_at_ms: i64,
    max_items: u32,
    /// Positions taken so far.
    items: u32,
    /// Closed by the node that filled it or whose closer took it; a request opens a new one.
    closed: bool,
}

impl Entry {
    fn value(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    fn takes_more(&self, now_ms: i64) -> bool {
        !self.closed && self.closes_at_ms > now_ms && self.items < self.max_items
    }
}

fn bucket_error(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ClusterError {
    ClusterError::new("batches bucket", err)
}

fn conflict(err: &kv::UpdateError) -> bool {
    err.kind() == kv::UpdateErrorKind::WrongLastRevision
}

/// A node's hold on the cluster's batches: the cluster, and this node's view of the stream,
/// from which the node that closes a batch reads its items.
pub struct Batches<'a> {
    pub cluster: &'a Cluster,
    pub view: &'a Store,
}

impl Batches<'_> {
    /// [`Batches::join`] in a task of its own: a request whose client goes away mid-join still
    /// ends it, confirming or releasing its idempotency claim, which a retry waits on.
    pub async fn join_detached(
        cluster: Cluster,
        view: Store,
        item: BatchItem,
        open: bool,
    ) -> Result<Joined, ClusterError> {
        let joining = tokio::spawn(async move {
            let batches = Batches {
                cluster: &cluster,
                view: &view,
            };
            batches.join(item, open).await
        });
        joining
            .await
            .map_err(|err| ClusterError::new("batch join", err))?
    }

    /// Adds a batch mapping's request to its open batch for the whole cluster, with `open`
    /// opening one when there is none; answers once the item is on the stream. Its idempotency
    /// key, if any, is claimed first (`batch_claims`): a retry gets the first request's place.
    pub async fn join(&self, item: BatchItem, open: bool) -> Result<Joined, ClusterError> {
        let claims = ItemClaims {
            cluster: self.cluster,
        };
        let claim = item.claim.clone();
        let revision = match &claim {
            None => None,
            Some(claim) => match claims.claim(claim).await? {
                ItemClaim::Repeat(added) => return Ok(Joined::Added(added)),
                ItemClaim::Claimed(revision) => Some(revision),
            },
        };
        let joined = self.take_position(item, open, revision).await;
        if let (Some(claim), Some(revision)) = (&claim, revision) {
            // An item that was added confirmed its claim as soon as it was on the stream.
            if !matches!(joined, Ok(Joined::Added(_))) {
                claims.release(claim, revision).await;
            }
        }
        joined
    }

    /// Takes the next position of the open batch (opening one with `open`) and publishes the
    /// item there, confirming its idempotency claim (`claimed`: the revision it holds) at
    /// once.
    async fn take_position(
        &self,
        mut item: BatchItem,
        open: bool,
        claimed: Option<u64>,
    ) -> Result<Joined, ClusterError> {
        let key = key_of(&format!("{}\n{}", item.mapping_id(), item.key()));
        for _ in 0..ATTEMPTS {
            let found = self.batch_entry(&key).await?;
            let now = now_ms();
            let (entry, revision) = match found {
                Some((entry, revision)) if entry.takes_more(now) => (entry, revision),
                Some((entry, revision)) if !entry.closed => {
                    // Past its window: closed here first, so that it takes no more.
                    if let Some(closed) = self.close_entry(&key, entry, revision).await? {
                        self.publish_closed_later(closed);
                    }
                    continue;
                }
                _ if !open => return Ok(Joined::NoneOpen(Box::new(item))),
                found => match self
                    .open_entry(&key, &item, found.map(|f| f.1), claimed)
                    .await?
                {
                    Some(added) => return Ok(Joined::Added(added)),
                    None => {
                        // Another node's batch took the key: the batch announced for this run
                        // will never have an item, and the request looks again as a new run.
                        self.discard(&item.run.run_id).await;
                        item.run.run_id = uuid::Uuid::now_v7().to_string();
                        continue;
                    }
                },
            };
            let taken = Entry {
                items: entry.items + 1,
                closed: entry.items + 1 >= entry.max_items,
                ..entry
            };
            match self
                .cluster
                .buckets
                .batches
                .update(&key, taken.value(), revision)
                .await
            {
                Ok(_) => {}
                Err(err) if conflict(&err) => continue,
                Err(err) => return Err(bucket_error(err)),
            }
            let added = self.publish_item(&item, &taken, false, claimed).await?;
            if taken.closed {
                self.publish_closed_later(taken);
            }
            return Ok(Joined::Added(added));
        }
        Err(bucket_error("too many concurrent updates of one batch"))
    }

    /// The bucket's entry `key` and its revision; `None` when there is none or it was deleted.
    async fn batch_entry(&self, key: &str) -> Result<Option<(Entry, u64)>, ClusterError> {
        let entry = self
            .cluster
            .buckets
            .batches
            .entry(key)
            .await
            .map_err(bucket_error)?;
        Ok(entry
            .filter(|entry| entry.operation == kv::Operation::Put)
            .and_then(|entry| {
                let value = serde_json::from_slice(&entry.value).ok()?;
                Some((value, entry.revision))
            }))
    }

    /// Opens a batch of `item`'s run in place of the closed entry at `revision` (or none);
    /// `None` when another node changed the entry first. The batch is announced to the views
    /// before the bucket names it, so that every item a joiner publishes has its batch in every
    /// view; an announced batch that the bucket never named gets no item, and is discarded.
    async fn open_entry(
        &self,
        key: &str,
        item: &BatchItem,
        revision: Option<u64>,
        claimed: Option<u64>,
    ) -> Result<Option<Added>, ClusterError> {
        let opened = item.opened(now_ms());
        let entry = Entry {
            run_id: item.run.run_id.clone(),
            closes_at_ms: opened.closes_at_ms,
            max_items: opened.max_items,
            items: 1,
            closed: opened.max_items <= 1,
        };
        let fact = Fact::BatchOpened {
            run: item.run.clone(),
            opened,
        };
        self.cluster
            .publish(&fact, &format!("batch-{}", entry.run_id))
            .await?;
        let bucket = &self.cluster.buckets.batches;
        let written = match revision {
            Some(revision) => match bucket.update(key, entry.value(), revision).await {
                Ok(_) => true,
                Err(err) if conflict(&err) => false,
                Err(err) => return Err(bucket_error(err)),
            },
            None => match bucket.create(key, entry.value()).await {
                Ok(_) => true,
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => false,
                Err(err) => return Err(bucket_error(err)),
            },
        };
        if !written {
            return Ok(None);
        }
        let added = self.publish_item(item, &entry, true, claimed).await?;
        if entry.closed {
            self.publish_closed_later(entry);
        }
        Ok(Some(added))
    }

    /// Discards the batch of run `run_id`, announced and given no item: the views forget its
    /// run. Best effort: a batch left announced is discarded by the closer once
    /// [`ORPHANED`].
    async fn discard(&self, run_id: &str) {
        let fact = Fact::BatchDiscarded {
            run_id: run_id.to_string(),
        };
        if let Err(err) = self
            .cluster
            .publish(&fact, &format!("discard-{run_id}"))
            .await
        {
            tracing::warn!(%err, %run_id, "cannot discard an empty batch; its closer will");
        }
    }

    /// Publishes `item` at the last position `entry` took, with its callback waiting for the
    /// batch's run to end, and confirms its idempotency claim (`claimed`) at once: a retry is
    /// answered with the position from then on.
    async fn publish_item(
        &self,
        item: &BatchItem,
        entry: &Entry,
        opened: bool,
        claimed: Option<u64>,
    ) -> Result<Added, ClusterError> {
        let position = entry.items;
        let callback = webhooks::callback_of(&item.run);
        let fact = Fact::BatchItem {
            run_id: entry.run_id.clone(),
            position,
            message: item.message(),
            webhooks: callback
                .map(|callback| {
                    let fingerprint = item.claim.as_ref().map(|c| c.fingerprint.as_str());
                    webhooks::member_callback(callback, position, &entry.run_id, fingerprint)
                })
                .into_iter()
                .collect(),
        };
        let id = format!("batch-{}-{position}", entry.run_id);
        self.cluster.publish(&fact, &id).await?;
        let added = Added {
            run_id: entry.run_id.clone(),
            position: Some(position),
            repeated: false,
            opened,
            closed: entry.closed,
        };
        if let (Some(claim), Some(revision)) = (&item.claim, claimed) {
            let claims = ItemClaims {
                cluster: self.cluster,
            };
            claims.confirm(claim, revision, &added).await;
        }
        Ok(added)
    }

    /// Publishes the run of the batch `closed` that this node closed, in a task of its own: a
    /// request that closed it is not kept waiting while this node's view catches up with its
    /// items (up to [`ITEMS_WAIT`]), nor is its idempotency claim. A failure is logged: the
    /// batch is closed in the bucket, and a closer publishes its run once it is [`ORPHANED`].
    fn publish_closed_later(&self, closed: Entry) {
        let (cluster, view) = (self.cluster.clone(), self.view.clone());
        tokio::spawn(async move {
            let batches = Batches {
                cluster: &cluster,
                view: &view,
            };
            if let Err(err) = batches.publish_closed(&closed.run_id, closed.items).await {
                tracing::warn!(%err, run_id = %closed.run_id, "cannot publish a closed batch's run; a closer will");
            }
        });
    }

    /// Marks the open batch `entry` at `revision` closed; the closed entry when this node
    /// did, whose run it is then this node's to publish. Another node's change first leaves it
    /// to that node.
    async fn close_entry(
        &self,
        key: &str,
        entry: Entry,
        revision: u64,
    ) -> Result<Option<Entry>, ClusterError> {
        let closed = Entry {
            closed: true,
            ..entry
        };
        match self
            .cluster
            .buckets
            .batches
            .update(key, closed.value(), revision)
            .await
        {
            Ok(_) => Ok(Some(closed)),
            Err(err) if conflict(&err) => Ok(None),
            Err(err) => Err(bucket_error(err)),
        }
    }

    /// Publishes the run of closed batch `run_id` with the prompt of its `items` items, once
    /// this node's view shows them (or [`ITEMS_WAIT`] passed: an item whose node died before
    /// publishing it was never answered). The stream keeps one run per run id. A batch with no
    /// item is discarded instead.
    async fn publish_closed(&self, run_id: &str, items: u32) -> Result<(), ClusterError> {
        let view = self.view;
        let deadline = tokio::time::Instant::now() + ITEMS_WAIT;
        let stored = loop {
            let id = run_id.to_string();
            let stored = view
                .read(move |conn| items_stored(conn, &id))
                .await
                .map_err(|e| ClusterError::new("cannot read the view", e))?;
            if stored >= items || tokio::time::Instant::now() >= deadline {
                break stored;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if stored == 0 {
            // No item reached the stream (an opener that died, or lost its key to another
            // node's batch): there is nothing to run, and no request was answered with it.
            self.discard(run_id).await;
            return Ok(());
        }
        let id = run_id.to_string();
        let run = view
            .read(move |conn| batches::closed_run(conn, &id))
            .await
            .map_err(|e| ClusterError::new("cannot read the view", e))?;
        match run {
            Some(run) => self
                .cluster
                .publish(
                    &Fact::Run {
                        run,
                        webhooks: Vec::new(),
                    },
                    run_id,
                )
                .await
                .map(drop),
            // Closed in this view already: its run is on the stream.
            None => Ok(()),
        }
    }
}

/// How many items of batch `run_id` a view holds.
fn items_stored(conn: &Connection, run_id: &str) -> rusqlite::Result<u32> {
    conn.prepare_cached("SELECT COUNT(*) FROM batch_items WHERE run_id = ?1")?
        .query_row(params![run_id], |row| row.get(0))
}

/// The batches open in a view whose window ended by `now_ms`: run id, mapping id, batch key
/// and end of window.
fn due(conn: &Connection, now_ms: i64) -> rusqlite::Result<Vec<(String, String, String, i64)>> {
    conn.prepare_cached(
        "SELECT run_id, mapping_id, batch_key, closes_at_ms FROM batches
         WHERE open = 1 AND closes_at_ms <= ?1",
    )?
    .query_map(params![now_ms], |row| {
        Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
    })?
    .collect()
}

/// Every node's batch closer: closes the batches its view shows open past their window (one
/// node wins each, by revision), and publishes the run of one whose closing node died
/// ([`ORPHANED`]). Wakes at the earliest window's end, or every [`TICK`] for the batches
/// other nodes open.
pub async fn closer(ctx: Context, cluster: Cluster) {
    loop {
        let now = now_ms();
        match ctx.store.read(move |conn| due(conn, now)).await {
            Ok(due) => {
                for (run_id, mapping_id, batch_key, closes_at_ms) in due {
                    let orphaned =
                        now.saturating_sub(closes_at_ms) > crate::gateway::clock::millis(ORPHANED);
                    let batches = Batches {
                        cluster: &cluster,
                        view: &ctx.store,
                    };
                    let closing = batches.close_due(&run_id, &mapping_id, &batch_key, orphaned);
                    if let Err(err) = closing.await {
                        tracing::warn!(%err, %run_id, "cannot close a batch");
                    }
                }
            }
            Err(err) => tracing::error!(%err, "batch closer cannot read open batches"),
        }
        let next = ctx.store.read(batches::next_close).await.ok().flatten();
        let wait = next.map_or(TICK, |at| {
            Duration::from_millis(u64::try_from(at - now_ms()).unwrap_or(0)).min(TICK)
        });
        tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
    }
}

impl Batches<'_> {
    /// Closes the batch of run `run_id` whose window ended: in the bucket when it is still
    /// its key's open batch, and then publishes its run; an `orphaned` one (closed in the
    /// bucket, its run never published) has its run published all the same.
    async fn close_due(
        &self,
        run_id: &str,
        mapping_id: &str,
        batch_key: &str,
        orphaned: bool,
    ) -> Result<(), ClusterError> {
        let key = key_of(&format!("{mapping_id}\n{batch_key}"));
        match self.batch_entry(&key).await? {
            Some((entry, revision)) if entry.run_id == run_id && !entry.closed => {
                match self.close_entry(&key, entry, revision).await? {
                    Some(closed) => self.publish_closed(&closed.run_id, closed.items).await,
                    None => Ok(()),
                }
            }
            Some((entry, _)) if entry.run_id == run_id && !orphaned => Ok(()),
            _ if orphaned => self.publish_closed(run_id, 0).await,
            // Closed by another node a moment ago: its run is on the way.
            _ => Ok(()),
        }
    }
}
