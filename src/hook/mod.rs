//! The pure domain of a hook request: the action it asks for ([`action`], its enums' wire names
//! written once in `wire`), payload normalising, the agent/session/model policies, the idempotency
//! key, the safety envelope, provider signatures, which headers are credentials and what of a
//! request the log captures. Nothing here does I/O, so every rule is a plain function that tests
//! can call directly.

pub mod action;
pub mod capture;
pub mod credentials;
pub mod envelope;
pub mod idempotency;
pub mod payload;
pub mod policy;
pub mod signature;
pub(crate) mod wire;

pub use action::{
    AdmittedRun, AgentAction, AgentRequest, Channel, Named, SessionMode, Thinking, WakeMode,
    WakeRequest,
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
