//! hookgate: a webhook ingress for AI agents.
//!
//! External services POST webhooks; hookgate authenticates each request, turns it into a wake (a
//! system event for the agent's main session) or an agent run, and answers 200 only once that is
//! durably committed. See docs/architecture.md for the layout and docs/ for operation.

pub mod allocator;
pub mod build;
pub mod client;
pub mod config;
pub mod gateway;
pub mod hook;
pub mod http;
pub mod intake;
pub mod mapping;
pub mod metrics;
pub mod private_fs;
pub mod request_log;
pub mod server;
pub mod slots;
pub mod subscription;
pub mod transform;
