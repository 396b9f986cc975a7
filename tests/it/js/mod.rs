//! Transforms written in JavaScript and TypeScript, built with `transforms/js-sdk`, through real
//! HTTP: the existing-style contract (an override, `null`, `undefined`, a throw), the two
//! examples, and the time limit on a loop; the input and `ctx` a function is called with in
//! `arguments`; the runtime itself in `runtime`; what a transform's
//! own bugs must not do to other senders or to the runtime in `hostile`; the headers and body a
//! transform receives in `received`; what a function's value is read or awaited as in `settling`;
//! a module over 64 MiB in `large_module`; a component built by an older SDK in `outdated`; the
//! WASI a component imports in `wiring`; the SDK's WASI preview 1 functions, in Node, in
//! `preview1`; every field of a merge, read where the contract puts it, in `every_field`.

mod arguments;
mod build;
mod every_field;
mod hostile;
mod large_module;
mod outdated;
mod partial;
mod preview1;
mod received;
mod runtime;
mod settling;
mod wiring;

use serde_json::{Value, json};

use crate::harness::*;
pub(crate) use build::js_transforms;

/// What the examples' README configures for JavaScript, the limits a mapping naming the module
/// gets: the runtime works in the 16 MiB default, and these leave room for large payloads.
fn js_limits(timeout_ms: u64) -> Value {
    json!({"memoryBytes": 64 * 1024 * 1024, "timeoutMs": timeout_ms})
}

fn behaviour(mode: &str, extra: Value) -> Value {
    let mut mapping = json!({
        "id": mode,
        "match": {"path": mode},
        "transform": {"module": "js-behaviours.wasm", "config": {"mode": mode},
                      "limits": js_limits(if mode == "loop" { 300 } else { 2000 })},
    });
    for (key, value) in extra.as_object().unwrap() {
        mapping[key] = value.clone();
    }
    mapping
}

fn start(mappings: Value, modules: &[&str]) -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    set(&mut config, "hooks.mappings", mappings);
    let dir = ConfigDir::new(&config);
    install_from(js_transforms(), &dir, modules);
    (Hookgate::start_in(&dir), dir)
}

/// One module in the existing style, one behaviour per mapping: each return value means what it
/// meant for the gateway the specification describes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_style_results_become_outcomes() {
    let (server, _dir) = start(
        json!([
            behaviour("override-wake", json!({})),
            behaviour("override-agent", json!({"deliver": false})),
            behaviour("null", json!({})),
            behaviour(
                "undefined",
                json!({"action": "wake", "textTemplate": "kept {{note}}"})
            ),
            behaviour("throw", json!({})),
            behaviour("loop", json!({})),
            behaviour("echo-headers", json!({})),
            behaviour("blank-text", json!({})),
            behaviour("blank-message", json!({})),
        ]),
        &["js-behaviours"],
    );
    let post = |mode: &str| {
        server
            .hook(&format!("/hooks/{mode}?page=2"))
            .header("x-demo", "yes")
            .json(&json!({"note": "n1"}))
            .send()
    };
    let failed = json!({"ok": false, "error": "hook mapping failed"});

    assert_eq!(json_of(post("override-wake").await.unwrap()).await.0, 200);
    let (status, reply) = json_of(post("override-agent").await.unwrap()).await;
    assert_eq!(status, 200, "{reply}");
    let run = server.run_of(&reply).await;
    assert!(run["message"].as_str().unwrap().contains("n1"), "{run}");
    assert_eq!(post("null").await.unwrap().status(), 204);
    assert_eq!(json_of(post("undefined").await.unwrap()).await.0, 200);
    assert_eq!(
        json_of(post("throw").await.unwrap()).await,
        (500, failed.clone())
    );
    assert_eq!(json_of(post("loop").await.unwrap()).await, (500, failed));
    assert_eq!(json_of(post("echo-headers").await.unwrap()).await.0, 200);
    // Blank is the client's 400, as in the OpenClaw gateway, not the transform's failure.
    for (mode, error) in [
        ("blank-text", "hook mapping requires text"),
        ("blank-message", "hook mapping requires message"),
    ] {
        assert_eq!(
            json_of(post(mode).await.unwrap()).await,
            (400, json!({"ok": false, "error": error}))
        );
    }

    let texts = server.wake_texts().await;
    assert_eq!(texts[0], "wake from override-wake: n1");
    assert_eq!(texts[1], "kept n1");
    assert!(
        texts[2].contains("x-demo") && texts[2].contains("/hooks/echo-headers?page=2"),
        "{texts:?}"
    );
    assert!(
        !texts[2].contains("authorization"),
        "credentials never reach a transform: {texts:?}"
    );
    let (_, log) = server.terminate();
    for (mode, cause) in [("throw", "error"), ("loop", "timeout")] {
        let line = log
            .lines()
            .find(|l| l.contains("transform failed") && l.contains(&format!("mapping={mode}")))
            .unwrap_or_else(|| panic!("no failure logged for {mode}:\n{log}"));
        assert!(
            line.contains(&format!("cause=\"{cause}\""))
                || line.contains(&format!("cause={cause}")),
            "{mode}: {line}"
        );
    }
    assert!(
        log.contains("thrown on purpose"),
        "the thrown message is logged"
    );
}

/// The JavaScript and the TypeScript example, as their README configures them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_and_typescript_examples_serve_real_requests() {
    let (server, _dir) = start(
        json!([
            {"id": "issues", "match": {"path": "issues"}, "deliver": false,
             "transform": {"module": "github-issues-digest.wasm", "limits": js_limits(2000)}},
            {"id": "contact", "match": {"path": "contact"}, "action": "wake",
             "textTemplate": "empty form",
             "transform": {"module": "form-to-wake.wasm", "config": {"form": "Contact"},
                           "limits": js_limits(2000)}},
        ]),
        &["github-issues-digest", "form-to-wake"],
    );
    let issue = json!({
        "action": "opened",
        "issue": {"number": 42, "title": "Crash on start", "body": "It crashes.",
                  "user": {"login": "octocat"}, "labels": [{"name": "bug"}],
                  "html_url": "https://github.com/o/r/issues/42"},
        "repository": {"full_name": "o/r"},
    });
    let (status, reply) = json_of(
        server
            .hook("/hooks/issues")
            .header("x-github-event", "issues")
            .json(&issue)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let message = server.run_of(&reply).await["message"]
        .as_str()
        .unwrap()
        .to_string();
    for part in ["42", "Crash on start", "octocat", "bug"] {
        assert!(message.contains(part), "{part:?} in {message:?}");
    }
    let ping = server
        .hook("/hooks/issues")
        .header("x-github-event", "ping")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(ping.status(), 204, "other events are skipped");

    let form = json!({"name": "Ada", "email": "ada@example.com"});
    let r = server
        .hook("/hooks/contact")
        .json(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = server
        .hook("/hooks/contact")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let texts = server.wake_texts().await;
    assert!(
        texts[0].contains("Contact") && texts[0].contains("name=Ada"),
        "{texts:?}"
    );
    assert_eq!(
        texts[1], "empty form",
        "an empty form keeps the mapping's action"
    );
}
