//! A refused hook request told to the endpoints subscribed to `request.refused`
//! (docs/outbound.md): its messages, bounded per endpoint ([`refusals::RefusalGate`]), are written in a
//! transaction of their own on a task of their own, so that the sender's answer never waits for
//! them and their failure never changes it. On a NATS cluster they ride on a fact of their own
//! ([`Fact::RequestRefused`]), which every view writes once.

use std::sync::Arc;

use super::nats::Fact;
use super::outbound::refusals;
use super::outbound::webhooks::WebhookMessage;
use super::requests::RequestRecord;
use super::runtime::{Backend, Runtime};
use super::store::StoreError;
use crate::config::outbound::OutboundSettings;

impl Runtime {
    /// Tells the endpoints of `outbound` subscribed to `request.refused` of the refusal
    /// `record` (finished: its status and the error the sender got), within each endpoint's
    /// bound. Returns at once: the messages are written by a task of their own. Messages that
    /// cannot be written are counted as suppressed, told with each endpoint's next message
    /// ([`refusals::RefusalGate::give_back`]); messages not written yet when the node stops are
    /// lost.
    pub fn refused(self: &Arc<Self>, outbound: &OutboundSettings, record: &RequestRecord) {
        let made = self.refusals.messages(outbound, record);
        if made.messages.is_empty() {
            return;
        }
        let runtime = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(err) = runtime.write_refusals(made.messages.clone()).await {
                runtime.refusals.give_back(&made, &err);
            }
        });
    }

    /// Writes `messages` to the outbox (on a NATS cluster, publishes them as a fact every view
    /// writes) and wakes the webhook sender.
    async fn write_refusals(&self, messages: Vec<WebhookMessage>) -> Result<(), StoreError> {
        if let Backend::Nats(cluster) = &self.backend {
            let msg_id = format!("refused-{}", messages[0].id);
            let fact = Fact::RequestRefused { webhooks: messages };
            cluster.publish(&fact, &msg_id).await?;
            return Ok(());
        }
        self.store
            .write(move |conn| refusals::write(conn, &messages))
            .await?;
        if let Some(signals) = self.signals() {
            signals.webhooks_ready.notify_one();
        }
        Ok(())
    }
}
