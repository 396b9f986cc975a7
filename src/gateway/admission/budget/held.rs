//! Held runs (docs/runtime.md#held-runs): stored with status `held` and the budget that held
//! them, never taken by the runner. The release step starts the oldest of them as their budgets'
//! windows make room; the operator releases one whatever its budget, or cancels it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::sync::{Arc, LazyLock};

use rusqlite::{Connection, OptionalExtension, params};

use super::{HeldBy, Scope, applying, judge};
use crate::config::Settings;
use crate::config::budget::Budgets;
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::context::Context;
use crate::gateway::signals::Signals;
use crate::gateway::store::records::{NewRun, RunStatus};
use crate::gateway::store::runs;
use crate::gateway::store::{Store, StoreError};

/// Held runs the embedded release step releases in one transaction at most.
pub(super) const RELEASE_BATCH: usize = 256;

/// Marks the just-queued run `run_id` held by `by`.
pub(crate) fn hold(conn: &Connection, run_id: &str, by: &HeldBy) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE runs SET status = 'held', held_by = ?2 WHERE run_id = ?1")?
        .execute(params![run_id, by.to_column()])?;
    Ok(())
}

/// Queues the held run `run_id`, which counts against its budgets from `at` on; whether it was
/// held.
pub(crate) fn mark_released(conn: &Connection, run_id: &str, at: &str) -> rusqlite::Result<bool> {
    if_held(
        conn,
        "UPDATE runs SET status = 'queued', released_at = ?2 WHERE run_id = ?1 AND status = 'held'",
        run_id,
        at,
    )
}

/// Cancels the held run `run_id` at `at`: it never runs. Whether it was held.
pub(crate) fn mark_cancelled(conn: &Connection, run_id: &str, at: &str) -> rusqlite::Result<bool> {
    let cancelled = if_held(
        conn,
        "UPDATE runs SET status = 'cancelled', finished_at = ?2 WHERE run_id = ?1 AND status = 'held'",
        run_id,
        at,
    )?;
    if cancelled {
        // Forward mode stores a run's relay waiting beside it; a cancelled run is never relayed.
        conn.prepare_cached(
            "DELETE FROM outbox WHERE run_id = ?1 AND kind = 'forward-run' AND status = 'waiting'",
        )?
        .execute(params![run_id])?;
    }
    Ok(cancelled)
}

/// Runs `update` (of a held run `?1`, at `?2`); whether the run was held.
fn if_held(conn: &Connection, update: &str, run_id: &str, at: &str) -> rusqlite::Result<bool> {
    Ok(conn.prepare_cached(update)?.execute(params![run_id, at])? == 1)
}

/// The held runs of one mapping for one agent (no mapping: `POST {prefix}/agent`'s runs of
/// it): the same budgets apply to each, so the oldest one's verdict is theirs.
struct Group {
    mapping_id: Option<String>,
    agent: String,
}

/// The first agent after `?1` with held runs no mapping admitted.
pub(super) const NEXT_DIRECT_GROUP: &str = "SELECT target_agent FROM runs INDEXED BY runs_held
      WHERE status = 'held' AND mapping_id IS NULL AND target_agent > ?1
      ORDER BY target_agent LIMIT 1";

/// The first mapping and agent after (`?1`, `?2`) with held runs.
pub(super) const NEXT_MAPPED_GROUP: &str = "SELECT mapping_id, target_agent
      FROM runs INDEXED BY runs_held
      WHERE status = 'held' AND (mapping_id, target_agent) > (?1, ?2)
      ORDER BY mapping_id, target_agent LIMIT 1";

/// The oldest run of mapping `?1` (NULL: none) and agent `?2` held after rowid `?3`.
pub(super) const OLDEST_HELD: &str = "SELECT rowid, run_id FROM runs INDEXED BY runs_held
      WHERE status = 'held' AND mapping_id IS ?1 AND target_agent = ?2 AND rowid > ?3
      ORDER BY rowid LIMIT 1";

/// Every group with a held run, on `runs_held`: one seek per group, never a step per held run.
fn held_groups(conn: &Connection) -> rusqlite::Result<Vec<Group>> {
    let mut groups = Vec::new();
    // Agent ids are never empty, nor are mapping ids: '' is below every group.
    let mut agent = String::new();
    let mut direct = conn.prepare_cached(NEXT_DIRECT_GROUP)?;
    while let Some(next) = direct.query_row([&agent], |row| row.get(0)).optional()? {
        agent = next;
        groups.push(Group {
            mapping_id: None,
            agent: agent.clone(),
        });
    }
    let (mut mapping, mut agent) = (String::new(), String::new());
    let mut mapped = conn.prepare_cached(NEXT_MAPPED_GROUP)?;
    while let Some(next) = mapped
        .query_row([&mapping, &agent], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
    {
        (mapping, agent) = next;
        groups.push(Group {
            mapping_id: Some(mapping.clone()),
            agent: agent.clone(),
        });
    }
    Ok(groups)
}

/// The oldest held run of `group` held after rowid `after`: its rowid and id, on `runs_held`.
fn oldest_held(
    conn: &Connection,
    group: &Group,
    after: i64,
) -> rusqlite::Result<Option<(i64, String)>> {
    conn.prepare_cached(OLDEST_HELD)?
        .query_row(params![group.mapping_id, group.agent, after], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()
}

/// Whether any run is held: the release step's cheap look before it writes.
fn any_held(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM runs INDEXED BY runs_held WHERE status = 'held' LIMIT 1")?
        .query_row([], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Hands `take` the held runs whose budgets (as `budgets` now says: a reload applies) have room
/// at `now_ms`, oldest first, each counted after what `take` released before it, until `take`
/// answers false or none is left.
///
/// Walks the groups' oldest runs in the order they were held: a group whose budgets have room
/// gives its run and then its next one; a group with a budget found without room is done for
/// this walk, and so is every other group of that budget (releasing only takes room), so a
/// mapping with room is never kept waiting behind the runs a spent one holds. Costs a seek on
/// `runs_held` and a count of its budgets per group, plus a seek and a count per run taken:
/// nothing per run left held.
fn walk_releasable(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
    mut take: impl FnMut(String) -> rusqlite::Result<bool>,
) -> rusqlite::Result<()> {
    let groups = held_groups(conn)?;
    let mut heads = BinaryHeap::new();
    for (i, group) in groups.iter().enumerate() {
        if let Some((rowid, run_id)) = oldest_held(conn, group, 0)? {
            heads.push(Reverse((rowid, i, run_id)));
        }
    }
    let mut spent: HashSet<(Scope, String)> = HashSet::new();
    while let Some(Reverse((rowid, i, run_id))) = heads.pop() {
        let group = &groups[i];
        let applying = applying(budgets, group.mapping_id.as_deref(), &group.agent);
        if applying
            .iter()
            .any(|budget| spent.contains(&(budget.scope, budget.id.clone())))
        {
            continue;
        }
        if let Some(exceeded) = judge(conn, &applying, now_ms)? {
            spent.insert((exceeded.by.scope, exceeded.by.id));
            continue;
        }
        if !take(run_id)? {
            return Ok(());
        }
        if let Some((rowid, run_id)) = oldest_held(conn, group, rowid)? {
            heads.push(Reverse((rowid, i, run_id)));
        }
    }
    Ok(())
}

/// Releases, oldest first, each held run whose budgets have room at `now_ms`, at most
/// [`RELEASE_BATCH`]; each one released counts against the runs after it. The ids released. In
/// one transaction of the caller's.
pub(crate) fn release_due_in(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
) -> rusqlite::Result<Vec<String>> {
    let at = crate::gateway::clock::rfc3339(now_ms);
    let mut released = Vec::new();
    walk_releasable(conn, budgets, now_ms, |run_id| {
        if mark_released(conn, &run_id, &at)? {
            released.push(run_id);
        }
        Ok(released.len() < RELEASE_BATCH)
    })?;
    Ok(released)
}

/// The oldest held run whose budgets have room at `now_ms`.
pub(crate) fn first_releasable(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
) -> rusqlite::Result<Option<String>> {
    let mut first = None;
    walk_releasable(conn, budgets, now_ms, |run_id| {
        first = Some(run_id);
        Ok(false)
    })?;
    Ok(first)
}

/// The embedded runner's release step: one indexed read when nothing is held; else a read
/// ([`walk_releasable`]) for a run the budgets have room for, and only when there is one a
/// transaction releasing at most [`RELEASE_BATCH`], and the runner told (which comes back for
/// the next batch at once). A spent budget's held runs never take the store's writer.
pub(crate) async fn release_due(ctx: &Context, signals: &Signals) -> Result<(), StoreError> {
    if !ctx.store.read(any_held).await? {
        return Ok(());
    }
    let settings = ctx.config.current();
    let looked = Arc::clone(&settings);
    let due = ctx
        .store
        .read(move |conn| first_releasable(conn, budgets_of(&looked), now_ms()))
        .await?;
    if due.is_none() {
        return Ok(());
    }
    let released = ctx
        .store
        .write(move |conn| release_due_in(conn, budgets_of(&settings), now_ms()))
        .await?;
    if !released.is_empty() {
        tracing::info!(
            count = released.len(),
            "held runs released: their budgets have room"
        );
        signals.run_queued();
    }
    Ok(())
}

/// The budgets of `settings`; none without hooks.
pub(crate) fn budgets_of(settings: &Settings) -> &Budgets {
    static NONE: LazyLock<Budgets> = LazyLock::new(Budgets::default);
    settings
        .hooks
        .as_ref()
        .map_or(&NONE, |hooks| &hooks.budgets)
}

/// Why a held run cannot be released or cancelled.
#[derive(Debug, thiserror::Error)]
pub enum HeldError {
    #[error("run not found")]
    NotFound,
    #[error("the run is {0}, not held")]
    NotHeld(RunStatus),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A held run the operator settled, by a release or a cancel: the run's status now (`queued`,
/// or further along, after a release; `cancelled` after a cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled(pub RunStatus);

/// Starts the held run `run_id` whatever its budgets say (it counts against them from now):
/// the embedded and forward backends' release, on the local store; `signals` wakes their
/// runner. 409 material ([`HeldError::NotHeld`]) for a run that is not held, cancelled or
/// released already included.
pub async fn release(store: &Store, signals: &Signals, run_id: &str) -> Result<Settled, HeldError> {
    let (id, at) = (run_id.to_string(), now_rfc3339());
    let done = store
        .write(move |conn| mark_released(conn, &id, &at))
        .await?;
    signals.run_queued();
    outcome(store, run_id, done, RunStatus::Queued).await
}

/// Cancels the held run `run_id` on the local store: status `cancelled`, it never runs.
pub async fn cancel(store: &Store, run_id: &str) -> Result<Settled, HeldError> {
    let (id, at) = (run_id.to_string(), now_rfc3339());
    let done = store
        .write(move |conn| mark_cancelled(conn, &id, &at))
        .await?;
    outcome(store, run_id, done, RunStatus::Cancelled).await
}

/// The run `run_id` as this node's view has it, when it is held.
pub(crate) async fn held_run(store: &Store, run_id: &str) -> Result<NewRun, HeldError> {
    let id = run_id.to_string();
    let found = store
        .read(move |conn| {
            let status = runs::status(conn, &id)?;
            Ok(status.zip(NewRun::select(conn, &id)?))
        })
        .await?;
    match found {
        None => Err(HeldError::NotFound),
        Some((RunStatus::Held, run)) => Ok(run),
        Some((status, _)) => Err(HeldError::NotHeld(status)),
    }
}

/// The answer of a release or cancel on the store: done, or why not.
async fn outcome(
    store: &Store,
    run_id: &str,
    done: bool,
    now: RunStatus,
) -> Result<Settled, HeldError> {
    if done {
        return Ok(Settled(now));
    }
    Err(HeldError::NotHeld(status_of(store, run_id).await?))
}

pub(crate) async fn status_of(store: &Store, run_id: &str) -> Result<RunStatus, HeldError> {
    let id = run_id.to_string();
    let status = store.read(move |conn| runs::status(conn, &id)).await?;
    status.ok_or(HeldError::NotFound)
}
