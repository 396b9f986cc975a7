//! Lanes on a NATS cluster. A mapping's `maxConcurrent` holds for the whole cluster: a run
//! takes one of its mapping's slots, keys `lane.<mapping hash>.<i>` for `i` below the limit in
//! the locks bucket, taken and kept like a session key's lock. Priority is looser than in one
//! process, since the runner consumer offers runs in stream order: a run offered while this
//! node's view shows a queued run of a higher priority that could start steps aside for a
//! moment, so that the higher one is taken first, for a bounded number of offers.

use std::time::Duration;

use super::Cluster;
use super::session_lock::SessionLock;
use crate::config::Settings;
use crate::config::lanes::Priority;
use crate::gateway::context::Context;
use crate::gateway::store::next_runs::Busy;
use crate::gateway::store::records::NewRun;
use crate::gateway::turns::lane_slots::{full_lanes, higher_waiting, limit, running_by_mapping};

/// How long a run steps aside for a higher-priority one.
pub(super) const STEP_ASIDE: Duration = Duration::from_millis(250);

/// Offers of a run during which it steps aside for higher priorities; from then on it takes
/// its turn like any run, so that a stream of higher-priority runs cannot starve it (nor have
/// the consumer give it up after its last offer).
const STEP_ASIDE_OFFERS: i64 = 40;

/// Whether `work`, offered for the `delivered`th time, should step aside for a run of a higher
/// priority that this node's view shows queued and able to start (the next run of its idle
/// session key, which may be `work`'s own, its mapping's lane not full as far as the view
/// shows): a key's queued runs start highest priority first, as on one node. Costs two reads of
/// the view; none for a `high` run. A view that cannot be read steps nothing aside.
pub(super) async fn steps_aside(ctx: &Context, work: &NewRun, delivered: i64) -> bool {
    if work.priority == Priority::High || delivered > STEP_ASIDE_OFFERS {
        return false;
    }
    let settings = ctx.config.current();
    let priority = work.priority;
    let found = ctx
        .store
        .read(move |conn| {
            let running = running_by_mapping(conn)?;
            let busy = Busy {
                lanes: full_lanes(
                    settings.hooks.as_ref(),
                    running.iter().map(|(m, n)| (m.as_str(), *n)),
                ),
                ..Busy::default()
            };
            higher_waiting(conn, priority, &busy)
        })
        .await;
    found.unwrap_or(false)
}

/// One of the `maxConcurrent` slots of `work`'s mapping for the whole cluster, taken for its
/// `offer`th offer: `Ok(None)` when its mapping has no limit, `Err(())` when every slot is
/// held by other runs. A slot an earlier offer of the same run held (on a node that stopped)
/// is taken over. Costs up to `maxConcurrent` writes to the locks bucket.
pub(super) async fn take_slot<'a>(
    cluster: &'a Cluster,
    settings: &Settings,
    work: &'a NewRun,
    offer: i64,
) -> Result<Option<SessionLock<'a>>, ()> {
    let Some(mapping) = work.admitted.mapping_id.as_deref() else {
        return Ok(None);
    };
    let Some(limit) = settings
        .hooks
        .as_ref()
        .and_then(|hooks| limit(hooks, mapping))
    else {
        return Ok(None);
    };
    let lane = super::key_of(mapping);
    for i in 0..limit {
        let slot = SessionLock::keyed(cluster, format!("lane.{lane}.{i}"), &work.run_id, offer);
        if slot.take().await {
            return Ok(Some(slot));
        }
    }
    Err(())
}
