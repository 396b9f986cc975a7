//! Reload is all or nothing: every key either takes effect on reload, or a change of it refuses
//! the whole reload, naming the key (docs/configuration.md lists which is which).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{agent, with_provider};

/// `GET /api/config`: the generation in force and the last refusal.
async fn config_status(server: &Hookgate) -> Value {
    json_of(server.api("/api/config").send().await.unwrap())
        .await
        .1
}

async fn wake_status(server: &Hookgate, path: &str) -> u16 {
    server
        .hook(path)
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_change_of_a_restart_only_key_refuses_the_whole_reload() {
    let base = base_config();
    let (server, dir) = Hookgate::start(&base);
    let changes: [(&str, Value); 6] = [
        ("gateway.stateDir", json!("elsewhere")),
        ("gateway.bind", json!("127.0.0.2")),
        ("gateway.port", json!(1)),
        ("gateway.groupCommit", json!(false)),
        (
            "gateway.store",
            json!({"kind": "nats", "url": "nats://127.0.0.1:1"}),
        ),
        ("gateway.mode", json!("forward")),
    ];
    for (generation, (key, value)) in (1..).zip(changes) {
        // The restart-only change comes with a live one: neither may take effect.
        let mut config = base.clone();
        set(&mut config, key, value);
        set(&mut config, "hooks.path", json!("/ingress"));
        if key == "gateway.mode" {
            set(
                &mut config,
                "gateway.forward",
                json!({"url": "http://127.0.0.1:1", "token": "t"}),
            );
        }
        dir.write(&config);
        let expected = format!("{key}: changed; takes effect only after a restart");
        eventually(&format!("the refusal naming {key}"), async || {
            config_status(&server).await["lastError"]
                .to_string()
                .contains(&expected)
        })
        .await;
        let status = config_status(&server).await;
        assert_eq!(status["generation"], generation, "{status}");
        assert_eq!(status["lastError"].as_array().unwrap().len(), 1, "{status}");
        assert_eq!(wake_status(&server, "/hooks/wake").await, 200, "{key}");
        assert_eq!(wake_status(&server, "/ingress/wake").await, 404, "{key}");
        // Back to the configuration in force: accepted as a new generation.
        dir.write(&base);
        eventually("the original file to be taken again", async || {
            config_status(&server).await["generation"] == generation + 1
        })
        .await;
        assert_eq!(config_status(&server).await["lastError"], Value::Null);
    }
}

/// A provider that answers after a while, so that runs overlap.
async fn slow_provider() -> Fake {
    Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(600),
            Box::new(Answer::Json(200, chat_reply("done"))),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runners_concurrency_follows_a_reload() {
    let provider = slow_provider().await;
    let mut config = with_provider(&provider);
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(&mut config, "agents.defaults.maxConcurrent", json!(1));
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let (server, dir) = Hookgate::start(&config);
    for i in 0..4 {
        let body = json!({"message": "m", "sessionKey": format!("hook:a{i}"), "deliver": false,
                          "wakeMode": "next-heartbeat"});
        agent(&server, body).await;
    }
    eventually("four runs", async || provider.requests().len() == 4).await;
    assert_eq!(provider.max_in_flight(), 1);

    set(&mut config, "agents.defaults.maxConcurrent", json!(4));
    dir.write(&config);
    eventually("the reload", async || {
        config_status(&server).await["generation"] == 2
    })
    .await;
    for i in 0..4 {
        let body = json!({"message": "m", "sessionKey": format!("hook:b{i}"), "deliver": false,
                          "wakeMode": "next-heartbeat"});
        agent(&server, body).await;
    }
    eventually("four runs at once", async || provider.max_in_flight() == 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_heartbeats_follow_a_reload() {
    let provider = Fake::provider("HEARTBEAT_OK").await;
    let mut config = with_provider(&provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let (server, dir) = Hookgate::start(&config);
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "for the next heartbeat", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    set(&mut config, "agents.defaults.heartbeat.every", json!("1s"));
    dir.write(&config);
    eventually("a periodic heartbeat over the pending event", async || {
        provider.requests().iter().any(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("for the next heartbeat"))
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_and_channel_credentials_follow_a_reload() {
    let first = Fake::provider("from the first").await;
    let second = Fake::provider("from the second").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&first);
    set(
        &mut config,
        "channels.telegram",
        json!({"botToken": "old-token", "apiBase": chat.base}),
    );
    let (server, dir) = Hookgate::start(&config);
    let run =
        json!({"message": "m", "channel": "telegram", "to": "42", "wakeMode": "next-heartbeat"});
    agent(&server, run.clone()).await;
    eventually("the first reply sent", async || chat.requests().len() == 1).await;

    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": second.base}),
    );
    set(
        &mut config,
        "channels.telegram",
        json!({"botToken": "new-token", "apiBase": chat.base}),
    );
    dir.write(&config);
    eventually("the reload", async || {
        config_status(&server).await["generation"] == 2
    })
    .await;
    agent(&server, run).await;
    eventually("the second reply sent", async || chat.requests().len() == 2).await;
    let sent = &chat.requests()[1];
    assert_eq!(sent.path, "/botnew-token/sendMessage");
    assert_eq!(sent.body["text"], "from the second");
    assert_eq!(second.requests().len(), 1);
}

/// Reads from `stream` until the server closes it.
async fn closed(stream: &mut tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    matches!(
        tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// A mapped wake whose text names the configuration generation it was answered under.
fn generation_probe(generation: u32) -> Value {
    json!([{"id": "probe", "match": {"path": "probe"}, "action": "wake",
            "textTemplate": format!("answered under generation {generation}")}])
}

/// The length of the body each held probe of `connection_limits_follow_a_reload` announces.
const HELD_BODY_BYTES: usize = 100;

/// A probe's head that asks the server before the body is sent (`expect: 100-continue`): once
/// the server asks, the request is in flight, and its connection cannot give way to another.
fn held_probe_head() -> String {
    format!(
        "POST /hooks/probe HTTP/1.1\r\nhost: h\r\nauthorization: Bearer {HOOK_TOKEN}\r\nexpect: 100-continue\r\ncontent-length: {HELD_BODY_BYTES}\r\n\r\n"
    )
}

/// The body of a held probe: an empty object, padded to the length its head announced.
fn held_probe_body() -> String {
    format!("{:<HELD_BODY_BYTES$}", "{}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limits_follow_a_reload() {
    let mut config = base_config();
    set(&mut config, "gateway.maxConnections", json!(1));
    // Room for a request of the operator API beside the two connections the test holds.
    set(&mut config, "gateway.maxConnectionsPerClient", json!(3));
    set(&mut config, "hooks.bodyTimeoutSeconds", json!(3600));
    set(&mut config, "gateway.minReceiveBytesPerSecond", json!(0));
    set(&mut config, "hooks.mappings", generation_probe(1));
    let (server, dir) = Hookgate::start(&config);
    // A request in flight holds the only slot (an idle connection would give way to the next
    // one): a request waits for a slot.
    let addr = server.url("").trim_start_matches("http://").to_string();
    let mut busy = tokio::net::TcpStream::connect(&addr).await.unwrap();
    send_head_until_continue(&mut busy, &held_probe_head()).await;
    let mut waiting = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST /hooks/probe HTTP/1.1\r\nhost: h\r\nauthorization: Bearer {HOOK_TOKEN}\r\ncontent-length: 2\r\n\r\n{{}}"
    );
    waiting.write_all(request.as_bytes()).await.unwrap();
    // With the waiting request sent, the busy connection's request is answered under the old
    // configuration, and a second one, sent with it, holds the slot again at once.
    busy.write_all((held_probe_body() + &held_probe_head()).as_bytes())
        .await
        .unwrap();
    assert_eq!(read_answer_status(&mut busy).await, 200);
    let interim = read_head(&mut busy).await;
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");

    set(&mut config, "gateway.maxConnections", json!(4));
    set(&mut config, "gateway.headerTimeoutSeconds", json!(1));
    set(&mut config, "hooks.mappings", generation_probe(2));
    dir.write(&config);
    assert_eq!(read_answer_status(&mut waiting).await, 200);
    // The waiting request, there before the busy one's first answer, was answered under the new
    // configuration only: it waited while the old one was in force.
    assert_eq!(
        server.wake_texts().await,
        ["answered under generation 1", "answered under generation 2"],
        "answered with every slot held"
    );
    // The busy connection's second request is still in flight and is answered: the waiting one
    // got in because the reload added slots, not because the busy one left.
    busy.write_all(held_probe_body().as_bytes()).await.unwrap();
    assert_eq!(read_answer_status(&mut busy).await, 200);
    // The new header timeout closes a connection that sends nothing (the old one allowed 10 s).
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    eventually("the silent connection to be closed", async || {
        closed(&mut silent).await
    })
    .await;
}

/// A mapping whose calls need more memory than the transform engine was sized for at start is
/// named by the refused reload, not `hooks.transformLimits.memoryBytes`, which did not change
/// (a first JavaScript mapping, which gets 64 MiB, is the usual case).
#[tokio::test]
async fn a_mapping_that_outgrows_the_instance_pool_is_named() {
    let config = base_config();
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["passthrough"]);
    let server = Hookgate::start_in(&dir);
    let mut grown = config.clone();
    set(
        &mut grown,
        "hooks.mappings",
        json!([{"id": "big", "match": {"path": "big"}, "action": "wake",
                "transform": {"module": "passthrough.wasm",
                              "limits": {"memoryBytes": 128 * 1024 * 1024}}}]),
    );
    dir.write(&grown);
    let mut last_error = String::new();
    eventually("the refused reload", async || {
        last_error = config_status(&server).await["lastError"].to_string();
        last_error.contains("restart")
    })
    .await;
    assert!(
        last_error.contains("hooks.mappings[0].transform: needs more memory per call"),
        "{last_error}"
    );
    assert!(
        !last_error.contains("hooks.transformLimits"),
        "{last_error}"
    );
}
