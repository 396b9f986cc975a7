//! Budgets (docs/hooks.md#budgets): how many runs an hour and tokens a day a mapping's or an
//! agent's runs may take, over rolling windows, and what becomes of a run past them: held (stored
//! with status `held`, started once the window has room or the operator releases it) or refused
//! (`429`, nothing stored).
//!
//! A run counts against `runsPerHour` from the moment it entered the queue: when it was accepted,
//! or, for a run that was held, when it was released. A held run that is still held, or was
//! cancelled, counts nothing. The counts are those of the store: on a NATS cluster, this node's
//! view of every node's runs.

mod admit;
mod count;
pub(in crate::gateway) mod held;
mod standing;

use std::time::Duration;

use rusqlite::Connection;

use crate::config::budget::{Budget, Budgets, OnExceeded, RUNS_WINDOW, TOKENS_WINDOW};
use crate::gateway::clock::rfc3339;
use crate::gateway::store::records::NewRun;
use crate::hook::{LimitKind, LimitReached};

pub use crate::gateway::store::held_by::{HeldBy, Limit, Scope};
pub use admit::{Queued, Verdict, verdict};
pub(crate) use held::release_due;
pub use held::{HeldError, Settled};
pub use standing::BudgetStanding;

/// A budget that applies to a run.
#[derive(Debug, Clone)]
struct Applying {
    scope: Scope,
    id: String,
    budget: Budget,
}

/// The budgets of a run of mapping `mapping_id` (none for `POST {prefix}/agent`) and `agent`:
/// the mapping's, then the agent's, each when it has one. At most two.
fn applying(budgets: &Budgets, mapping_id: Option<&str>, agent: &str) -> Vec<Applying> {
    let mapping = mapping_id.and_then(|id| {
        Some(Applying {
            scope: Scope::Mapping,
            id: id.to_string(),
            budget: *budgets.mappings.get(id)?,
        })
    });
    let agent = budgets.agents.get(agent).map(|budget| Applying {
        scope: Scope::Agent,
        id: agent.to_string(),
        budget: *budget,
    });
    mapping.into_iter().chain(agent).collect()
}

/// The budgets of `run`.
fn applying_to(budgets: &Budgets, run: &NewRun) -> Vec<Applying> {
    let admitted = &run.admitted;
    applying(
        budgets,
        admitted.mapping_id.as_deref(),
        &admitted.target_agent,
    )
}

/// A budget with no room for another run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub by: HeldBy,
    pub on_exceeded: OnExceeded,
    /// How long until the oldest run it counts leaves its window: the earliest a run may pass.
    pub retry_after: Duration,
    /// The limit, for the operator's reason.
    limit: u64,
}

impl Exceeded {
    /// The refusal of a run: `budget exceeded` to the client; the budget and its limit in full
    /// to the request log and the log line.
    pub fn refusal(&self) -> LimitReached {
        let per = match self.by.limit {
            Limit::RunsPerHour => "runs per hour",
            Limit::TokensPerDay => "tokens per day",
        };
        LimitReached {
            kind: LimitKind::Budget,
            message: "budget exceeded; retry later",
            reason: format!("budget exceeded: {} ({} {per})", self.by, self.limit),
            retry_after: self.retry_after,
        }
    }
}

/// The first of `applying` that has no room at `now_ms`, if any; a refusing budget before a
/// holding one (nothing is stored when any refuses). Costs one or two indexed counts per budget.
fn judge(
    conn: &Connection,
    applying: &[Applying],
    now_ms: i64,
) -> rusqlite::Result<Option<Exceeded>> {
    let mut exceeded = Vec::new();
    for budget in applying {
        exceeded.extend(exceeded_in(conn, budget, now_ms)?);
    }
    let refusing = exceeded
        .iter()
        .position(|e| e.on_exceeded == OnExceeded::Refuse);
    Ok(match refusing {
        Some(at) => Some(exceeded.swap_remove(at)),
        None => exceeded.into_iter().next(),
    })
}

/// The first limit of `budget` that has no room at `now_ms`.
fn exceeded_in(
    conn: &Connection,
    budget: &Applying,
    now_ms: i64,
) -> rusqlite::Result<Option<Exceeded>> {
    let exceeded = |limit: Limit, max: u64, oldest: Option<i64>, window: Duration| {
        let leaves_at = oldest.map_or(now_ms, |oldest| {
            oldest + crate::gateway::clock::millis(window)
        });
        let wait = u64::try_from(leaves_at.saturating_sub(now_ms)).unwrap_or(0);
        Exceeded {
            by: HeldBy {
                scope: budget.scope,
                id: budget.id.clone(),
                limit,
            },
            on_exceeded: budget.budget.on_exceeded,
            retry_after: Duration::from_millis(wait).max(Duration::from_secs(1)),
            limit: max,
        }
    };
    if let Some(max) = budget.budget.runs_per_hour {
        let since = rfc3339(now_ms - crate::gateway::clock::millis(RUNS_WINDOW));
        let window = count::window(
            conn,
            Limit::RunsPerHour,
            budget.scope,
            &budget.id,
            &since,
            max.get().into(),
        )?;
        if window.count >= u64::from(max.get()) {
            return Ok(Some(exceeded(
                Limit::RunsPerHour,
                max.get().into(),
                window.oldest_ms,
                RUNS_WINDOW,
            )));
        }
    }
    if let Some(max) = budget.budget.tokens_per_day {
        let since = rfc3339(now_ms - crate::gateway::clock::millis(TOKENS_WINDOW));
        let window = count::window(
            conn,
            Limit::TokensPerDay,
            budget.scope,
            &budget.id,
            &since,
            max.get(),
        )?;
        if window.count >= max.get() {
            return Ok(Some(exceeded(
                Limit::TokensPerDay,
                max.get(),
                window.oldest_ms,
                TOKENS_WINDOW,
            )));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
