//! A transform's own bugs (transforms/fixtures/js/hostile.mjs) reach no other sender and do not
//! break the runtime: a payload that pollutes `Object.prototype` through a naive deep merge does
//! not steer the next sender's action on the kept instance, a call that failed leaves nothing to
//! the next one (docs/transforms.md#limits), a rejection whose description rejects again is
//! logged, not a crash of the runtime, and a result with millions of elements is read for its
//! fields alone.

use serde_json::{Value, json};

use super::start;
use crate::failures::record_of;
use crate::harness::*;

/// A mapping of the hostile fixture, named by its `.mjs` source: instances are kept between
/// calls, as for any JavaScript module.
fn hostile(id: &str, extra: Value) -> Value {
    let mut mapping = json!({
        "id": id, "match": {"path": id},
        "transform": {"module": "js-hostile.mjs", "config": {"mode": id}},
    });
    for (key, value) in extra.as_object().unwrap() {
        mapping[key] = value.clone();
    }
    mapping
}

/// The first sender's payload pollutes Object.prototype with a chat of its own; the second
/// sender's run, on the same kept instance, still goes where the mapping sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polluted_prototype_does_not_steer_the_next_sender() {
    let (server, _dir) = start(
        json!([hostile(
            "merge",
            json!({"action": "agent", "messageTemplate": "m", "channel": "telegram",
                   "to": "+1000", "deliver": false})
        )]),
        &["js-hostile"],
    );
    let pollution = json!({"sender": "mallory", "__proto__": {
        "channel": "discord", "to": "attacker-chat", "deliver": true, "model": "attacker/model",
    }});
    for (sender, payload) in [
        ("mallory", pollution),
        ("alice", json!({"sender": "alice"})),
        ("bob", json!({"sender": "bob"})),
    ] {
        let (status, reply) = json_of(
            server
                .hook("/hooks/merge")
                .json(&payload)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{sender}: {reply}");
        let run = server.run_of(&reply).await;
        let got = json!([run["message"], run["channel"], run["to"], run["deliver"]]);
        let mapping = json!([format!("from {sender}"), "telegram", "+1000", false]);
        assert_eq!(got, mapping, "{sender}: {run}");
        assert_ne!(run["model"], "attacker/model", "{sender}: {run}");
    }
}

/// A call that sets a global and then throws fails alone: its instance is dropped, so the next
/// call does not see the global; a call that succeeds keeps its instance, and the next sees what
/// it left (which shows the calls share an instance when nothing fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_leaves_nothing_to_the_next() {
    let (server, _dir) = start(json!([hostile("leak", json!({}))]), &["js-hostile"]);
    let post = |payload: Value| server.hook("/hooks/leak").json(&payload).send();
    assert_eq!(
        json_of(post(json!({"n": 1, "fail": true})).await.unwrap()).await,
        (500, json!({"ok": false, "error": "hook mapping failed"}))
    );
    for n in [2, 3] {
        assert_eq!(post(json!({"n": n})).await.unwrap().status(), 200, "{n}");
    }
    assert_eq!(
        server.wake_texts().await,
        [
            "call 2, left by an earlier call: nothing",
            "call 3, left by an earlier call: 2"
        ]
    );
}

/// A promise rejected with a value whose `toJSON` rejects another promise: the call succeeds,
/// both rejections are logged as warnings, and the runtime neither panics nor traps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_that_rejects_again_while_described_is_logged() {
    let (server, _dir) = start(json!([hostile("reenter", json!({}))]), &["js-hostile"]);
    for n in 0..2 {
        let r = server
            .hook("/hooks/reenter")
            .json(&json!({"n": n}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "call {n}");
    }
    assert_eq!(
        server.wake_texts().await,
        [
            "survived a re-entrant rejection (0)",
            "survived a re-entrant rejection (1)"
        ]
    );
    let (_, log) = server.terminate();
    for reason in [r#""outer rejection""#, "inner rejection"] {
        let warned = log
            .lines()
            .filter(|l| l.contains(&format!("nothing handled it: {reason}")))
            .filter(|l| l.contains("WARN") && l.contains("mapping=reenter"))
            .count();
        assert_eq!(warned, 2, "{reason} not warned once per call:\n{log}");
    }
    for crash in ["panicked", "transform failed"] {
        assert!(!log.contains(crash), "{crash}:\n{log}");
    }
}

/// A typed array of four million elements with fields of its own as the result: the adapter
/// reads its fields by name rather than listing its own names (four million indices, more than
/// the module's 64 MiB hold as strings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_with_millions_of_elements_is_read_for_its_fields() {
    let (server, _dir) = start(json!([hostile("array", json!({}))]), &["js-hostile"]);
    let r = server
        .hook("/hooks/array")
        .json(&json!({"length": 4_000_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(server.wake_texts().await, ["an array of 4000000"]);
}

/// A call that fills its instance's memory to the cap and then needs the runtime's Rust code to
/// allocate: Rust prints "memory allocation of N bytes failed" and aborts. The operator sees that
/// message in the log and the memory limit in the request record, not a stack overflow: the
/// message's write allocates nothing (the WASI shim lowers its result into a static buffer), so it
/// cannot fail for want of memory and print its own failure again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_at_its_memory_cap_is_reported_as_a_memory_breach() {
    let (server, _dir) = exhausted(json!({"length": 4_000_000})).await;
    let (_, log) = server.terminate();
    assert!(
        log.lines().any(|l| l.contains("mapping=exhaust")
            && l.contains("stream=\"stderr\"")
            && l.contains("memory allocation of")),
        "no memory message from the runtime:\n{log}"
    );
    assert!(!log.contains("stack overflow"), "{log}");
}

/// The same breach when the text is not ASCII: QuickJS converts it to UTF-8 with an allocation of
/// its own, which fails at the cap, and the runtime returns QuickJS's "out of memory" as the call's
/// error. The call hit the cap all the same: the record says so, not that the transform erred.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_text_cannot_be_converted_at_the_cap_is_a_memory_breach() {
    exhausted(json!({"length": 4_000_000, "letter": "\u{e9}"})).await;
}

/// The same breach on a kept instance whose earlier call emptied arenas of every small size,
/// which the runtime's QuickJS keeps for the next call rather than freeing
/// (docs/performance.md, "QuickJS's own costs"): at the cap it hands them back before its own
/// allocation fails, so the call still ends in the runtime's allocation, not in an exception.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_at_its_cap_after_arenas_were_kept_is_a_memory_breach() {
    let (server, _dir) = start(json!([hostile("exhaust", json!({}))]), &["js-hostile"]);
    let warm = server
        .hook("/hooks/exhaust")
        .json(&json!({"warm": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), 200);
    assert_eq!(server.wake_texts().await, ["warm 128"]);
    exhaust(&server, json!({"length": 4_000_000})).await;
}

/// A kept instance holds none of its memory for the names senders chose: the shapes the
/// runtime's QuickJS keeps for the next call hold their keys' atoms (docs/performance.md,
/// "QuickJS's own costs"), so only shapes with short keys are kept. After 40 calls whose payloads
/// each have a 200 KB key of their own, a call takes as much memory before its cap as on an
/// instance that saw none (the first measure's, replaced since: it reached its cap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_keys_of_earlier_calls_hold_no_memory_of_a_kept_instance() {
    let (server, _dir) = start(json!([hostile("hoard", json!({}))]), &["js-hostile"]);
    let before = hoarded(&server).await;
    for n in 0..40 {
        let key = format!("{n}{}", "k".repeat(200_000));
        let response = server
            .hook("/hooks/hoard")
            .json(&json!({ key: 1 }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "call {n}");
    }
    let after = hoarded(&server).await;
    assert!(
        before.abs_diff(after) < 2048,
        "a call could take {before} KiB, after 40 long keys {after} KiB"
    );
}

/// How many KiB a call of `server`'s `hoard` mapping took before its instance's cap.
async fn hoarded(server: &Hookgate) -> u64 {
    let response = server
        .hook("/hooks/hoard")
        .json(&json!({"measure": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let texts = server.wake_texts().await;
    texts
        .last()
        .and_then(|text| text.strip_prefix("hoarded "))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or_else(|| panic!("no measure in {texts:?}"))
}

/// Sends `payload` to the `exhaust` mode and checks that the sender got the terse 500 and the
/// request record names the breached memory limit; the server is returned for its log.
async fn exhausted(payload: Value) -> (Hookgate, ConfigDir) {
    let (server, dir) = start(json!([hostile("exhaust", json!({}))]), &["js-hostile"]);
    exhaust(&server, payload).await;
    (server, dir)
}

/// Sends `payload` to `server`'s `exhaust` mapping and checks that the sender got the terse 500
/// and the request record names the breached memory limit.
async fn exhaust(server: &Hookgate, payload: Value) {
    let response = server
        .hook("/hooks/exhaust")
        .json(&payload)
        .send()
        .await
        .unwrap();
    let record = record_of(server, &response).await;
    assert_eq!(
        json_of(response).await,
        (500, json!({"ok": false, "error": "hook mapping failed"}))
    );
    assert_eq!(record["transform"]["failure"], "memory", "{record}");
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("memory limit of 67108864 bytes exceeded"),
        "{record}"
    );
}
