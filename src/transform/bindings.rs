//! Host bindings generated from the two versions of the transform contract hookgate loads:
//! `wit/transform.wit` (0.2.0) and `wit/0.1.0/transform.wit`. The rest of the host speaks 0.2:
//! a 0.1 component's request and outcome are converted at the call (0.2 only added to 0.1).

/// `hookgate:transform@0.1.0`: a root `transform` export and a root `log` import.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "wit/0.1.0",
        world: "transform",
        // Calls are async so that a timeout drops the whole store (and with it any host call the
        // guest is blocked in); the `log` import stays a plain synchronous function.
        exports: { default: async },
    });

    pub use self::hookgate::transform::types;
}

/// `hookgate:transform@0.2.0`: the `handler` export and the `host` import, both versioned.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "transform",
        exports: { default: async },
    });

    pub use self::hookgate::transform::{host, types};
}

pub use v0_2::types;

use v0_1::types as old;

/// A 0.2 request as a 0.1 component receives it: without `url` and `export-name`.
impl From<types::Request> for old::Request {
    fn from(req: types::Request) -> Self {
        old::Request {
            name: req.name,
            headers: req.headers,
            query: req.query,
            body: req.body,
            mapping_id: req.mapping_id,
            config: req.config,
        }
    }
}

impl From<old::Outcome> for types::Outcome {
    fn from(outcome: old::Outcome) -> Self {
        match outcome {
            old::Outcome::Run(old::Action::Wake(wake)) => {
                types::Outcome::Run(types::Action::Wake(types::Wake {
                    text: wake.text,
                    mode: wake.mode.map(Into::into),
                }))
            }
            old::Outcome::Run(old::Action::Agent(a)) => {
                types::Outcome::Run(types::Action::Agent(types::Agent {
                    message: a.message,
                    name: a.name,
                    agent_id: a.agent_id,
                    session_key: a.session_key,
                    wake_mode: a.wake_mode.map(Into::into),
                    deliver: a.deliver,
                    channel: a.channel,
                    to: a.to,
                    model: a.model,
                    thinking: a.thinking,
                    timeout_seconds: a.timeout_seconds,
                }))
            }
            old::Outcome::Keep => types::Outcome::Keep,
            old::Outcome::Skip => types::Outcome::Skip,
            old::Outcome::Respond(reply) => types::Outcome::Respond(types::Reply {
                status: reply.status,
                content_type: reply.content_type,
                body: reply.body,
            }),
        }
    }
}

impl From<old::WakeMode> for types::WakeMode {
    fn from(mode: old::WakeMode) -> Self {
        match mode {
            old::WakeMode::Now => types::WakeMode::Now,
            old::WakeMode::NextHeartbeat => types::WakeMode::NextHeartbeat,
        }
    }
}

impl From<old::Level> for types::Level {
    fn from(level: old::Level) -> Self {
        match level {
            old::Level::Debug => types::Level::Debug,
            old::Level::Info => types::Level::Info,
            old::Level::Warn => types::Level::Warn,
            old::Level::Error => types::Level::Error,
        }
    }
}
