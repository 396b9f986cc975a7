//! Every field of a merge a transform returns lands where it was set: hookgate reads a merge at
//! offsets of its own (docs/performance.md, "The host's side of a call"), and a field read at
//! another field's offset of the same type would show here as a value in the wrong place.

use serde_json::{Value, json};

use super::build::js_transforms;
use crate::harness::*;

#[test]
fn every_field_of_a_merge_is_read_where_the_transform_set_it() {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{}").unwrap();
    let out = std::process::Command::new(binary())
        .args(["transform", "run"])
        .arg(js_transforms().join("js-every-field.wasm"))
        .arg("--body")
        .arg(&body)
        .output()
        .unwrap();
    assert_succeeded(&out);
    let outcome: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = json!({
        "kind": "agent",
        "text": "text-1",
        "mode": "next-heartbeat",
        "message": "message-2",
        "name": "name-3",
        "agentId": "agent-id-4",
        "sessionKey": "session-key-5",
        "sessionKeySource": "static",
        "sessionMode": "session-mode-6",
        "deliver": true,
        "allowUnsafeExternalContent": false,
        "channel": "channel-7",
        "to": "to-8",
        "model": "model-9",
        "thinking": "thinking-10",
        "timeoutSeconds": 1234567,
    });
    assert_eq!(outcome["outcome"], "merge", "{outcome:#}");
    let got = outcome["overrides"].as_object().unwrap();
    for (field, value) in expected.as_object().unwrap() {
        assert_eq!(got.get(field), Some(value), "{field} in {outcome:#}");
    }
    assert_eq!(
        got.len(),
        expected.as_object().unwrap().len(),
        "{outcome:#}"
    );
}
