//! A module file over 64 MiB loads when a mapping grants the memory for it, and is refused before
//! it is read when none does (docs/transforms.md#limits). The module is a JavaScript component
//! made larger by a custom section: a heap snapshot with a large table grows it the same way.

use serde_json::{Value, json};

use super::js_transforms;
use crate::harness::*;

/// Just over the 64 MiB every configuration may load.
const SIZE: usize = (64 << 20) + 4096;

/// `component` with a custom section appended, `size` bytes in all (`size` is well over the
/// component, and its padding's length fits a 5-byte LEB128).
fn padded(component: &[u8], size: usize) -> Vec<u8> {
    const NAME: &[u8] = b"padding";
    let leb = |mut n: usize| -> Vec<u8> {
        // Always 5 bytes (continuation bits on the first four), so the size is exact.
        let mut out = Vec::with_capacity(5);
        for i in 0..5 {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if i < 4 { byte | 0x80 } else { byte });
        }
        out
    };
    let payload = size - component.len() - 1 - 5 - 1 - NAME.len();
    let mut bytes = component.to_vec();
    bytes.push(0); // custom section
    bytes.extend(leb(1 + NAME.len() + payload));
    bytes.push(NAME.len() as u8);
    bytes.extend(NAME);
    bytes.resize(size, 0);
    bytes
}

fn config(memory_bytes: Option<u64>) -> Value {
    let mut transform = json!({"module": "big.wasm", "config": {"mode": "count"}});
    if let Some(bytes) = memory_bytes {
        transform["limits"] = json!({"memoryBytes": bytes});
    }
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "big", "match": {"path": "big"}, "transform": transform}]),
    );
    config
}

/// `hookgate check` of `dir`'s configuration: whether it refused it, and what it printed.
fn check(dir: &ConfigDir) -> (bool, String) {
    let check = std::process::Command::new(binary())
        .args(["check", "--config"])
        .arg(dir.config_file())
        .output()
        .unwrap();
    let output = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    (!check.status.success(), output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_over_64_mib_loads_when_a_mapping_grants_the_memory() {
    let component = std::fs::read(js_transforms().join("js-globals.wasm")).unwrap();
    let dir = ConfigDir::new(&config(None));
    let transforms = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&transforms).unwrap();
    std::fs::write(transforms.join("big.wasm"), padded(&component, SIZE)).unwrap();

    let (refused, output) = check(&dir);
    assert!(refused, "{output}");
    assert!(
        output.contains(&format!(
            "big.wasm: {SIZE} bytes, over the 67108864-byte limit of a module file"
        )),
        "{output}"
    );

    dir.write(&config(Some(128 << 20)));
    let (refused, output) = check(&dir);
    assert!(!refused, "{output}");
    let server = Hookgate::start_in(&dir);
    let r = server
        .hook("/hooks/big")
        .json(&json!({"n": 7}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.wake_texts().await, ["count 1/1 (7)"]);
}
