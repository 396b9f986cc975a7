//! Running agent turns: the embedded runner that takes queued runs ([`runner`], reading the
//! queue through `store::next_runs`), one run's or a heartbeat's turn ([`agent`]) as calls to a model
//! provider ([`provider`], recorded as [`model_call`]s), the tokens it used in the metrics
//! ([`token_metrics`]), the heartbeat scheduler, and what the operator's retry of a run does.

pub(super) mod agent;
pub(super) mod heartbeat;
pub(crate) mod lane_slots;
pub(super) mod model_call;
pub(super) mod provider;
pub(super) mod retry;
pub(super) mod runner;
pub(super) mod token_metrics;
