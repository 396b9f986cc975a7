//! A mapping's `batch` (docs/hooks.md "Batches"): the requests of one mapping and session key
//! that arrive within a window gathered into one agent run. Pure: what a batch is and which
//! batch a request joins; storing and closing batches is the gateway's (`gateway::batches`).

use std::time::Duration;

/// How a batch mapping gathers its requests, read once at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRule {
    /// How long a batch gathers, from its first request; never zero.
    pub window: Duration,
    /// The most requests one batch holds; the request that reaches it closes the batch. Never
    /// zero.
    pub max_items: u32,
}

/// The batch a request joins: its mapping's id and the session key its runs share (empty when
/// the key is generated per request, which would make every request a batch of its own: those
/// gather per mapping, under the first request's key).
pub fn batch_key(session_key: &str, chosen: bool) -> &str {
    if chosen { session_key } else { "" }
}
