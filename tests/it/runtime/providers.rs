use super::*;

/// An Anthropic Messages API answer with a thinking block and `text`.
fn anthropic_reply(text: &str) -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [
            {"type": "thinking", "thinking": "Let me see.", "signature": "sig"},
            {"type": "text", "text": text},
        ],
        "stop_reason": "end_turn",
    })
}

pub(super) async fn named_providers_speak_their_wire_format_and_take_the_model_without_prefix(
    backend: Backend,
) {
    let openai = Fake::provider("from openai").await;
    let anthropic = Fake::start(|_, _| Answer::Json(200, anthropic_reply("from anthropic"))).await;
    let mut config = base_config();
    set(
        &mut config,
        "models.providers",
        json!({
            "openai": {"baseUrl": format!("{}/v1", openai.base), "apiKey": "sk-openai"},
            "anthropic": {"baseUrl": anthropic.base, "apiKey": "sk-ant", "api": "anthropic-messages"},
        }),
    );
    set(
        &mut config,
        "agents.defaults.model",
        json!("openai/gpt-4.1-mini"),
    );
    let (server, _dir) = backend.start(&config);
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "deliver": false})).await,
    )
    .await;
    assert_eq!(
        (run["reply"].as_str(), run["answeredBy"].as_str()),
        (Some("from openai"), Some("openai/gpt-4.1-mini")),
        "{run}"
    );
    let sent = &openai.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.body["model"], "gpt-4.1-mini");
    assert_eq!(sent.header("authorization"), Some("Bearer sk-openai"));

    let body = json!({"message": "m", "deliver": false, "model": "anthropic/claude-sonnet-4-5", "thinking": "medium"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["reply"], "from anthropic", "{run}");
    let sent = &anthropic.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some("sk-ant"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(sent.body["model"], "claude-sonnet-4-5");
    assert_eq!(sent.body["messages"][0]["content"], run["prompt"]);
    assert_eq!(
        sent.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 10000})
    );
    assert!(
        sent.body["max_tokens"].as_u64() > Some(10000),
        "{:?}",
        sent.body
    );
}

pub(super) async fn a_failing_model_falls_back_in_order_and_a_refusal_does_not(backend: Backend) {
    // The primary is overloaded, the first fallback is a proxy that cannot reach its model, the
    // second answers.
    let primary = Fake::start(|_, _| Answer::Json(529, json!({"error": "overloaded"}))).await;
    let second = Fake::start(|_, _| Answer::Text(502, "bad gateway".into())).await;
    let last = Fake::provider("from the last").await;
    let mut config = base_config();
    set(
        &mut config,
        "models.providers",
        json!({
            "a": {"baseUrl": primary.base},
            "b": {"baseUrl": second.base},
            "c": {"baseUrl": last.base},
        }),
    );
    set(
        &mut config,
        "agents.defaults.model",
        json!({"primary": "a/one", "fallbacks": ["b/two", "c/three"]}),
    );
    let (server, _dir) = backend.start(&config);
    // No heartbeat: it would walk the same chain and add requests.
    let body = json!({"message": "m", "deliver": false, "timeoutSeconds": 1, "wakeMode": "next-heartbeat"});
    let run = finished(&server, &agent(&server, body.clone()).await).await;
    assert_eq!(run["status"], "ok", "{run}");
    assert_eq!(run["reply"], "from the last");
    assert_eq!(run["answeredBy"], "c/three");
    assert_eq!(
        (
            primary.requests().len(),
            second.requests().len(),
            last.requests().len()
        ),
        (1, 1, 1)
    );

    // A model that takes the run's whole timeout ends the chain there: no fallback is called
    // past the run's deadline (each used to get a whole timeout of its own).
    primary.respond_with(|_, _| {
        Answer::After(
            Duration::from_secs(5),
            Box::new(Answer::Json(200, chat_reply("too late"))),
        )
    });
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["status"], "timeout", "{run}");
    assert_eq!(run["modelCalls"].as_array().unwrap().len(), 1, "{run}");
    assert_eq!(
        (second.requests().len(), last.requests().len()),
        (1, 1),
        "{run}"
    );

    // A refusal is the request's fault, not the model's: no fallback is asked.
    primary.respond_with(|_, _| Answer::Json(400, json!({"error": "bad request"})));
    let body = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["status"], "error", "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .starts_with("provider a answered 400"),
        "{run}"
    );
    assert_eq!(run["answeredBy"], Value::Null, "no model answered");
    assert_eq!(last.requests().len(), 1);
}

pub(super) async fn a_timeout_under_a_second_counts_as_one(backend: Backend) {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(300),
            Box::new(Answer::Json(200, chat_reply("in time"))),
        )
    })
    .await;
    let (server, _dir) = backend.start(&with_provider(&provider));
    let body = json!({"message": "m", "deliver": false, "timeoutSeconds": 0.5});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(
        (run["status"].as_str(), run["timeoutSeconds"].as_i64()),
        (Some("ok"), Some(1)),
        "{run}"
    );
    let body = json!({"message": "m", "deliver": false, "timeoutSeconds": 0});
    let run = finished(&server, &agent(&server, body).await).await;
    assert_eq!(run["status"], "ok", "0 is the default's limit: {run}");
}
