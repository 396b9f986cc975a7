//! What the store keeps of an agent turn: the earlier exchanges of a persistent session
//! ([`Exchange`]), the tokens a turn used ([`Usage`]) and its calls to model providers
//! ([`ModelCall`]). The turns floor makes them; the store and the API read them, so they live
//! at the bottom, with the records.

use serde::{Deserialize, Serialize};

/// One earlier exchange of a persistent session: what the agent was given and what it replied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    pub prompt: String,
    pub reply: String,
}

/// The tokens one turn used, as its provider reported them.
///
/// `input_tokens` is every token the model read: the chat-completions `usage.prompt_tokens`
/// (which counts cached tokens among them), or on the Messages API `usage.input_tokens` plus its
/// `cache_creation_input_tokens` and `cache_read_input_tokens` (which it counts apart).
/// `output_tokens` is `completion_tokens` or `output_tokens`, thinking included.
/// Each count is at most [`MAX_TURN_TOKENS`]: a provider reporting more is counted that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The most tokens one turn is counted for, in each direction: a hundred million, far above
/// any model's context window. A provider that reports more (a bug, or a hostile one) is
/// counted this, with a warning in the log, so that the sums of a window's runs (budgets'
/// `tokensPerDay`, `GET /api/spend`) stay far from `i64::MAX`, which SQLite's `SUM()` may not
/// pass: it would take 92 billion such turns.
pub const MAX_TURN_TOKENS: u64 = 100_000_000;

/// The calls a run's record keeps: its last ones, so that a run that retried for its whole
/// deadline does not grow its record without bound (the final error counts them all).
pub const MAX_RECORDED: usize = 20;

/// One call to a model provider, as `GET /api/runs/<runId>` lists it under `modelCalls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCall {
    /// The model id as the run asked for it (`<provider>/<model>` for a named provider).
    pub model: String,
    /// The provider: its name under `models.providers`, or its host and port (never a URL's
    /// credentials, path or query).
    pub provider: String,
    /// When the call began (RFC 3339, UTC).
    pub at: String,
    /// Why it failed; `None` for the call that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the run waited after this call before its next pass over its models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}
