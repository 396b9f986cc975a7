//! The embedded agent runner: takes queued runs from the store, highest priority first, then
//! oldest, at most `agents.defaults.maxConcurrent` at once, never two of one session key
//! together and no more of a mapping's than its `runs.maxConcurrent` ([`LaneSlots`]), runs each
//! as one turn ([`agent::turn`]) and records the outcome together with its summary or delivery.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::agent::{self, Conclusion};
use super::lane_slots::{LaneSlots, LaneTicket};
use crate::config::Settings;
use crate::config::outbound::Event;
use crate::gateway::clock::now_rfc3339;
use crate::gateway::context::Context;
use crate::gateway::outbound::outbox::OutboxItem;
use crate::gateway::outbound::webhooks;
use crate::gateway::signals::Signals;
use crate::gateway::store::StoreError;
use crate::gateway::store::next_runs;
use crate::gateway::store::records::{DeliveryRecord, NewRun, RunOutcome, SummaryEvent};
use crate::gateway::store::runs;
use crate::gateway::turns::token_metrics;
use crate::slots::Slots;

/// Queued runs are looked for at least this often, besides whenever a run is queued.
const POLL: Duration = Duration::from_secs(1);

/// Session keys with a run in progress.
type BusySessions = Arc<Mutex<HashSet<String>>>;

/// What runs in this process hold while they run: one of the runner's slots
/// (`agents.defaults.maxConcurrent`), their session key, a place in their mapping's lane. Shared
/// by the runner and admission, which starts a run itself when all three are free and nothing
/// waits before it ([`Places::reserve`]). Cheap to clone.
#[derive(Clone)]
pub struct Places {
    slots: Arc<Slots>,
    busy: BusySessions,
    lanes: LaneSlots,
    /// Set once the runs a stop interrupted are queued again: they start before new ones.
    resumed: Arc<AtomicBool>,
}

impl Places {
    pub fn new(max_concurrent: usize) -> Places {
        Places {
            slots: Arc::new(Slots::new(max_concurrent)),
            busy: Arc::default(),
            lanes: LaneSlots::default(),
            resumed: Arc::default(),
        }
    }

    /// A slot, `run`'s session key and a place in its mapping's lane under `settings`, held
    /// until the [`Reservation`] is dropped or its run ends; `None` when one of them is taken,
    /// or before the runner has queued the interrupted runs again. Costs three locks; no read
    /// of the store.
    pub fn reserve(
        &self,
        settings: &Settings,
        signals: &Arc<Signals>,
        run: &NewRun,
    ) -> Option<Reservation> {
        if !self.resumed.load(Ordering::Acquire) {
            return None;
        }
        self.slots.resize(settings.runtime.max_concurrent);
        let slot = self.slots.try_take()?;
        let lane = self
            .lanes
            .enter(run.admitted.mapping_id.as_deref(), settings.hooks.as_ref())?;
        let session_key = run.admitted.session_key.clone();
        if !lock(&self.busy).insert(session_key.clone()) {
            return None;
        }
        Some(Reservation {
            queued_count: signals.queued_count(),
            release: Release::new(&self.busy, session_key, signals, slot, lane),
        })
    }
}

/// Places reserved at admission ([`Places::reserve`]) for a run not yet stored. Dropped
/// unused (the run was queued, was a repeat, or its write failed) they are freed and the
/// runner looks at the queue, which it may have passed over for want of the reserved slot.
pub struct Reservation {
    release: Release,
    /// [`Signals::queued_count`] when the places were reserved.
    queued_count: u64,
}

impl Reservation {
    /// Runs `run`, which admission stored `running` after finding no run queued, holding these
    /// places. At its end the runner is woken only if a run was queued since the reservation:
    /// its look at the queue would find nothing (about 20k instructions a run, profiled under
    /// /hooks/agent).
    pub fn start(self, ctx: &Context, signals: &Arc<Signals>, run: NewRun) {
        let Reservation {
            mut release,
            queued_count,
        } = self;
        release.quiet_since = Some(queued_count);
        spawn(ctx, signals, release, run);
    }
}

/// Runs the runner until the process ends. The number of runs at once follows
/// `agents.defaults.maxConcurrent` as it is reloaded: a lower limit takes effect as runs finish.
pub async fn run(ctx: Context, signals: Arc<Signals>, places: Places) {
    match ctx.store.write(runs::resume_interrupted).await {
        Ok(0) => {}
        Ok(resumed) => tracing::warn!(resumed, "runs interrupted by a stop are queued again"),
        Err(err) => tracing::error!(%err, "cannot resume interrupted runs"),
    }
    places.resumed.store(true, Ordering::Release);
    loop {
        places
            .slots
            .resize(ctx.config.current().runtime.max_concurrent);
        if let Err(err) = crate::gateway::admission::budget::release_due(&ctx, &signals).await {
            tracing::error!(%err, "runner cannot release held runs");
        }
        match start_queued(&ctx, &signals, &places).await {
            // A lane filled up while its runs were being started: read the queue again at
            // once, without that lane, for the slots still free.
            Ok(Pass::Again) => continue,
            Ok(Pass::Done) => {}
            Err(err) => tracing::error!(%err, "runner cannot read queued runs"),
        }
        let _ = tokio::time::timeout(POLL, signals.runs_queued.notified()).await;
    }
}

/// What a look at the queue left to do.
enum Pass {
    Done,
    /// Runs were passed over because their lane filled up during the pass.
    Again,
}

async fn start_queued(
    ctx: &Context,
    signals: &Arc<Signals>,
    places: &Places,
) -> Result<Pass, StoreError> {
    let Places {
        slots, busy, lanes, ..
    } = places;
    // Without a free slot nothing can start, and reading the queue would only load the store:
    // a slot that frees up signals the runner again.
    let Some(mut slot) = slots.try_take() else {
        return Ok(Pass::Done);
    };
    let settings = ctx.config.current();
    let hooks = settings.hooks.as_ref();
    let skip = next_runs::Busy {
        sessions: lock(busy).clone(),
        lanes: lanes.full(hooks),
    };
    let want = 1 + slots.free();
    let queued = ctx
        .store
        .read(move |conn| next_runs::queued(conn, 256, &skip, want))
        .await?;
    let mut pass = Pass::Done;
    for next_runs::Startable {
        run_id,
        session_key,
        mapping_id,
    } in queued
    {
        let Some(lane) = lanes.enter(mapping_id.as_deref(), hooks) else {
            pass = Pass::Again;
            continue;
        };
        if !lock(busy).insert(session_key.clone()) {
            continue;
        }
        let started_at = now_rfc3339();
        let endpoints = webhooks::with_endpoints(&settings);
        let claimed = ctx
            .store
            .write(move |conn| {
                let Some(run) = runs::claim(conn, &run_id, &started_at)? else {
                    return Ok(None);
                };
                let announced = match &endpoints {
                    Some(settings) => {
                        webhooks::on_event(conn, &settings.outbound, Event::RunStarted, &run, None)?
                    }
                    None => false,
                };
                Ok(Some((run, announced)))
            })
            .await;
        let Ok(Some((run, announced))) = claimed else {
            lock(busy).remove(&session_key);
            continue;
        };
        if announced {
            signals.webhooks_ready.notify_one();
        }
        let release = Release::new(busy, session_key, signals, slot, lane);
        spawn(ctx, signals, release, run);
        slot = match slots.try_take() {
            Some(next) => next,
            None => return Ok(Pass::Done),
        };
    }
    Ok(pass)
}

/// Runs `run`, stored `running`, in a task of its own, holding `release` until it ends.
fn spawn(ctx: &Context, signals: &Arc<Signals>, release: Release, run: NewRun) {
    let (ctx, signals) = (ctx.clone(), Arc::clone(signals));
    tokio::spawn(async move {
        execute(&ctx, &signals, run).await;
        drop(release);
    });
}

/// Frees a run's session key, slot and place in its lane when its task ends, even by a panic,
/// and has the runner look at the queue.
struct Release {
    busy: BusySessions,
    session_key: String,
    /// For a run started at admission ([`Reservation::start`]): [`Signals::queued_count`] when
    /// its places were reserved. Otherwise `None`, and the runner is always woken.
    quiet_since: Option<u64>,
    signals: Arc<Signals>,
    slot: Option<tokio::sync::OwnedSemaphorePermit>,
    lane: Option<LaneTicket>,
}

impl Release {
    fn new(
        busy: &BusySessions,
        session_key: String,
        signals: &Arc<Signals>,
        slot: tokio::sync::OwnedSemaphorePermit,
        lane: LaneTicket,
    ) -> Release {
        Release {
            busy: Arc::clone(busy),
            session_key,
            quiet_since: None,
            signals: Arc::clone(signals),
            slot: Some(slot),
            lane: Some(lane),
        }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        // The slot first: the runner, woken below, looks for a free slot before anything else.
        drop(self.slot.take());
        drop(self.lane.take());
        lock(&self.busy).remove(&self.session_key);
        // A run of this session key may have been waiting for this one.
        if self.quiet_since != Some(self.signals.queued_count()) {
            self.signals.runs_queued.notify_one();
        }
    }
}

fn lock(busy: &BusySessions) -> std::sync::MutexGuard<'_, HashSet<String>> {
    busy.lock().unwrap_or_else(|p| p.into_inner())
}

/// One run: the turn, then its outcome, summary or delivery in one transaction.
async fn execute(ctx: &Context, signals: &Signals, run: NewRun) {
    let settings = ctx.config.current();
    let history = agent::history(&ctx.store, &run).await;
    let outcome = agent::turn(&ctx.http, &settings, &run, &history).await;
    token_metrics::count_tokens(&ctx.metrics, &settings, &run, &outcome);
    let owner = agent::owner_route_for(&ctx.store, &settings, &run, &outcome).await;
    let conclusion = agent::conclude(&settings, &run, outcome, owner);
    let wakes_now = conclusion.wakes_now(&run);
    let Conclusion {
        outcome,
        delivery,
        summary_now,
        job,
    } = conclusion;
    // Without callbacks and endpoints a run's end does not look at the outbox for webhooks.
    let outbound = settings.outbound.is_active();
    let finished = Finished {
        run_id: run.run_id.clone(),
        outcome,
        delivery,
        summary_now,
        outbox: job.map(OutboxItem::Delivery),
        webhooks: outbound.then(|| (Arc::clone(&settings), Box::new(run))),
    };
    // Only a run with a reply to deliver gives the outbox work, and only one whose end made a
    // webhook pending gives its worker work: waking either for the others costs two reads of
    // the outbox per run (about 30k instructions, profiled under /hooks/agent).
    let delivers = finished.outbox.is_some();
    if let Some(Recorded { webhooks_pending }) = finished.record(ctx).await {
        if delivers {
            signals.outbox_ready.notify_one();
        }
        if webhooks_pending {
            signals.webhooks_ready.notify_one();
        }
        if wakes_now {
            signals.heartbeat.request();
        }
    }
}

/// How long a finished run's outcome is kept while the store refuses to record it (a full
/// disk): its write is tried again until then, holding the run's slot and session key, so that
/// at most `maxConcurrent` outcomes wait in memory. Past it, the run stays `running` until the
/// next start queues it again.
const RECORD_PATIENCE: Duration = Duration::from_secs(3600);

/// The first wait before an outcome's write is tried again; doubled each time, up to
/// [`RECORD_MAX_WAIT`]: once the disk has room the outcome lands within that long.
const RECORD_FIRST_WAIT: Duration = Duration::from_millis(100);
const RECORD_MAX_WAIT: Duration = Duration::from_secs(2);

/// What recording a run's end did beyond the run's own row.
struct Recorded {
    /// Its callback or an endpoint's message became pending: the webhooks' worker has work.
    webhooks_pending: bool,
}

/// What a finished run writes, in one transaction: its outcome with its delivery record and
/// summary event, and the delivery's outbox row.
#[derive(Clone)]
struct Finished {
    run_id: String,
    outcome: RunOutcome,
    delivery: DeliveryRecord,
    summary_now: Option<SummaryEvent>,
    outbox: Option<OutboxItem>,
    /// With `outbound` active: the settings and the run its callback and events are made of.
    webhooks: Option<(Arc<Settings>, Box<NewRun>)>,
}

impl Finished {
    /// Writes the outcome, trying again with a growing wait while the store refuses writes for
    /// a reason that passes (a full disk, a failed commit), for up to [`RECORD_PATIENCE`].
    /// What was recorded, or `None` when it could not be. Logs the first failure and the
    /// recovery, not every try.
    async fn record(self, ctx: &Context) -> Option<Recorded> {
        let deadline = tokio::time::Instant::now() + RECORD_PATIENCE;
        let mut wait = RECORD_FIRST_WAIT;
        let mut tries = 0u32;
        loop {
            let Finished {
                run_id,
                outcome,
                delivery,
                summary_now,
                outbox,
                webhooks: outbound,
            } = self.clone();
            let written = ctx
                .store
                .write(move |conn| {
                    runs::finish(conn, &run_id, &outcome, &delivery, summary_now.as_ref())?;
                    let webhooks_pending = match &outbound {
                        Some((settings, run)) => {
                            webhooks::on_end(conn, &settings.outbound, run, &outcome)?
                        }
                        None => false,
                    };
                    if let Some(item) = outbox {
                        item.insert(conn, Some(&run_id))?;
                    }
                    Ok(Recorded { webhooks_pending })
                })
                .await;
            tries += 1;
            let run_id = &self.run_id;
            let err = match written {
                Ok(recorded) if tries > 1 => {
                    tracing::warn!(%run_id, tries, "the run's outcome is recorded now");
                    return Some(recorded);
                }
                Ok(recorded) => return Some(recorded),
                Err(err) => err,
            };
            let passes = matches!(err, StoreError::Full | StoreError::Commit(_));
            if !passes || tokio::time::Instant::now() + wait > deadline {
                // The run stays `running`; the next start queues it again.
                tracing::error!(%err, %run_id, tries, "cannot record the run's outcome; given up");
                return None;
            }
            if tries == 1 {
                tracing::error!(%err, %run_id,
                    "cannot record the run's outcome; kept, and tried again until the store takes it");
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RECORD_MAX_WAIT);
        }
    }
}
