//! Forward mode's callbacks and lifecycle webhooks (docs/outbound.md#forward-mode) in front of
//! the real OpenClaw gateway (2026.9.6, as tests/it/openclaw.rs starts it), whose agents call a
//! model provider stand-in on loopback: what a callback says is made of OpenClaw's own
//! completion, and a run OpenClaw's model fails gives `run.failed`. The receiver verifies every
//! message with the official Standard Webhooks library.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::openclaw::OpenClaw;
use crate::openclaw_controls::{forwarding, model_calls};
use crate::outbound::{SECRET, endpoint_receiver, payloads_of};

/// What the stand-in model answers a prompt that does not ask it to fail.
const REPLY: &str = "Deployed to staging from OpenClaw's model.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_sends_callbacks_and_events_from_the_real_openclaws_completion() {
    // The model answers, or fails with a 500 when the prompt asks it to.
    let provider = Fake::start(|call, _| {
        if !call.path.ends_with("/chat/completions") {
            // OpenClaw lists the provider's models first: with none listed it keeps its own.
            return Answer::Json(404, json!({"error": "not found"}));
        }
        if call.body.to_string().contains("please fail") {
            return Answer::Json(500, json!({"error": {"message": "the model broke"}}));
        }
        Answer::Json(200, chat_reply(REPLY))
    })
    .await;
    let mut openclaw = OpenClaw::start_with_model(&format!("{}/v1", provider.base), "stand-in");
    let (receiver, outbound) = endpoint_receiver(&["run.started", "run.finished", "run.failed"]);
    let callback_url = outbound["endpoints"][0]["url"]
        .as_str()
        .unwrap()
        .replace("/events", "/callback");
    let mapping = json!([{
        "id": "deploy", "match": {"path": "deploy"}, "messageTemplate": "{{text}}",
        "deliver": false, "callback": {"url": callback_url, "secret": SECRET},
    }]);
    let mut config = forwarding(&openclaw, mapping);
    set(&mut config, "outbound", outbound);
    let (server, _dir) = Hookgate::start(&config);
    openclaw.ready().await;

    let mut runs = Vec::new();
    for text in ["ship it", "please fail"] {
        let (status, reply) = server
            .hook_json("/hooks/deploy", &json!({"text": text}))
            .await;
        assert_eq!(status, 200, "{reply}");
        runs.push(reply["runId"].as_str().unwrap().to_string());
    }
    // Two callbacks, and each run's run.started and its end.
    let received = eventually_within(
        "two callbacks and four events",
        Duration::from_secs(180),
        Duration::from_millis(250),
        async || {
            let received = receiver.received().await;
            match received.len() {
                6.. => Ok(received),
                n => Err(format!("{n} received\n{}", openclaw.log())),
            }
        },
    )
    .await;
    assert_eq!(received.len(), 6, "{received:?}");
    for message in &received {
        assert_eq!(message["verified"], true, "{message}");
    }
    let of = |run: &str, path: &str| payloads_of(&received, run, path);
    let types = |payloads: &[Value]| -> Vec<String> {
        payloads
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect()
    };

    // The run OpenClaw ran: its callback names OpenClaw's run, as the run record does.
    let (ok, failed) = (&runs[0], &runs[1]);
    let record = server.api_json(&format!("/api/runs/{ok}")).await.1;
    assert_eq!(record["status"], "forwarded", "{record}");
    let upstream = record["upstreamRunId"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(upstream).is_ok(), "{record}");
    let callback = of(ok, "/callback");
    assert_eq!(callback.len(), 1, "{received:?}");
    let data = &callback[0]["data"];
    assert_eq!(callback[0]["type"], "run.finished", "{data}");
    assert_eq!(data["status"], "ok", "{data}");
    assert_eq!(data["upstreamRunId"], upstream, "{data}");
    assert!(data["requestId"].is_string(), "{data}");
    // OpenClaw's model did answer; OpenClaw's completion never carries the reply's text (its
    // docs: "The response never includes model output"), so neither does the callback.
    let answered = model_calls(&provider)
        .iter()
        .any(|call| call.to_string().contains("ship it"));
    assert!(answered, "the model was never asked");
    assert_eq!(data.get("reply"), None, "{data}");
    assert_eq!(types(&of(ok, "/events")), ["run.started", "run.finished"]);

    // The run whose model failed: OpenClaw's completion is not ok, and so is the run's end.
    let callback = of(failed, "/callback");
    assert_eq!(callback.len(), 1, "{received:?}");
    let data = &callback[0]["data"];
    assert_eq!(callback[0]["type"], "run.failed", "{data}");
    assert_eq!(data["status"], "error", "{data}");
    assert_eq!(data["error"], "the upstream's run ended error", "{data}");
    assert!(data["upstreamRunId"].is_string(), "{data}");
    assert_eq!(types(&of(failed, "/events")), ["run.started", "run.failed"]);
}
