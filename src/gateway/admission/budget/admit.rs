//! A run's budgets at admission: the last step before it is queued (after its mapping's batch
//! and lane). Within its budgets a run is queued as any other; past one it is held or refused
//! ([`Verdict`]); the façade acts on the verdict (`Runtime::queue_within_budgets`).

use super::{Exceeded, applying_to, judge};
use crate::config::budget::{Budgets, OnExceeded};
use crate::gateway::admission::lanes::{self, HeldFull};
use crate::gateway::clock::now_ms;
use crate::gateway::store::records::NewRun;
use crate::gateway::store::runs::RunQueued;
use crate::gateway::store::{Store, StoreError};

/// A run `Runtime::queue_within_budgets` stored, and whether a budget held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub run: RunQueued,
    /// A budget that holds was spent: the run waits for the operator or the budget's window.
    pub held: bool,
}

/// What a run's budgets say of it now.
#[derive(Debug)]
pub enum Verdict {
    /// Every budget of the run has room: it is queued as any other.
    Within,
    /// A budget that holds is spent: the run is stored `held`.
    Hold(Exceeded),
    /// A budget that holds is spent, but the run's lane holds [`lanes::MAX_HELD`] already: it
    /// is refused as a full lane refuses.
    LaneHoldsEnough(HeldFull),
    /// A budget that refuses is spent: nothing is stored.
    Refuse(Exceeded),
}

/// What the mapping's and the agent's budgets of `run` say of it now.
///
/// Costs nothing for a run without budgets; otherwise one read of the store (its counts), and a
/// second (the lane's held runs) for a run a budget would hold. The counts are read, not
/// locked: requests admitted at the same moment may each see the last free place, so a budget
/// may be passed by the requests in flight together.
pub async fn verdict(
    store: &Store,
    budgets: &Budgets,
    run: &NewRun,
) -> Result<Verdict, StoreError> {
    let Some(exceeded) = over_budget(store, budgets, run).await? else {
        return Ok(Verdict::Within);
    };
    Ok(match exceeded.on_exceeded {
        OnExceeded::Hold => match lanes::held_full(store, run).await? {
            Some(full) => Verdict::LaneHoldsEnough(full),
            None => Verdict::Hold(exceeded),
        },
        OnExceeded::Refuse => Verdict::Refuse(exceeded),
    })
}

/// The budget of `run` that has no room now, if any.
async fn over_budget(
    store: &Store,
    budgets: &Budgets,
    run: &NewRun,
) -> Result<Option<Exceeded>, StoreError> {
    if budgets.is_empty() {
        return Ok(None);
    }
    let applying = applying_to(budgets, run);
    if applying.is_empty() {
        return Ok(None);
    }
    store
        .read(move |conn| judge(conn, &applying, now_ms()))
        .await
}
