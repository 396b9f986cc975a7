//! Forward mode's worker: it relays queued runs into the lanes' free slots, and sends the relays.
//!
//! A run accepted in forward mode waits `queued`, as on the embedded runtime (so `maxQueued`,
//! priorities, held runs released and closed batches all wait the same way). [`dispatch`] takes
//! the queued runs highest priority first, oldest first, and relays each whose lane has room:
//! it becomes `forwarding` with its relay in the outbox, in one write. An agent relay asks the
//! upstream to answer once its run ended (`waitForCompletion`), so a `forwarding` run is one the
//! upstream may still be running: it holds its lane slot (`runs.maxConcurrent`) until the
//! upstream answered, and so does one whose relay is retried. Runs of one chosen session key
//! are relayed one at a time, as the upstream runs them (its admission times out after 15 s
//! behind a busy session). Held runs are released here as their budgets make room, as the
//! embedded runner releases them. See docs/hooks.md, "Forward mode".

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::task::JoinSet;

use super::outbox::{self, Lane, OutboxItem};
use super::relay::{AgentBody, Relayed};
use super::webhooks;
use crate::config::Settings;
use crate::config::outbound::Event;
use crate::config::runtime::GatewayMode;
use crate::gateway::clock::{now_ms, now_rfc3339};
use crate::gateway::context::Context;
use crate::gateway::signals::Signals;
use crate::gateway::store::next_runs;
use crate::gateway::store::records::NewRun;

/// The most agent relays in flight at once, whatever the lanes allow: each holds a connection to
/// the upstream until its run ends.
pub const MAX_IN_FLIGHT: usize = 16;
/// The most queued runs one pass looks at.
const PASS: u32 = 256;

/// Runs forward mode's relays until the stop: queued runs into free lane slots, then each
/// relay due. A wake is sent in turn; an agent relay is sent on a task of its own, since it
/// waits for the upstream's run to end. A stop drops the relays in flight: their rows are sent
/// again at the next start, with the same idempotency key, which the upstream answers with the
/// same run while it remembers the key (OpenClaw: in memory, 5 minutes after the run ended;
/// docs/hooks.md, "Forward mode").
pub async fn run(ctx: Context, signals: Arc<Signals>) {
    outbox::recover(&ctx, &signals, Lane::Relays).await;
    let mut in_flight = JoinSet::new();
    while !signals.stopping() {
        while in_flight.try_join_next().is_some() {}
        // Held runs whose budgets have room again are queued, as the embedded runner does.
        if let Err(err) = crate::gateway::admission::budget::release_due(&ctx, &signals).await {
            tracing::error!(%err, "cannot release held runs");
        }
        let settings = ctx.config.current();
        let dispatched = ctx.store.write(move |conn| dispatch(conn, &settings)).await;
        if let Err(err) = &dispatched {
            tracing::error!(%err, "cannot relay queued runs");
        }
        let due = ctx
            .store
            .read(move |conn| outbox::due(conn, Lane::Relays, now_ms(), PASS))
            .await;
        let Ok(due) = due else {
            // The store is failing (disk full, read-only): do not spin on rows it cannot mark.
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        };
        let mut full = false;
        for row in due.into_iter().take_while(|_| !signals.stopping()) {
            let agent = matches!(row.item, Some(OutboxItem::Relay(Relayed::Agent { .. })));
            if !agent {
                outbox::attempt(&ctx, &signals, row).await;
            } else if in_flight.len() >= MAX_IN_FLIGHT {
                full = true;
            } else if outbox::mark(&ctx, &row).await == Some(true) {
                let (ctx, signals) = (ctx.clone(), Arc::clone(&signals));
                in_flight.spawn(async move { outbox::send_marked(&ctx, &signals, row).await });
            }
        }
        // With every task taken, a due row waits for one to end (below), not for its time.
        let wait = if full {
            outbox::POLL
        } else {
            outbox::next_wait(&ctx, Lane::Relays).await
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = signals.outbox_ready.notified() => {}
            () = signals.runs_queued.notified() => {}
            Some(_) = in_flight.join_next() => {}
        }
    }
}

/// Relays the queued runs whose lane has room, highest priority first, then oldest, one per
/// idle session key ([`next_runs::queued`], as the embedded runner reads the queue, so that a
/// backlog of one busy key or one full lane never hides the runs of others): each becomes
/// `forwarding` (started now) with its relay in the outbox. Returns how many.
pub fn dispatch(conn: &Connection, settings: &Settings) -> rusqlite::Result<usize> {
    let GatewayMode::Forward(upstream) = &settings.runtime.mode else {
        return Ok(0);
    };
    let mut busy = Busy::read(conn)?;
    let room = MAX_IN_FLIGHT.saturating_sub(busy.total);
    if room == 0 {
        return Ok(0);
    }
    let skip = next_runs::Busy {
        sessions: busy.sessions.clone(),
        lanes: busy.full_lanes(settings),
    };
    let mut relayed = 0;
    for startable in next_runs::queued(conn, PASS, &skip, room)? {
        if busy.total >= MAX_IN_FLIGHT {
            break;
        }
        // A lane with room for fewer than its heads here: the rest wait for the next pass.
        if let Some(mapping) = &startable.mapping_id
            && busy.lane_full(settings, mapping)
        {
            continue;
        }
        let Some(run) = NewRun::select(conn, &startable.run_id)? else {
            continue;
        };
        relay_queued(conn, &run, upstream.relay_session_key)?;
        if !settings.outbound.endpoints.is_empty() {
            // Relayed now: for this gateway, the run starts.
            webhooks::on_event(conn, &settings.outbound, Event::RunStarted, &run, None)?;
        }
        busy.take(startable.mapping_id, Some(startable.session_key));
        relayed += 1;
    }
    Ok(relayed)
}

/// Makes queued `run` `forwarding` and its relay due: the waiting relay stored when the run was
/// accepted, held or opened as a batch, with the request's fields. A closed batch is relayed
/// with its prompt (every item's message, as the embedded runtime gives its agent); any other
/// run with its message, which the upstream wraps as it wraps a hook's. A run with no waiting
/// relay (queued by an older version) is relayed from what its record keeps.
fn relay_queued(conn: &Connection, run: &NewRun, relay_session_key: bool) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET status = 'forwarding', started_at = ?2
         WHERE run_id = ?1 AND status = 'queued'",
    )?
    .execute(params![run.run_id, now_rfc3339()])?;
    let batch: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM batches WHERE run_id = ?1")?
        .query_row(params![run.run_id], |row| row.get(0))
        .optional()?;
    let waiting: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT id, payload FROM outbox
             WHERE run_id = ?1 AND kind = 'forward-run' AND status = 'waiting'",
        )?
        .query_row(params![run.run_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let Some((id, mut payload)) = waiting else {
        let mut body = AgentBody::of(&run.admitted, relay_session_key);
        if batch.is_some() {
            body.action.message = run.prompt.clone();
        }
        let relay = OutboxItem::Relay(Relayed::Agent {
            body: Box::new(body),
            idempotency_key: run.run_id.clone(),
        });
        return relay.insert(conn, Some(&run.run_id));
    };
    if let (Some(_), Some((mut body, key))) = (batch, OutboxItem::agent_of(&payload)) {
        body.action.message = run.prompt.clone();
        payload = OutboxItem::agent_payload(body, key);
    }
    conn.prepare_cached(
        "UPDATE outbox SET status = 'pending', payload = ?2, next_at_ms = ?3 WHERE id = ?1",
    )?
    .execute(params![id, payload, now_ms()])?;
    Ok(())
}

/// The relays in flight (`forwarding` runs): in all, by mapping, and their chosen session keys.
struct Busy {
    total: usize,
    mappings: HashMap<String, u32>,
    sessions: HashSet<String>,
}

impl Busy {
    fn read(conn: &Connection) -> rusqlite::Result<Busy> {
        let mut busy = Busy {
            total: 0,
            mappings: HashMap::new(),
            sessions: HashSet::new(),
        };
        let mut stmt = conn.prepare_cached(
            "SELECT mapping_id, session_key FROM runs WHERE status = 'forwarding'",
        )?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        for row in rows {
            let (mapping, session): (Option<String>, String) = row?;
            // A generated key is the run's own: it never matches a queued run's chosen key.
            busy.take(mapping, Some(session));
        }
        Ok(busy)
    }

    fn of_mapping(&self, mapping: &str) -> u32 {
        self.mappings.get(mapping).copied().unwrap_or(0)
    }

    /// Whether `mapping`'s relays in flight fill its lane (`runs.maxConcurrent`).
    fn lane_full(&self, settings: &Settings, mapping: &str) -> bool {
        let max = settings
            .hooks
            .as_ref()
            .and_then(|hooks| hooks.lane_for(mapping)?.max_concurrent);
        max.is_some_and(|max| self.of_mapping(mapping) >= max.get())
    }

    /// The mappings whose lanes are full.
    fn full_lanes(&self, settings: &Settings) -> Vec<String> {
        let full = self.mappings.keys();
        full.filter(|mapping| self.lane_full(settings, mapping))
            .cloned()
            .collect()
    }

    fn take(&mut self, mapping: Option<String>, session: Option<String>) {
        self.total += 1;
        if let Some(mapping) = mapping {
            *self.mappings.entry(mapping).or_default() += 1;
        }
        if let Some(session) = session {
            self.sessions.insert(session);
        }
    }
}

/// Relays a run the upstream refused again, once the operator mended the cause: its row goes
/// back to pending with its attempts reset, and the run back to `forwarding`. Whether there was
/// one.
pub fn resend_relay(conn: &Connection, run_id: &str) -> rusqlite::Result<bool> {
    let retried = conn
        .prepare_cached(
            "UPDATE outbox SET status = 'pending', attempts = 0, last_error = NULL, next_at_ms = ?2
             WHERE run_id = ?1 AND kind = 'forward-run' AND status IN ('failed', 'uncertain')",
        )?
        .execute(params![run_id, now_ms()])?;
    if retried == 0 {
        return Ok(false);
    }
    conn.prepare_cached(
        "UPDATE runs SET status = 'forwarding', error = NULL, finished_at = NULL
         WHERE run_id = ?1 AND status = 'forward_failed'",
    )?
    .execute(params![run_id])?;
    Ok(true)
}
