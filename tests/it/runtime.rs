//! The gateway runtime over real HTTP: runs against a fake model provider, heartbeats, delivery to
//! fake chat APIs, the outbox's retries, crash and resume, and forward mode to a second hookgate.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;

pub(crate) fn with_provider(provider: &Fake) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("default-model"));
    config
}

/// Queues an agent run on `server`; its run id.
pub(crate) async fn agent(server: &Hookgate, body: Value) -> String {
    let (status, reply) = json_of(
        server
            .hook("/hooks/agent")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    reply["runId"].as_str().unwrap().to_string()
}

/// Waits until the run leaves `queued`/`running` (and, when it is to be delivered, until the
/// delivery settles), then returns it.
async fn finished(server: &Hookgate, run_id: &str) -> Value {
    let mut run = Value::Null;
    eventually("the run to finish", async || {
        run = json_of(
            server
                .api(&format!("/api/runs/{run_id}"))
                .send()
                .await
                .unwrap(),
        )
        .await
        .1;
        let done = !matches!(
            run["status"].as_str(),
            Some("queued" | "running" | "forwarding")
        );
        done && run["delivery"]["status"] != "pending"
    })
    .await;
    run
}

async fn summaries(server: &Hookgate) -> Vec<String> {
    server
        .events()
        .await
        .iter()
        .filter(|e| e["kind"] == "summary")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sends_its_prompt_and_records_reply_and_summary() {
    let provider = Fake::provider("Build fixed on main.\nDetails follow.").await;
    let (server, _dir) = Hookgate::start(&with_provider(&provider));
    let run_id = agent(&server, json!({"message": "Why red?", "name": "CI", "deliver": false, "thinking": "high", "model": "gpt-x"})).await;
    let run = finished(&server, &run_id).await;
    assert_eq!(run["status"], "ok");
    assert_eq!(run["reply"], "Build fixed on main.\nDetails follow.");
    assert_eq!(run["summary"], "Build fixed on main.");
    assert!(
        run["startedAt"].is_string() && run["finishedAt"].is_string(),
        "{run}"
    );
    assert_eq!(run["delivery"]["status"], "skipped");
    let sent = &provider.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/chat/completions")
    );
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(sent.body["model"], "gpt-x");
    assert_eq!(sent.body["reasoning_effort"], "high");
    assert_eq!(sent.body["messages"][0]["content"], run["prompt"]);
    assert_eq!(summaries(&server).await, ["Hook CI: Build fixed on main."]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_model_uses_the_agent_default_and_per_agent_provider() {
    let shared = Fake::provider("shared").await;
    let own = Fake::provider("own").await;
    let mut config = with_provider(&shared);
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true}, {"id": "ops", "model": "ops-model", "provider": {"baseUrl": own.base}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let main_run = finished(
        &server,
        &agent(&server, json!({"message": "m", "deliver": false})).await,
    )
    .await;
    assert_eq!(main_run["reply"], "shared");
    assert_eq!(shared.requests()[0].body["model"], "default-model");
    let ops_run = finished(
        &server,
        &agent(
            &server,
            json!({"message": "m", "agentId": "ops", "deliver": false}),
        )
        .await,
    )
    .await;
    assert_eq!(ops_run["reply"], "own");
    assert_eq!(own.requests()[0].body["model"], "ops-model");
    assert_eq!(own.requests()[0].header("authorization"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_failures_end_the_run_with_its_error_and_a_summary() {
    let provider = Fake::start(|_, _| Answer::Text(500, "overloaded".into())).await;
    let (server, _dir) = Hookgate::start(&with_provider(&provider));
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "name": "Deploy"})).await,
    )
    .await;
    assert_eq!(run["status"], "error");
    assert_eq!(run["error"], "provider answered 500: overloaded");
    assert_eq!(
        summaries(&server).await,
        ["Hook Deploy (error): provider answered 500: overloaded"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_provider_response_is_an_error() {
    let provider = Fake::start(|_, _| Answer::Text(200, "{not json".into())).await;
    let (server, _dir) = Hookgate::start(&with_provider(&provider));
    let run = finished(&server, &agent(&server, json!({"message": "m"})).await).await;
    assert_eq!(run["status"], "error");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("malformed provider response"),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_provider_past_the_timeout_ends_the_run_as_timeout() {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_secs(5),
            Box::new(Answer::Json(200, chat_reply("late"))),
        )
    })
    .await;
    let (server, _dir) = Hookgate::start(&with_provider(&provider));
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "timeoutSeconds": 1})).await,
    )
    .await;
    assert_eq!(run["status"], "timeout");
    assert_eq!(run["reply"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_provider_runs_end_with_an_error() {
    let (server, _dir) = Hookgate::start(&base_config());
    let run = finished(&server, &agent(&server, json!({"message": "m"})).await).await;
    assert_eq!(
        (run["status"].as_str(), run["error"].as_str()),
        (Some("error"), Some("no model provider configured"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_one_session_key_never_overlap_and_concurrency_is_bounded() {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(200),
            Box::new(Answer::Json(200, chat_reply("ok"))),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(&mut config, "agents.defaults.maxConcurrent", json!(2));
    let (server, _dir) = Hookgate::start(&config);
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            agent(
                &server,
                // `next-heartbeat`: a heartbeat turn would be one more provider request.
                json!({"message": format!("same {i}"), "sessionKey": "hook:one", "deliver": false, "wakeMode": "next-heartbeat"}),
            )
            .await,
        );
    }
    for id in &ids {
        finished(&server, id).await;
    }
    assert_eq!(
        provider.max_in_flight(),
        1,
        "runs of one session key overlapped"
    );
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            agent(
                &server,
                json!({"message": format!("other {i}"), "deliver": false, "wakeMode": "next-heartbeat"}),
            )
            .await,
        );
    }
    for id in &ids {
        finished(&server, id).await;
    }
    assert!(
        provider.max_in_flight() <= 2,
        "{} runs at once",
        provider.max_in_flight()
    );
}

fn all_channels(fake: &Fake) -> Value {
    json!({
        "telegram": {"botToken": "tg-token", "apiBase": fake.base},
        "slack": {"botToken": "xoxb-1", "apiBase": fake.base},
        "discord": {"botToken": "dc-token", "apiBase": fake.base},
        "mattermost": {"baseUrl": fake.base, "token": "mm-token"},
        "msteams": {"webhookUrl": format!("{}/teams-webhook", fake.base)},
        "signal": {"baseUrl": fake.base, "number": "+15550000"},
        "whatsapp": {"accessToken": "wa-token", "phoneNumberId": "1055", "apiBase": fake.base},
        "imessage": {"baseUrl": fake.base, "password": "bb-pass"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_channel_adapter_speaks_its_api() {
    let provider = Fake::provider("Reply text").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = Hookgate::start(&config);
    let expected = [
        (
            "telegram",
            "42",
            "/bottg-token/sendMessage",
            None,
            json!({"chat_id": "42", "text": "Reply text"}),
        ),
        (
            "slack",
            "C1",
            "/chat.postMessage",
            Some("Bearer xoxb-1"),
            json!({"channel": "C1", "text": "Reply text"}),
        ),
        (
            "discord",
            "D1",
            "/channels/D1/messages",
            Some("Bot dc-token"),
            json!({"content": "Reply text"}),
        ),
        (
            "mattermost",
            "M1",
            "/api/v4/posts",
            Some("Bearer mm-token"),
            json!({"channel_id": "M1", "message": "Reply text"}),
        ),
        (
            "msteams",
            "T1",
            "/teams-webhook",
            None,
            json!({"text": "Reply text"}),
        ),
        (
            "signal",
            "+1555",
            "/v2/send",
            None,
            json!({"message": "Reply text", "number": "+15550000", "recipients": ["+1555"]}),
        ),
        (
            "whatsapp",
            "+1666",
            "/1055/messages",
            Some("Bearer wa-token"),
            json!({"messaging_product": "whatsapp", "to": "+1666", "type": "text", "text": {"body": "Reply text"}}),
        ),
    ];
    for (channel, to, path, auth, body) in expected {
        let run = finished(
            &server,
            &agent(
                &server,
                json!({"message": "m", "channel": channel, "to": to}),
            )
            .await,
        )
        .await;
        assert_eq!(run["delivery"]["status"], "sent", "{channel}: {run}");
        let sent = chat.requests().into_iter().last().unwrap();
        assert_eq!(sent.path, path, "{channel}");
        assert_eq!(sent.header("authorization"), auth, "{channel}");
        assert_eq!(sent.body, body, "{channel}");
    }
    let run = finished(
        &server,
        &agent(
            &server,
            json!({"message": "m", "channel": "imessage", "to": "iMessage;-;+1777"}),
        )
        .await,
    )
    .await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    let sent = chat.requests().into_iter().last().unwrap();
    assert_eq!(sent.path, "/api/v1/message/text?password=bb-pass");
    assert_eq!(
        (
            sent.body["chatGuid"].as_str(),
            sent.body["message"].as_str()
        ),
        (Some("iMessage;-;+1777"), Some("Reply text"))
    );
    // A delivered reply is not also summarised into the main session.
    assert!(summaries(&server).await.is_empty());
}

/// The (channel, to) a run's reply went to.
fn route_of(run: &Value) -> (Option<&str>, Option<&str>) {
    (
        run["delivery"]["channel"].as_str(),
        run["delivery"]["to"].as_str(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_route_belongs_to_the_owner_not_to_hook_runs() {
    let provider = Fake::provider("hello").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["defaultRoute"] = json!({"channel": "signal", "to": "+1999"});
    let (server, _dir) = Hookgate::start(&config);
    let last = async || {
        let body = json!({"message": "m", "wakeMode": "next-heartbeat"});
        finished(&server, &agent(&server, body).await).await
    };
    assert_eq!(route_of(&last().await), (Some("signal"), Some("+1999")));

    // A hook-token holder sends a run's reply to a chat of their own: it goes there, and only
    // there; the owner's route is untouched.
    let elsewhere =
        json!({"message": "m", "channel": "telegram", "to": "666", "wakeMode": "next-heartbeat"});
    let run = finished(&server, &agent(&server, elsewhere).await).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    assert_eq!(route_of(&run), (Some("telegram"), Some("666")));
    assert_eq!(route_of(&last().await), (Some("signal"), Some("+1999")));

    // The heartbeat's reply goes to the owner's route too.
    let sent_before = chat.requests().len();
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    eventually("the heartbeat's reply to be sent", async || {
        chat.requests().len() > sent_before
    })
    .await;
    let beat = chat.requests().into_iter().last().unwrap();
    assert_eq!(beat.body["recipients"], json!(["+1999"]), "{:?}", beat.body);

    // The operator moves the route; `last` follows it, and a DELETE gives the default back.
    let put = |body: Value| {
        client()
            .put(server.url("/api/sessions/main/route"))
            .bearer_auth(GATEWAY_TOKEN)
            .json(&body)
            .send()
    };
    let (status, set) = json_of(
        put(json!({"channel": "telegram", "to": "42"}))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &set["route"]),
        (200, &json!({"channel": "telegram", "to": "42"}))
    );
    let (_, shown) = json_of(server.api("/api/sessions/main/route").send().await.unwrap()).await;
    assert_eq!(
        shown["route"],
        json!({"channel": "telegram", "to": "42"}),
        "{shown}"
    );
    assert_eq!(route_of(&last().await), (Some("telegram"), Some("42")));
    let (status, refused) = json_of(put(json!({"channel": "last"})).await.unwrap()).await;
    assert_eq!(status, 400, "{refused}");
    let cleared = client()
        .delete(server.url("/api/sessions/main/route"))
        .bearer_auth(GATEWAY_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 200);
    assert_eq!(route_of(&last().await), (Some("signal"), Some("+1999")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgement_replies_are_not_sent_but_summarised() {
    let provider = Fake::start(|_, i| {
        Answer::Json(
            200,
            chat_reply(if i == 0 { "HEARTBEAT_OK" } else { "NO_REPLY" }),
        )
    })
    .await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = Hookgate::start(&config);
    for _ in 0..2 {
        let run = finished(
            &server,
            &agent(
                &server,
                json!({"message": "m", "channel": "telegram", "to": "42", "name": "Ack"}),
            )
            .await,
        )
        .await;
        assert_eq!(run["delivery"]["status"], "skipped");
    }
    assert!(chat.requests().is_empty());
    assert_eq!(
        summaries(&server).await,
        ["Hook Ack: HEARTBEAT_OK", "Hook Ack: NO_REPLY"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sends_are_retried_with_backoff() {
    let provider = Fake::provider("hi").await;
    let chat = Fake::start(|_, i| {
        if i < 2 {
            Answer::Text(502, "bad gateway".into())
        } else {
            Answer::Json(200, json!({"ok": true}))
        }
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 5, "baseDelayMs": 20});
    let (server, _dir) = Hookgate::start(&config);
    let run = finished(
        &server,
        &agent(
            &server,
            json!({"message": "m", "channel": "telegram", "to": "42"}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (
            run["delivery"]["status"].as_str(),
            run["delivery"]["attempts"].as_u64()
        ),
        (Some("sent"), Some(3))
    );
    assert_eq!(chat.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_keeps_failing_is_recorded_and_summarised() {
    let provider = Fake::provider("the reply").await;
    let chat = Fake::start(|_, _| Answer::Text(500, "down".into())).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 3, "baseDelayMs": 10});
    let (server, _dir) = Hookgate::start(&config);
    let run = finished(
        &server,
        &agent(
            &server,
            json!({"message": "m", "channel": "slack", "to": "C1", "name": "Alert"}),
        )
        .await,
    )
    .await;
    assert_eq!(run["delivery"]["status"], "failed");
    assert_eq!(run["delivery"]["attempts"], 3);
    assert!(
        run["delivery"]["error"].as_str().unwrap().contains("500"),
        "{run}"
    );
    assert_eq!(chat.requests().len(), 3);
    eventually("the summary of the undelivered reply", async || {
        summaries(&server).await == ["Hook Alert: the reply"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfigured_channel_fails_without_retries() {
    let provider = Fake::provider("x").await;
    let (server, _dir) = Hookgate::start(&with_provider(&provider));
    let run = finished(
        &server,
        &agent(
            &server,
            json!({"message": "m", "channel": "discord", "to": "D"}),
        )
        .await,
    )
    .await;
    assert_eq!(run["delivery"]["status"], "failed");
    assert_eq!(
        run["delivery"]["error"],
        "channel discord is not configured"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_now_runs_a_heartbeat_over_pending_events_and_delivers_its_reply() {
    let provider = Fake::provider("Deploy finished; nothing else.").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["defaultRoute"] = json!({"channel": "telegram", "to": "42"});
    let (server, _dir) = Hookgate::start(&config);
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "later one", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "Deploy done"}))
        .send()
        .await
        .unwrap();
    eventually("the heartbeat's reply to be delivered", async || {
        !chat.requests().is_empty()
    })
    .await;
    let prompt = provider.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let lines: Vec<&str> = prompt.lines().take(2).collect();
    assert!(
        lines[0].starts_with("System (untrusted): [") && lines[0].ends_with("] later one"),
        "{prompt}"
    );
    assert!(lines[1].ends_with("] Deploy done"), "{prompt}");
    assert_eq!(
        chat.requests()[0].body,
        json!({"chat_id": "42", "text": "Deploy finished; nothing else."})
    );
    // Consumed: the next heartbeat sees only what came after.
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "third"}))
        .send()
        .await
        .unwrap();
    eventually("a second heartbeat", async || {
        provider.requests().len() == 2
    })
    .await;
    let second = provider.requests()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        second.contains("] third") && !second.contains("Deploy done"),
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_requests_close_together_make_one_heartbeat() {
    let provider = Fake::provider("HEARTBEAT_OK").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = Hookgate::start(&config);
    for i in 0..5 {
        server
            .hook("/hooks/wake")
            .json(&json!({"text": format!("burst {i}")}))
            .send()
            .await
            .unwrap();
    }
    eventually("every event to reach a heartbeat", async || {
        let seen: String = provider
            .requests()
            .iter()
            .map(|r| {
                r.body["messages"][0]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        (0..5).all(|i| seen.contains(&format!("] burst {i}")))
    })
    .await;
    assert!(
        provider.requests().len() < 5,
        "{} heartbeats for 5 requests",
        provider.requests().len()
    );
    // HEARTBEAT_OK is never sent anywhere.
    assert!(chat.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_runs_are_resumed_and_finish_once_with_one_summary_each() {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_secs(60),
            Box::new(Answer::Json(200, chat_reply("too late"))),
        )
    })
    .await;
    let dir = ConfigDir::new(&with_provider(&provider));
    let server = Hookgate::start_in(&dir);
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            agent(
                &server,
                json!({"message": format!("job {i}"), "deliver": false, "name": format!("Job{i}")}),
            )
            .await,
        );
    }
    eventually("all runs to be in flight", async || {
        provider.requests().len() == 4
    })
    .await;
    server.kill();

    provider.respond_with(|_, _| Answer::Json(200, chat_reply("done")));
    let server = Hookgate::start_in(&dir);
    for id in &ids {
        let run = finished(&server, id).await;
        assert_eq!(
            (run["status"].as_str(), run["reply"].as_str()),
            (Some("ok"), Some("done"))
        );
    }
    let mut texts = summaries(&server).await;
    texts.sort();
    assert_eq!(
        texts,
        [
            "Hook Job0: done",
            "Hook Job1: done",
            "Hook Job2: done",
            "Hook Job3: done"
        ]
    );
    // Another restart finds nothing to resume and adds nothing.
    server.terminate();
    let server = Hookgate::start_in(&dir);
    assert_eq!(summaries(&server).await.len(), 4);
    assert_eq!(provider.requests().len(), 8);
}

/// A free port on 127.0.0.1 for a server that must come back on the same address.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_relays_wakes_and_runs_and_loses_nothing_while_upstream_is_down() {
    let port = free_port();
    let upstream_dir = ConfigDir::new(&base_config());
    let upstream = Hookgate::try_start_on(&upstream_dir, port).unwrap();
    let mut config = base_config();
    set(&mut config, "hooks.token", json!("forwarder-hook-token"));
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{port}"), "token": HOOK_TOKEN}),
    );
    let (forwarder, _dir) = Hookgate::start(&config);
    let post = |path: &str, body: Value| {
        client()
            .post(forwarder.url(path))
            .bearer_auth("forwarder-hook-token")
            .json(&body)
            .send()
    };
    assert_eq!(
        post("/hooks/wake", json!({"text": "relayed wake"}))
            .await
            .unwrap()
            .status(),
        200
    );
    let (_, reply) = json_of(
        post(
            "/hooks/agent",
            json!({"message": "relayed run", "name": "Fwd", "channel": "slack", "to": "C7"}),
        )
        .await
        .unwrap(),
    )
    .await;
    let run_id = reply["runId"].as_str().unwrap().to_string();
    let run = finished(&forwarder, &run_id).await;
    assert_eq!(run["status"], "forwarded", "{run}");
    let upstream_run = upstream
        .run_of(&json!({"runId": run["upstreamRunId"]}))
        .await;
    assert_eq!(
        (
            upstream_run["message"].as_str(),
            upstream_run["hookName"].as_str(),
            upstream_run["to"].as_str()
        ),
        (Some("relayed run"), Some("Fwd"), Some("C7"))
    );
    assert_eq!(upstream.wake_texts().await, ["relayed wake"]);

    // A repeat of an accepted request (same idempotency key) makes no second upstream run.
    let keyed = json!({"message": "keyed", "idempotencyKey": "delivery-77"});
    let (_, first) = json_of(post("/hooks/agent", keyed.clone()).await.unwrap()).await;
    let (_, again) = json_of(post("/hooks/agent", keyed).await.unwrap()).await;
    assert_eq!(first["runId"], again["runId"]);
    let keyed_run = finished(&forwarder, first["runId"].as_str().unwrap()).await;
    let upstream_keyed = upstream
        .run_of(&json!({"runId": keyed_run["upstreamRunId"]}))
        .await;
    assert_eq!(upstream_keyed["message"], "keyed");

    // Upstream down: the forwarder still answers 200 and keeps what it accepted.
    upstream.kill();
    assert_eq!(
        post("/hooks/wake", json!({"text": "during outage"}))
            .await
            .unwrap()
            .status(),
        200
    );
    let (_, reply) = json_of(
        post("/hooks/agent", json!({"message": "outage run"}))
            .await
            .unwrap(),
    )
    .await;
    let outage_run = reply["runId"].as_str().unwrap().to_string();
    let upstream = Hookgate::try_start_on(&upstream_dir, port).unwrap();
    let run = finished(&forwarder, &outage_run).await;
    assert_eq!(run["status"], "forwarded", "{run}");
    eventually("the outage wake upstream", async || {
        upstream.wake_texts().await == ["relayed wake", "during outage"]
    })
    .await;
    let upstream_run = upstream
        .run_of(&json!({"runId": run["upstreamRunId"]}))
        .await;
    assert_eq!(upstream_run["message"], "outage run");
}

#[tokio::test]
async fn runs_can_be_listed_by_status() {
    let (server, _dir) = Hookgate::start(&base_config());
    let id = agent(&server, json!({"message": "m"})).await;
    finished(&server, &id).await;
    let (status, body) = json_of(
        server
            .api("/api/runs?status=error&limit=10")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["runs"][0]["runId"], id.as_str());
    let (_, body) = json_of(server.api("/api/runs?status=ok").send().await.unwrap()).await;
    assert_eq!(body["runs"], json!([]));
    let r = server.api("/api/runs?limit=0").send().await.unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_key_with_a_backlog_does_not_hold_up_other_keys() {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(150),
            Box::new(Answer::Json(200, chat_reply("ok"))),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    let (server, _dir) = Hookgate::start(&config);
    let quiet = |key: &str, i: usize| json!({"message": format!("{key} {i}"), "sessionKey": key, "deliver": false, "wakeMode": "next-heartbeat"});
    let mut backlog = Vec::new();
    for i in 0..4 {
        backlog.push(agent(&server, quiet("hook:busy", i)).await);
    }
    let other = agent(&server, quiet("hook:other", 0)).await;
    let other = finished(&server, &other).await;
    let last = finished(&server, backlog.last().unwrap()).await;
    assert!(
        other["finishedAt"].as_str() < last["finishedAt"].as_str(),
        "the other key waited for the whole backlog: {} vs {}",
        other["finishedAt"],
        last["finishedAt"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_in_progress_at_sigterm_is_finished_not_abandoned() {
    let provider = Fake::provider("deliver me").await;
    let chat = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(800),
            Box::new(Answer::Json(200, json!({"ok": true}))),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let dir = ConfigDir::new(&config);
    let server = Hookgate::start_in(&dir);
    let run_id = agent(
        &server,
        json!({"message": "m", "channel": "telegram", "to": "42"}),
    )
    .await;
    eventually("the send to start", async || !chat.requests().is_empty()).await;
    let (status, _) = server.terminate();
    assert!(status.success());
    let server = Hookgate::start_in(&dir);
    let run = finished(&server, &run_id).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    assert_eq!(chat.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_refusal_fails_the_run_until_the_operator_retries_it() {
    let port = free_port();
    // The upstream serves its hooks under /ingress and refuses request session keys.
    let mut upstream_config = base_config();
    set(&mut upstream_config, "hooks.path", json!("/ingress"));
    let upstream_dir = ConfigDir::new(&upstream_config);
    let upstream = Hookgate::try_start_on(&upstream_dir, port).unwrap();
    let mut config = base_config();
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{port}"), "path": "ingress", "token": HOOK_TOKEN,
               "relaySessionKey": true}),
    );
    let (forwarder, _dir) = Hookgate::start(&config);
    let run_id = agent(
        &forwarder,
        json!({"message": "keyed", "sessionKey": "hook:ops"}),
    )
    .await;
    let run = finished(&forwarder, &run_id).await;
    assert_eq!(run["status"], "forward_failed", "{run}");
    assert!(
        run["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("upstream answered 400: sessionKey is disabled")),
        "{run}"
    );
    let (_, listed) = json_of(
        forwarder
            .api("/api/runs?status=forward_failed")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(listed["runs"][0]["runId"], run_id.as_str(), "{listed}");
    let metrics = forwarder
        .api("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"hookgate_runs{status="forward_failed"} 1"#),
        "{metrics}"
    );

    // Nothing to retry for an unknown run; the operator mends the upstream, then retries.
    let retry = |id: &str| {
        client()
            .post(forwarder.url(&format!("/api/runs/{id}/retry")))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
    };
    assert_eq!(retry("no-such-run").await.unwrap().status(), 404);
    set(
        &mut upstream_config,
        "hooks.allowRequestSessionKey",
        json!(true),
    );
    upstream_dir.write(&upstream_config);
    eventually("the upstream to reload", async || {
        let (_, status) = json_of(upstream.api("/api/config").send().await.unwrap()).await;
        status["generation"] == 2
    })
    .await;
    let (status, retried) = json_of(retry(&run_id).await.unwrap()).await;
    assert_eq!(status, 200, "{retried}");
    let run = finished(&forwarder, &run_id).await;
    assert_eq!(run["status"], "forwarded", "{run}");
    let upstream_run = upstream
        .run_of(&json!({"runId": run["upstreamRunId"]}))
        .await;
    assert_eq!(upstream_run["sessionKey"], "hook:ops");
    let (status, _) = json_of(retry(&run_id).await.unwrap()).await;
    assert_eq!(status, 409, "a forwarded run has nothing to retry");
}
