//! Recovering what failed of a run (`POST /api/runs/<runId>/retry`): its turn run again when the
//! model call failed, its reply sent again, or its relay sent upstream again. What a retry would
//! do follows from the run record alone ([`Retry::of`]), so the operator API can say it before
//! anyone asks for one, and the console offers a retry exactly where the API takes one.

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};

use crate::gateway::store::records::{DeliveryRecord, RunStatus};
use crate::gateway::store::run_view::RunRecord;

/// What a retry does to a run (`retry` of a run in the operator API; `retried` of a retry's
/// answer, which the CLI reads back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retry {
    /// Its turn failed (`error`, `timeout`): it is queued again, as its next attempt. This
    /// starts agent work: the model is called again.
    Run,
    /// Its reply was given up (`failed`, or `uncertain` after a stop): it is sent again, to the
    /// route as it resolves now.
    Delivery,
    /// Forward mode: the upstream refused it; it is relayed again (and the upstream runs it).
    Relay,
}

impl Retry {
    /// What a retry of `run` would do; `None` when nothing of it failed (or it is still going).
    pub fn of(run: &RunRecord) -> Option<Retry> {
        match (run.status, &run.delivery) {
            (RunStatus::Error | RunStatus::Timeout, _) => Some(Retry::Run),
            (RunStatus::ForwardFailed, _) => Some(Retry::Relay),
            (_, Some(DeliveryRecord::Failed { .. } | DeliveryRecord::Uncertain { .. })) => {
                Some(Retry::Delivery)
            }
            _ => None,
        }
    }
}

/// Queues a run whose turn failed again, as its next attempt, its outcome cleared. Its summary
/// event goes if no heartbeat has taken it yet (the new attempt records its own); one that a
/// heartbeat took stays in the session, no longer counted as the run's, so that the new
/// attempt's summary is recorded too. Whether the run had failed.
pub fn rerun(conn: &Connection, run_id: &str) -> rusqlite::Result<bool> {
    let queued = conn
        .prepare_cached(
            "UPDATE runs SET status = 'queued', attempts = attempts + 1, reply = NULL,
                 summary = NULL, error = NULL, answered_by = NULL, started_at = NULL,
                 finished_at = NULL, delivery = NULL, model_calls = NULL
             WHERE run_id = ?1 AND status IN ('error', 'timeout')",
        )?
        .execute(params![run_id])?;
    if queued == 0 {
        return Ok(false);
    }
    conn.prepare_cached("DELETE FROM events WHERE run_id = ?1 AND consumed = 0")?
        .execute(params![run_id])?;
    conn.prepare_cached("UPDATE events SET run_id = NULL WHERE run_id = ?1")?
        .execute(params![run_id])?;
    Ok(true)
}
