//! Held runs (docs/runtime.md#held-runs): stored with status `held` and the budget that held
//! them, never taken by the runner. The release step starts the oldest of them as their budgets'
//! windows make room; the operator releases one whatever its budget, or cancels it.

use std::collections::HashSet;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::{HeldBy, applying, judge};
use crate::config::budget::Budgets;
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::context::Context;
use crate::gateway::nats::{Cluster, Fact};
use crate::gateway::records::{NewRun, RunStatus};
use crate::gateway::runs;
use crate::gateway::signals::Signals;
use crate::gateway::{Runtime, StoreError};

/// Held runs read at once by the release step, oldest first.
pub(super) const RELEASE_BATCH: u32 = 256;
/// How long the operator's release or cancel waits for this node's view to apply it.
const APPLY_WAIT: Duration = Duration::from_secs(10);

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
    if_held(
        conn,
        "UPDATE runs SET status = 'cancelled', finished_at = ?2 WHERE run_id = ?1 AND status = 'held'",
        run_id,
        at,
    )
}

/// Runs `update` (of a held run `?1`, at `?2`); whether the run was held.
fn if_held(conn: &Connection, update: &str, run_id: &str, at: &str) -> rusqlite::Result<bool> {
    Ok(conn.prepare_cached(update)?.execute(params![run_id, at])? == 1)
}

/// A held run, as much of it as its budgets need, and its place in the order of holding.
struct HeldRun {
    rowid: i64,
    run_id: String,
    mapping_id: Option<String>,
    agent: String,
}

/// The oldest held runs after rowid `after`, at most `limit`, on the `runs_queue` index.
fn held_after(conn: &Connection, after: i64, limit: u32) -> rusqlite::Result<Vec<HeldRun>> {
    conn.prepare_cached(
        "SELECT rowid, run_id, mapping_id, target_agent FROM runs
         WHERE status = 'held' AND rowid > ?1 ORDER BY rowid LIMIT ?2",
    )?
    .query_map(params![after, limit], |row| {
        Ok(HeldRun {
            rowid: row.get(0)?,
            run_id: row.get(1)?,
            mapping_id: row.get(2)?,
            agent: row.get(3)?,
        })
    })?
    .collect()
}

/// Whether any run is held: the release step's cheap look before it writes.
fn any_held(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM runs WHERE status = 'held' LIMIT 1")?
        .query_row([], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Whether `run`'s budgets (as `budgets` now says: a reload applies) have room at `now_ms`.
fn room_now(
    conn: &Connection,
    budgets: &Budgets,
    run: &HeldRun,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let applying = applying(budgets, run.mapping_id.as_deref(), &run.agent);
    Ok(judge(conn, &applying, now_ms)?.is_none())
}

/// Walks the held runs oldest first, handing `take` each whose budgets have room at `now_ms`
/// (counted after what `take` released before it), until `take` answers false or none is left.
///
/// Every held run is looked at, a page of [`RELEASE_BATCH`] at a time, so that the runs of a
/// budget with room are found however many runs of a spent one were held before them; the
/// budgets of a mapping and agent found without room are not counted again in the same walk
/// (releasing only takes room). Costs a walk of the held runs' index and one count per run
/// taken, plus one per mapping and agent without room.
fn walk_releasable(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
    mut take: impl FnMut(HeldRun) -> rusqlite::Result<bool>,
) -> rusqlite::Result<()> {
    let mut spent: HashSet<(Option<String>, String)> = HashSet::new();
    let mut after = 0;
    loop {
        let page = held_after(conn, after, RELEASE_BATCH)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = last.rowid;
        for run in page {
            let group = (run.mapping_id.clone(), run.agent.clone());
            if spent.contains(&group) {
                continue;
            }
            if !room_now(conn, budgets, &run, now_ms)? {
                spent.insert(group);
            } else if !take(run)? {
                return Ok(());
            }
        }
    }
}

/// Releases, oldest first, each held run whose budgets have room at `now_ms`; each one released
/// counts against the runs after it. The ids released. In one transaction of the caller's.
pub(crate) fn release_due_in(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
) -> rusqlite::Result<Vec<String>> {
    let at = crate::gateway::clock::rfc3339(now_ms);
    let mut released = Vec::new();
    walk_releasable(conn, budgets, now_ms, |run| {
        if mark_released(conn, &run.run_id, &at)? {
            released.push(run.run_id);
        }
        Ok(true)
    })?;
    Ok(released)
}

/// The oldest held run whose budgets have room at `now_ms`.
fn first_releasable(
    conn: &Connection,
    budgets: &Budgets,
    now_ms: i64,
) -> rusqlite::Result<Option<NewRun>> {
    let mut first = None;
    walk_releasable(conn, budgets, now_ms, |run| {
        first = Some(run.run_id);
        Ok(false)
    })?;
    match first {
        Some(run_id) => NewRun::select(conn, &run_id),
        None => Ok(None),
    }
}

/// The embedded runner's release step: one indexed read when nothing is held; else one
/// transaction releasing what the budgets have room for, and the runner told.
pub(crate) async fn release_due(ctx: &Context, signals: &Signals) -> Result<(), StoreError> {
    if !ctx.store.read(any_held).await? {
        return Ok(());
    }
    let settings = ctx.config.current();
    let released = ctx
        .store
        .write(move |conn| {
            let budgets = settings.hooks.as_ref().map(|h| &h.budgets);
            release_due_in(conn, budgets.unwrap_or(&Budgets::default()), now_ms())
        })
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
                let default = Budgets::default();
                let budgets = settings.hooks.as_ref().map_or(&default, |h| &h.budgets);
                first_releasable(conn, budgets, now_ms())
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

/// Starts the held run `run_id` whatever its budgets say (it counts against them from now).
/// On a NATS cluster the run is published for the runner under `release-<run id>`: two nodes
/// releasing it at once make one release. 409 material ([`HeldError::NotHeld`]) for a run that
/// is not held, cancelled or released already included.
pub async fn release(runtime: &Runtime, run_id: &str) -> Result<Settled, HeldError> {
    let at = now_rfc3339();
    if let Some(cluster) = runtime.cluster() {
        let run = held_run(runtime, run_id).await?;
        let fact = Fact::Released {
            run,
            released_at: at,
        };
        return settle(
            runtime,
            cluster,
            &fact,
            &format!("release-{run_id}"),
            run_id,
        )
        .await;
    }
    let id = run_id.to_string();
    let done = runtime
        .store()
        .write(move |conn| mark_released(conn, &id, &at))
        .await?;
    if let Some(signals) = runtime.signals() {
        signals.run_queued();
    }
    outcome(runtime, run_id, done, RunStatus::Queued).await
}

/// Cancels the held run `run_id`: status `cancelled`, it never runs. On a NATS cluster a fact
/// every view applies in stream order, so that a release and a cancel racing on two nodes end
/// alike everywhere, and the answer says which came first.
pub async fn cancel(runtime: &Runtime, run_id: &str) -> Result<Settled, HeldError> {
    let at = now_rfc3339();
    if let Some(cluster) = runtime.cluster() {
        held_run(runtime, run_id).await?;
        let fact = Fact::Cancelled {
            run_id: run_id.to_string(),
            at,
        };
        return settle(runtime, cluster, &fact, &format!("cancel-{run_id}"), run_id).await;
    }
    let id = run_id.to_string();
    let done = runtime
        .store()
        .write(move |conn| mark_cancelled(conn, &id, &at))
        .await?;
    outcome(runtime, run_id, done, RunStatus::Cancelled).await
}

/// The run `run_id` as this node's view has it, when it is held.
async fn held_run(runtime: &Runtime, run_id: &str) -> Result<NewRun, HeldError> {
    let id = run_id.to_string();
    let found = runtime
        .store()
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

/// Publishes an operator's release or cancel, waits for this node's view to apply it and
/// answers from the view: whichever of a release and a cancel the stream has first wins.
async fn settle(
    runtime: &Runtime,
    cluster: &Cluster,
    fact: &Fact,
    id: &str,
    run_id: &str,
) -> Result<Settled, HeldError> {
    let sequence = cluster.publish(fact, id).await.map_err(StoreError::from)?;
    cluster.wait_applied(sequence, APPLY_WAIT).await;
    let cancelling = matches!(fact, Fact::Cancelled { .. });
    let status = status_of(runtime, run_id).await?;
    // A release that came first may have been started, even finished, by now.
    if cancelling == (status == RunStatus::Cancelled) {
        Ok(Settled(status))
    } else {
        Err(HeldError::NotHeld(status))
    }
}

/// The answer of a release or cancel on the store: done, or why not.
async fn outcome(
    runtime: &Runtime,
    run_id: &str,
    done: bool,
    now: RunStatus,
) -> Result<Settled, HeldError> {
    if done {
        return Ok(Settled(now));
    }
    Err(HeldError::NotHeld(status_of(runtime, run_id).await?))
}

async fn status_of(runtime: &Runtime, run_id: &str) -> Result<RunStatus, HeldError> {
    let id = run_id.to_string();
    let status = runtime
        .store()
        .read(move |conn| runs::status(conn, &id))
        .await?;
    status.ok_or(HeldError::NotFound)
}
