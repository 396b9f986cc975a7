//! docs/hooks.md#notify-only-hooks: a notify mapping's message goes to its chat channel with no
//! model call, durably through the outbox, retried like a reply, its outcome on its record;
//! over HTTP against the real binary, a fake model provider and a fake chat API on loopback.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::fake::{Answer, Fake};
use crate::harness::*;
use crate::requests::recorded;
use crate::runtime::{Backend, all_channels, finished, with_provider};

/// A notify mapping `deploys` to telegram chat 42, the model provider `provider`, every channel
/// at `chat`.
fn notify_config(provider: &Fake, chat: &Fake) -> Value {
    let mut config = with_provider(provider);
    config["channels"] = all_channels(chat);
    config["channels"]["retry"] = json!({"attempts": 20, "baseDelayMs": 20});
    set(
        &mut config,
        "hooks.mappings",
        json!([{
            "id": "deploys", "match": {"path": "deploys"}, "action": "notify",
            "messageTemplate": "Deploy of {{service}} finished: {{status}}",
            "channel": "telegram", "to": "42",
        }]),
    );
    config
}

async fn notify(server: &Hookgate) -> String {
    let body = json!({"service": "api", "status": "green"});
    let (status, answer) = server.hook_json("/hooks/deploys", &body).await;
    assert_eq!(status, 200, "{answer}");
    answer["runId"].as_str().unwrap().to_string()
}

/// The message reaches the chat API as rendered; the provider is never called; the record says
/// it was sent, and the request's record names it.
async fn a_notify_hook_delivers_its_message_with_no_model_call(backend: Backend) {
    let provider = Fake::provider("never asked").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let (server, _kept) = backend.start(&notify_config(&provider, &chat));
    let run_id = notify(&server).await;
    let run = finished(&server, &run_id).await;
    assert_eq!(
        (run["status"].as_str(), run["delivery"]["status"].as_str()),
        (Some("ok"), Some("sent")),
        "{run}"
    );
    assert_eq!(run["delivery"]["attempts"], 1, "{run}");
    let sent = chat.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/bottg-token/sendMessage");
    assert_eq!(
        sent[0].body,
        json!({"chat_id": "42", "text": "Deploy of api finished: green"})
    );
    assert_eq!(provider.requests().len(), 0, "no model call");
    let record = &recorded(&server, "limit=1", 1).await[0];
    assert_eq!(record["mappingId"], "deploys", "{record}");
    assert_eq!(record["runIds"], json!([run_id]), "{record}");
}

/// A chat API that fails until the test brings it up: the message is sent again with the
/// channels' backoff and lands once.
async fn a_notify_sent_while_the_chat_api_is_down_lands_once_it_is_up(backend: Backend) {
    let provider = Fake::provider("never asked").await;
    let up = Arc::new(AtomicBool::new(false));
    let chat = Fake::start({
        let up = Arc::clone(&up);
        move |_, _| match up.load(Ordering::SeqCst) {
            true => Answer::Json(200, json!({"ok": true})),
            false => Answer::Text(503, "down for maintenance".into()),
        }
    })
    .await;
    let (server, _kept) = backend.start(&notify_config(&provider, &chat));
    let run_id = notify(&server).await;
    eventually("a first attempt, refused", async || {
        !chat.requests().is_empty()
    })
    .await;
    up.store(true, Ordering::SeqCst);
    let run = finished(&server, &run_id).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    let attempts = run["delivery"]["attempts"].as_u64().unwrap();
    assert!(attempts >= 2, "{run}");
    assert_eq!(
        chat.requests().len() as u64,
        attempts,
        "one send per attempt"
    );
    assert_eq!(provider.requests().len(), 0, "no model call");
}

on_both_stores!(
    a_notify_hook_delivers_its_message_with_no_model_call,
    a_notify_sent_while_the_chat_api_is_down_lands_once_it_is_up,
);

/// Forward mode: the upstream has no notify action, so the forwarder sends it itself, and the
/// upstream hears nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_delivers_a_notification_itself() {
    let upstream = Fake::start(|_, _| Answer::Json(200, json!({"ok": true, "runId": "u1"}))).await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = notify_config(&upstream, &chat);
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": upstream.base, "token": "upstream-token"}),
    );
    let (server, _dir) = Hookgate::start(&config);
    let run = finished(&server, &notify(&server).await).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    assert_eq!(chat.requests().len(), 1);
    assert_eq!(upstream.requests().len(), 0, "nothing relayed");
}

/// `check` names each key a notify mapping cannot use, and a route it cannot reach.
#[test]
fn check_refuses_a_notify_mapping_with_agent_keys_or_no_route() {
    let chat = json!({"telegram": {"botToken": "t", "apiBase": "http://127.0.0.1:9"}});
    let mut config = base_config();
    config["channels"] = chat;
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "a", "match": {"path": "a"}, "action": "notify", "messageTemplate": "m",
             "channel": "telegram", "to": "1", "model": "gpt-secret-model", "thinking": "high"},
            {"id": "b", "match": {"path": "b"}, "action": "notify", "messageTemplate": "m",
             "channel": "telegram"},
            {"id": "c", "match": {"path": "c"}, "action": "notify", "messageTemplate": "m",
             "channel": "last", "to": "1"},
            {"id": "d", "match": {"path": "d"}, "action": "notify", "messageTemplate": "m",
             "channel": "slack", "to": "1"},
            {"id": "e", "match": {"path": "e"}, "action": "notify", "to": "1"},
        ]),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].model: does not apply to a notify mapping",
        "hooks.mappings[0].thinking: does not apply to a notify mapping",
        "hooks.mappings[1].to: is required on a notify mapping to telegram",
        "hooks.mappings[2].channel: cannot be last on a notify mapping",
        "hooks.mappings[3].channel: names slack, which is not configured under channels",
        "hooks.mappings[4].channel: is required on a notify mapping",
        "hooks.mappings[4].messageTemplate: is required on a notify mapping",
    ] {
        assert!(output.contains(expected), "{expected:?} not in {output}");
    }
    assert!(!output.contains("gpt-secret-model"), "{output}");
}

/// A reload that would break a notify mapping's route is refused; the one in force keeps
/// sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_removes_a_notify_channel_is_refused() {
    let provider = Fake::provider("never asked").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let config = notify_config(&provider, &chat);
    let (server, dir) = Hookgate::start(&config);
    let mut broken = config.clone();
    broken["channels"]
        .as_object_mut()
        .unwrap()
        .remove("telegram");
    dir.write(&broken);
    eventually("the reload to be refused", async || {
        let (_, status) = server.api_json("/api/config").await;
        status["lastError"]
            .to_string()
            .contains("hooks.mappings[0].channel")
    })
    .await;
    let run = finished(&server, &notify(&server).await).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
}
