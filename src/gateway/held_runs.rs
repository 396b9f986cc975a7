//! Runs past their budgets, as the façade admits, releases and cancels them
//! (docs/hooks.md#budgets, docs/runtime.md#held-runs): the budgets' [`Verdict`] decides, the
//! backend stores what it decided.

use super::admission::budget::{self, HeldBy, HeldError, Queued, Settled, Verdict, held};
use super::runtime::{Backend, Runtime};
use super::store::StoreError;
use super::store::records::NewRun;
use super::store::runs::{IdempotencyClaim, RunQueued};
use crate::config::budget::Budgets;
use crate::hook::LimitReached;

/// What a batch mapping's request that found no open batch may open ([`Runtime::batch_opening`]).
#[derive(Debug)]
pub enum BatchOpening {
    /// A batch, queued when it closes; held then by `held_by` when that budget is spent now.
    Open { held_by: Option<HeldBy> },
    /// No batch: a budget refuses the request, or its lane holds enough held runs.
    None,
}

impl Runtime {
    /// Queues `run` as [`Runtime::submit_run`] does when its mapping's and its agent's budgets
    /// have room; past one that holds, stores it `held` (answered as queued, its id the run's),
    /// unless its lane holds enough held runs already (then refused as a full lane refuses);
    /// past one that refuses, stores nothing and answers the refusal. A request that `claim`
    /// finds a repeat of one admitted before is answered with its run's id, as without a budget.
    ///
    /// Costs what [`budget::verdict`] costs before the commit; nothing more without budgets.
    pub async fn queue_within_budgets(
        &self,
        budgets: &Budgets,
        run: NewRun,
        claim: Option<IdempotencyClaim>,
    ) -> Result<Result<Queued, LimitReached>, StoreError> {
        match budget::verdict(&self.store, budgets, &run).await? {
            Verdict::Within => {
                let run = self.submit_run(run, claim).await?;
                Ok(Ok(Queued { run, held: false }))
            }
            Verdict::Hold(exceeded) => {
                tracing::info!(run_id = %run.run_id, budget = %exceeded.by, "run held: its budget is spent");
                let run = self.hold_run(run, claim, exceeded.by).await?;
                // A repeat is answered with the earlier run, which this budget did not hold now.
                let held = matches!(run, RunQueued::New { .. });
                Ok(Ok(Queued { run, held }))
            }
            Verdict::LaneHoldsEnough(full) => {
                let count = || self.metrics.count_lane_refusal(full.mapping());
                self.refuse(claim, full.clone().into(), count).await
            }
            Verdict::Refuse(exceeded) => {
                let count = || self.metrics.budget_refused(exceeded.by.scope.as_str());
                self.refuse(claim, exceeded.refusal(), count).await
            }
        }
    }

    /// Refuses a run with `refusal` (`count` counts it), unless `claim` finds the request a
    /// repeat of one admitted before: then its run's id, as without a budget.
    async fn refuse(
        &self,
        claim: Option<IdempotencyClaim>,
        refusal: LimitReached,
        count: impl FnOnce(),
    ) -> Result<Result<Queued, LimitReached>, StoreError> {
        match self.repeat_of(claim.as_ref()).await? {
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

    /// Whether a batch mapping's request that found no open batch opens one, by what its
    /// mapping's and its agent's budgets say of `run` now ([`budget::verdict`]): within them it
    /// opens a batch; past one that holds it opens one too, whose run is held when it closes,
    /// so that a burst past a spent budget stays one turn; past one that refuses (or with its
    /// lane holding enough held runs) it opens none, and is refused as the run of its own it is.
    pub async fn batch_opening(
        &self,
        budgets: &Budgets,
        run: &NewRun,
    ) -> Result<BatchOpening, StoreError> {
        Ok(match budget::verdict(&self.store, budgets, run).await? {
            Verdict::Within => BatchOpening::Open { held_by: None },
            Verdict::Hold(exceeded) => {
                tracing::info!(run_id = %run.run_id, budget = %exceeded.by, "batch held: its budget is spent");
                BatchOpening::Open {
                    held_by: Some(exceeded.by),
                }
            }
            Verdict::LaneHoldsEnough(_) | Verdict::Refuse(_) => BatchOpening::None,
        })
    }

    /// Starts the held run `run_id` whatever its budgets say (it counts against them from now).
    /// 409 material ([`HeldError::NotHeld`]) for a run that is not held, cancelled or released
    /// already included.
    pub async fn release_held(&self, run_id: &str) -> Result<Settled, HeldError> {
        match &self.backend {
            Backend::Nats(cluster) => {
                super::nats::held::release(cluster, &self.store, run_id).await
            }
            Backend::Embedded(embedded) => {
                held::release(&self.store, embedded.signals(), run_id).await
            }
            Backend::Forward(forward) => {
                held::release(&self.store, forward.signals(), run_id).await
            }
        }
    }

    /// Cancels the held run `run_id`: status `cancelled`, it never runs. On a NATS cluster the
    /// answer says whether a release came first.
    pub async fn cancel_held(&self, run_id: &str) -> Result<Settled, HeldError> {
        match &self.backend {
            Backend::Nats(cluster) => super::nats::held::cancel(cluster, &self.store, run_id).await,
            _ => held::cancel(&self.store, run_id).await,
        }
    }
}
