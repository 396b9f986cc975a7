//! What the store's runs look like now, for the console's overview (`GET /api/overview`,
//! docs/operations.md#the-overview): how many runs the store keeps in each status, each lane's
//! running, queued and held runs, and the oldest held run. One read; on a NATS store, of this
//! node's view, which holds the whole cluster's runs.

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use super::records::RunStatus;
use super::{Store, StoreError};

/// The runs waiting or in progress of one lane: a mapping's, or (for `POST {prefix}/agent`,
/// whose runs no mapping admitted) an agent's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneRuns {
    /// The mapping that admitted the runs; null for an agent's runs of no mapping.
    pub mapping_id: Option<String>,
    /// With no mapping, the agent whose runs these are.
    pub agent: Option<String>,
    pub running: u64,
    pub queued: u64,
    /// Held by a spent budget (`onExceeded: hold`).
    pub held: u64,
}

/// The held run that has waited longest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OldestHeld {
    pub run_id: String,
    /// RFC 3339: when it was accepted (and held).
    pub created_at: String,
    pub mapping_id: Option<String>,
    pub agent: String,
    /// The budget that held it, as the run's record names it (`mapping:runsPerHour:github`).
    pub held_by: Option<String>,
}

/// The runs now: by status, by lane, and the oldest held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunsNow {
    /// Every status, in [`RunStatus::ALL`]'s order, with the runs the store keeps in it (the
    /// retention bounds how long it keeps finished ones).
    pub by_status: Vec<(RunStatus, u64)>,
    /// The lanes that have a run running, queued or held, by mapping and then agent.
    pub lanes: Vec<LaneRuns>,
    pub oldest_held: Option<OldestHeld>,
}

/// Runs by status, on the status index alone.
const BY_STATUS: &str = "SELECT status, COUNT(*) FROM runs GROUP BY status";

/// The runs in progress or waiting, by lane, on the status index: a step per such run.
const BY_LANE: &str = "SELECT mapping_id, CASE WHEN mapping_id IS NULL THEN target_agent END,
       CASE WHEN status = 'forwarding' THEN 'running' ELSE status END, COUNT(*)
       FROM runs WHERE status IN ('running', 'forwarding', 'queued', 'held')
       GROUP BY 1, 2, 3 ORDER BY 1, 2";

/// The oldest held run, among the held ones (at most `lanes::MAX_HELD` a lane).
const OLDEST_HELD: &str = "SELECT run_id, created_at, mapping_id, target_agent, held_by
       FROM runs WHERE status = 'held' ORDER BY created_at, rowid LIMIT 1";

impl Store {
    /// The runs now ([`RunsNow`]). Costs a walk of the status index, and a step per run
    /// running, queued or held.
    pub async fn runs_now(&self) -> Result<RunsNow, StoreError> {
        self.read(runs_now).await
    }
}

fn runs_now(conn: &Connection) -> rusqlite::Result<RunsNow> {
    let mut counted = std::collections::HashMap::new();
    let mut stmt = conn.prepare_cached(BY_STATUS)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let status: String = row.get(0)?;
        counted.insert(status, row.get::<_, i64>(1)?.unsigned_abs());
    }
    let by_status = RunStatus::ALL
        .iter()
        .map(|&status| (status, counted.get(status.as_str()).copied().unwrap_or(0)))
        .collect();
    let mut lanes: Vec<LaneRuns> = Vec::new();
    let mut stmt = conn.prepare_cached(BY_LANE)?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let (mapping_id, agent): (Option<String>, Option<String>) = (row.get(0)?, row.get(1)?);
        if lanes
            .last()
            .is_none_or(|lane| lane.mapping_id != mapping_id || lane.agent != agent)
        {
            lanes.push(LaneRuns {
                mapping_id,
                agent,
                ..LaneRuns::default()
            });
        }
        let count = row.get::<_, i64>(3)?.unsigned_abs();
        if let Some(lane) = lanes.last_mut() {
            // A forwarding run holds its lane's slot as a running one does (forward mode).
            match row.get::<_, RunStatus>(2)? {
                RunStatus::Running => lane.running = count,
                RunStatus::Queued => lane.queued = count,
                _ => lane.held = count,
            }
        }
    }
    let oldest_held = conn
        .prepare_cached(OLDEST_HELD)?
        .query_row([], |row| {
            Ok(OldestHeld {
                run_id: row.get(0)?,
                created_at: row.get(1)?,
                mapping_id: row.get(2)?,
                agent: row.get(3)?,
                held_by: row.get(4)?,
            })
        })
        .optional()?;
    Ok(RunsNow {
        by_status,
        lanes,
        oldest_held,
    })
}
