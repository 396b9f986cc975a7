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
