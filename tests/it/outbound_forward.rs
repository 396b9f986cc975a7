//! Forward mode's callbacks and lifecycle webhooks (docs/outbound.md#forward-mode), made of the
//! upstream's completion. The upstream is another hookgate on loopback speaking OpenClaw's hook
//! wire (`waitForCompletion`'s `completion`), as `runtime::forward`'s relay tests use; the
//! receiver verifies every message with the official Standard Webhooks library.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::outbound::{SECRET, endpoint_receiver, payloads_of};
use crate::runtime::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_sends_callbacks_and_events_from_the_upstreams_completion() {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("relayed answer"))).await;
    let port = free_port();
    // The upstream runs agents, and refuses a request's session key (its default).
    let upstream_dir = ConfigDir::new(&crate::runtime::with_provider(&provider));
    let _upstream = Hookgate::try_start_on(&upstream_dir, port).unwrap();
    let events = ["run.started", "run.finished", "run.failed", "relay.failed"];
    let (receiver, outbound) = endpoint_receiver(&events);
    let callback_url = outbound["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .replace("/events", "/callback");
    let mut config = base_config();
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{port}"), "token": HOOK_TOKEN,
               "relaySessionKey": true}),
    );
    set(
        &mut config,
        "hooks.mappings",
        json!([{
            "id": "cb", "match": {"path": "cb"}, "messageTemplate": "Do {{n}}", "deliver": false,
            "callback": {"url": callback_url, "secret": SECRET},
        }]),
    );
    set(&mut config, "outbound", outbound);
    let (forwarder, _dir) = Hookgate::start(&config);
    let (status, reply) = forwarder.hook_json("/hooks/cb", &json!({"n": 1})).await;
    assert_eq!(status, 200, "{reply}");
    let relayed = reply["runId"].as_str().unwrap().to_string();
    // The upstream refuses this relay (a session key it does not take): it fails for good.
    let (status, reply) = forwarder
        .hook_json(
            "/hooks/agent",
            &json!({"message": "keyed", "sessionKey": "hook:ops", "deliver": false}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let refused = reply["runId"].as_str().unwrap().to_string();
    let received = eventually_within(
        "the callback and the six events to arrive",
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            match received.len() {
                6.. => Ok(received),
                n => Err(format!("{n} received")),
            }
        },
    )
    .await;
    for message in &received {
        assert_eq!(message["verified"], true, "{message}");
    }
    let of = |run: &str, path: &str| payloads_of(&received, run, path);
    let callback = of(&relayed, "/callback");
    assert_eq!(callback.len(), 1, "{received:?}");
    assert_eq!(callback[0]["type"], "run.finished");
    assert_eq!(callback[0]["data"]["status"], "ok");
    assert_eq!(callback[0]["data"]["reply"], "relayed answer");
    assert!(callback[0]["data"]["requestId"].is_string(), "{callback:?}");
    let types = |payloads: Vec<Value>| -> Vec<String> {
        payloads
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        types(of(&relayed, "/events")),
        ["run.started", "run.finished"]
    );
    let failed = of(&refused, "/events");
    assert_eq!(
        types(failed.clone()),
        ["run.started", "relay.failed", "run.failed"]
    );
    let why = failed[1]["data"]["error"].as_str().unwrap();
    assert!(why.contains("sessionKey is disabled"), "{why}");
    let run = crate::runtime::finished(&forwarder, &refused).await;
    assert_eq!(run["status"], "forward_failed", "{run}");
}
