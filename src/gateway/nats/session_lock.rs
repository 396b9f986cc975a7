//! A key of the cluster's locks bucket held by one run at a time: a session key's run in
//! progress, or a slot of a mapping's lane.

use std::sync::Mutex;

use async_nats::jetstream::kv;

use super::Cluster;

/// A session key's run in progress, for the whole cluster: a key in the locks bucket whose
/// value names the run and the offer that holds it. When the holder dies, its run is offered
/// again after the ack wait, and that offer takes the lock over; the lock itself expires only
/// after twice the ack wait unless refreshed, so no other run of the session gets in between.
/// A lane's slot is the same kind of lock on a key of its own ([`SessionLock::keyed`]).
pub(super) struct SessionLock<'a> {
    cluster: &'a Cluster,
    key: String,
    run_id: &'a str,
    holder: String,
    /// The revision of the last write of ours; `None` once the lock was lost or released.
    revision: Mutex<Option<u64>>,
}

impl<'a> SessionLock<'a> {
    pub(super) fn new(
        cluster: &'a Cluster,
        session_key: &str,
        run_id: &'a str,
        offer: i64,
    ) -> Self {
        Self::keyed(cluster, super::key_of(session_key), run_id, offer)
    }

    /// The lock of the bucket key `key` (one a session key's hash never is) for `run_id`'s
    /// `offer`th offer.
    pub(super) fn keyed(cluster: &'a Cluster, key: String, run_id: &'a str, offer: i64) -> Self {
        SessionLock {
            cluster,
            key,
            run_id,
            holder: format!("{run_id} {offer}"),
            revision: Mutex::new(None),
        }
    }

    fn set_revision(&self, revision: Option<u64>) {
        *self.revision.lock().unwrap_or_else(|p| p.into_inner()) = revision;
    }

    fn revision(&self) -> Option<u64> {
        *self.revision.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the session is now this run's.
    pub(super) async fn take(&self) -> bool {
        let bucket = &self.cluster.buckets.locks;
        let value = || self.holder.clone().into();
        if let Ok(revision) = bucket.create(&self.key, value()).await {
            self.set_revision(Some(revision));
            return true;
        }
        let Ok(Some(entry)) = bucket.entry(&self.key).await else {
            return false;
        };
        let held_by_this_run = entry.operation == kv::Operation::Put
            && entry
                .value
                .strip_prefix(self.run_id.as_bytes())
                .is_some_and(|rest| rest.starts_with(b" "));
        if !held_by_this_run {
            return false;
        }
        // An earlier offer of this run, on a node that stopped or died.
        match bucket.update(&self.key, value(), entry.revision).await {
            Ok(revision) => {
                self.set_revision(Some(revision));
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps the lock from expiring; only while it is still ours.
    pub(super) async fn refresh(&self) {
        let Some(revision) = self.revision() else {
            return;
        };
        let bucket = &self.cluster.buckets.locks;
        match bucket
            .update(&self.key, self.holder.clone().into(), revision)
            .await
        {
            Ok(revision) => self.set_revision(Some(revision)),
            // Another holder wrote since: the lock is not ours any more.
            Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                tracing::warn!(%err, run_id = %self.run_id, "session lock lost");
                self.set_revision(None);
            }
            // A timeout or a lost connection: still ours; the next refresh tries again.
            Err(err) => {
                tracing::warn!(%err, run_id = %self.run_id, "cannot refresh a session lock")
            }
        }
    }

    pub(super) async fn release(&self) {
        if let Some(revision) = self.revision() {
            let bucket = &self.cluster.buckets.locks;
            let _ = bucket
                .delete_expect_revision(&self.key, Some(revision))
                .await;
            self.set_revision(None);
        }
    }
}
