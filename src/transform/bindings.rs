//! Host bindings generated from `wit/transform.wit`.

wasmtime::component::bindgen!({
    path: "wit",
    world: "transform",
});

pub use self::hookgate::transform::types;
