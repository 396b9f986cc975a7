//! Batches (docs/runtime.md "Batches"): the requests of a batch mapping and session key that
//! arrive within its window, gathered into one run. The run is stored when the batch opens,
//! with status `batching`, and each request as an item of it (`batch_items`), before the
//! request is answered; the batch closes when `maxItems` is reached (by the request that
//! reaches it) or when its window ends (by [`closer`]), and closing queues the run with the
//! prompt of every message ([`batch_prompt`]). A batch opened past a budget that holds
//! ([`BatchItem::held_by`]) gathers alike, and closing stores its one run `held` instead: the
//! burst stays one turn, released as one. The embedded store runs each of these steps
//! in one write, so a crash leaves a request either in its batch or unanswered; a NATS view
//! applies the same steps from the facts the nodes publish (`nats::batches`).

use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::gateway::admission::budget::HeldBy;
use crate::gateway::clock::{millis, now_ms};
use crate::gateway::context::Context;
use crate::gateway::signals::Signals;
use crate::gateway::store::records::NewRun;
use crate::gateway::store::runs::{self, IdempotencyClaim};
use crate::hook::batch_prompt::{BatchMessage, batch_prompt, batch_task, message_list};
use crate::mapping::{BatchRule, batch_key};

/// How long an idle closer sleeps when no batch is open and none was opened: a bound, not a
/// schedule (an opened batch wakes it).
const IDLE: Duration = Duration::from_secs(60);

/// A request of a batch mapping, ready to join its batch.
#[derive(Debug, Clone)]
pub struct BatchItem {
    /// Its mapping's: the batch it joins is of the mapping its run names (`mapping_id`).
    pub rule: BatchRule,
    /// The run it would open: the batch's run when no batch is open. Its message, source and
    /// acceptance time are the item's.
    pub run: NewRun,
    /// Recognises a retry of the same request: it gets the position it got the first time.
    pub claim: Option<IdempotencyClaim>,
    /// The name its sender chose, when it is not its mapping's own: it goes in the item's
    /// envelope ([`BatchMessage::name`]).
    pub sender_name: Option<String>,
    /// The budget that holds the batch this item would open: it is spent, so the batch's run
    /// is stored `held` when it closes, not queued. Read only when the item opens a batch.
    pub held_by: Option<HeldBy>,
}

impl BatchItem {
    pub(crate) fn mapping_id(&self) -> &str {
        self.run.admitted.mapping_id.as_deref().unwrap_or_default()
    }

    /// The session key the batch's run will have, or empty when every request would have
    /// one of its own ([`batch_key`]).
    pub(crate) fn key(&self) -> &str {
        let admitted = &self.run.admitted;
        batch_key(&admitted.session_key, admitted.session_key_chosen)
    }

    /// The batch it opens, now.
    pub(crate) fn opened(&self, now_ms: i64) -> Opened {
        Opened {
            batch_key: self.key().to_string(),
            closes_at_ms: now_ms.saturating_add(millis(self.rule.window)),
            max_items: self.rule.max_items,
            held_by: self.held_by.clone(),
        }
    }

    pub(crate) fn message(&self) -> BatchMessage {
        BatchMessage {
            received: self.run.created_at.clone(),
            source: self.run.admitted.source,
            message: self.run.admitted.action.message.clone(),
            allow_unsafe: self.run.admitted.allow_unsafe_external_content,
            name: self.sender_name.clone(),
        }
    }
}

/// Where a request of a batch mapping went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The batch's run.
    pub run_id: String,
    /// The request's place in its batch, from 1; `None` for a retry of a request that was
    /// queued as a run of its own (the mapping had no batch then).
    pub position: Option<u32>,
    /// A retry of an earlier request (same idempotency key): nothing was written.
    pub repeated: bool,
    /// This request opened the batch.
    pub opened: bool,
    /// This request filled the batch, which closed and queued its run.
    pub closed: bool,
}

/// What [`join`] did in the store: where the item went, and whether a batch's run was queued
/// on the way (the item filled its batch, or found one past its window and closed it), which is
/// when the runner has a run to start.
#[derive(Debug)]
pub struct Join {
    pub joined: Joined,
    pub queued: bool,
}

/// What [`join`] did with an item.
#[derive(Debug)]
pub enum Joined {
    Added(Added),
    /// No batch of its mapping and key is open, and it was not asked to open one: the item
    /// comes back for the caller to open one with (after the checks an opening passes).
    NoneOpen(Box<BatchItem>),
}

/// Adds `item` to the open batch of its mapping and key, at the next position; with `open`,
/// opens one when there is none. The request that reaches `maxItems` closes the batch; a batch
/// whose window has ended is closed here first, so that a late closer never lets it grow past
/// its window. A retry (`item.claim` seen within its window) changes nothing and gets the
/// position it got. Runs in one write of the store.
pub fn join(conn: &Connection, item: BatchItem, open: bool, now_ms: i64) -> rusqlite::Result<Join> {
    if let Some(claim) = &item.claim
        && let Some(run_id) = runs::repeat_of(conn, claim)?
    {
        let position = position_of(conn, &run_id, &claim.fingerprint)?;
        let joined = Joined::Added(Added {
            run_id,
            position,
            repeated: true,
            opened: false,
            closed: false,
        });
        return Ok(Join {
            joined,
            queued: false,
        });
    }
    let (open_now, stale_closed) = open_batch(conn, &item, now_ms)?;
    let (run_id, position, max_items, opened) = match open_now {
        Some((run_id, items, max_items)) => (run_id, items + 1, max_items, false),
        None if open => {
            open_new(conn, &item, now_ms)?;
            (item.run.run_id.clone(), 1, item.rule.max_items, true)
        }
        None => {
            let joined = Joined::NoneOpen(Box::new(item));
            return Ok(Join {
                joined,
                queued: stale_closed,
            });
        }
    };
    add_item(conn, &run_id, position, &item)?;
    if let Some(claim) = &item.claim {
        runs::record_claim(conn, claim, &run_id)?;
    }
    let closed = position >= max_items;
    if closed {
        close(conn, &run_id)?;
    }
    let joined = Joined::Added(Added {
        run_id,
        position: Some(position),
        repeated: false,
        opened,
        closed,
    });
    Ok(Join {
        joined,
        queued: closed || stale_closed,
    })
}

/// An open batch's run id, items and `maxItems`.
type OpenBatch = (String, u32, u32);

/// The open batch of `item`'s mapping and key: its run id, items and `maxItems`. One whose
/// window ended by `now_ms` is closed instead, and then there is none; the flag says whether
/// one was closed so.
fn open_batch(
    conn: &Connection,
    item: &BatchItem,
    now_ms: i64,
) -> rusqlite::Result<(Option<OpenBatch>, bool)> {
    let open: Option<(String, u32, u32, i64)> = conn
        .prepare_cached(
            "SELECT run_id, items, max_items, closes_at_ms FROM batches
             WHERE mapping_id = ?1 AND batch_key = ?2 AND open = 1",
        )?
        .query_row(params![item.mapping_id(), item.key()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    match open {
        Some((run_id, _, _, closes_at_ms)) if closes_at_ms <= now_ms => {
            Ok((None, close(conn, &run_id)?))
        }
        other => Ok((
            other.map(|(run_id, items, max, _)| (run_id, items, max)),
            false,
        )),
    }
}

/// Stores `item`'s run as a batch of its own, `batching` until it closes. The rule in force
/// now stays the batch's: a reload applies to the batches opened after it.
fn open_new(conn: &Connection, item: &BatchItem, now_ms: i64) -> rusqlite::Result<()> {
    insert_open(conn, &item.run, &item.opened(now_ms))
}

/// A batch as it opened: what a view stores of it besides its run (on a NATS cluster, the
/// fact that opened it carries this).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Opened {
    /// The session key its requests share, empty when each would have had its own.
    pub batch_key: String,
    pub closes_at_ms: i64,
    pub max_items: u32,
    /// The spent budget that holds its run when it closes; absent from batches opened within
    /// their budgets (and from the facts of versions before held batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
}

/// Stores `run` as an open batch, `batching` (with the budget that will hold it, if any, in
/// `held_by`); a batch stored already is left as it is.
pub fn insert_open(conn: &Connection, run: &NewRun, opened: &Opened) -> rusqlite::Result<()> {
    if runs::status(conn, &run.run_id)?.is_some() {
        return Ok(());
    }
    run.insert(conn)?;
    let held_by = opened.held_by.as_ref().map(HeldBy::to_column);
    conn.prepare_cached("UPDATE runs SET status = 'batching', held_by = ?2 WHERE run_id = ?1")?
        .execute(params![run.run_id, held_by])?;
    conn.prepare_cached(
        "INSERT INTO batches (run_id, mapping_id, batch_key, closes_at_ms, max_items, items)
         VALUES (?1, ?2, ?3, ?4, ?5, 0)",
    )?
    .execute(params![
        run.run_id,
        run.admitted.mapping_id.as_deref().unwrap_or_default(),
        opened.batch_key,
        opened.closes_at_ms,
        opened.max_items,
    ])?;
    Ok(())
}

/// Forgets open batch `run_id` and its run when no item of it is stored; one with an item is
/// left as it is.
pub fn discard(conn: &Connection, run_id: &str) -> rusqlite::Result<()> {
    // The trigger `batches_pruned` takes the batch's row with its run's.
    conn.prepare_cached(
        "DELETE FROM runs WHERE run_id = ?1 AND status = 'batching'
           AND NOT EXISTS (SELECT 1 FROM batch_items WHERE run_id = ?1)",
    )?
    .execute(params![run_id])?;
    Ok(())
}

fn add_item(
    conn: &Connection,
    run_id: &str,
    position: u32,
    item: &BatchItem,
) -> rusqlite::Result<()> {
    let fingerprint = item.claim.as_ref().map(|claim| claim.fingerprint.as_str());
    insert_item(conn, run_id, position, &item.message(), fingerprint).map(drop)
}

/// Stores `message` at `position` of batch `run_id`; one stored there already is kept. Whether
/// it was stored now (not there already).
pub fn insert_item(
    conn: &Connection,
    run_id: &str,
    position: u32,
    message: &BatchMessage,
    fingerprint: Option<&str>,
) -> rusqlite::Result<bool> {
    let stored = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO batch_items
             (run_id, position, message, source, received, fingerprint, allow_unsafe, name)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![
            run_id,
            position,
            message.message,
            message.source,
            message.received,
            fingerprint,
            message.allow_unsafe,
            message.name,
        ])?;
    conn.prepare_cached("UPDATE batches SET items = MAX(items, ?2) WHERE run_id = ?1")?
        .execute(params![run_id, position])?;
    Ok(stored > 0)
}

/// The position of the item of batch `run_id` with this idempotency fingerprint.
fn position_of(
    conn: &Connection,
    run_id: &str,
    fingerprint: &str,
) -> rusqlite::Result<Option<u32>> {
    conn.prepare_cached("SELECT position FROM batch_items WHERE run_id = ?1 AND fingerprint = ?2")?
        .query_row(params![run_id, fingerprint], |row| row.get(0))
        .optional()
}

/// Closes batch `run_id`: its run gets the prompt of every item, oldest first, and is queued.
/// Closing a batch that is closed already changes nothing.
pub fn close(conn: &Connection, run_id: &str) -> rusqlite::Result<bool> {
    let Some(run) = closed_run(conn, run_id)? else {
        return Ok(false);
    };
    queue_closed(conn, &run)?;
    Ok(true)
}

/// The run of open batch `run_id` as it closes: with the prompt of every item stored so far,
/// oldest first, and their messages numbered as its message. `None` when no such batch is open.
pub fn closed_run(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<NewRun>> {
    let open: Option<bool> = conn
        .prepare_cached("SELECT open FROM batches WHERE run_id = ?1 AND open = 1")?
        .query_row(params![run_id], |row| row.get(0))
        .optional()?;
    let (Some(_), Some(mut run)) = (open, NewRun::select(conn, run_id)?) else {
        return Ok(None);
    };
    let messages = items(conn, run_id)?;
    let task = batch_task(
        &run.action().name,
        run.admitted.mapping_id.as_deref(),
        &messages,
    );
    run.prompt = batch_prompt(task, run_id, &messages);
    run.admitted.action.message = message_list(&messages);
    Ok(Some(run))
}

/// Queues the closed batch `run` (from [`closed_run`]) with its prompt and message, or holds
/// it when it opened past a budget that holds (its `held_by`); a run no longer `batching` is
/// left as it is.
pub fn queue_closed(conn: &Connection, run: &NewRun) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = CASE WHEN held_by IS NULL THEN 'queued' ELSE 'held' END,
                prompt = ?2, message = ?3
         WHERE run_id = ?1 AND status = 'batching'",
    )?
    .execute(params![run.run_id, run.prompt, run.action().message])?;
    conn.prepare_cached("UPDATE batches SET open = 0 WHERE run_id = ?1")?
        .execute(params![run.run_id])?;
    Ok(())
}

/// The messages of batch `run_id`, oldest first.
pub fn items(conn: &Connection, run_id: &str) -> rusqlite::Result<Vec<BatchMessage>> {
    let mut stmt = conn.prepare_cached(
        "SELECT received, source, message, allow_unsafe, name FROM batch_items
         WHERE run_id = ?1 ORDER BY position",
    )?;
    let rows = stmt.query_map(params![run_id], |row| {
        Ok(BatchMessage {
            received: row.get(0)?,
            source: row.get(1)?,
            message: row.get(2)?,
            allow_unsafe: row.get(3)?,
            name: row.get(4)?,
        })
    })?;
    rows.collect()
}

/// Closes every open batch whose window ended by `now_ms`; returns how many it closed.
pub fn close_due(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    let due: Vec<String> = conn
        .prepare_cached("SELECT run_id FROM batches WHERE open = 1 AND closes_at_ms <= ?1")?
        .query_map(params![now_ms], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut closed = 0;
    for run_id in due {
        closed += usize::from(close(conn, &run_id)?);
    }
    Ok(closed)
}

/// When the next open batch's window ends (ms since the epoch), if one is open.
pub fn next_close(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT MIN(closes_at_ms) FROM batches WHERE open = 1")?
        .query_row([], |row| row.get(0))
}

/// The embedded closer: closes each batch when its window ends, waking at the earliest end
/// (or when a batch opens), and queues its run. Batches left open by a stop are closed once
/// their window has ended, by the next start.
pub async fn closer(ctx: Context, signals: Arc<Signals>) {
    loop {
        let next = match ctx.store.read(next_close).await {
            Ok(next) => next,
            Err(err) => {
                tracing::error!(%err, "batch closer cannot read open batches");
                Some(now_ms().saturating_add(millis(Duration::from_secs(1))))
            }
        };
        let now = now_ms();
        if next.is_some_and(|at| at <= now) {
            match ctx.store.write(move |conn| close_due(conn, now)).await {
                Ok(0) => {}
                Ok(closed) => {
                    tracing::debug!(closed, "batches closed at the end of their window");
                    signals.run_queued();
                }
                Err(err) => {
                    tracing::error!(%err, "batch closer cannot close batches");
                    // A pause before trying again, so that a failing store is not hammered.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            continue;
        }
        let wait = next.map_or(IDLE, |at| {
            Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
        });
        let _ = tokio::time::timeout(wait, signals.batch_opened.notified()).await;
    }
}
