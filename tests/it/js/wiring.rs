//! What a JavaScript component asks its host to wire on every instantiation: the SDK satisfies
//! the runtime's WASI preview 1 imports inside the module (docs/performance.md, "A fresh
//! JavaScript instance"), so a component imports only the WASI interfaces those functions call,
//! not the whole of preview 1 through jco's adapter.

use wasmtime::component::Component;
use wasmtime::{Config, Engine};

use super::js_transforms;

/// The interfaces (without their versions) a component built by the SDK may import: its
/// contract, and the WASI that randomness, the clocks, stdout and stderr and exit need.
const WIRED: &[&str] = &[
    "hookgate:transform/types",
    "hookgate:transform/host",
    "wasi:random/random",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:io/error",
    "wasi:io/streams",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/exit",
];

#[test]
fn a_component_imports_only_the_wasi_its_runtime_calls() {
    let mut config = Config::new();
    config.wasm_component_model(true);
    let engine = Engine::new(&config).unwrap();
    let component = Component::from_file(&engine, js_transforms().join("js-globals.wasm")).unwrap();
    let imports: Vec<String> = component
        .component_type()
        .imports(&engine)
        .map(|(name, _)| {
            name.split_once('@')
                .map_or(name, |(base, _)| base)
                .to_owned()
        })
        .collect();
    let unwired: Vec<&String> = imports
        .iter()
        .filter(|name| !WIRED.contains(&name.as_str()))
        .collect();
    assert!(
        unwired.is_empty(),
        "imports beyond what the runtime calls: {unwired:?}"
    );
    assert!(
        imports.iter().any(|name| name == "wasi:random/random"),
        "{imports:?}"
    );
}
