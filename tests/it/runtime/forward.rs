use super::*;

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
    let metrics = forwarder.metrics().await;
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
