//! What the idempotency bucket of a NATS cluster holds for a key ([`ClaimValue`]), and how a
//! request of a batch mapping claims its key before it takes a position, so that two retries of
//! one request reaching two nodes at once take one position between them, not two.
//!
//! A run's key holds its run id from the moment it is claimed (the run is published under that
//! id). A batch item's key is `pending` from the claim until the item is on the stream, then
//! `<run id>#<position>`. A retry that finds it pending waits for the first to finish; one that is
//! still pending after [`STALE`] was left by a node that died before answering, and the retry
//! takes it over. The cost of that takeover: when the node died after its item reached the
//! stream but before it confirmed the key, the message is in the batch twice. It is never
//! lost: the first request was not answered, and its retry is.

use std::time::Duration;

use async_nats::jetstream::kv;

use super::key_of;
use super::{Cluster, ClusterError};
use crate::gateway::admission::batches::Added;
use crate::gateway::store::runs::IdempotencyClaim;

/// The entry of a claim whose item is not on the stream yet.
const PENDING: &str = "pending";

/// How long a pending claim is waited for before it is taken to belong to a node that died: a
/// live node confirms it as soon as its item is on the stream, after at most two publishes
/// (the batch it opens, its item), each given up after 5 s, and an update of the bucket.
const STALE: Duration = Duration::from_secs(15);

/// How often a pending claim is looked at again while waiting.
const POLL: Duration = Duration::from_millis(50);

fn bucket_error(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> ClusterError {
    ClusterError::new("idempotency bucket", err)
}

/// What the idempotency bucket holds for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimValue {
    /// The run of a request queued on its own, published under this id.
    Run(String),
    /// The item of a batch mapping's request: its batch's run and its position there.
    Item { run_id: String, position: u32 },
    /// A batch item's claim whose item is not on the stream yet.
    Pending,
}

impl ClaimValue {
    fn parse(value: &[u8]) -> ClaimValue {
        if value == PENDING.as_bytes() {
            return ClaimValue::Pending;
        }
        let value = String::from_utf8_lossy(value);
        match value
            .split_once('#')
            .and_then(|(run_id, position)| Some((run_id, position.parse().ok()?)))
        {
            Some((run_id, position)) => ClaimValue::Item {
                run_id: run_id.to_string(),
                position,
            },
            None => ClaimValue::Run(value.into_owned()),
        }
    }

    /// The run a request with this key was answered with; `None` while it is pending.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            ClaimValue::Run(run_id) | ClaimValue::Item { run_id, .. } => Some(run_id),
            ClaimValue::Pending => None,
        }
    }

    /// The answer to a retry of the request that took the key.
    fn repeat(&self) -> Option<Added> {
        let position = match self {
            ClaimValue::Item { position, .. } => Some(*position),
            _ => None,
        };
        Some(Added {
            run_id: self.run_id()?.to_string(),
            position,
            repeated: true,
            opened: false,
            closed: false,
        })
    }
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
            if let Some(added) = ClaimValue::parse(&entry.value).repeat() {
                return Ok(ItemClaim::Repeat(added));
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

impl Cluster {
    /// What the idempotency bucket holds for `key` (a [`key_of`] a fingerprint) and its
    /// revision, once it is not pending or [`STALE`] passed; `None` when it holds nothing. A
    /// pending claim is a retry's first request still taking its position: waited for, as a
    /// retry of a batch item waits in [`ItemClaims::claim`].
    pub(super) async fn settled_claim(
        &self,
        key: &str,
    ) -> Result<Option<(ClaimValue, u64)>, ClusterError> {
        let deadline = tokio::time::Instant::now() + STALE;
        loop {
            let entry = self.buckets.idempotency.entry(key).await;
            let Some(entry) = entry.map_err(bucket_error)? else {
                return Ok(None);
            };
            if entry.operation != kv::Operation::Put {
                return Ok(None);
            }
            let value = ClaimValue::parse(&entry.value);
            if value != ClaimValue::Pending || tokio::time::Instant::now() >= deadline {
                return Ok(Some((value, entry.revision)));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_entry_reads_as_a_run_an_item_or_pending() {
        assert_eq!(ClaimValue::parse(b"r1"), ClaimValue::Run("r1".into()));
        let item = ClaimValue::parse(b"r1#3");
        assert_eq!(
            item,
            ClaimValue::Item {
                run_id: "r1".into(),
                position: 3
            }
        );
        assert_eq!(item.run_id(), Some("r1"));
        assert_eq!(ClaimValue::parse(b"pending"), ClaimValue::Pending);
        assert_eq!(ClaimValue::Pending.run_id(), None);
    }
}
