//! A model provider that fails for a moment (docs/reliability.md#a-model-provider-that-fails-for-a-moment):
//! its runs call it again, after a growing wait and at least its `Retry-After`, within their
//! own timeout, and each call and its cause is in the run's record; a refusal is not called
//! again. The provider is a real HTTP server on loopback that fails as real ones do: not
//! listening yet, overloaded, throttling, refusing.

use super::*;

/// Runs sent while the provider is down.
const RUNS: usize = 8;

/// How long the provider is down: the outage itself, not a synchronisation.
const OUTAGE: Duration = Duration::from_secs(2);

/// A provider at `127.0.0.1:<port>`, whatever listens there (nothing, at first), with room for
/// every run at once.
fn provider_at(port: u16) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": format!("http://127.0.0.1:{port}"), "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("default-model"));
    set(&mut config, "agents.defaults.maxConcurrent", json!(RUNS));
    config
}

/// A run that reaches no heartbeat: the provider's calls are its own.
fn quiet_run(timeout_seconds: u64) -> Value {
    json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat",
           "timeoutSeconds": timeout_seconds})
}

/// The errors of a run's recorded model calls, in order (`null` for the call that answered).
fn call_errors(run: &Value) -> Vec<Value> {
    run["modelCalls"]
        .as_array()
        .unwrap_or_else(|| panic!("no modelCalls: {run}"))
        .iter()
        .map(|call| call["error"].clone())
        .collect()
}

pub(super) async fn runs_sent_while_the_provider_is_down_end_ok_once_it_is_up(backend: Backend) {
    let port = free_port();
    let (server, _kept) = backend.start(&provider_at(port));
    let down_since = tokio::time::Instant::now();
    let mut run_ids = Vec::new();
    for _ in 0..RUNS {
        run_ids.push(agent(&server, quiet_run(60)).await);
    }
    tokio::time::sleep_until(down_since + OUTAGE).await;
    let provider = Fake::start_on(port, |_, _| Answer::Json(200, chat_reply("back"))).await;

    let mut ended_ok = 0;
    for run_id in &run_ids {
        let run = finished(&server, run_id).await;
        ended_ok += usize::from(run["status"] == "ok");
        let errors = call_errors(&run);
        assert_eq!(
            errors.first(),
            Some(&json!("unreachable: connection refused")),
            "{run}"
        );
        assert_eq!(errors.last(), Some(&Value::Null), "{run}");
        let calls = run["modelCalls"].as_array().unwrap();
        assert_eq!(calls[0]["provider"], format!("127.0.0.1:{port}"), "{run}");
        assert!(calls[0]["retryInMs"].as_u64().is_some(), "{run}");
        assert_eq!(run["answeredBy"], "default-model", "{run}");
    }
    assert_eq!(
        ended_ok, RUNS,
        "runs that ended ok after a {OUTAGE:?} outage"
    );
    assert_eq!(provider.requests().len(), RUNS, "one answered call per run");

    // The operator sees each call in `runs show`, and the log says why each call failed.
    let shown = std::process::Command::new(binary())
        .args(["runs", "show", &run_ids[0], "--url", &server.base])
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("unreachable: connection refused"), "{shown}");
    let (_, log) = server.terminate();
    assert!(
        log.lines()
            .any(|l| l.contains("model call failed") && l.contains("connection refused")),
        "{log}"
    );
}

pub(super) async fn an_overloaded_provider_is_called_again_and_the_run_ends_ok(backend: Backend) {
    let provider = Fake::start(|_, i| match i {
        0 => Answer::Text(503, "overloaded".into()),
        _ => Answer::Json(200, chat_reply("done")),
    })
    .await;
    let (server, _kept) = backend.start(&with_provider(&provider));
    let run = finished(&server, &agent(&server, quiet_run(60)).await).await;
    assert_eq!(
        (&run["status"], &run["reply"]),
        (&json!("ok"), &json!("done")),
        "{run}"
    );
    assert_eq!(
        call_errors(&run),
        [json!("answered 503: overloaded"), Value::Null],
        "{run}"
    );
    assert_eq!(provider.requests().len(), 2);
}

pub(super) async fn a_throttled_provider_is_called_again_after_its_retry_after(backend: Backend) {
    let provider = Fake::start(|_, i| match i {
        0 => Answer::Header(
            "retry-after",
            "2".into(),
            Box::new(Answer::Json(429, json!({"error": "slow down"}))),
        ),
        _ => Answer::Json(200, chat_reply("done")),
    })
    .await;
    let (server, _kept) = backend.start(&with_provider(&provider));
    let run = finished(&server, &agent(&server, quiet_run(60)).await).await;
    assert_eq!(run["status"], "ok", "{run}");
    let calls = run["modelCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{run}");
    assert!(
        calls[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("answered 429"),
        "{run}"
    );
    assert!(
        calls[0]["retryInMs"].as_u64() >= Some(2000),
        "the wait honours Retry-After: {run}"
    );
}

pub(super) async fn a_refusal_is_not_called_again(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Json(400, json!({"error": "bad request"}))).await;
    let (server, _kept) = backend.start(&with_provider(&provider));
    let run = finished(&server, &agent(&server, quiet_run(60)).await).await;
    let host = provider.base.strip_prefix("http://").unwrap();
    assert_eq!(run["status"], "error", "{run}");
    assert_eq!(
        run["error"],
        format!(r#"provider {host} answered 400: {{"error":"bad request"}}"#),
        "{run}"
    );
    assert_eq!(run["modelCalls"].as_array().unwrap().len(), 1, "{run}");
    assert_eq!(run["modelCalls"][0]["retryInMs"], Value::Null, "{run}");
    assert_eq!(provider.requests().len(), 1);
}

pub(super) async fn a_provider_down_past_the_deadline_names_itself_and_the_cause(backend: Backend) {
    let port = free_port();
    let mut config = provider_at(port);
    // Credentials in the URL, as a careless operator writes them: never in a record or a log.
    set(
        &mut config,
        "agents.defaults.provider.baseUrl",
        json!(format!("http://admin:pw-in-url@127.0.0.1:{port}/v1")),
    );
    let (server, _kept) = backend.start(&config);
    let run = finished(&server, &agent(&server, quiet_run(2)).await).await;
    assert_eq!(run["status"], "error", "{run}");
    let error = run["error"].as_str().unwrap();
    let calls = run["modelCalls"].as_array().unwrap();
    assert!(calls.len() >= 2, "called again within its 2 s: {run}");
    assert_eq!(
        error,
        format!(
            "provider 127.0.0.1:{port} unreachable: connection refused (after {} calls)",
            calls.len()
        )
    );
    let (_, log) = server.terminate();
    for shown in [run.to_string(), log] {
        assert!(
            !shown.contains("pw-in-url") && !shown.contains("admin:"),
            "{shown}"
        );
    }
}
