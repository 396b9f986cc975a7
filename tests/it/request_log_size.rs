//! The request log stays within what the operator configured, whatever is sent
//! (docs/operations.md#the-request-log): a refused request's path is kept cut, and the log's size
//! bound prunes the oldest records first.

use serde_json::{Value, json};

use crate::harness::*;

/// The longest path or hook name a record keeps (src/gateway/requests.rs).
const MAX_RECORDED_PATH: usize = 256;

async fn record(server: &Hookgate, id: &str) -> (u16, Value) {
    json_of(
        server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Record `id`, once the log's writer has committed it.
async fn recorded(server: &Hookgate, id: &str) -> Value {
    let mut kept = Value::Null;
    eventually("the request's record", async || {
        let (status, body) = record(server, id).await;
        kept = body;
        status == 200
    })
    .await;
    kept
}

#[tokio::test]
async fn a_refused_request_keeps_a_cut_path_and_cannot_be_replayed() {
    let (server, _dir) = Hookgate::start(&base_config());
    let name = "a".repeat(65_000);
    let response = client()
        .post(server.url(&format!("/hooks/{name}")))
        .bearer_auth("wrong-token")
        .json(&json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let kept = recorded(&server, &request_id(&response)).await;
    for field in ["target", "hook"] {
        let text = kept[field].as_str().unwrap();
        assert!(text.ends_with('…'), "{field} is marked as cut");
        assert!(text.len() <= MAX_RECORDED_PATH + '…'.len_utf8(), "{field}");
    }
    assert!(kept["replayRefusal"].is_string(), "{kept}");
}

#[tokio::test]
async fn the_log_is_pruned_oldest_first_to_its_size_bound() {
    const BOUND: u64 = 1024 * 1024;
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "gateway.retention.requestsMaxBytes",
        json!(BOUND),
    );
    let (server, dir) = Hookgate::start(&config);
    // Sixty captured requests of ~48 KB each: nearly three times the bound.
    let filler = "x".repeat(48 * 1024);
    let mut ids = Vec::new();
    for i in 0..60 {
        let response = server
            .hook("/hooks/agent")
            .json(&json!({"message": format!("{i} {filler}"), "deliver": false}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        ids.push(request_id(&response));
    }
    recorded(&server, ids.last().unwrap()).await;
    let (status, _) = record(&server, &ids[0]).await;
    assert_eq!(status, 404, "the oldest record was pruned");
    let log = dir.path().join("state/requests.db");
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(
        size <= BOUND + BOUND / 2,
        "requests.db is {size} bytes, bound {BOUND}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics
            .lines()
            .filter_map(
                |l| l.strip_prefix("hookgate_request_log_records_total{outcome=\"pruned\"} ")
            )
            .any(|count| count != "0"),
        "{metrics}"
    );
}

#[test]
fn a_size_bound_under_a_mebibyte_is_refused() {
    let mut config = base_config();
    set(
        &mut config,
        "gateway.retention.requestsMaxBytes",
        json!(4096),
    );
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("gateway.retention.requestsMaxBytes: must be 0 (no bound) or at least"),
        "{output}"
    );
}

#[tokio::test]
async fn a_refused_request_keeps_a_cut_method() {
    let (server, _dir) = Hookgate::start(&base_config());
    let method = reqwest::Method::from_bytes("X".repeat(60_000).as_bytes()).unwrap();
    let response = client()
        .request(method, server.url("/hooks/wake"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 405);
    let kept = recorded(&server, &request_id(&response)).await;
    let method = kept["method"].as_str().unwrap();
    assert!(method.ends_with('…'), "{method}");
    assert!(method.len() <= 32 + '…'.len_utf8(), "{}", method.len());
}
