//! Host bindings generated from `wit/transform.wit`.

wasmtime::component::bindgen!({
    path: "wit",
    world: "transform",
    // Calls are async so that a timeout drops the whole store (and with it any host call the
    // guest is blocked in); the `log` import stays a plain synchronous function.
    exports: { default: async },
});

pub use self::hookgate::transform::types;
