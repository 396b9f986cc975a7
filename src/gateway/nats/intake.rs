//! Accepting hooks on the cluster: wakes and runs published to the stream, idempotency keys and
//! signed delivery ids decided in key-value buckets, so that a retry landing on another node
//! gets the answer the first one got.

use std::time::Duration;

use async_nats::jetstream::kv;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::claims::ClaimValue;
use super::{Cluster, ClusterError, Fact, key_of};
use crate::config::outbound::{Event, OutboundSettings};
use crate::gateway::admission::budget::HeldBy;
use crate::gateway::admission::replay::{Claim, RecordedAnswer, STALE_CLAIM};
use crate::gateway::clock::now_ms;
use crate::gateway::outbound::webhooks;
use crate::gateway::store::records::{NewEvent, NewRun};
use crate::gateway::store::runs::{IdempotencyClaim, RunQueued};
use crate::hook::WakeMode;

/// Heartbeat requests within this long of each other make one heartbeat, whichever node they
/// reach (they share a message id, which the stream keeps once), as on one node.
const BEAT_COALESCE_MS: i64 = crate::gateway::signals::COALESCE.as_millis() as i64;

/// What a signed delivery's id holds in the replay bucket.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "camelCase")]
enum ReplayEntry {
    /// Being processed since `at_ms`.
    #[serde(rename_all = "camelCase")]
    Claimed { at_ms: i64 },
    /// Answered: the answer every redelivery gets.
    #[serde(rename_all = "camelCase")]
    Answered {
        status: u16,
        content_type: Option<String>,
        body: String,
    },
}

pub(super) fn is_already_exists(err: &kv::CreateError) -> bool {
    err.kind() == kv::CreateErrorKind::AlreadyExists
}

impl Cluster {
    /// Publishes a wake; with `mode` now also a heartbeat request.
    ///
    /// Answered once the stream has it, without waiting for this node's view to show it: every
    /// view applies the stream in order a moment later, so a reader paging by `seq` never skips
    /// an event, and a webhook sender needs only the durability. (Waiting for the view cost 60%
    /// of the throughput in the cluster benchmark.)
    pub async fn submit_wake(&self, event: NewEvent, mode: WakeMode) -> Result<(), ClusterError> {
        let id = format!("wake-{}", uuid::Uuid::new_v4());
        self.publish(&Fact::Wake { event }, &id).await?;
        if mode == WakeMode::Now
            && let Err(err) = self.request_beat().await
        {
            // The event is stored; the next periodic heartbeat takes it.
            tracing::warn!(%err, "cannot request a heartbeat");
        }
        Ok(())
    }

    /// Asks for a heartbeat soon, on whichever node the heartbeat consumer picks. Requests of
    /// one 250 ms window, from any node, are one message (the stream drops the copies), and its
    /// heartbeat begins only when the window has ended, so that it covers the events of every
    /// request it stands for (the nodes' clocks are taken to agree to well within that).
    pub async fn request_beat(&self) -> Result<(), ClusterError> {
        let slot = now_ms() / BEAT_COALESCE_MS;
        let request = Fact::BeatRequested {
            not_before_ms: (slot + 1) * BEAT_COALESCE_MS,
        };
        self.publish(&request, &format!("beat-now-{slot}"))
            .await
            .map(drop)
    }

    /// Publishes a run, unless `claim` finds its idempotency key taken in the window: the first
    /// run's id is then the answer. The run is published under its run id as the message id.
    pub async fn submit_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<RunQueued, ClusterError> {
        self.submit(run, claim, |run| {
            let webhooks = webhooks::callback_of(&run).into_iter().collect();
            Fact::Run { run, webhooks }
        })
        .await
    }

    /// Publishes a run a budget held, as [`Cluster::submit_run`] publishes a run: the views
    /// store it `held`, and the runner consumer never sees it until it is released. Its
    /// callback waits with it, and its `run.held` goes to the endpoints of `outbound`.
    pub async fn hold_run(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        held_by: HeldBy,
        outbound: &OutboundSettings,
    ) -> Result<RunQueued, ClusterError> {
        self.submit(run, claim, |run| {
            let mut webhooks: Vec<_> = webhooks::callback_of(&run).into_iter().collect();
            webhooks.extend(webhooks::event_messages(
                outbound,
                Event::RunHeld,
                &run,
                None,
            ));
            Fact::Held {
                run,
                held_by,
                webhooks,
            }
        })
        .await
    }

    /// Publishes a notification's run, stored finished with its delivery (`gateway::notify`),
    /// unless `claim` finds its idempotency key taken, as [`Cluster::submit_run`] publishes a
    /// run.
    pub async fn submit_notify(
        &self,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
        fact: impl FnOnce(NewRun) -> Fact,
    ) -> Result<RunQueued, ClusterError> {
        self.submit(run, claim, fact).await
    }

    async fn submit(
        &self,
        mut run: NewRun,
        claim: Option<IdempotencyClaim>,
        fact: impl FnOnce(NewRun) -> Fact,
    ) -> Result<RunQueued, ClusterError> {
        let mut replayed = false;
        if let Some(claim) = &claim {
            let key = key_of(&claim.fingerprint);
            let bucket = &self.buckets.idempotency;
            match bucket.create(&key, run.run_id.clone().into()).await {
                Ok(_) => {}
                Err(err) if is_already_exists(&err) => match self.settled_claim(&key).await? {
                    Some((ClaimValue::Run(first), _)) => {
                        run.run_id = first;
                        replayed = true;
                    }
                    // A retry of a request that joined a batch (its mapping had one then): the
                    // batch's run answers it, and nothing is published in its name.
                    Some((ClaimValue::Item { run_id, .. }, _)) => {
                        return Ok(RunQueued::Replayed { run_id });
                    }
                    // Left pending by a node that died admitting a batch item: the key is
                    // this run's now, unless another request took it over first.
                    Some((ClaimValue::Pending, revision)) => {
                        let key_taken = bucket.update(&key, run.run_id.clone().into(), revision);
                        key_taken
                            .await
                            .map_err(|e| ClusterError::new("idempotency bucket", e))?;
                    }
                    None => {}
                },
                Err(err) => return Err(ClusterError::new("idempotency bucket", err)),
            }
        }
        // A repeat publishes the run again under the first run's id. The stream drops it when
        // the first one landed; when the first node died between the bucket and the stream,
        // this is what stores the run that the bucket already promised.
        let run_id = run.run_id.clone();
        self.publish(&fact(run), &run_id).await?;
        Ok(if replayed {
            RunQueued::Replayed { run_id }
        } else {
            RunQueued::New { run_id }
        })
    }

    /// The run an earlier request with `claim`'s idempotency key was answered with, from the
    /// idempotency bucket (whose entries live as long as the key's window): a run's, or a batch
    /// item's batch's. A claim still pending is waited for; one that stays pending (its node
    /// died) is no repeat.
    pub async fn repeat_of(
        &self,
        claim: &IdempotencyClaim,
    ) -> Result<Option<String>, ClusterError> {
        let settled = self.settled_claim(&key_of(&claim.fingerprint)).await?;
        Ok(settled.and_then(|(value, _)| value.run_id().map(str::to_string)))
    }

    /// Claims a signed delivery id for the whole cluster.
    pub async fn claim_delivery(&self, key: &str) -> Result<Claim, ClusterError> {
        let key = key_of(key);
        let bucket = &self.buckets.replay;
        let claim = |at_ms| serde_json::to_vec(&ReplayEntry::Claimed { at_ms }).unwrap_or_default();
        match bucket.create(&key, claim(now_ms()).into()).await {
            Ok(_) => return Ok(Claim::Claimed),
            Err(err) if is_already_exists(&err) => {}
            Err(err) => return Err(ClusterError::new("replay bucket", err)),
        }
        let entry = bucket.entry(&key).await;
        let Some(entry) = entry.map_err(|e| ClusterError::new("replay bucket", e))? else {
            return Ok(Claim::InProgress);
        };
        Ok(match serde_json::from_slice::<ReplayEntry>(&entry.value) {
            Ok(ReplayEntry::Answered {
                status,
                content_type,
                body,
            }) => Claim::Answered(RecordedAnswer {
                status,
                content_type,
                body: base64::engine::general_purpose::STANDARD
                    .decode(body)
                    .unwrap_or_default(),
            }),
            Ok(ReplayEntry::Claimed { at_ms })
                if now_ms().saturating_sub(at_ms) > millis(STALE_CLAIM) =>
            {
                // The node that claimed it died before answering: take it over, unless another
                // node just did.
                match bucket
                    .update(&key, claim(now_ms()).into(), entry.revision)
                    .await
                {
                    Ok(_) => Claim::Claimed,
                    Err(_) => Claim::InProgress,
                }
            }
            _ => Claim::InProgress,
        })
    }

    /// Records the answer to a claimed delivery.
    pub async fn answer_delivery(
        &self,
        key: &str,
        answer: &RecordedAnswer,
    ) -> Result<(), ClusterError> {
        let entry = ReplayEntry::Answered {
            status: answer.status,
            content_type: answer.content_type.clone(),
            body: base64::engine::general_purpose::STANDARD.encode(&answer.body),
        };
        let value = serde_json::to_vec(&entry).unwrap_or_default();
        self.buckets
            .replay
            .put(key_of(key), value.into())
            .await
            .map(drop)
            .map_err(|e| ClusterError::new("replay bucket", e))
    }

    /// Gives a claimed delivery up, so that the provider's retry is processed.
    pub async fn release_delivery(&self, key: &str) -> Result<(), ClusterError> {
        self.buckets
            .replay
            .delete(key_of(key))
            .await
            .map_err(|e| ClusterError::new("replay bucket", e))
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
