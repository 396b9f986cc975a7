//! The WebAssembly transform host: components of the world in `wit/transform.wit` (0.2, and 0.1
//! components still), compiled once (cached on disk) and pre-instantiated. A call runs in a
//! limited store: a fresh store and instance per call by default, or an instance kept with its
//! store from the same mapping's earlier calls when the mapping sets `transform.reuse` above 1,
//! as a mapping naming a JavaScript or TypeScript module does unless it says otherwise
//! ([`TransformLimits::reuse`]). A kept instance carries what earlier calls left in its memory,
//! and is given up after a call that fails. A JavaScript component built by an older SDK
//! (`builder`) keeps no instance: each of its calls gets a fresh one.
//!
//! A transform sees only its request: no filesystem, network, environment, arguments or stdin.
//! Each call is bounded in running time (epoch interruption, see `guest_clock`), memory (a store
//! limiter) and output size; a transform that breaks a limit fails its own request and nothing
//! else.

mod answer;
mod bindings;
mod builder;
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
mod pipe;
mod registry;
mod request;
mod shown;
mod warm;
mod wasi;

pub use builder::{Builder, JS_ADAPTER_REVISION, JS_SDK_SECTION};
pub use cache::CompileCache;
pub use call::{CallOutcome, Reply, Returned, TransformFailure};
pub use call_slots::SlotShare;
pub use contract::Contract;
pub use engine::TransformEngine;
pub use limits::TransformLimits;
pub use registry::{LoadError, LoadedTransform, TransformRegistry, TransformSet, TransformStatus};
pub use request::TransformInput;
