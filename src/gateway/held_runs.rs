//! Runs past their budgets, as the façade admits, releases and cancels them
//! (docs/hooks.md#budgets, docs/runtime.md#held-runs): the budgets' [`Verdict`] decides, the
//! backend stores what it decided.

use super::admission::budget::{self, HeldError, Queued, Settled, Verdict, held};
use super::runtime::{Backend, Runtime};
use super::store::StoreError;
use super::store::records::NewRun;
use super::store::runs::{IdempotencyClaim, RunQueued};
use crate::config::budget::Budgets;
use crate::hook::LimitReached;

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
        idempotency_key: Option<&str>,
    ) -> Result<Result<Queued, LimitReached>, StoreError> {
        match budget::verdict(&self.store, budgets, &run).await? {
            Verdict::Within => {
                let run = self.submit_run(run, claim, idempotency_key).await?;
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

    /// Whether `run` is within its mapping's and its agent's budgets now ([`budget::has_room`]):
    /// a batch mapping's request opens a batch only then.
    pub async fn within_budgets(
        &self,
        budgets: &Budgets,
        run: &NewRun,
    ) -> Result<bool, StoreError> {
        budget::has_room(&self.store, budgets, run).await
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
