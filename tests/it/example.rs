//! The bundled example configuration runs as is, with the example transforms and payloads.

use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn example_config_serves_its_mappings() {
    let dir = ConfigDir::new(&json!({}));
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    dir.write_text(&std::fs::read_to_string(example.join("hookgate.json5")).unwrap());
    install_transforms(&dir, &["github", "slack", "stripe", "passthrough"]);
    let env = [("HOOK_TOKEN", HOOK_TOKEN), ("GATEWAY_TOKEN", GATEWAY_TOKEN)];
    let server = Hookgate::try_start_in(&dir, &env).unwrap();
    let payload = |name: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(example.join("payloads").join(name)).unwrap())
            .unwrap()
    };
    let cases = [
        (
            "/hooks/wake",
            None,
            serde_json::from_slice(&std::fs::read(example.join("wake.json")).unwrap()).unwrap(),
            200,
        ),
        (
            "/hooks/agent",
            None,
            serde_json::from_slice(&std::fs::read(example.join("agent.json")).unwrap()).unwrap(),
            200,
        ),
        (
            "/hooks/deploy",
            None,
            json!({"service": "api", "version": "1.2"}),
            200,
        ),
        ("/hooks/gmail", None, payload("gmail.json"), 200),
        (
            "/hooks/github",
            Some("push"),
            payload("github-push.json"),
            200,
        ),
        ("/hooks/github", Some("ping"), json!({}), 204),
        (
            "/hooks/slack",
            None,
            payload("slack-url-verification.json"),
            200,
        ),
        (
            "/hooks/stripe",
            None,
            payload("stripe-invoice-payment-failed.json"),
            200,
        ),
        (
            "/hooks/alerts",
            None,
            payload("passthrough-alert.json"),
            200,
        ),
    ];
    for (path, event, body, expected) in cases {
        let mut request = server.hook(path).json(&body);
        if let Some(event) = event {
            request = request.header("x-github-event", event);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), expected, "{path} {event:?}");
    }
    assert!(
        server
            .wake_texts()
            .await
            .contains(&"Deployed api 1.2 ()".to_string())
    );
}

/// The README's walk-through: a request to the example is captured, its redactions applied,
/// and it replays.
#[tokio::test]
async fn example_config_captures_payloads_with_redactions_and_replays_them() {
    let dir = ConfigDir::new(&json!({}));
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    dir.write_text(&std::fs::read_to_string(example.join("hookgate.json5")).unwrap());
    install_transforms(&dir, &["github", "slack", "stripe", "passthrough"]);
    let env = [("HOOK_TOKEN", HOOK_TOKEN), ("GATEWAY_TOKEN", GATEWAY_TOKEN)];
    let server = Hookgate::try_start_in(&dir, &env).unwrap();
    let body: serde_json::Value = serde_json::from_slice(
        &std::fs::read(example.join("payloads/stripe-invoice-payment-failed.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        body["data"]["object"]["customer_email"], "jenny.rosen@example.com",
        "the example payload carries what the example redacts"
    );
    let response = server
        .hook("/hooks/stripe")
        .header("x-api-key", "key-from-the-sender")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = request_id(&response);

    let mut record = serde_json::Value::Null;
    eventually("the stripe request's record", async || {
        let (status, body) = json_of(
            server
                .api(&format!("/api/requests/{id}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        record = body;
        status == 200
    })
    .await;
    assert_eq!(record["mappingId"], "stripe", "{record}");
    assert_eq!(record["captured"], true, "{record}");
    let headers = record["capture"]["headers"].as_array().unwrap();
    assert!(
        headers.contains(&json!(["x-api-key", "[redacted]"])),
        "{record}"
    );
    let captured: serde_json::Value =
        serde_json::from_str(record["capture"]["body"].as_str().unwrap()).unwrap();
    let mut expected = body.clone();
    expected["data"]["object"]["customer_email"] = json!("[redacted]");
    assert_eq!(captured, expected);
    assert_eq!(record["replayRefusal"], serde_json::Value::Null, "{record}");

    let (status, replayed) = json_of(
        client()
            .post(server.url(&format!("/api/requests/{id}/replay")))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["replayOf"], id.as_str());
    assert_eq!(replayed["status"], 200, "{replayed}");
    assert_eq!(replayed["answer"]["ok"], true, "{replayed}");
    let (_, original) = json_of(
        server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(original["replays"], json!([replayed["requestId"]]));
}
