//! Which budget held a run ([`HeldBy`]): the `runs.held_by` column and the API's `heldBy`. The
//! budgets (admission) decide it; the store keeps it and the API shows it.

use serde::Serialize;

/// Whose budget it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `hooks.mappings[i].budget`: the runs that mapping admitted.
    Mapping,
    /// `agents.list[i].budget`: the runs of that agent, whatever admitted them.
    Agent,
}

crate::hook::wire::wire_names!(Scope {
    Mapping => "mapping",
    Agent => "agent",
});

/// Which limit of a budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    RunsPerHour,
    TokensPerDay,
}

crate::hook::wire::wire_names!(Limit {
    RunsPerHour => "runsPerHour",
    TokensPerDay => "tokensPerDay",
});

/// The budget that held a run: whose, and which of its limits. Stored in `runs.held_by` as
/// `scope:limit:id` (the id last: it may hold any character) and shown by the API as an object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HeldBy {
    pub scope: Scope,
    pub id: String,
    pub limit: Limit,
}

impl HeldBy {
    /// The form of the `runs.held_by` column.
    pub fn to_column(&self) -> String {
        format!(
            "{}:{}:{}",
            self.scope.as_str(),
            self.limit.as_str(),
            self.id
        )
    }

    /// The budget a `runs.held_by` column names; `None` for text no version wrote.
    pub fn from_column(text: &str) -> Option<HeldBy> {
        let mut parts = text.splitn(3, ':');
        let scope = Scope::from_wire(parts.next()?)?;
        let limit = Limit::from_wire(parts.next()?)?;
        let id = parts.next()?.to_string();
        Some(HeldBy { scope, id, limit })
    }
}

/// `mapping github runsPerHour`: how the log, the request record and the API's messages name a
/// budget.
impl std::fmt::Display for HeldBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (scope, id, limit) = (self.scope.as_str(), &self.id, self.limit.as_str());
        write!(f, "{scope} {id} {limit}")
    }
}
