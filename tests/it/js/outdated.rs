//! docs/transforms.md "JavaScript components built by an older SDK": a component built by the SDK
//! before it recorded its adapter revision (a real build, with that SDK's build.mjs and
//! adapter.js) is named by `check` and in `serve`'s log with the command that rebuilds it, and
//! gets a fresh instance per call; a component of this SDK is neither named nor changed.

use serde_json::json;

use super::build::unrevised_js_transform;
use super::{js_limits, js_transforms};
use crate::harness::*;

/// The old component twice (named by its source, and as the `.wasm` with its source beside
/// it) and the same module built by this SDK; the mappings are wakes of what each returns, and
/// each asks for its instances to be kept.
fn config_dir() -> ConfigDir {
    let mapping = |id: &str, module: &str| {
        json!({"id": id, "match": {"path": id}, "action": "wake",
               "transform": {"module": module, "limits": js_limits(2000), "reuse": 1000}})
    };
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            mapping("old", "old-counter.mjs"),
            mapping("old-wasm", "old-counter.wasm"),
            mapping("new", "js-counter.wasm"),
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_from(js_transforms(), &dir, &["js-counter"]);
    let transforms = dir.path().join("hooks/transforms");
    std::fs::copy(
        unrevised_js_transform().join("js-counter-unrevised.wasm"),
        transforms.join("old-counter.wasm"),
    )
    .unwrap();
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/transforms/fixtures/js/counter.mjs"
    );
    std::fs::copy(source, transforms.join("old-counter.mjs")).unwrap();
    dir
}

/// What `check` and `serve` say of the old component under `key`: the file and the command.
fn expected(dir: &ConfigDir, key: &str) -> String {
    let transforms = dir.path().join("hooks/transforms");
    format!(
        "{key}: {} was built by an older hookgate JavaScript SDK (no adapter revision; this hookgate's is 1)",
        transforms.join("old-counter.wasm").display()
    )
}

fn rebuild(dir: &ConfigDir) -> String {
    let source = dir.path().join("hooks/transforms/old-counter.mjs");
    format!("Rebuild it: hookgate transform build {}", source.display())
}

#[test]
fn check_names_each_old_component_and_the_command_that_rebuilds_it() {
    let dir = config_dir();
    let (status, output) = check_in(&dir);
    assert!(status.success(), "{output}");
    let warnings: Vec<&str> = output
        .lines()
        .filter(|line| {
            line.starts_with("warning: ") && line.contains("older hookgate JavaScript SDK")
        })
        .collect();
    assert_eq!(warnings.len(), 2, "{output}");
    for (warning, i) in warnings.iter().zip([0, 1]) {
        let key = format!("hooks.mappings[{i}].transform.module");
        assert!(
            warning.starts_with(&format!("warning: {}", expected(&dir, &key))),
            "{warning}"
        );
        assert!(warning.ends_with(&rebuild(&dir)), "{warning}");
    }
    let named = |line: &&str| line.starts_with("warning: ") && line.contains("js-counter");
    assert!(!output.lines().any(|line| named(&line)), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_it_in_its_log_and_keeps_no_instance_of_it() {
    let dir = config_dir();
    let server = Hookgate::start_in(&dir);
    for (n, path) in ["/hooks/old", "/hooks/old", "/hooks/new", "/hooks/new"]
        .iter()
        .enumerate()
    {
        let (status, answer) = server.hook_json(path, &json!({"n": n})).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    // The old component's calls each had a fresh instance; this SDK's shared one.
    assert_eq!(
        server.wake_texts().await,
        ["0: call 1", "1: call 1", "2: call 1", "3: call 2"]
    );
    let (_, status) = server.api_json("/api/config").await;
    let older: Vec<(&str, bool)> = status["transforms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["module"].as_str().unwrap(), t["builtByOlderSdk"] == true))
        .collect();
    assert_eq!(
        older,
        [
            ("js-counter.wasm", false),
            ("old-counter.mjs", true),
            ("old-counter.wasm", true)
        ]
    );
    let (_, log) = server.terminate();
    let key = "hooks.mappings[0].transform.module";
    let line = log
        .lines()
        .find(|line| line.contains(key) && line.contains("older hookgate JavaScript SDK"))
        .unwrap_or_else(|| panic!("no warning for {key}:\n{log}"));
    assert!(line.contains("WARN"), "{line}");
    let path = dir.path().join("hooks/transforms/old-counter.wasm");
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(line.contains(&rebuild(&dir)), "{line}");
    assert!(!log.contains("js-counter.wasm was built"), "{log}");
}
