//! The WebAssembly transform host: components of the world in `wit/transform.wit` (0.2, and 0.1
//! components still), compiled once
//! (cached on disk), pre-instantiated, and instantiated into a fresh, limited store per request.
//!
//! A transform sees only its request: no filesystem, network, environment, arguments or stdin.
//! Each call is bounded in wall time (epoch interruption), memory (a store limiter) and output
//! size; a transform that breaks a limit fails its own request and nothing else.

mod bindings;
mod cache;
mod call;
mod call_slots;
mod contract;
mod engine;
mod guest_clock;
mod guest_text;
mod host;
mod limits;
mod module_file;
mod registry;
mod warm;

pub use cache::CompileCache;
pub use call::{CallOutcome, Reply, TransformFailure, TransformInput};
pub use contract::Contract;
pub use engine::TransformEngine;
pub use limits::TransformLimits;
pub use registry::{LoadError, LoadedTransform, TransformRegistry, TransformSet, TransformStatus};
