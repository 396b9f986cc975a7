//! The facts of the stream: everything that changes what the operator API shows, as published
//! by the node that did it, and how each is applied to a node's view.
//!
//! Applying is deterministic and idempotent: every node applies the same facts in stream order
//! and ends up with the same rows (the same event sequence numbers included), and a fact that
//! arrives twice, or one that no longer applies (a run finished by another node first), changes
//! nothing.

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::config::runtime::Route;
use crate::gateway::admission::batches::{self, Opened};
use crate::gateway::admission::budget::{HeldBy, held};
use crate::gateway::notify;
use crate::gateway::outbound::outbox::WebhookAttempt;
use crate::gateway::outbound::refusals;
use crate::gateway::outbound::webhook_api as outbound_api;
use crate::gateway::outbound::webhooks::{self as outbound_webhooks, RunEndStamp, WebhookMessage};
use crate::gateway::store::records::RunStatus;
use crate::gateway::store::records::{
    DeliveryJob, DeliveryRecord, NewEvent, NewRun, RunOutcome, SummaryEvent,
};
use crate::gateway::store::{runs, spend};
use crate::gateway::turns::provider::Usage;
use crate::gateway::turns::retry;
use crate::hook::batch_prompt::BatchMessage;

/// One change, as published to `<stream>.<subject>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "camelCase")]
pub enum Fact {
    /// A wake's system event for the main session.
    Wake { event: NewEvent },
    /// An accepted agent run; the runner consumer hands it to one node. For a batch's run, its
    /// closing: the run with the prompt of every item (docs/runtime.md "Batches").
    Run {
        run: NewRun,
        /// Callbacks and lifecycle webhooks written with it (`outbound::webhooks::write`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
    },
    /// An accepted run a budget held (`gateway::budget`): stored `held`, on a subject the runner
    /// consumer does not read.
    #[serde(rename_all = "camelCase")]
    Held {
        run: NewRun,
        held_by: HeldBy,
        /// Callbacks and lifecycle webhooks written with it (`outbound::webhooks::write`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
    },
    /// A held run released, by its budget's window or the operator: queued from `released_at`
    /// on, and handed to the runner consumer like a new run (under `release-<run id>`, so that
    /// nodes releasing it at once make one release).
    #[serde(rename_all = "camelCase")]
    Released { run: NewRun, released_at: String },
    /// The operator asked a run whose turn failed to run again (`POST /api/runs/<id>/retry`):
    /// queued again as its `attempt`th attempt, its outcome cleared, and handed to the runner
    /// consumer like a new run (under `retry-<run id>-<attempt>`, so that nodes retrying it at
    /// once make one retry).
    #[serde(rename_all = "camelCase")]
    Retried { run: NewRun, attempt: u32 },
    /// The operator cancelled a held run: it never runs.
    #[serde(rename_all = "camelCase")]
    Cancelled { run_id: String, at: String },
    /// A batch opened with its run, `batching` until its `Run` fact closes it.
    BatchOpened { run: NewRun, opened: Opened },
    /// Batch `run_id` was announced and no request joined it (its opener lost the batch's key
    /// to another node, or died first): its run is forgotten.
    #[serde(rename_all = "camelCase")]
    BatchDiscarded { run_id: String },
    /// A request joined batch `run_id` at `position` (from 1).
    #[serde(rename_all = "camelCase")]
    BatchItem {
        run_id: String,
        position: u32,
        message: BatchMessage,
        /// The request's callback, if it has one (at most one), waiting with the batch's run
        /// (`outbound::webhooks::await_member`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
    },
    /// A node began the run.
    #[serde(rename_all = "camelCase")]
    Started {
        run_id: String,
        started_at: String,
        /// Callbacks and lifecycle webhooks written with it (`outbound::webhooks::write`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
    },
    /// A run's outcome, with its summary event or the delivery to make, which the delivery
    /// consumer hands to one node.
    #[serde(rename_all = "camelCase")]
    Finished {
        run_id: String,
        outcome: RunOutcome,
        delivery: DeliveryRecord,
        summary: Option<SummaryEvent>,
        /// Boxed: a reply is the bulk of the fact, and most facts carry none.
        job: Option<Box<DeliveryJob>>,
        /// Lifecycle webhooks written with it (`outbound::webhooks::write`); facts of earlier
        /// versions also carry the run's callbacks here, bodies and all.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
        /// When the run's mapping has a callback: what its callbacks say besides the outcome.
        /// Each view makes the callbacks waiting in it pending with bodies built from its own
        /// rows, alike in every view, so that the fact carries the reply once however many
        /// requests a batch's run answers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        callbacks: Option<RunEndStamp>,
    },
    /// A notification (`gateway::notify`): its run, stored finished with its outcome and its
    /// delivery pending, and the delivery, which the delivery consumer hands to one node.
    /// Nodes of earlier versions do not read it.
    Notified {
        run: NewRun,
        outcome: RunOutcome,
        /// Boxed: as a finished run's.
        job: Box<DeliveryJob>,
    },
    /// A request for a heartbeat, which the heartbeat consumer hands to one node at a time, to
    /// begin no earlier than `not_before_ms` (the end of the window whose requests it stands
    /// for). Changes nothing by itself.
    #[serde(rename_all = "camelCase")]
    BeatRequested { not_before_ms: i64 },
    /// A heartbeat consumed the main session's events up to `up_to`; its reply, if any, is
    /// delivered by the delivery consumer. Its turn, ended at `finished_at` having used
    /// `usage`, counts in the agent's spend (absent from the facts of versions that did not
    /// count heartbeats: those count nothing).
    #[serde(rename_all = "camelCase")]
    Beat {
        agent: String,
        up_to: i64,
        job: Option<DeliveryJob>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finished_at: Option<String>,
    },
    /// The operator set the main session's route (`None`: cleared).
    RouteSet {
        agent: String,
        route: Option<Route>,
        at: String,
    },
    /// What became of a delivery: the run's delivery record, and the summary of a reply that
    /// could not be delivered. (Facts of earlier versions also carry `sentAt`, which set the
    /// main session's route; it is ignored: the route belongs to its owner.)
    #[serde(rename_all = "camelCase")]
    Delivered {
        run_id: Option<String>,
        agent: String,
        delivery: DeliveryRecord,
        summary: Option<SummaryEvent>,
        /// Callbacks and lifecycle webhooks written with it (`outbound::webhooks::write`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        webhooks: Vec<WebhookMessage>,
    },
    /// A node's attempt at the webhook `webhookId` (outbox row `row` in every view): sent,
    /// to be tried again at `nextAtMs`, or given up.
    WebhookAttempted(WebhookAttempt),
    /// A hook request was refused and endpoints subscribe to `request.refused`: its messages
    /// (within each endpoint's bound, `outbound::refusals`), which every view writes once.
    /// Nodes of earlier versions do not read it.
    RequestRefused { webhooks: Vec<WebhookMessage> },
    /// The operator sent the failed webhook `webhookId` (row `row`) again from `atMs`.
    #[serde(rename_all = "camelCase")]
    WebhookRetried {
        row: i64,
        webhook_id: String,
        at_ms: i64,
    },
}

impl Fact {
    /// The subject suffix: runs go where the runner consumer reads, outcomes and heartbeats that
    /// may carry a delivery where the delivery consumer reads.
    pub fn subject(&self) -> String {
        match self {
            Fact::Wake { .. } => "wake",
            Fact::Run { .. } | Fact::Released { .. } | Fact::Retried { .. } => "run",
            Fact::Held { .. } => "held",
            Fact::Cancelled { .. } => "cancelled",
            Fact::BatchOpened { .. } => "batch.opened",
            Fact::BatchItem { .. } => "batch.item",
            Fact::BatchDiscarded { .. } => "batch.discarded",
            Fact::Started { .. } => "started",
            Fact::BeatRequested { .. } => "beat",
            Fact::Finished { .. } => "out.finished",
            Fact::Notified { .. } => "out.notified",
            Fact::Beat { .. } => "out.beat",
            Fact::Delivered { .. } => "delivered",
            Fact::RouteSet { .. } => "route",
            Fact::WebhookAttempted(_) => "webhook.attempted",
            Fact::WebhookRetried { .. } => "webhook.retried",
            Fact::RequestRefused { .. } => "request.refused",
        }
        .to_string()
    }

    pub fn to_bytes(&self) -> bytes::Bytes {
        // Plain data: strings, numbers and JSON values always serialise.
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    /// The delivery this fact asks for, if any.
    pub fn job(&self) -> Option<&DeliveryJob> {
        match self {
            Fact::Finished { job, .. } => job.as_deref(),
            Fact::Notified { job, .. } => Some(job),
            Fact::Beat { job, .. } => job.as_ref(),
            _ => None,
        }
    }

    /// Applies the fact to a view.
    pub fn apply(&self, conn: &Connection) -> rusqlite::Result<()> {
        match self {
            Fact::Wake { event } => {
                // Every view applies the stream in one order, so every view coalesces alike.
                event.append_wake(conn)?;
            }
            Fact::Run { run, webhooks } => match runs::status(conn, &run.run_id)? {
                None => {
                    run.insert(conn)?;
                    outbound_webhooks::write(conn, &run.run_id, webhooks)?;
                }
                Some(RunStatus::Batching) => batches::queue_closed(conn, run)?,
                Some(_) => {}
            },
            Fact::Held {
                run,
                held_by,
                webhooks,
            } => {
                if runs::status(conn, &run.run_id)?.is_none() {
                    run.insert(conn)?;
                    held::hold(conn, &run.run_id, held_by)?;
                    outbound_webhooks::write(conn, &run.run_id, webhooks)?;
                }
            }
            Fact::Released { run, released_at } => {
                held::mark_released(conn, &run.run_id, released_at)?;
            }
            Fact::Retried { run, .. } => {
                retry::rerun(conn, &run.run_id)?;
            }
            Fact::Cancelled { run_id, at } => {
                held::mark_cancelled(conn, run_id, at)?;
            }
            Fact::BatchOpened { run, opened } => batches::insert_open(conn, run, opened)?,
            Fact::BatchDiscarded { run_id } => batches::discard(conn, run_id)?,
            Fact::BatchItem {
                run_id,
                position,
                message,
                webhooks,
            } => {
                // An item applied twice keeps its callback once.
                if batches::insert_item(conn, run_id, *position, message, None)? {
                    outbound_webhooks::await_member(conn, run_id, webhooks)?;
                }
            }
            Fact::Started {
                run_id,
                started_at,
                webhooks,
            } => {
                // A repeated start (a run handed to another node) announces nothing again.
                if runs::claim(conn, run_id, started_at)?.is_some() {
                    outbound_webhooks::write(conn, run_id, webhooks)?;
                }
            }
            Fact::Finished {
                run_id,
                outcome,
                delivery,
                summary,
                webhooks,
                callbacks,
                ..
            } => {
                let status = runs::status(conn, run_id)?;
                if status.is_some_and(|s| s.is_pending()) {
                    runs::finish(conn, run_id, outcome, delivery, summary.as_ref())?;
                    if let Some(stamp) = callbacks {
                        let waiting = outbound_webhooks::waiting_callbacks(conn, run_id)?;
                        outbound_webhooks::release_waiting(conn, stamp, run_id, outcome, waiting)?;
                    }
                    outbound_webhooks::write(conn, run_id, webhooks)?;
                }
            }
            Fact::Notified { run, outcome, job } => notify::store(conn, run, outcome, job)?,
            Fact::BeatRequested { .. } => {}
            Fact::RouteSet { agent, route, at } => {
                runs::set_owner_route(conn, agent, route.as_ref(), at)?;
            }
            Fact::Beat {
                agent,
                up_to,
                usage,
                finished_at,
                ..
            } => {
                runs::consume_events(conn, agent, *up_to)?;
                if let Some(at) = finished_at {
                    spend::record_heartbeat(conn, agent, at, *usage)?;
                }
            }
            Fact::Delivered {
                run_id,
                delivery,
                summary,
                webhooks,
                ..
            } => {
                if let Some(run_id) = run_id {
                    runs::set_delivery(conn, run_id, delivery)?;
                    outbound_webhooks::write(conn, run_id, webhooks)?;
                }
                if let Some(summary) = summary {
                    summary.insert(conn)?;
                }
            }
            Fact::WebhookAttempted(attempt) => attempt.apply(conn)?,
            Fact::RequestRefused { webhooks } => refusals::write(conn, webhooks)?,
            Fact::WebhookRetried {
                row,
                webhook_id,
                at_ms,
            } => {
                outbound_api::resend(conn, *row, Some(webhook_id), *at_ms)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_round_trip_through_json() {
        let fact = Fact::Started {
            run_id: "r".into(),
            started_at: "t".into(),
            webhooks: Vec::new(),
        };
        let text = String::from_utf8(fact.to_bytes().to_vec()).unwrap();
        assert_eq!(text, r#"{"fact":"started","runId":"r","startedAt":"t"}"#);
        let back: Fact = serde_json::from_str(&text).unwrap();
        assert!(matches!(back, Fact::Started { run_id, .. } if run_id == "r"));
    }

    /// An outcome carries its usage to every view; one that a node of an earlier version
    /// published, without it, still reads.
    #[test]
    fn an_outcome_carries_its_usage_and_one_without_still_reads() {
        let earlier = r#"{"fact":"finished","runId":"r","outcome":{"status":"ok","reply":"hi",
            "summary":"hi","error":null,"model":"m","finished_at":"t"},
            "delivery":{"status":"skipped","reason":"deliver is false"},"summary":null,"job":null}"#;
        let Fact::Finished { mut outcome, .. } = serde_json::from_str(earlier).unwrap() else {
            panic!("not an outcome");
        };
        assert_eq!(outcome.usage, None);
        outcome.usage = Some(crate::gateway::turns::provider::Usage {
            input_tokens: 12,
            output_tokens: 3,
        });
        let fact = Fact::Finished {
            run_id: "r".into(),
            outcome,
            delivery: DeliveryRecord::Pending {
                channel: crate::hook::Channel::Last,
                to: None,
            },
            summary: None,
            job: None,
            webhooks: Vec::new(),
            callbacks: None,
        };
        let text = String::from_utf8(fact.to_bytes().to_vec()).unwrap();
        assert!(
            text.contains(r#""usage":{"inputTokens":12,"outputTokens":3}"#),
            "{text}"
        );
        let Fact::Finished { outcome, .. } = serde_json::from_str(&text).unwrap() else {
            panic!("not an outcome");
        };
        assert_eq!(outcome.usage.map(|u| u.input_tokens), Some(12));
    }

    /// A batch item's callback is kept once however often its item comes: applied twice, or
    /// published again at another position by a retry of its request (same idempotency
    /// fingerprint); and not at all once the batch's run is closed, where it would wait forever.
    #[test]
    fn a_batch_items_callback_is_kept_once_and_only_while_batching() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("view.db")).unwrap();
        crate::gateway::store::schema::migrate(&conn).unwrap();
        let mut run = crate::gateway::store::runs::tests::run("batch-1");
        run.admitted.mapping_id = Some("standup".into());
        run.admitted.callback = Some("http://127.0.0.1:9/cb".into());
        let opened = Opened {
            batch_key: String::new(),
            closes_at_ms: i64::MAX,
            max_items: 10,
            held_by: None,
        };
        let open = Fact::BatchOpened {
            run: run.clone(),
            opened,
        };
        open.apply(&conn).unwrap();
        let item = |position: u32, fingerprint: &str| {
            let callback = outbound_webhooks::callback_of(&run).unwrap();
            let callback = outbound_webhooks::member_callback(
                callback,
                position,
                "batch-1",
                Some(fingerprint),
            );
            Fact::BatchItem {
                run_id: "batch-1".into(),
                position,
                message: BatchMessage {
                    received: "2026-01-01T00:00:00Z".into(),
                    source: crate::hook::envelope::ContentSource::Webhook,
                    message: format!("item {position}"),
                    allow_unsafe: false,
                    name: None,
                },
                webhooks: vec![callback],
            }
        };
        let rows = || -> i64 {
            conn.query_row("SELECT COUNT(*) FROM outbox", [], |row| row.get(0))
                .unwrap()
        };
        item(1, "first").apply(&conn).unwrap();
        item(1, "first").apply(&conn).unwrap();
        item(2, "first").apply(&conn).unwrap();
        assert_eq!(rows(), 1);
        let close = Fact::Run {
            run: run.clone(),
            webhooks: Vec::new(),
        };
        close.apply(&conn).unwrap();
        item(3, "late").apply(&conn).unwrap();
        assert_eq!(rows(), 1);
    }

    #[test]
    fn only_outcomes_and_heartbeats_go_to_the_delivery_consumer() {
        let beat = Fact::Beat {
            agent: "main".into(),
            up_to: 3,
            job: None,
            usage: None,
            finished_at: None,
        };
        assert_eq!(beat.subject(), "out.beat");
        assert_eq!(
            Fact::Started {
                run_id: "r".into(),
                started_at: "t".into(),
                webhooks: Vec::new(),
            }
            .subject(),
            "started"
        );
    }
}
