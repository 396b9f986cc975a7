use super::*;

pub(super) async fn run_sends_its_prompt_and_records_reply_and_summary(backend: Backend) {
    let provider = Fake::provider("Build fixed on main.\nDetails follow.").await;
    let (server, _dir) = backend.start(&with_provider(&provider));
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

pub(super) async fn run_without_model_uses_the_agent_default_and_per_agent_provider(
    backend: Backend,
) {
    let shared = Fake::provider("shared").await;
    let own = Fake::provider("own").await;
    let mut config = with_provider(&shared);
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true}, {"id": "ops", "model": "ops-model", "provider": {"baseUrl": own.base}}]),
    );
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn provider_failures_end_the_run_with_its_error_and_a_summary(backend: Backend) {
    // A refusal: no later call mends it (docs/reliability.md).
    let provider = Fake::start(|_, _| Answer::Text(404, "no such model".into())).await;
    let host = provider.base.strip_prefix("http://").unwrap().to_string();
    let (server, _dir) = backend.start(&with_provider(&provider));
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "name": "Deploy"})).await,
    )
    .await;
    let error = format!("provider {host} answered 404: no such model");
    assert_eq!(run["status"], "error");
    assert_eq!(run["error"], error);
    assert_eq!(
        summaries(&server).await,
        [format!("Hook Deploy (error): {error}")]
    );
    // The line that ends the run says why.
    let (_, log) = server.terminate();
    let line = log.lines().find(|l| l.contains("run finished"));
    assert!(line.is_some_and(|l| l.contains(&error)), "{log}");
}

pub(super) async fn malformed_provider_response_is_an_error(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Text(200, "{not json".into())).await;
    let (server, _dir) = backend.start(&with_provider(&provider));
    let run = finished(&server, &agent(&server, json!({"message": "m"})).await).await;
    assert_eq!(run["status"], "error");
    assert!(
        run["error"]
            .as_str()
            .unwrap()
            .contains("sent a malformed response"),
        "{run}"
    );
}

pub(super) async fn slow_provider_past_the_timeout_ends_the_run_as_timeout(backend: Backend) {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_secs(5),
            Box::new(Answer::Json(200, chat_reply("late"))),
        )
    })
    .await;
    let (server, _dir) = backend.start(&with_provider(&provider));
    let run = finished(
        &server,
        &agent(&server, json!({"message": "m", "timeoutSeconds": 1})).await,
    )
    .await;
    assert_eq!(run["status"], "timeout");
    assert_eq!(run["reply"], Value::Null);
}

pub(super) async fn without_a_provider_runs_end_with_an_error(backend: Backend) {
    let (server, _dir) = backend.start(&base_config());
    let run = finished(&server, &agent(&server, json!({"message": "m"})).await).await;
    assert_eq!(
        (run["status"].as_str(), run["error"].as_str()),
        (Some("error"), Some("no model provider configured"))
    );
}

pub(super) async fn runs_of_one_session_key_never_overlap_and_concurrency_is_bounded(
    backend: Backend,
) {
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
    let (server, _dir) = backend.start(&config);
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

pub(super) async fn runs_can_be_listed_by_status(backend: Backend) {
    let (server, _dir) = backend.start(&base_config());
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

pub(super) async fn a_session_key_with_a_backlog_does_not_hold_up_other_keys(backend: Backend) {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(150),
            Box::new(Answer::Json(200, chat_reply("ok"))),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    let (server, _dir) = backend.start(&config);
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

/// On the embedded store a run admitted while the runner has a slot, its session key and its
/// lane free, and nothing queued, is started in its admission's transaction: it is `running`
/// when its 200 is answered. A run of a busy session key is queued and starts after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_admitted_with_a_free_slot_is_running_when_answered() {
    let provider = Fake::slow_provider(Duration::from_secs(2), "ok").await;
    let mut config = with_provider(&provider);
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    let (server, _dir) = Backend::Embedded.start(&config);
    let quiet = |i: usize| json!({"message": format!("m {i}"), "sessionKey": "hook:one", "deliver": false, "wakeMode": "next-heartbeat"});
    let first = agent(&server, quiet(0)).await;
    let (_, run) = server.api_json(&format!("/api/runs/{first}")).await;
    assert_eq!(run["status"], "running", "{run}");
    assert!(run["startedAt"].is_string(), "{run}");
    let second = agent(&server, quiet(1)).await;
    let (_, run) = server.api_json(&format!("/api/runs/{second}")).await;
    assert_eq!(run["status"], "queued", "{run}");
    let first = finished(&server, &first).await;
    let second = finished(&server, &second).await;
    assert_eq!(
        (&first["status"], &second["status"]),
        (&json!("ok"), &json!("ok"))
    );
    assert!(
        first["finishedAt"].as_str() <= second["startedAt"].as_str(),
        "{first} {second}"
    );
}
