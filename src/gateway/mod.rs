//! What happens to an accepted hook. [`Runtime`] is a façade over one backend, chosen at start:
//! embedded (the local store, the agent runner, heartbeats and delivery to chat channels),
//! forward (relayed to an upstream gateway through a durable outbox) or NATS (several nodes on
//! one JetStream stream, [`nats`]). What the backends share is laid out by concern, each floor
//! using only those below it: [`admission`] (the limits a request meets before it is answered),
//! `turns` (running agent turns), `outbound` (chat replies and relays, through the outbox),
//! [`store`] (the SQLite file: its rows, their SQL and the records they hold) and [`requests`]
//! (the request log's rows).

pub mod admission;
mod clock;
mod context;
pub mod edge_queue;
mod embedded;
mod forward;
mod held_runs;
pub mod nats;
mod notify;
mod outbound;
mod request_refused;
pub mod requests;
mod retention;
mod runtime;
mod signals;
pub mod store;
mod turns;

pub use held_runs::BatchOpening;
pub use notify::NewNotice;
pub use runtime::{RetryError, Runtime};
pub use store::records::{
    DeliveryRecord, EventKind, EventOutcome, EventRecord, NewEvent, NewRun, RunStatus, SkipReason,
};
pub use store::run_view::{RunFilter, RunRecord};
pub use turns::provider::Usage;
pub use turns::retry::Retry;

/// The clock the runtime and replay protection share.
/// The operator's view of callbacks and lifecycle webhooks in the outbox.
pub mod outbound_api {
    pub use super::outbound::webhook_api::{
        OutboundRecord, OutboundStatus, Resent, list, of_run, retry,
    };
}

pub mod runtime_clock {
    pub use super::clock::{now_ms, now_rfc3339, rfc3339};
}
pub use requests::{REQUEST_LOG_FILE, RequestLogStore};
pub use store::runs::{IdempotencyClaim, RunQueued};
pub use store::{CommitError, DB_FILE, Store, StoreError};
