//! A mapping's own `transform.limits` over `hooks.transformLimits`, and `transform.reuse`.

use serde_json::{Value, json};

use crate::harness::*;

fn allocate(path: &str, mib: u64, limits: Option<Value>) -> Value {
    let mut transform =
        json!({"module": "hostile.wasm", "config": {"mode": "allocate", "mib": mib}});
    if let Some(limits) = limits {
        transform["limits"] = limits;
    }
    json!({"id": path, "match": {"path": path}, "transform": transform})
}

/// With every call held to 8 MiB, the mapping allowed 48 MiB can hold 24 at once, while the same
/// transform under the global cap fails with a memory breach, and a later small call still works.
#[tokio::test]
async fn a_mapping_memory_cap_raises_its_own_calls_only() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"memoryBytes": 8 * 1024 * 1024}),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([
            allocate(
                "roomy",
                24,
                Some(json!({"memoryBytes": 48 * 1024 * 1024, "timeoutMs": 5000}))
            ),
            allocate("cramped", 24, None),
            allocate("small", 1, None),
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let post = |path: &'static str| {
        server
            .hook(&format!("/hooks/{path}"))
            .json(&json!({}))
            .send()
    };

    assert_eq!(post("roomy").await.unwrap().status(), 200);
    let (status, body) = json_of(post("cramped").await.unwrap()).await;
    assert_eq!(
        (status, body),
        (500, json!({"ok": false, "error": "hook mapping failed"}))
    );
    assert_eq!(post("small").await.unwrap().status(), 200);
    assert_eq!(
        server.wake_texts().await,
        ["allocated 24 MiB", "allocated 1 MiB"]
    );
    let (_, log) = server.terminate();
    assert!(
        log.lines()
            .any(|l| l.contains("mapping=cramped") && l.contains("memory")),
        "the cramped call failed on its memory cap: {log}"
    );
}

#[test]
fn mapping_limits_are_checked_like_the_global_ones() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([allocate(
            "a",
            1,
            Some(json!({"timeoutMs": 0, "maxConcurrent": 4}))
        )]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let (status, output) = check_in(&dir);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].transform.limits.timeoutMs: must be greater than 0",
        "hooks.mappings[0].transform.limits.maxConcurrent: bounds all transforms together; \
         set it in hooks.transformLimits",
    ] {
        assert!(output.contains(expected), "{expected:?} in:\n{output}");
    }
    set(
        &mut config,
        "hooks.mappings",
        json!([allocate(
            "a",
            1,
            Some(json!({"memoryBytes": 1, "outputBytes": 10, "unknown": 1}))
        )]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("hooks.mappings[0].transform.limits.unknown: unknown field"),
        "{output}"
    );
}

fn counter(id: &str, reuse: Option<u32>) -> Value {
    let mut transform = json!({"module": "hostile.wasm", "config": {"mode": "counter"}});
    if let Some(calls) = reuse {
        transform["reuse"] = json!(calls);
    }
    json!({"id": id, "match": {"path": id}, "transform": transform})
}

/// An instance keeps its state for exactly `reuse` calls of its own mapping; without `reuse`
/// every call starts fresh; two mappings of one module never share an instance.
#[tokio::test]
async fn reused_instances_serve_their_own_mapping_for_reuse_calls() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            counter("fresh", None),
            counter("reused", Some(3)),
            counter("other", Some(3))
        ]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    // `other` between the two `fresh` calls, so that the second `fresh call 1` is not coalesced
    // into the first.
    for path in [
        "reused", "reused", "other", "reused", "reused", "fresh", "other", "fresh",
    ] {
        let response = server
            .hook(&format!("/hooks/{path}"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    assert_eq!(
        server.wake_texts().await,
        [
            "reused call 1",
            "reused call 2",
            "other call 1",
            "reused call 3",
            "reused call 1",
            "fresh call 1",
            "other call 2",
            "fresh call 1",
        ]
    );
    let mut zero = base_config();
    set(&mut zero, "hooks.mappings", json!([counter("x", Some(0))]));
    let (status, output, _dir) = check(&zero);
    assert!(!status.success());
    assert!(
        output.contains("hooks.mappings[0].transform.reuse: must be greater than 0"),
        "{output}"
    );
}

#[test]
fn two_mappings_may_not_share_an_id() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([counter("mapping-2", Some(3)), counter("x", Some(3))]),
    );
    // Without its id the second mapping is `mapping-2` by default: the id the first one took.
    config["hooks"]["mappings"][1]
        .as_object_mut()
        .unwrap()
        .remove("id");
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("hooks.mappings[1].id: is already the id of hooks.mappings[0]"),
        "{output}"
    );
}

/// An instance whose call trapped is dropped: the next call starts on a fresh one.
#[tokio::test]
async fn a_reused_instance_that_traps_is_not_reused() {
    let mut config = base_config();
    let mut flaky = counter("flaky", Some(10));
    flaky["transform"]["config"]["mode"] = json!("flaky");
    set(&mut config, "hooks.mappings", json!([flaky]));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = server
            .hook("/hooks/flaky")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 500, 200, 500]);
    // The third call's text repeats the first's (a fresh instance counts from 1 again), so it
    // is coalesced into that pending event.
    assert_eq!(server.wake_texts().await, ["flaky call 1"]);
}

/// Limits hold on reused instances too: a call that writes more than its `logBytes` fails even
/// though the reused store's pipes had room, and an instance whose memory growth was refused is
/// not reused even when its guest carried on.
#[tokio::test]
async fn reused_instances_keep_the_output_and_memory_limits() {
    let mut config = base_config();
    let mut chatty = counter("chatty", Some(10));
    chatty["transform"]["config"] = json!({"mode": "chatty", "bytes": 3000});
    chatty["transform"]["limits"] = json!({"logBytes": 1024});
    let mut hungry = counter("hungry", Some(10));
    hungry["transform"]["config"]["mode"] = json!("hungry");
    set(&mut config, "hooks.mappings", json!([chatty, hungry]));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let post = |path: &'static str| server.hook(path).json(&json!({})).send();

    let (status, body) = json_of(post("/hooks/chatty").await.unwrap()).await;
    assert_eq!(
        (status, body),
        (500, json!({"ok": false, "error": "hook mapping failed"}))
    );
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let (status, body) = json_of(post("/hooks/hungry").await.unwrap()).await;
        assert_eq!(status, 200);
        outcomes.push(body["eventOutcome"].clone());
    }
    // Both calls said "call 1": the second ran on a fresh instance, and its text, repeating the
    // first, was coalesced.
    assert_eq!(outcomes, [json!("queued"), json!("coalesced")]);
    assert_eq!(server.wake_texts().await, ["hungry call 1, refused true"]);
    let (_, log) = server.terminate();
    assert!(
        log.lines()
            .any(|l| l.contains("mapping=chatty") && l.contains("output")),
        "{log}"
    );
}

/// Idle reused instances keep their last fiber stack: with the pool sized for calls alone, four
/// instances waiting on four reuse mappings took every stack, and fresh calls then failed with a
/// 500 (`maximum concurrent limit of 4 for fibers reached`).
#[tokio::test]
async fn idle_reused_instances_leave_stacks_for_fresh_calls() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"maxConcurrent": 4}),
    );
    let mut mappings: Vec<Value> = (1..=4)
        .map(|i| counter(&format!("reused-{i}"), Some(100)))
        .collect();
    mappings.push(counter("fresh", None));
    set(&mut config, "hooks.mappings", Value::Array(mappings));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    for i in 1..=4 {
        let response = server
            .hook(&format!("/hooks/reused-{i}"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "reused-{i}");
    }
    for round in 0..3 {
        let calls = (0..4).map(|_| server.hook("/hooks/fresh").json(&json!({})).send());
        for response in futures_util::future::join_all(calls).await {
            let response = response.unwrap();
            let status = response.status();
            assert_eq!(
                status,
                200,
                "round {round}: {}",
                response.text().await.unwrap()
            );
        }
    }
    // The idle instances are still there to serve their mappings.
    let response = server
        .hook("/hooks/reused-1")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        server
            .wake_texts()
            .await
            .contains(&"reused-1 call 2".to_string())
    );
}

/// When no call slot frees up for ten times the mapping's time limit (at least a second), the
/// request is refused with 503 and `Retry-After`, which providers retry, rather than queued
/// without end or failed as if the transform had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_finds_no_slot_in_time_is_told_to_retry() {
    let mut config = base_config();
    let sleep = json!({"id": "sleep", "match": {"path": "sleep"},
                       "transform": {"module": "hostile.wasm", "config": {"mode": "sleep"}}});
    set(&mut config, "hooks.mappings", json!([sleep]));
    // One slot for the mapping (half of two); each call holds it for its 150 ms limit, so of
    // sixteen calls at once the last ones wait longer than 1.5 s.
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"timeoutMs": 150, "maxConcurrent": 2}),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let calls: Vec<_> = (0..16)
        .map(|_| tokio::spawn(server.hook("/hooks/sleep").json(&json!({})).send()))
        .collect();
    let mut busy = 0;
    for call in calls {
        let response = call.await.unwrap().unwrap();
        match response.status().as_u16() {
            500 => {}
            503 => {
                busy += 1;
                assert_eq!(response.headers()["retry-after"], "1");
                assert_eq!(
                    response.json::<Value>().await.unwrap(),
                    json!({"ok": false, "error": "transforms busy; retry"})
                );
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(busy > 0, "some calls waited past the slot bound");
    let (_, log) = server.terminate();
    assert!(
        log.contains("cause=\"busy\"") || log.contains("cause=busy"),
        "{log}"
    );
}
