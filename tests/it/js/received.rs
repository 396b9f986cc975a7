//! What a JavaScript transform receives, as the runtime builds it (transforms/js-runtime/src/
//! convert.rs): `headers` with lower-case names, a repeated header's values joined with `, `, each
//! an own data property; the body decoded as `TextDecoder` decodes it, a byte-order mark dropped.

use std::process::Command;

use serde_json::{Value, json};

use super::{js_limits, js_transforms};
use crate::harness::*;

/// Answers with what it observed, as the HTTP response: no wake to poll for.
const OBSERVER: &str = r#"
const own = (object, name) => {
  const d = Object.getOwnPropertyDescriptor(object, name);
  return d && { value: d.value, writable: d.writable, enumerable: d.enumerable,
                configurable: d.configurable, accessor: 'get' in d || 'set' in d };
};
export default function observe({ payload, headers }) {
  return { kind: 'respond', body: {
    xa: own(headers, 'x-a'),
    proto: own(headers, '__proto__'),
    prototypeIsObject: Object.getPrototypeOf(headers) === Object.prototype,
    polluted: Object.getOwnPropertyNames(Object.prototype).filter((n) => n === 'x-a' || n === 'polluted'),
    plainObjectSees: ({})['x-a'] ?? null,
    payload,
  } };
}
"#;

/// Builds the module `source` with the SDK into the config's transforms as `<name>.wasm`.
pub(super) fn install_module(dir: &ConfigDir, name: &str, source: &str) {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/js-sdk");
    js_transforms(); // installs the SDK's packages
    let scratch = tempfile::tempdir().unwrap();
    let module = scratch.path().join(format!("{name}.mjs"));
    std::fs::write(&module, source).unwrap();
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    let output = Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(&module)
        .arg("-o")
        .arg(root.join(format!("{name}.wasm")))
        .output()
        .expect("run node (is Node.js installed?)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A real request with a repeated header (in two spellings), a header named `__proto__` and a
/// JSON body behind a UTF-8 byte-order mark: the transform sees the header joined, `__proto__`
/// as a plain own entry of an ordinary object, and the body parsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_and_body_reach_a_transform_as_the_runtime_builds_them() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "observe", "match": {"path": "observe"},
                "transform": {"module": "observer.wasm", "limits": js_limits(2000)}}]),
    );
    let dir = ConfigDir::new(&config);
    install_module(&dir, "observer", OBSERVER);
    let server = Hookgate::start_in(&dir);

    let sent = json!({"note": "behind a BOM", "n": [1, 2]});
    let mut body = b"\xEF\xBB\xBF".to_vec();
    body.extend(serde_json::to_vec(&sent).unwrap());
    let response = server
        .hook("/hooks/observe")
        .header("X-A", "1")
        .header("x-a", "2")
        .header("__proto__", "polluted")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, seen) = json_of(response).await;
    assert_eq!(status, 200, "{seen}");

    let data = |value: &str| {
        json!({"value": value, "writable": true, "enumerable": true, "configurable": true,
               "accessor": false})
    };
    assert_eq!(seen["xa"], data("1, 2"), "headers['x-a']: {seen}");
    assert_eq!(seen["proto"], data("polluted"), "headers.__proto__: {seen}");
    assert_eq!(seen["prototypeIsObject"], true, "{seen}");
    assert_eq!(seen["polluted"], json!([]), "Object.prototype: {seen}");
    assert_eq!(seen["plainObjectSees"], Value::Null, "{seen}");
    assert_eq!(seen["payload"], sent, "the body behind the BOM: {seen}");
}
