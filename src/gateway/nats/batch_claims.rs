//! The idempotency keys of batch items on a NATS cluster: a request of a batch mapping claims
//! its key before it takes a position, so that two retries of one request reaching two nodes
//! at once take one position between them, not two.
//!
//! A key's entry in the idempotency bucket is `pending` from the claim until the item is on the
//! stream, then `<run id>#<position>` (a run queued on its own, before its mapping had a batch,
//! is `<run id>`). A retry that finds it pending waits for the first to finish; one that is
//! still pending after [`STALE`] was left by a node that died before answering, and the retry
//! takes it over. The cost of that takeover: when the node died after its item reached the
//! stream but before it confirmed the key, the message is in the batch twice. It is never
//! lost: the first request was not answered, and its retry is.

use std::time::Duration;

use async_nats::jetstream::kv;

use super::intake::key_of;
use super::{Cluster, ClusterError};
use crate::gateway::batches::Added;
use crate::gateway::runs::IdempotencyClaim;

/// The entry of a claim whose item is not on the stream yet.
const PENDING: &str = "pending";

/// How long a pending claim is waited for before it is taken to belong to a node that died: the
/// item's publish is given up after 5 s, and the position's update before it takes less.
const STALE: Duration = Duration::from_secs(10);

/// How often a pending claim is looked at again while waiting.
const POLL: Duration = Duration::from_millis(50);

fn bucket_error(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ClusterError {
    ClusterError::new("idempotency bucket", err)
}

/// What claiming an item's idempotency key found.
pub enum ItemClaim {
    /// The key is this request's, at this revision of the bucket's entry, until it is
    /// [`confirm`](ItemClaims::confirm)ed or [`release`](ItemClaims::release)d.
    Claimed(u64),
    /// A retry of a request whose item is stored: its run and position.
    Repeat(Added),
}

/// The idempotency bucket as batch items use it.
pub struct ItemClaims<'a> {
    pub cluster: &'a Cluster,
}

impl ItemClaims<'_> {
    fn bucket(&self) -> &kv::Store {
        &self.cluster.buckets.idempotency
    }

    /// Claims `claim`'s key for a new item, or finds the item of an earlier request with it
    /// (waiting while that request is still taking its position).
    pub async fn claim(&self, claim: &IdempotencyClaim) -> Result<ItemClaim, ClusterError> {
        let key = key_of(&claim.fingerprint);
        let deadline = tokio::time::Instant::now() + STALE;
        loop {
            match self.bucket().create(&key, PENDING.into()).await {
                Ok(revision) => return Ok(ItemClaim::Claimed(revision)),
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {}
                Err(err) => return Err(bucket_error(err)),
            }
            let Some(entry) = self.bucket().entry(&key).await.map_err(bucket_error)? else {
                // Released between the two calls: claim it again.
                continue;
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            if &*entry.value != PENDING.as_bytes() {
                return Ok(ItemClaim::Repeat(repeat(&entry.value)));
            }
            if tokio::time::Instant::now() >= deadline {
                // Its node died before answering: the key is this request's now, unless
                // another retry took it over first.
                match self
                    .bucket()
                    .update(&key, PENDING.into(), entry.revision)
                    .await
                {
                    Ok(revision) => return Ok(ItemClaim::Claimed(revision)),
                    Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => {}
                    Err(err) => return Err(bucket_error(err)),
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Records where the claimed item went, once it is on the stream: a retry is answered with
    /// it from now on. A failure is logged, not returned: the item is stored, and a retry that
    /// finds the claim pending takes it over after [`STALE`].
    pub async fn confirm(&self, claim: &IdempotencyClaim, revision: u64, added: &Added) {
        let value = match added.position {
            Some(position) => format!("{}#{position}", added.run_id),
            None => added.run_id.clone(),
        };
        let key = key_of(&claim.fingerprint);
        if let Err(err) = self.bucket().update(&key, value.into(), revision).await {
            tracing::warn!(%err, "cannot record a batch item's idempotency key");
        }
    }

    /// Gives the claim up: the request took no position (no batch was open, or it failed).
    pub async fn release(&self, claim: &IdempotencyClaim, revision: u64) {
        let key = key_of(&claim.fingerprint);
        let released = self
            .bucket()
            .delete_expect_revision(&key, Some(revision))
            .await;
        if let Err(err) = released {
            tracing::warn!(%err, "cannot release a batch item's idempotency key");
        }
    }
}

/// The answer to a retry, from the entry of its key: `<run id>#<position>`, or `<run id>` for
/// a run queued on its own.
fn repeat(value: &[u8]) -> Added {
    let value = String::from_utf8_lossy(value);
    let (run_id, position) = match value.split_once('#') {
        Some((run_id, position)) => (run_id, position.parse().ok()),
        None => (value.as_ref(), None),
    };
    Added {
        run_id: run_id.to_string(),
        position,
        repeated: true,
        opened: false,
        closed: false,
    }
}
