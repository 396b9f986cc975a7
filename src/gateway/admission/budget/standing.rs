//! Where each budget stands now, for the console's overview (`GET /api/overview`,
//! docs/operations.md#the-overview): for each limit of each mapping's and agent's budget, what
//! its window holds against the limit, counted as admission counts it ([`count::window`]), so
//! that a full bar is a budget that holds or refuses the next run.

use rusqlite::Connection;
use serde::Serialize;

use super::{Limit, Scope, count};
use crate::config::budget::{Budget, Budgets, OnExceeded, RUNS_WINDOW, TOKENS_WINDOW};
use crate::gateway::clock::{millis, rfc3339};
use crate::gateway::store::{Store, StoreError};

/// One limit of one budget, and what its window holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStanding {
    pub scope: Scope,
    /// The mapping's id or the agent's (normalised).
    pub id: String,
    pub limit: Limit,
    /// The limit: runs an hour or tokens a day.
    pub max: u64,
    /// What the window holds: the runs that entered the queue in the last hour (counted up to
    /// `max`: at `max` the budget is spent), or the tokens of the runs that finished in the
    /// last 24 hours.
    pub used: u64,
    /// What a run past the budget meets: `hold` or `refuse`.
    pub on_exceeded: &'static str,
}

impl Store {
    /// Every limit of `budgets` with what its window holds at `now_ms`: mappings' budgets
    /// (by id), then agents'; runs per hour before tokens per day. Costs what admission's
    /// check of each budget costs: one or two indexed counts per limit.
    pub async fn budget_standing(
        &self,
        budgets: &Budgets,
        now_ms: i64,
    ) -> Result<Vec<BudgetStanding>, StoreError> {
        let budgets_of = |map: &std::collections::HashMap<String, Budget>, scope| {
            let mut list: Vec<(Scope, String, Budget)> = map
                .iter()
                .map(|(id, budget)| (scope, id.clone(), *budget))
                .collect();
            list.sort_by(|a, b| a.1.cmp(&b.1));
            list
        };
        let mut all = budgets_of(&budgets.mappings, Scope::Mapping);
        all.extend(budgets_of(&budgets.agents, Scope::Agent));
        self.read(move |conn| {
            let mut standing = Vec::new();
            for (scope, id, budget) in all {
                standing.extend(limits_of(conn, scope, &id, &budget, now_ms)?);
            }
            Ok(standing)
        })
        .await
    }
}

/// The limits `budget` sets, each with what its window holds at `now_ms`.
fn limits_of(
    conn: &Connection,
    scope: Scope,
    id: &str,
    budget: &Budget,
    now_ms: i64,
) -> rusqlite::Result<Vec<BudgetStanding>> {
    let limits = [
        (
            Limit::RunsPerHour,
            budget.runs_per_hour.map(|max| u64::from(max.get())),
            RUNS_WINDOW,
        ),
        (
            Limit::TokensPerDay,
            budget.tokens_per_day.map(|max| max.get()),
            TOKENS_WINDOW,
        ),
    ];
    let mut standing = Vec::new();
    for (limit, max, window) in limits {
        let Some(max) = max else { continue };
        let since = rfc3339(now_ms - millis(window));
        let held = count::window(conn, limit, scope, id, &since, max)?;
        standing.push(BudgetStanding {
            scope,
            id: id.to_string(),
            limit,
            max,
            used: held.count,
            on_exceeded: match budget.on_exceeded {
                OnExceeded::Hold => "hold",
                OnExceeded::Refuse => "refuse",
            },
        });
    }
    Ok(standing)
}
