//! docs/cli.md, `hookgate config`: the schema and the key reference the binary prints are the
//! ones the configuration's types generate, committed beside the example configuration.

use std::process::Command;

use serde_json::{Value, json};

use crate::harness::*;

fn printed(what: &str) -> String {
    let out = Command::new(binary())
        .args(["config", what])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn config_schema_prints_the_committed_schema_that_the_example_names() {
    let schema: Value = serde_json::from_str(&printed("schema")).unwrap();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let committed = std::fs::read_to_string(examples.join("hookgate.schema.json")).unwrap();
    assert!(
        schema == serde_json::from_str::<Value>(&committed).unwrap(),
        "`hookgate config schema` differs from examples/hookgate.schema.json"
    );
    let max_concurrent =
        &schema["definitions"]["AgentDefaultsConfig"]["properties"]["maxConcurrent"];
    assert_eq!(max_concurrent["default"], json!(4));
    assert_eq!(schema["additionalProperties"], json!(false));
    let example = std::fs::read_to_string(examples.join("hookgate.json5")).unwrap();
    assert!(example.contains("$schema: \"./hookgate.schema.json\""));

    // The key that names it is no problem of the file.
    let mut config = base_config();
    config["$schema"] = json!("./hookgate.schema.json");
    let (status, output, _dir) = check(&config);
    assert!(status.success(), "{output}");
}

#[test]
fn config_reference_lists_every_key_with_its_default_and_reload_class() {
    let reference = printed("reference");
    assert!(
        reference
            .contains("| `agents.defaults.maxConcurrent` | `4` | ≥ 1 | restart on a NATS store |"),
        "{reference}"
    );
    assert!(
        reference.contains("| `gateway.headerTimeoutSeconds` | `10` | > 0, ≤ 3600 | live |"),
        "{reference}"
    );
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    assert!(
        docs.contains(&reference),
        "docs/configuration.md lacks the generated reference"
    );
}
