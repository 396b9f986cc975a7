//! What happens to an accepted hook. [`Runtime`] is a façade over one backend, chosen at start:
//! embedded (the local store, the agent runner, heartbeats and delivery to chat channels),
//! forward (relayed to an upstream gateway through a durable outbox) or NATS (several nodes on
//! one JetStream stream). The agent work and delivery rules they share live in `agent` and
//! `delivery`; the records they store are typed in `records`.

mod agent;
pub mod batches;
pub mod budget;
mod clock;
mod context;
pub mod deliveries;
mod delivery;
mod embedded;
mod forward;
mod heartbeat;
pub mod lanes;
mod model_call;
pub mod nats;
mod outbox;
mod provider;
mod queue;
mod records;
mod relay;
pub mod requests;
mod retention;
mod retry;
mod run_record;
mod runner;
mod runs;
mod runtime;
mod schema;
mod signals;
pub mod spend;
mod store;
mod stored_run;
mod usage;

pub use provider::Usage;
pub use records::{
    DeliveryRecord, EventKind, EventOutcome, EventRecord, NewEvent, NewRun, RunStatus, SkipReason,
};
pub use retry::Retry;
pub use run_record::{RunFilter, RunRecord};
pub use runtime::{RetryError, Runtime};

/// The clock the runtime and replay protection share.
pub mod runtime_clock {
    pub use super::clock::{now_ms, now_rfc3339, rfc3339};
}
pub use requests::{REQUEST_LOG_FILE, RequestLogStore};
pub use runs::{IdempotencyClaim, RunQueued};
pub use store::{CommitError, DB_FILE, Store, StoreError};
