//! What an operator meets on the second day: the command line in a pipeline and its help, what
//! `check` warns about, and the answers that must be OpenClaw's (docs/cli.md,
//! docs/configuration.md, docs/coming-from-openclaw.md).

use serde_json::{Value, json};

use crate::harness::*;

async fn agent(server: &Hookgate, body: Value) -> Value {
    let (status, answer) = json_of(
        server
            .hook("/hooks/agent")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    server.run_of(&answer).await
}

#[tokio::test]
async fn a_request_timeout_of_zero_is_the_default_and_a_fraction_is_a_second() {
    let (server, _dir) = Hookgate::start(&base_config());
    let zero = agent(&server, json!({"message": "m", "timeoutSeconds": 0})).await;
    assert_eq!(zero["timeoutSeconds"], Value::Null, "{zero}");
    let half = agent(&server, json!({"message": "m", "timeoutSeconds": 0.5})).await;
    assert_eq!(half["timeoutSeconds"], 1, "{half}");
    let unknown = agent(&server, json!({"message": "m", "thinking": "hgih"})).await;
    assert_eq!(unknown["thinking"], Value::Null, "{unknown}");
}
