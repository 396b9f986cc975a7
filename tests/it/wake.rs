//! docs/http-contract.md: `POST {prefix}/wake`.

use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn wake_appends_an_untrusted_system_event_and_answers_the_mode() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .hook("/hooks/wake")
        .json(&json!({"text": "  Ping  "}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!({"ok": true, "mode": "now", "eventOutcome": "queued"})
        )
    );
    let events = server.events().await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(event["seq"], 1);
    assert_eq!(event["kind"], "system");
    assert_eq!(event["text"], "Ping");
    assert_eq!(event["trusted"], false);
    assert_eq!(event["source"], "hook:wake");
    let at = event["at"].as_str().unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{at}");
}

#[tokio::test]
async fn wake_text_required() {
    let (server, _dir) = Hookgate::start(&base_config());
    for body in [
        json!({}),
        json!({"text": "   "}),
        json!({"text": 3}),
        json!([]),
    ] {
        let r = server.hook("/hooks/wake").json(&body).send().await.unwrap();
        assert_eq!(
            json_of(r).await,
            (400, json!({"ok": false, "error": "text required"}))
        );
    }
    assert!(server.events().await.is_empty());
}

#[tokio::test]
async fn wake_mode_next_heartbeat_only_for_the_exact_string() {
    let (server, _dir) = Hookgate::start(&base_config());
    for (i, (mode, expected)) in [
        (json!("next-heartbeat"), "next-heartbeat"),
        (json!("NEXT-HEARTBEAT"), "now"),
        (json!(true), "now"),
        (json!("later"), "now"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = server
            .hook("/hooks/wake")
            .json(&json!({"text": format!("t{i}"), "mode": mode}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            json_of(r).await,
            (
                200,
                json!({"ok": true, "mode": expected, "eventOutcome": "queued"})
            )
        );
    }
}

#[tokio::test]
async fn wake_events_go_to_the_default_agent_main_session_in_commit_order() {
    let mut config = base_config();
    set(
        &mut config,
        "agents.list",
        json!([{"id": "ops"}, {"id": "Home Bot", "default": true}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    for i in 0..5 {
        let r = server
            .hook("/hooks/wake")
            .json(&json!({"text": format!("e{i}")}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    assert_eq!(server.event_texts().await, ["e0", "e1", "e2", "e3", "e4"]);
    let (_, page) = json_of(
        server
            .api("/api/sessions/main/events?after=2&limit=2")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let seqs: Vec<_> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4]);
}

#[tokio::test]
async fn concurrent_wakes_are_all_committed_once() {
    let (server, _dir) = Hookgate::start(&base_config());
    let sends = (0..64).map(|i| {
        server
            .hook("/hooks/wake")
            .json(&json!({"text": format!("c{i}")}))
            .send()
    });
    for r in futures_join(sends).await {
        assert_eq!(r.unwrap().status(), 200);
    }
    let (_, body) = json_of(
        server
            .api("/api/sessions/main/events?limit=1000")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let mut texts: Vec<_> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    texts.sort();
    let mut expected: Vec<_> = (0..64).map(|i| format!("c{i}")).collect();
    expected.sort();
    assert_eq!(texts, expected);
}

/// Runs futures concurrently on the test's runtime.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

/// A wake whose text repeats the newest pending event of the session is `coalesced` and stores
/// nothing; an older pending event of that text does not count (as in the OpenClaw gateway).
#[tokio::test]
async fn a_repeated_wake_is_coalesced_into_the_newest_pending_event() {
    let (server, _dir) = Hookgate::start(&base_config());
    let mut outcomes = Vec::new();
    for text in ["A", " A ", "B", "A", "a"] {
        let r = server
            .hook("/hooks/wake")
            .json(&json!({"text": text, "mode": "next-heartbeat"}))
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(r).await;
        assert_eq!(status, 200, "{body}");
        outcomes.push(body["eventOutcome"].as_str().unwrap().to_string());
    }
    assert_eq!(
        outcomes,
        ["queued", "coalesced", "queued", "queued", "queued"]
    );
    assert_eq!(server.event_texts().await, ["A", "B", "A", "a"]);
}
