//! Lanes at admission: a mapping's `runs` bound what waits. Admission gives a run its mapping's
//! priority and refuses it when `maxQueued` of the mapping's runs wait already, queued or held by
//! a budget ([`enter`]), and a run a budget would hold when its lane holds [`MAX_HELD`]
//! ([`held_full`]). How many of a mapping's runs run at once (`maxConcurrent`) is the runner's
//! (`turns/lane_slots.rs`, above this floor). See docs/hooks.md, "Lanes".

use std::num::NonZeroU32;
use std::time::Duration;

use rusqlite::types::{FromSql, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql, params};

use crate::config::HookSettings;
use crate::config::lanes::Priority;
use crate::gateway::store::records::NewRun;
use crate::gateway::store::{Store, StoreError};
use crate::hook::{LimitKind, LimitReached};

/// The `Retry-After` of a request refused by a full lane. A queue drains as fast as its runs
/// end, which nothing here knows ahead: a pause that keeps a sender from hammering the lane,
/// not a promise that it has room by then.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);

impl ToSql for Priority {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.rank()))
    }
}

impl FromSql for Priority {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        i64::column_result(value).map(Priority::from_rank)
    }
}

/// The most runs one lane holds (held by a budget: `onExceeded: hold`), whatever its
/// `maxQueued`: a mapping's, or for `POST {prefix}/agent` an agent's. Past it a run the budget
/// would hold is refused as a full lane refuses, so that held runs never grow without bound.
pub const MAX_HELD: u32 = 1000;

/// A request refused because its mapping's lane holds `runs.maxQueued` waiting runs (queued or
/// held) already.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mapping {mapping}: runs.maxQueued ({max_queued}) reached")]
pub struct LaneFull {
    pub mapping: String,
    pub max_queued: u32,
}

/// The client is told the queue is full, the request log which lane, and to retry after
/// [`RETRY_AFTER`].
impl From<LaneFull> for LimitReached {
    fn from(full: LaneFull) -> Self {
        LimitReached {
            kind: LimitKind::Lane,
            message: "run queue full; retry later",
            reason: full.to_string(),
            retry_after: RETRY_AFTER,
        }
    }
}

/// A run a budget would hold, refused because its lane holds [`MAX_HELD`] held runs already.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeldFull {
    #[error("mapping {0}: {max} runs held, the most a lane holds", max = MAX_HELD)]
    Mapping(String),
    #[error("agent {0}: {max} runs of /hooks/agent held, the most a lane holds", max = MAX_HELD)]
    Agent(String),
}

impl HeldFull {
    /// The `mapping` label of `hookgate_lane_refusals_total`: empty for `POST {prefix}/agent`.
    pub fn mapping(&self) -> &str {
        match self {
            HeldFull::Mapping(mapping) => mapping,
            HeldFull::Agent(_) => "",
        }
    }
}

/// Answered as a full lane is: the lane in the request log, retry after [`RETRY_AFTER`].
impl From<HeldFull> for LimitReached {
    fn from(full: HeldFull) -> Self {
        LimitReached {
            kind: LimitKind::Lane,
            message: "run queue full; retry later",
            reason: full.to_string(),
            retry_after: RETRY_AFTER,
        }
    }
}

/// Why a run did not enter its lane.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    #[error(transparent)]
    Full(#[from] LaneFull),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Puts an admitted run in the lane of the mapping that admitted it: gives it the lane's
/// priority, and refuses it ([`LaneFull`]) when `runs.maxQueued` of the mapping's runs are
/// queued or held already. A run without a mapping, or of a mapping without `runs`, passes as
/// it is. The caller lets a repeat of an earlier request through a full lane (it queues
/// nothing).
///
/// Costs one read of at most `maxQueued` entries of an index of the queued runs and as many of
/// the held runs' (on a NATS cluster, of this node's view). The count is read before the run is queued, not in its
/// transaction: requests of one mapping admitted at the same moment may each see room, so the
/// queue may pass `maxQueued` by as many as were admitted together.
pub async fn enter(store: &Store, hooks: &HookSettings, run: &mut NewRun) -> Result<(), LaneError> {
    let Some(mapping) = run.admitted.mapping_id.as_deref() else {
        return Ok(());
    };
    let Some(lane) = hooks.lane_for(mapping) else {
        return Ok(());
    };
    run.priority = lane.priority;
    let Some(max_queued) = lane.max_queued else {
        return Ok(());
    };
    let owned = mapping.to_string();
    let queued = store
        .read(move |conn| queued_of(conn, &owned, max_queued))
        .await?;
    if queued < max_queued.get() {
        return Ok(());
    }
    Err(LaneFull {
        mapping: mapping.to_string(),
        max_queued: max_queued.get(),
    }
    .into())
}

/// How many runs of `mapping` wait, queued or held, each counted up to `cap` (what admission
/// needs to know): on `runs_queued_by_mapping` and `runs_held`, which hold those runs alone.
fn queued_of(conn: &Connection, mapping: &str, cap: NonZeroU32) -> rusqlite::Result<u32> {
    conn.prepare_cached(
        "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM runs INDEXED BY runs_queued_by_mapping
                  WHERE mapping_id = ?1 AND status = 'queued' LIMIT ?2))
              + (SELECT COUNT(*) FROM (SELECT 1 FROM runs INDEXED BY runs_held
                  WHERE mapping_id = ?1 AND status = 'held' LIMIT ?2))",
    )?
    .query_row(params![mapping, cap.get()], |row| row.get(0))
}

/// Whether the lane of `run` (its mapping's, or for a run without one its agent's) holds
/// [`MAX_HELD`] held runs: then a budget may hold no more of it. Costs one read of at most
/// [`MAX_HELD`] entries of `runs_held` (on a NATS cluster, of this node's view); it is read
/// before the run is held, so requests held at the same moment may pass the bound together.
pub async fn held_full(store: &Store, run: &NewRun) -> Result<Option<HeldFull>, StoreError> {
    let lane = match &run.admitted.mapping_id {
        Some(mapping) => HeldFull::Mapping(mapping.clone()),
        None => HeldFull::Agent(run.admitted.target_agent.clone()),
    };
    store
        .read(move |conn| {
            let (sql, id) = match &lane {
                HeldFull::Mapping(mapping) => (HELD_OF_MAPPING, mapping),
                HeldFull::Agent(agent) => (HELD_OF_AGENT, agent),
            };
            let held: u32 = conn
                .prepare_cached(sql)?
                .query_row(params![id, MAX_HELD], |row| row.get(0))?;
            Ok((held >= MAX_HELD).then_some(lane))
        })
        .await
}

/// The held runs of mapping `?1`, counted up to `?2`.
const HELD_OF_MAPPING: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs INDEXED BY runs_held
      WHERE mapping_id = ?1 AND status = 'held' LIMIT ?2)";

/// The held runs of agent `?1` that no mapping admitted (`POST {prefix}/agent`'s), up to `?2`.
const HELD_OF_AGENT: &str = "SELECT COUNT(*) FROM (SELECT 1 FROM runs INDEXED BY runs_held
      WHERE mapping_id IS NULL AND target_agent = ?1 AND status = 'held' LIMIT ?2)";

impl Store {
    /// Queued runs by the mapping that admitted them, for mappings that have any: the
    /// `hookgate_lane_queued` gauge. Costs a walk of the index of queued runs.
    pub async fn queued_by_mapping(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT mapping_id, COUNT(*) FROM runs INDEXED BY runs_queued_by_mapping
                  WHERE mapping_id IS NOT NULL AND status = 'queued' GROUP BY mapping_id",
            )?;
            let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect()
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held runs wait in their lane as queued ones do: they count against `maxQueued`, and a
    /// lane (a mapping's, or an agent's runs of no mapping) holds at most [`MAX_HELD`].
    #[tokio::test]
    async fn held_runs_count_against_their_lane() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        let of = |id: &str, mapping: Option<&str>| {
            let mut new = crate::gateway::store::runs::tests::run(id);
            new.admitted.mapping_id = mapping.map(String::from);
            new
        };
        let (bulk, direct) = (of("next", Some("bulk")), of("next-direct", None));
        let held = |runs: Vec<NewRun>| {
            store.write(move |conn| {
                let by = crate::gateway::admission::budget::HeldBy::from_column(
                    "mapping:runsPerHour:bulk",
                );
                for run in runs {
                    crate::gateway::store::runs::queue_run(conn, &run, None)?;
                    crate::gateway::admission::budget::held::hold(
                        conn,
                        &run.run_id,
                        by.as_ref().unwrap(),
                    )?;
                }
                Ok(())
            })
        };
        store
            .queue_run(of("queued", Some("bulk")), None)
            .await
            .unwrap();
        held(vec![of("held-0", Some("bulk"))]).await.unwrap();
        let three = NonZeroU32::new(3).unwrap();
        let waiting = store.read(move |conn| queued_of(conn, "bulk", three)).await;
        assert_eq!(waiting.unwrap(), 2, "one queued and one held");
        assert_eq!(held_full(&store, &bulk).await.unwrap(), None);
        let more = (1..MAX_HELD).flat_map(|i| {
            [
                of(&format!("held-{i}"), Some("bulk")),
                of(&format!("direct-{i}"), None),
            ]
        });
        held(more.collect()).await.unwrap();
        assert_eq!(
            held_full(&store, &bulk).await.unwrap(),
            Some(HeldFull::Mapping("bulk".into()))
        );
        assert_eq!(held_full(&store, &direct).await.unwrap(), None, "one short");
        held(vec![of("direct-0", None)]).await.unwrap();
        let full = held_full(&store, &direct).await.unwrap().unwrap();
        assert_eq!(
            full.to_string(),
            "agent main: 1000 runs of /hooks/agent held, the most a lane holds"
        );
        store.close();
    }
}
