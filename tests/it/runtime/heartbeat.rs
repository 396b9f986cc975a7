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
