//! A run's budgets at admission: the last step before it is queued (after its mapping's batch
//! and lane). Within its budgets a run is queued as any other; past one it is held or refused.

use super::{Exceeded, applying_to, judge};
use crate::config::budget::{Budgets, OnExceeded};
use crate::gateway::admission::lanes;
use crate::gateway::clock::now_ms;
use crate::gateway::store::records::NewRun;
use crate::gateway::store::runs::{IdempotencyClaim, RunQueued};
use crate::gateway::{Runtime, StoreError};
use crate::hook::LimitReached;

/// A run [`queue`] stored, and whether a budget held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub run: RunQueued,
    /// A budget that holds was spent: the run waits for the operator or the budget's window.
    pub held: bool,
}

/// Queues `run` as [`Runtime::submit_run`] does when its mapping's and its agent's budgets have
/// room; past one that holds, stores it `held` (answered as queued, its id the run's), unless
/// its lane holds [`lanes::MAX_HELD`] already (then refused as a full lane refuses); past one
/// that refuses, stores nothing and answers the refusal, unless `claim` finds the request a
/// repeat of one admitted before (then its run's id, as without a budget).
///
/// Costs nothing more for a run without budgets; otherwise one read of the store (its counts)
/// before the commit. The counts are read, not locked: requests admitted at the same moment may
/// each see the last free place, so a budget may be passed by the requests in flight together.
pub async fn queue(
    runtime: &Runtime,
    budgets: &Budgets,
    run: NewRun,
    claim: Option<IdempotencyClaim>,
    idempotency_key: Option<&str>,
) -> Result<Result<Queued, LimitReached>, StoreError> {
    let exceeded = match budgets.is_empty() {
        true => None,
        false => over_budget(runtime, budgets, &run).await?,
    };
    let Some(exceeded) = exceeded else {
        let run = runtime.submit_run(run, claim, idempotency_key).await?;
        return Ok(Ok(Queued { run, held: false }));
    };
    match exceeded.on_exceeded {
        OnExceeded::Hold => {
            if let Some(full) = lanes::held_full(runtime.store(), &run).await? {
                let metrics = runtime.metrics();
                return refuse(runtime, claim, full.clone().into(), || {
                    metrics.count_lane_refusal(full.mapping());
                })
                .await;
            }
            tracing::info!(run_id = %run.run_id, budget = %exceeded.by, "run held: its budget is spent");
            let run = runtime.hold_run(run, claim, exceeded.by).await?;
            // A repeat is answered with the earlier run, which this budget did not hold now.
            let held = matches!(run, RunQueued::New { .. });
            Ok(Ok(Queued { run, held }))
        }
        OnExceeded::Refuse => {
            let scope = exceeded.by.scope.as_str();
            refuse(runtime, claim, exceeded.refusal(), || {
                runtime.metrics().budget_refused(scope);
            })
            .await
        }
    }
}

/// Refuses a run with `refusal` (`count` counts it), unless `claim` finds the request a repeat
/// of one admitted before: then its run's id, as without a budget.
async fn refuse(
    runtime: &Runtime,
    claim: Option<IdempotencyClaim>,
    refusal: LimitReached,
    count: impl FnOnce(),
) -> Result<Result<Queued, LimitReached>, StoreError> {
    match runtime.repeat_of(claim.as_ref()).await? {
        Some(run_id) => Ok(Ok(Queued {
            run: RunQueued::Replayed { run_id },
            held: false,
        })),
        None => {
            count();
            Ok(Err(refusal))
        }
    }
}

/// Whether `run` is within its mapping's and its agent's budgets now (see [`queue`] for what the
/// count costs and how exact it is): a batch mapping's request opens a batch only then.
pub async fn has_room(
    runtime: &Runtime,
    budgets: &Budgets,
    run: &NewRun,
) -> Result<bool, StoreError> {
    if budgets.is_empty() {
        return Ok(true);
    }
    Ok(over_budget(runtime, budgets, run).await?.is_none())
}

/// The budget of `run` that has no room now, if any.
async fn over_budget(
    runtime: &Runtime,
    budgets: &Budgets,
    run: &NewRun,
) -> Result<Option<Exceeded>, StoreError> {
    let applying = applying_to(budgets, run);
    if applying.is_empty() {
        return Ok(None);
    }
    runtime
        .store()
        .read(move |conn| judge(conn, &applying, now_ms()))
        .await
}
