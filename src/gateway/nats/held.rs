//! Held runs on a NATS cluster (docs/runtime.md#held-runs): the release step every node runs,
//! and the operator's release or cancel, each a fact on the stream that every view applies in
//! stream order, so that a release and a cancel racing on two nodes end alike everywhere.

use std::time::Duration;

use super::{Cluster, Fact};
use crate::gateway::admission::budget::held::{self, HeldError, Settled};
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::context::Context;
use crate::gateway::store::records::{NewRun, RunStatus};
use crate::gateway::store::{Store, StoreError};

/// How long the operator's release or cancel waits for this node's view to apply it.
const APPLY_WAIT: Duration = Duration::from_secs(10);

/// Starts the held run `run_id` whatever its budgets say: published for the runner under
/// `release-<run id>`, so that two nodes releasing it at once make one release. 409 material
/// ([`HeldError::NotHeld`]) for a run that is not held, cancelled or released already included.
pub async fn release(cluster: &Cluster, store: &Store, run_id: &str) -> Result<Settled, HeldError> {
    let run = held::held_run(store, run_id).await?;
    let fact = Fact::Released {
        run,
        released_at: now_rfc3339(),
    };
    settle(cluster, store, &fact, &format!("release-{run_id}"), run_id).await
}

/// Cancels the held run `run_id`: the answer says whether a release came first.
pub async fn cancel(cluster: &Cluster, store: &Store, run_id: &str) -> Result<Settled, HeldError> {
    held::held_run(store, run_id).await?;
    let fact = Fact::Cancelled {
        run_id: run_id.to_string(),
        at: now_rfc3339(),
    };
    settle(cluster, store, &fact, &format!("cancel-{run_id}"), run_id).await
}

/// Publishes an operator's release or cancel, waits for this node's view to apply it and
/// answers from the view: whichever of a release and a cancel the stream has first wins.
async fn settle(
    cluster: &Cluster,
    store: &Store,
    fact: &Fact,
    id: &str,
    run_id: &str,
) -> Result<Settled, HeldError> {
    let sequence = cluster.publish(fact, id).await.map_err(StoreError::from)?;
    cluster.wait_applied(sequence, APPLY_WAIT).await;
    let cancelling = matches!(fact, Fact::Cancelled { .. });
    let status = held::status_of(store, run_id).await?;
    // A release that came first may have been started, even finished, by now.
    if cancelling == (status == RunStatus::Cancelled) {
        Ok(Settled(status))
    } else {
        Err(HeldError::NotHeld(status))
    }
}

/// The cluster's release step, on every node: the oldest held run of this node's view whose
/// budgets have room is published for the runner under `release-<run id>`, so that nodes
/// releasing it at once make one release; then the next, once the view counts the first.
/// Nodes releasing different runs at the same moment may pass a budget by one run each.
async fn release_due_on(ctx: &Context, cluster: &Cluster) -> Result<(), StoreError> {
    loop {
        let settings = ctx.config.current();
        let next = ctx
            .store
            .read(move |conn| {
                match held::first_releasable(conn, held::budgets_of(&settings), now_ms())? {
                    Some(run_id) => NewRun::select(conn, &run_id),
                    None => Ok(None),
                }
            })
            .await?;
        let Some(run) = next else {
            return Ok(());
        };
        let run_id = run.run_id.clone();
        let fact = Fact::Released {
            run,
            released_at: now_rfc3339(),
        };
        let sequence = cluster.publish(&fact, &format!("release-{run_id}")).await?;
        if !cluster.wait_applied(sequence, APPLY_WAIT).await {
            return Ok(());
        }
    }
}

/// How often the cluster's release step looks at the held runs.
const RELEASE_POLL: Duration = Duration::from_secs(1);

/// Runs the cluster's release step ([`release_due_on`]) every [`RELEASE_POLL`] until the
/// process ends.
pub(crate) async fn release_loop(ctx: Context, cluster: Cluster) {
    loop {
        if let Err(err) = release_due_on(&ctx, &cluster).await {
            tracing::error!(%err, "cannot release held runs");
        }
        tokio::time::sleep(RELEASE_POLL).await;
    }
}
