//! A hook transform written for the OpenClaw gateway (transforms/fixtures/js/partial.mjs), named
//! by its `.mjs` file as an openclaw.json names it and run as the component built beside it: what
//! it returns is merged into the mapping's action as OpenClaw merges it (the outcomes OpenClaw
//! 2026.9.6 gives for the same results, recorded in docs/transforms.md#partial-overrides), its
//! `url` is a `URL`, and `transform.export` picks the function. tests/it/parity.rs sends the same
//! requests to OpenClaw itself.

use serde_json::{Value, json};

use super::build::js_transforms;
use crate::harness::*;

fn start() -> (Hookgate, ConfigDir) {
    let mut config = base_config();
    // No transform.limits: a mapping naming a JavaScript module gets 64 MiB and 1 s by default.
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "partial", "match": {"path": "partial"}, "action": "agent", "name": "Partial",
             "messageTemplate": "base {{case}}", "channel": "telegram", "to": "+1000",
             "model": "base/model", "transform": {"module": "partial.mjs"}},
            {"id": "named", "match": {"path": "named"}, "action": "agent", "messageTemplate": "m",
             "transform": {"module": "partial.mjs", "export": "named"}},
            {"id": "not-a-function", "match": {"path": "not-a-function"}, "action": "agent",
             "messageTemplate": "m", "transform": {"module": "partial.mjs", "export": "notAFunction"}},
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_from(js_transforms(), &dir, &["partial"]);
    (Hookgate::start_in(&dir), dir)
}

async fn send(server: &Hookgate, path: &str, case: &str) -> (u16, Value) {
    let response = server
        .hook(path)
        .json(&json!({"case": case}))
        .send()
        .await
        .unwrap();
    if response.status() == 204 {
        return (204, Value::Null);
    }
    json_of(response).await
}

/// The run a case made: it must have been accepted.
async fn run(server: &Hookgate, case: &str) -> Value {
    let (status, reply) = send(server, "/hooks/partial", case).await;
    assert_eq!(status, 200, "{case}: {reply}");
    server.run_of(&reply).await
}

fn refused(error: &str) -> (u16, Value) {
    (400, json!({"ok": false, "error": error}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_overrides_merge_as_the_openclaw_gateway_merges() {
    let (server, _dir) = start();

    // One field changed; everything else is the mapping's, templates rendered.
    let to = run(&server, "to").await;
    assert_eq!(
        (
            &to["to"],
            &to["channel"],
            &to["model"],
            &to["message"],
            &to["hookName"]
        ),
        (
            &json!("+1555"),
            &json!("telegram"),
            &json!("base/model"),
            &json!("base to"),
            &json!("Partial")
        )
    );
    assert_eq!(run(&server, "undeliver").await["deliver"], false);
    assert_eq!(run(&server, "model").await["model"], "x/y");
    // Values of the wrong type are ignored, as OpenClaw ignores them; the right ones apply.
    let mixed = run(&server, "wrong-types").await;
    assert_eq!(
        (
            &mixed["message"],
            &mixed["deliver"],
            &mixed["timeoutSeconds"],
            &mixed["wakeMode"]
        ),
        (
            &json!("base wrong-types"),
            &json!(true),
            &json!(7),
            &json!("next-heartbeat")
        )
    );
    for case in ["string", "empty", "undefined-case"] {
        assert_eq!(run(&server, case).await["message"], format!("base {case}"));
    }
    // A transform's key is external input unless it says it is its own.
    assert_eq!(
        send(&server, "/hooks/partial", "key").await,
        refused(
            "sessionKey is disabled for externally supplied hook payload values; set hooks.allowRequestSessionKey=true to enable"
        )
    );
    assert_eq!(run(&server, "static-key").await["sessionKey"], "hook:t3");
    let generated = run(&server, "blank-key").await;
    assert!(
        generated["sessionKey"]
            .as_str()
            .unwrap()
            .starts_with("hook:"),
        "{generated}"
    );

    // Checks after the merge are the client's 400s.
    assert_eq!(
        send(&server, "/hooks/partial", "blank-message").await,
        refused("hook mapping requires message")
    );
    assert_eq!(
        send(&server, "/hooks/partial", "to-wake").await,
        refused("hook mapping requires text")
    );
    assert_eq!(
        send(&server, "/hooks/partial", "weird-session-mode").await,
        refused("hook mapping sessionMode must be isolated or persistent")
    );
    // A change of kind.
    assert_eq!(
        send(&server, "/hooks/partial", "to-wake-text").await,
        (
            200,
            json!({"ok": true, "mode": "next-heartbeat", "eventOutcome": "queued"})
        )
    );
    assert_eq!(send(&server, "/hooks/partial", "null").await.0, 204);

    // The context: url is a URL of the request target, against http://localhost.
    let (status, reply) = json_of(
        server
            .hook("/hooks/partial?x=1&x=2")
            .json(&json!({"case": "url"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        server.run_of(&reply).await["message"],
        "true http://localhost/hooks/partial?x=1&x=2 1+2 partial"
    );

    // transform.export picks the function; one that is not a function fails the request.
    assert_eq!(
        send(&server, "/hooks/named", "n").await,
        (
            200,
            json!({"ok": true, "mode": "next-heartbeat", "eventOutcome": "queued"})
        )
    );
    let failed = (500, json!({"ok": false, "error": "hook mapping failed"}));
    assert_eq!(send(&server, "/hooks/not-a-function", "n").await, failed);
    assert_eq!(send(&server, "/hooks/partial", "throw").await, failed);

    let texts = server.wake_texts().await;
    assert_eq!(texts, ["switched to a wake", "named export: n"]);
    let (_, log) = server.terminate();
    for expected in [
        "transform result: message ignored: expected a string, got 5",
        "transform result: deliver ignored: expected true or false, got \"no\"",
        "the module has no function export \\\"notAFunction\\\" (transform.export)",
    ] {
        assert!(
            log.contains(expected) || log.contains(&expected.replace("\\\"", "\"")),
            "{expected}\nnot in:\n{log}"
        );
    }
}
