//! The pure domain of a hook request: the action it asks for ([`action`], its enums' wire names
//! written once in `wire`), payload normalising, the agent/session/model policies, the idempotency
//! key, the safety envelope, provider signatures, the configured tokens' comparison, which headers
//! are credentials and what of a request the log captures. Nothing here does I/O, so every rule is
//! a plain function that tests can call directly.

pub mod action;
pub mod batch_prompt;
pub mod capture;
pub mod credentials;
pub mod envelope;
pub mod form;
pub mod idempotency;
pub mod payload;
pub mod policy;
pub mod signature;
pub mod token;
pub(crate) mod wire;

pub use action::{
    AdmittedRun, AgentAction, AgentRequest, Channel, DEFAULT_NAME, Named, SessionMode, Thinking,
    WakeMode, WakeRequest,
};
pub use policy::{AgentDirectory, HookPolicy, ModelAllowlist, SessionKeyPolicy};

/// A request the hook contract refuses, with the message the client gets (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Rejected(pub String);

impl Rejected {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Rejected(message.into())
    }
}

/// A run refused because one of hookgate's own limits on what runs cost is reached (a mapping's
/// lane is full, a budget is spent): HTTP 429 with `Retry-After`, nothing stored. The client gets
/// the terse `message`; the operator reads `reason`, which names the mapping or agent and the
/// limit, in the request log and the log line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct LimitReached {
    /// Which kind of limit it is.
    pub kind: LimitKind,
    /// What the client is told, e.g. `run queue full; retry later`.
    pub message: &'static str,
    /// The limit in full, e.g. `mapping github: runs.maxQueued (20) reached`.
    pub reason: String,
    /// When the limit may let a run through again; the answer's `Retry-After`, rounded up to
    /// whole seconds.
    pub retry_after: std::time::Duration,
}

/// Which of hookgate's limits refused a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// A mapping's lane holds `runs.maxQueued` waiting runs.
    Lane,
    /// A budget whose `onExceeded` is `refuse` is spent.
    Budget,
}
