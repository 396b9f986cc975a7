//! Which runs an operator means: the filters of `GET /api/runs`, parsed once into a
//! [`RunFilter`] (docs/operations.md#operator-api). The listing and the operations over many
//! runs (`POST /api/runs/release|cancel|retry`) read them here, so that one filter means the
//! same runs everywhere.

use serde::Deserialize;

use super::api_error::ApiError;
use super::query_params::{limit, time_ms};
use crate::gateway::{RunFilter, RunStatus};

/// The filters of a selection of runs, as `GET /api/runs` takes them in its query. A parameter
/// of another name is refused, so that a typo cannot widen the selection silently. Its JSON
/// Schema (the field docs) is what the MCP tool `list_runs` shows an agent.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunsQuery {
    /// The run's status.
    #[schemars(extend("enum" = ["queued", "batching", "running", "ok", "error", "timeout",
        "forwarding", "forwarded", "forward_failed", "held", "cancelled"]))]
    status: Option<String>,
    /// The hook name of the request that made the run.
    hook: Option<String>,
    /// The mapping that admitted the run.
    mapping: Option<String>,
    /// The agent the run is for.
    agent: Option<String>,
    /// The run's session key.
    session_key: Option<String>,
    /// RFC 3339: runs created at or after it.
    since: Option<String>,
    /// The previous page's `next`.
    before: Option<String>,
    /// How many, 1 to 1000 (default 100).
    #[schemars(with = "Option<u32>", range(min = 1, max = 1000))]
    limit: Option<String>,
}

impl RunsQuery {
    /// Whether the query continues a listing (`before`) or bounds its page (`limit`): an
    /// operation over every run the filter selects refuses both.
    pub fn pages(&self) -> bool {
        self.before.is_some() || self.limit.is_some()
    }

    /// Whether the query names a status.
    pub fn has_status(&self) -> bool {
        self.status.is_some()
    }

    /// The filter these parameters name, newest first; an invalid one answered 400 naming the
    /// parameter.
    pub fn filter(self) -> Result<RunFilter, ApiError> {
        let status = self
            .status
            .map(|text| {
                RunStatus::from_wire(&text).ok_or_else(|| {
                    ApiError::Invalid(format!(
                        "status must be one of: {}",
                        RunStatus::NAMES.join(", ")
                    ))
                })
            })
            .transpose()?;
        let before = self
            .before
            .map(|cursor| {
                cursor
                    .parse::<i64>()
                    .map_err(|_| ApiError::Invalid("before must be a cursor from next".into()))
            })
            .transpose()?;
        let since = self
            .since
            .map(|at| time_ms(&at, "since").map(crate::gateway::runtime_clock::rfc3339))
            .transpose()?;
        Ok(RunFilter {
            status,
            hook: self.hook,
            mapping: self.mapping,
            agent: self.agent,
            session_key: self.session_key,
            since,
            before,
            limit: limit(self.limit.as_deref())?,
        })
    }
}
