//! The embedded heartbeat scheduler: the agent's main-session turn ([`agent::heartbeat`]) runs
//! every `agents.defaults.heartbeat.every` (read again after each heartbeat, so a reload takes
//! effect from the next period) and when a hook asks for one now.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::agent::{self, Beat};
use crate::gateway::context::Context;
use crate::gateway::outbound::outbox::OutboxItem;
use crate::gateway::signals::Signals;
use crate::gateway::store::{runs, spend};

/// Runs heartbeats until the process ends.
pub async fn run(ctx: Context, signals: Arc<Signals>) {
    let mut every = ctx.config.current().runtime.heartbeat_every;
    let mut due = every.map(|every| Instant::now() + every);
    loop {
        tokio::select! {
            () = signals.heartbeat.requested() => {}
            () = periodic(&ctx, &mut every, &mut due) => {}
        }
        beat(&ctx, &signals).await;
        every = ctx.config.current().runtime.heartbeat_every;
        due = every.map(|every| Instant::now() + every);
    }
}

/// Returns when the periodic heartbeat is due, following reloads of its period (checked every
/// second). Dropped at any await without losing anything: it changes state only between them.
async fn periodic(ctx: &Context, every: &mut Option<Duration>, due: &mut Option<Instant>) {
    loop {
        let check = Instant::now() + Duration::from_secs(1);
        match *due {
            Some(at) if at <= check => {
                tokio::time::sleep_until(at).await;
                return;
            }
            _ => tokio::time::sleep_until(check).await,
        }
        let now = ctx.config.current().runtime.heartbeat_every;
        if now != *every {
            *every = now;
            *due = now.map(|every| Instant::now() + every);
        }
    }
}

/// One heartbeat: pending events → one turn → events consumed and the turn's tokens counted
/// (the agent's spend) → reply delivered to the owner's route unless it is only an
/// acknowledgement. Without a provider the events stay pending.
async fn beat(ctx: &Context, signals: &Signals) {
    let settings = ctx.config.current();
    let Some(beat) = agent::heartbeat(&ctx.http, &settings, &ctx.store).await else {
        return;
    };
    let Beat {
        agent,
        up_to,
        more,
        job,
        usage,
        finished_at,
    } = beat;
    let recorded = ctx
        .store
        .write(move |conn| {
            runs::consume_events(conn, &agent, up_to)?;
            spend::record_heartbeat(conn, &agent, &finished_at, usage)?;
            if let Some(job) = job {
                OutboxItem::Delivery(job).insert(conn, None)?;
            }
            Ok(())
        })
        .await;
    match recorded {
        Ok(()) => {
            signals.outbox_ready.notify_one();
            if more {
                // Events past this heartbeat's share do not wait for the next period.
                signals.heartbeat.request();
            }
        }
        Err(err) => tracing::error!(%err, "cannot record the heartbeat"),
    }
}
