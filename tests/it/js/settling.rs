//! How the runtime takes what a transform's function returned (transforms/fixtures/js/settling.mjs,
//! docs/transforms.md#writing-one-in-javascript-or-typescript): a plain value is read at once, and
//! whatever an `await` would change (a promise, a thenable, a job queued before the value was
//! returned, even one a call before left) is awaited as an async function awaits it; a thenable's
//! `then` is read once, the result's fields after it, and what a getter, a `then` or an async
//! function throws fails the call with its message.

use serde_json::{Value, json};

use super::start;

/// A mapping of the fixture: named as `.mjs`, its instance is kept between calls; as `.wasm`,
/// each call has a fresh one.
fn settling(mode: &str, module: &str) -> Value {
    json!({"id": mode, "match": {"path": mode}, "action": "wake", "textTemplate": "template",
           "transform": {"module": module, "config": {"mode": mode}}})
}

/// The fields the runtime tests by name on an array, in its order.
const FIELDS: &str = "kind text message mode wakeMode name agentId sessionKey sessionMode channel \
                      to model thinking deliver allowUnsafeExternalContent sessionKeySource \
                      timeoutSeconds status contentType body";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_read_at_once_and_values_awaited_give_what_await_gives() {
    let modes = [
        "sync",
        "async",
        "thenable",
        "queued",
        "then-queues",
        "proxy",
        "array-proxy",
    ];
    let mut mappings: Vec<Value> = modes
        .iter()
        .map(|mode| settling(mode, "js-settling.mjs"))
        .collect();
    mappings.push(settling("polluted", "js-settling.wasm"));
    mappings.push(settling("leave-job", "js-settling.mjs"));
    let (server, _dir) = start(json!(mappings), &["js-settling"]);
    for (n, mode) in modes.iter().chain(&["polluted"]).enumerate() {
        let (status, reply) = server
            .hook_json(&format!("/hooks/{mode}"), &json!({"n": n}))
            .await;
        assert_eq!(status, 200, "{mode}: {reply}");
    }
    for n in 0..2 {
        let (status, reply) = server.hook_json("/hooks/leave-job", &json!({"n": n})).await;
        assert_eq!(status, 200, "leave-job {n}: {reply}");
    }
    let tested: Vec<String> = FIELDS
        .split_whitespace()
        .map(|f| format!("has {f}"))
        .collect();
    assert_eq!(
        server.wake_texts().await,
        [
            "sync 0".to_string(),
            "async 1".into(),
            "thenable 2: then read 1 time(s), through the module's Reflect.apply 0".into(),
            "changed by a queued job 3".into(),
            "changed by a job its then queued 4".into(),
            "proxy 5: get then, ownKeys, get kind, get text".into(),
            format!(
                "array proxy 6: get then, {}, get kind, get text",
                tested.join(", ")
            ),
            "polluted 7: then read 1 time(s), kind inherited".into(),
            "leave-job 0".into(),
            "leave-job 1: a job the call before left ran first".into(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throw_while_settling_or_reading_fails_the_call_with_its_message() {
    let modes = ["async-throws", "then-throws", "getter-throws"];
    let mappings: Vec<Value> = modes
        .iter()
        .map(|mode| settling(mode, "js-settling.mjs"))
        .collect();
    let (server, _dir) = start(json!(mappings), &["js-settling"]);
    let failed = (500, json!({"ok": false, "error": "hook mapping failed"}));
    for mode in modes {
        let answer = server
            .hook_json(&format!("/hooks/{mode}"), &json!({"n": 0}))
            .await;
        assert_eq!(answer, failed, "{mode}");
    }
    // The instance serves on after each.
    let (status, _) = server
        .hook_json("/hooks/getter-throws", &json!({"n": 1}))
        .await;
    assert_eq!(status, 500);
    assert!(server.wake_texts().await.is_empty());
    let (_, log) = server.terminate();
    for (mode, message) in [
        ("async-throws", "an async function threw 0"),
        ("then-throws", "a then threw 0"),
        ("getter-throws", "a getter threw 0"),
        ("getter-throws", "a getter threw 1"),
    ] {
        let failure = log.lines().find(|l| {
            l.contains("transform failed")
                && l.contains(&format!("mapping={mode}"))
                && l.contains(message)
        });
        assert!(
            failure.is_some(),
            "{mode}: no failure naming {message:?}:\n{log}"
        );
    }
}
