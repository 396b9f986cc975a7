use super::*;

pub(super) async fn wake_now_runs_a_heartbeat_over_pending_events_and_delivers_its_reply(
    backend: Backend,
) {
    let provider = Fake::provider("Deploy finished; nothing else.").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["defaultRoute"] = json!({"channel": "telegram", "to": "42"});
    let (server, _dir) = backend.start(&config);
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
    // Each event in an envelope of its own, after the notice, oldest first.
    assert!(prompt.starts_with("SECURITY NOTICE: "), "{prompt}");
    let first = prompt.find("\n---\nlater one\n<<<END_EXTERNAL_UNTRUSTED_CONTENT id=");
    let second = prompt.find("\n---\nDeploy done\n<<<END_EXTERNAL_UNTRUSTED_CONTENT id=");
    assert!(first.is_some() && first < second, "{prompt}");
    assert_eq!(
        prompt.matches("System (untrusted): [").count(),
        2,
        "{prompt}"
    );
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
        second.contains("\n---\nthird\n") && !second.contains("Deploy done"),
        "{second}"
    );
}

pub(super) async fn heartbeat_requests_close_together_make_one_heartbeat(backend: Backend) {
    let provider = Fake::provider("HEARTBEAT_OK").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = backend.start(&config);
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
        (0..5).all(|i| seen.contains(&format!("\n---\nburst {i}\n")))
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

pub(super) async fn a_wake_now_run_asks_for_a_heartbeat_even_when_its_reply_is_delivered(
    backend: Backend,
) {
    let provider = Fake::provider("Done.").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let (server, _dir) = backend.start(&config);
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "waiting for a heartbeat", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    let run = json!({"message": "m", "channel": "telegram", "to": "42", "wakeMode": "now"});
    let run = finished(&server, &agent(&server, run).await).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    eventually("the heartbeat over the pending event", async || {
        provider.requests().iter().any(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("waiting for a heartbeat"))
        })
    })
    .await;
}

pub(super) async fn replies_that_start_or_end_with_heartbeat_ok_and_say_little_are_acknowledgements(
    backend: Backend,
) {
    let replies = [
        "HEARTBEAT_OK.",
        "All quiet. HEARTBEAT_OK",
        "HEARTBEAT_OK but the disk is full",
    ];
    let provider = Fake::start(move |_, i| Answer::Json(200, chat_reply(replies[i % 3]))).await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    set(
        &mut config,
        "agents.defaults.heartbeat.ackMaxChars",
        json!(10),
    );
    let (server, _dir) = backend.start(&config);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let body = json!({"message": "m", "channel": "telegram", "to": "42", "wakeMode": "next-heartbeat"});
        let run = finished(&server, &agent(&server, body).await).await;
        statuses.push(run["delivery"]["status"].as_str().unwrap().to_string());
    }
    assert_eq!(statuses, ["skipped", "skipped", "sent"]);
    assert_eq!(chat.requests().len(), 1);
    assert_eq!(
        chat.requests()[0].body["text"],
        "HEARTBEAT_OK but the disk is full"
    );
}

pub(super) async fn periodic_heartbeats_run_while_events_are_pending(backend: Backend) {
    let provider = Fake::provider("HEARTBEAT_OK").await;
    let mut config = with_provider(&provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("1s"));
    let (server, _dir) = backend.start(&config);
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": "for the periodic heartbeat", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    eventually("a periodic heartbeat over the event", async || {
        provider.requests().iter().any(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.contains("for the periodic heartbeat"))
        })
    })
    .await;
    // Consumed: later periods find nothing pending and ask the model nothing.
    let asked = provider.requests().len();
    let later = server
        .hook("/hooks/wake")
        .json(&json!({"text": "second", "mode": "next-heartbeat"}))
        .send()
        .await
        .unwrap();
    assert_eq!(later.status(), 200);
    eventually("the next period's heartbeat", async || {
        provider.requests().len() > asked
    })
    .await;
    let last = provider.requests().into_iter().last().unwrap();
    let prompt = last.body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        prompt.contains("second") && !prompt.contains("for the periodic"),
        "{prompt}"
    );
}
