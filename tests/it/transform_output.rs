//! What a transform writes to stdout and stderr reaches the server log, tagged with its mapping
//! id, once, also when its call ends without returning: stopped at its time limit inside a host
//! call (its future dropped with its store), or its instantiation failing.

use serde_json::{Value, json};

use crate::harness::*;

fn hostile_mapping(id: &str, mode: &str, reuse: u32) -> Value {
    json!({"id": id, "match": {"path": id},
           "transform": {"module": "hostile.wasm", "config": {"mode": mode}, "reuse": reuse}})
}

/// The log lines of `log` that carry the guest's `text` as its output.
fn output_lines<'a>(log: &'a str, text: &str) -> Vec<&'a str> {
    let wanted = format!("transform output: {text}");
    log.lines().filter(|l| l.contains(&wanted)).collect()
}

fn assert_failed_with(log: &str, mapping: &str, cause: &str) {
    let failed = log
        .lines()
        .find(|l| l.contains("transform failed") && l.contains(&format!("mapping={mapping} ")));
    let failed = failed.unwrap_or_else(|| panic!("no failure logged for {mapping}:\n{log}"));
    assert!(
        failed.contains(&format!("cause=\"{cause}\""))
            || failed.contains(&format!("cause={cause}")),
        "{mapping}: {failed}"
    );
}

/// A guest that prints, then blocks in `wasi:io/poll` past its limit, is stopped where no epoch
/// reaches it: its call's future is dropped, store and instance with it. What it printed before
/// is in the log all the same, on a fresh instance and on a kept one.
#[tokio::test]
async fn a_call_stopped_inside_a_host_call_keeps_what_it_wrote() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            hostile_mapping("fresh", "sleep", 1),
            hostile_mapping("kept", "sleep", 4)
        ]),
    );
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"timeoutMs": 150}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    for id in ["fresh", "kept"] {
        let response = server.hook(&format!("/hooks/{id}")).json(&json!({})).send();
        let (status, body) = json_of(response.await.unwrap()).await;
        assert_eq!(
            (status, body),
            (500, json!({"ok": false, "error": "hook mapping failed"})),
            "{id}"
        );
    }
    let (_, log) = server.terminate();
    for id in ["fresh", "kept"] {
        assert_failed_with(&log, id, "timeout");
        for text in [format!("{id} going to sleep"), format!("{id} asleep")] {
            assert_eq!(output_lines(&log, &text).len(), 1, "{text}:\n{log}");
        }
    }
}

/// A component whose instantiation prints and then traps: what it printed is in the log, once,
/// whether its mapping takes a fresh instance per call or keeps them.
#[tokio::test]
async fn a_failed_instantiation_keeps_what_it_wrote() {
    let failing = |id: &str, reuse: u32| {
        json!({"id": id, "match": {"path": id},
               "transform": {"module": "failing_start.wasm", "reuse": reuse}})
    };
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([failing("fresh", 1), failing("kept", 4)]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["failing_start"]);
    let server = Hookgate::start_in(&dir);
    for id in ["fresh", "kept"] {
        let response = server.hook(&format!("/hooks/{id}")).json(&json!({})).send();
        assert_eq!(response.await.unwrap().status(), 500, "{id}");
    }
    let (_, log) = server.terminate();
    for id in ["fresh", "kept"] {
        assert_failed_with(&log, id, "trap");
        for text in ["failing-start: starting up", "failing-start: cannot start"] {
            let lines: Vec<_> = output_lines(&log, text)
                .into_iter()
                .filter(|l| l.contains(&format!("mapping={id} ")))
                .collect();
            assert_eq!(lines.len(), 1, "{id}: {text}:\n{log}");
        }
    }
}
