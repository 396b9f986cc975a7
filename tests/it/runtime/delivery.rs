use super::*;

pub(super) async fn every_channel_adapter_speaks_its_api(backend: Backend) {
    let provider = Fake::provider("Reply text").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = backend.start(&config);
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
            // An incoming webhook: its conversation is its URL, no recipient is named.
            "msteams",
            "",
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
        let request = match to {
            "" => json!({"message": "m", "channel": channel}),
            to => json!({"message": "m", "channel": channel, "to": to}),
        };
        let run = finished(&server, &agent(&server, request).await).await;
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

pub(super) async fn the_last_route_belongs_to_the_owner_not_to_hook_runs(backend: Backend) {
    let provider = Fake::provider("hello").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["defaultRoute"] = json!({"channel": "signal", "to": "+1999"});
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn acknowledgement_replies_are_not_sent_but_summarised(backend: Backend) {
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
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn failed_sends_are_retried_with_backoff(backend: Backend) {
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
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn a_send_that_keeps_failing_is_recorded_and_summarised(backend: Backend) {
    let provider = Fake::provider("the reply").await;
    let chat = Fake::start(|_, _| Answer::Text(500, "down".into())).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 3, "baseDelayMs": 10});
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn an_unconfigured_channel_fails_without_retries(backend: Backend) {
    let provider = Fake::provider("x").await;
    let (server, _dir) = backend.start(&with_provider(&provider));
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

pub(super) async fn a_refusal_is_given_up_at_once_with_the_apis_reason(backend: Backend) {
    let provider = Fake::provider("the reply").await;
    let chat = Fake::start(|_, _| {
        Answer::Json(
            403,
            json!({"ok": false, "description": "Forbidden: bot was blocked by the user"}),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 5, "baseDelayMs": 10});
    let (server, _dir) = backend.start(&config);
    let body = json!({"message": "m", "channel": "telegram", "to": "42", "name": "Blocked"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["delivery"]["status"], "failed", "{run}");
    assert_eq!(run["delivery"]["attempts"], 1);
    let error = run["delivery"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("telegram answered 403") && error.contains("bot was blocked"),
        "{error}"
    );
    assert_eq!(chat.requests().len(), 1);
}

pub(super) async fn a_throttled_send_waits_for_its_retry_after(backend: Backend) {
    let provider = Fake::provider("the reply").await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let chat = Fake::start({
        let seen = seen.clone();
        move |_, i| {
            seen.lock().unwrap().push(std::time::Instant::now());
            if i == 0 {
                Answer::Header(
                    "retry-after",
                    "1".into(),
                    Box::new(Answer::Json(
                        429,
                        json!({"ok": false, "error": "ratelimited"}),
                    )),
                )
            } else {
                Answer::Json(200, json!({"ok": true}))
            }
        }
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 3, "baseDelayMs": 1});
    let (server, _dir) = backend.start(&config);
    let body = json!({"message": "m", "channel": "slack", "to": "C1"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(
        (
            run["delivery"]["status"].as_str(),
            run["delivery"]["attempts"].as_u64()
        ),
        (Some("sent"), Some(2)),
        "{run}"
    );
    let seen = seen.lock().unwrap();
    // A lower bound the code enforces, not a measurement: without Retry-After the backoff here is
    // at most a millisecond.
    assert!(
        seen[1] - seen[0] >= Duration::from_millis(950),
        "{:?}",
        seen[1] - seen[0]
    );
}

pub(super) async fn a_long_reply_is_split_to_the_channels_limit_in_order(backend: Backend) {
    let paragraph = "word ".repeat(500); // 2500 characters
    let reply = format!(
        "{}\n{}\n{}",
        paragraph.trim_end(),
        paragraph.trim_end(),
        "the end"
    );
    let provider = Fake::start({
        let reply = reply.clone();
        move |_, _| Answer::Json(200, chat_reply(&reply))
    })
    .await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = backend.start(&config);
    let body = json!({"message": "m", "channel": "telegram", "to": "42"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    let parts: Vec<String> = chat
        .requests()
        .iter()
        .map(|r| r.body["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        parts.len(),
        2,
        "{:?}",
        parts.iter().map(String::len).collect::<Vec<_>>()
    );
    assert!(parts.iter().all(|p| p.chars().count() <= 4096));
    assert_eq!(parts[0], paragraph.trim_end(), "split at the line break");
    assert_eq!(parts.join("\n"), reply);
}

pub(super) async fn msteams_refuses_a_recipient_and_records_none(backend: Backend) {
    let provider = Fake::provider("to the team").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["defaultRoute"] = json!({"channel": "msteams"});
    let (server, _dir) = backend.start(&config);
    let (status, refused) = json_of(
        server
            .hook("/hooks/agent")
            .json(&json!({"message": "m", "channel": "msteams", "to": "19:abc"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["error"],
        "to cannot be used with channel msteams: its incoming webhook posts to one conversation"
    );
    // `last` on an msteams default route, with a `to`: sent to the webhook, and the record says
    // where it really went: no recipient.
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "to": "x"})).await,
    )
    .await;
    assert_eq!(
        (
            run["delivery"]["status"].as_str(),
            run["delivery"]["channel"].as_str(),
            run["delivery"]["to"].as_str()
        ),
        (Some("sent"), Some("msteams"), None),
        "{run}"
    );
}

pub(super) async fn a_retried_split_reply_sends_only_the_parts_not_yet_sent(backend: Backend) {
    let first = "a".repeat(2000);
    let reply = format!("{first}\nsecond part");
    let provider = Fake::start({
        let reply = reply.clone();
        move |_, _| Answer::Json(200, chat_reply(&reply))
    })
    .await;
    // Discord takes 2000 characters: two parts; the second fails once.
    let chat = Fake::start(|_, i| match i {
        1 => Answer::Text(503, "busy".into()),
        _ => Answer::Json(200, json!({"id": "1"})),
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    config["channels"]["retry"] = json!({"attempts": 3, "baseDelayMs": 10});
    let (server, _dir) = backend.start(&config);
    let body =
        json!({"message": "m", "channel": "discord", "to": "D1", "wakeMode": "next-heartbeat"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(
        (
            run["delivery"]["status"].as_str(),
            run["delivery"]["attempts"].as_u64()
        ),
        (Some("sent"), Some(2)),
        "{run}"
    );
    let sent: Vec<String> = chat
        .requests()
        .iter()
        .map(|r| r.body["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, [first.as_str(), "second part", "second part"]);
}
