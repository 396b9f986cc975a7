//! What was answered 200 survives: a restart, a SIGTERM, a SIGKILL right after the answer.

use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn wake_events_queued_runs_and_idempotency_survive_a_restart() {
    let dir = ConfigDir::new(&base_config());
    let server = Hookgate::start_in(&dir);
    server
        .hook("/hooks/wake")
        .json(&json!({"text": "before restart"}))
        .send()
        .await
        .unwrap();
    let (_, first) = json_of(
        server
            .hook("/hooks/agent")
            .header("idempotency-key", "k1")
            .json(&json!({"message": "m"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let (status, _) = server.terminate();
    assert!(status.success());

    let server = Hookgate::start_in(&dir);
    assert_eq!(server.wake_texts().await, ["before restart"]);
    let run_id = first["runId"].as_str().unwrap();
    let (status, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(run["runId"], first["runId"], "{run}");
    let (_, again) = json_of(
        server
            .hook("/hooks/agent")
            .header("idempotency-key", "k1")
            .json(&json!({"message": "m"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(again["runId"], first["runId"]);
}

#[tokio::test]
async fn nothing_answered_200_is_lost_on_sigkill() {
    let dir = ConfigDir::new(&base_config());
    let server = Hookgate::start_in(&dir);
    let mut acknowledged = Vec::new();
    let mut runs = Vec::new();
    for i in 0..50 {
        let text = format!("acked {i}");
        let r = server
            .hook("/hooks/wake")
            .json(&json!({"text": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        acknowledged.push(text);
        let (_, body) = server
            .hook_json("/hooks/agent", &json!({"message": i.to_string()}))
            .await;
        runs.push(body["runId"].as_str().unwrap().to_string());
    }
    server.kill();

    let server = Hookgate::start_in(&dir);
    assert_eq!(server.wake_texts().await, acknowledged);
    for run_id in runs {
        let r = server
            .api(&format!("/api/runs/{run_id}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "run {run_id} lost");
    }
}

#[tokio::test]
async fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = base_config();
    set(&mut config, "hooks.bodyTimeoutSeconds", json!(20));
    let dir = ConfigDir::new(&config);
    let server = Hookgate::start_in(&dir);
    let addr = server.base.trim_start_matches("http://").to_string();
    // A request whose body is still arriving when the signal comes.
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = r#"{"text":"in flight"}"#;
    // `Expect: 100-continue` makes the server say when the handler starts reading the body: from
    // then on the request is in flight, and the signal cannot overtake it.
    let head = format!(
        "POST /hooks/wake HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {HOOK_TOKEN}\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    send_head_until_continue(&mut stream, &head).await;
    stream.write_all(&body.as_bytes()[..5]).await.unwrap();
    server.signal("-TERM");
    // Shutdown has begun once the listener is closed: new connections are refused.
    eventually("the listener to close", async || {
        tokio::net::TcpStream::connect(&addr).await.is_err()
    })
    .await;
    stream.write_all(&body.as_bytes()[5..]).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (status, _log) = server.wait();
    assert!(status.success(), "{status:?}");

    let server = Hookgate::start_in(&dir);
    assert_eq!(server.wake_texts().await, ["in flight"]);
}
