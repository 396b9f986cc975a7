//! Versions of the transform contract (docs/transforms.md#contract-versions): a component built
//! against 0.1.0 still loads and serves, one built against a version hookgate does not know is
//! refused at load naming both versions, whether its exports carry the version (0.2 on) or only
//! its imports do (a root `transform` export, as in 0.1), and `transform.export` is refused on a
//! 0.1 component, which has one entry point. A component with the 0.2 handler's names whose
//! `transform` has another type is refused at load too.

use serde_json::{Value, json};

use crate::harness::*;

fn mapping(module: &str) -> Value {
    let id = module.trim_end_matches(".wasm");
    json!({"id": id, "match": {"path": id}, "action": "wake",
           "textTemplate": "from the template", "transform": {"module": module}})
}

fn config_with(mappings: Value) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.mappings", mappings);
    config
}

#[tokio::test]
async fn a_component_built_against_0_1_still_serves() {
    let dir = ConfigDir::new(&config_with(json!([mapping("legacy.wasm")])));
    install_transforms(&dir, &["legacy"]);
    let server = Hookgate::start_in(&dir);
    let (status, reply) = json_of(
        server
            .hook("/hooks/legacy")
            .json(&json!({"n": 1}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        server.wake_texts().await,
        vec![r#"0.1 component for legacy: {"n":1}"#]
    );
    let (_, log) = server.terminate();
    assert!(
        log.contains("legacy transform called") && log.contains("mapping=legacy"),
        "0.1's root log import is served:\n{log}"
    );
}

#[test]
fn components_of_versions_hookgate_does_not_load_are_refused_naming_both() {
    let dir = ConfigDir::new(&config_with(json!([
        mapping("future.wasm"),
        mapping("future_root.wasm"),
    ])));
    install_transforms(&dir, &["future", "future_root"]);
    let (status, output) = check_in(&dir);
    assert!(!status.success(), "{output}");
    for (i, module, version) in [
        (0, "future.wasm", "1.0.0"),
        (1, "future_root.wasm", "0.3.0"),
    ] {
        let expected = format!(
            "hooks.mappings[{i}].transform.module: {module}: is built against hookgate:transform@{version}; this hookgate loads hookgate:transform@0.1 and @0.2"
        );
        assert!(output.contains(&expected), "{expected}\nnot in:\n{output}");
    }
    let refused = Hookgate::try_start_in(&dir, &[])
        .err()
        .expect("serve refuses them too");
    assert!(refused.contains("hookgate:transform@1.0.0"), "{refused}");
}

#[test]
fn transform_export_on_a_0_1_component_is_refused_at_load() {
    let mut with_export = mapping("legacy.wasm");
    with_export["transform"]["export"] = json!("other");
    let dir = ConfigDir::new(&config_with(json!([with_export])));
    install_transforms(&dir, &["legacy"]);
    let (status, output) = check_in(&dir);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains(
            "hooks.mappings[0].transform.export: needs a component built against hookgate:transform@0.2, and legacy.wasm is built against 0.1"
        ),
        "{output}"
    );
}

/// A 0.2 component whose `handler#transform` has another type than the contract's is refused
/// at load, naming the mapping and the module, as a 0.1 component's root export is: never
/// loaded to fail every call.
#[test]
fn a_handler_of_another_type_is_refused_at_load() {
    let dir = ConfigDir::new(&config_with(json!([mapping("mistyped.wasm")])));
    install_transforms(&dir, &["mistyped"]);
    let (status, output) = check_in(&dir);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("hooks.mappings[0].transform.module: mistyped.wasm:")
            && output.contains("type-checking `hookgate:transform/handler@0.2.0#transform`"),
        "{output}"
    );
    let refused = Hookgate::try_start_in(&dir, &[])
        .err()
        .expect("serve refuses it too");
    assert!(refused.contains("mistyped.wasm"), "{refused}");
}
