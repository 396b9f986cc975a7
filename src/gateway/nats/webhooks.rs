//! Callbacks and lifecycle webhooks on a NATS store. A message is written with what it tells:
//! the fact of a run, its hold, its start, its end or its given-up delivery carries it, and
//! every view writes it to its outbox as that fact applies (docs/outbound.md). Every node looks
//! at its view for messages due; the one that takes the message's attempt in the `webhooks`
//! bucket (an atomic create under its `webhook-id`, window and attempt) sends it, and publishes
//! what came of it ([`Fact::WebhookAttempted`]) for every view to record. A node that dies
//! mid-send leaves its key to expire ([`CLAIM_TTL`]); another node then sends the message
//! again, with the same `webhook-id`.

use std::time::Duration;

use super::intake::is_already_exists;
use super::{Cluster, ClusterError, Fact};
use crate::gateway::clock::now_ms;
use crate::gateway::context::Context;
use crate::gateway::outbound::outbox::{self, Lane, Row, due};
use crate::gateway::outbound::webhook_api::{self, Resent};
use crate::gateway::store::StoreError;

/// How long one node holds an attempt at a message: two attempts' timeout. A node that died
/// mid-send delays the message's next attempt this long at most.
pub(super) const CLAIM_TTL: Duration = Duration::from_secs(30);

/// How long a node waits for its view to apply what it published before looking again.
const APPLY_WAIT: Duration = Duration::from_secs(2);

/// Sends the messages due in this node's view, until the process ends.
pub(super) async fn sender(ctx: Context, cluster: Cluster) {
    loop {
        let rows = ctx
            .store
            .read(|conn| due(conn, Lane::Webhooks, now_ms(), 32))
            .await;
        match rows {
            Ok(rows) => {
                for row in rows {
                    attempt(&ctx, &cluster, &row).await;
                }
            }
            Err(err) => tracing::error!(%err, "cannot read the outbox"),
        }
        let wait = outbox::next_wait(&ctx, Lane::Webhooks).await;
        tokio::time::sleep(wait.max(Duration::from_millis(50))).await;
    }
}

/// Sends `row` when this node takes its attempt, and publishes what came of it.
async fn attempt(ctx: &Context, cluster: &Cluster, row: &Row) {
    let Some(key) = row.webhook_claim_key() else {
        return;
    };
    match cluster
        .buckets
        .webhooks
        .create(&key, "sending".into())
        .await
    {
        Ok(_) => {}
        // Another node sends it, or sent it and its outcome is not in this view yet.
        Err(err) if is_already_exists(&err) => return,
        Err(err) => {
            tracing::warn!(%err, "webhooks bucket: cannot take a message");
            return;
        }
    }
    let Some(attempted) = outbox::attempt_webhook(ctx, row).await else {
        return;
    };
    let fact = Fact::WebhookAttempted(attempted);
    match cluster.publish(&fact, &format!("webhook-{key}")).await {
        Ok(sequence) => {
            cluster.wait_applied(sequence, APPLY_WAIT).await;
        }
        // Its key expires and the message is sent again, with the same id.
        Err(err) => tracing::error!(%err, "cannot record a webhook's attempt"),
    }
}

/// The operator's retry of the failed webhook row `id`, as a fact every view applies.
pub(crate) async fn retry(
    cluster: &Cluster,
    store: &crate::gateway::store::Store,
    id: i64,
) -> Result<Resent, StoreError> {
    let found = store
        .read(move |conn| webhook_api::status_of(conn, id))
        .await?;
    let webhook_id = match found {
        None => return Ok(Resent::NotFound),
        Some((status, _)) if status != "failed" => return Ok(Resent::NotFailed),
        Some((_, webhook_id)) => webhook_id,
    };
    let at_ms = now_ms();
    let fact = Fact::WebhookRetried {
        row: id,
        webhook_id: webhook_id.clone(),
        at_ms,
    };
    let sequence = cluster
        .publish(&fact, &format!("webhook-retry-{webhook_id}-{at_ms}"))
        .await
        .map_err(|e: ClusterError| StoreError::from(e))?;
    cluster.wait_applied(sequence, APPLY_WAIT).await;
    Ok(Resent::Resent)
}
