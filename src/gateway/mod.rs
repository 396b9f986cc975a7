//! What happens to an accepted hook: the durable embedded store, and the runtime on top of it:
//! the agent runner against a model provider, heartbeats, delivery to chat channels through a
//! durable outbox, and forward mode, which relays everything to an upstream gateway instead.

mod channels;
pub mod deliveries;
mod heartbeat;
pub mod nats;
mod outbox;
mod provider;
mod record;
mod runner;
mod runs;
mod runtime;
mod schema;
mod store;

pub use heartbeat::HeartbeatTrigger;
pub use record::{EventKind, EventRecord, NewEvent, NewRun, RunRecord};
pub use runtime::{Runtime, forward_body};

/// The clock the runtime and replay protection share.
pub mod runtime_clock {
    pub use super::runtime::{now_ms, now_rfc3339};
}
pub use store::{DB_FILE, IdempotencyClaim, RunQueued, Store, StoreError};

use crate::hook::AdmittedRun;

impl NewRun {
    /// The run record of an admitted agent request, with the prompt the agent will be given.
    pub fn admitted(run_id: String, run: &AdmittedRun, prompt: String, created_at: String) -> Self {
        NewRun {
            run_id,
            hook_name: run.name.clone(),
            agent_id: run.agent_id.clone(),
            target_agent: run.target_agent.clone(),
            session_key: run.session_key.clone(),
            message: run.message.clone(),
            prompt,
            deliver: run.deliver,
            channel: run.channel.as_str().to_string(),
            to: run.to.clone(),
            model: run.model.clone(),
            thinking: run.thinking.clone(),
            timeout_seconds: run.timeout_seconds,
            wake_mode: run.wake_mode.as_str().to_string(),
            source: run.source.as_str().to_string(),
            created_at,
        }
    }
}
