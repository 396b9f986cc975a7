//! Every failure says why where the operator looks (docs/operations.md#the-request-log): the
//! request log keeps the reason a sender was refused, or its mapping failed, while the sender's
//! answer stays exactly what it was; a run's error is on the line that ends it and in
//! `hookgate runs list`.

use serde_json::{Value, json};

use crate::harness::*;
use crate::signatures::sign;

const SECRET: &str = "gh-secret";

/// The record of the request answered with `response`, once the log has it.
pub(crate) async fn record_of(server: &Hookgate, response: &reqwest::Response) -> Value {
    let id = request_id(response);
    let mut record = Value::Null;
    eventually(&format!("the record of {id}"), async || {
        let answer = server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap();
        let ok = answer.status() == 200;
        record = json_of(answer).await.1;
        ok
    })
    .await;
    record
}

/// The status and body a sender got.
async fn answer_of(response: reqwest::Response) -> (u16, String) {
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Serves one mapping `id` (at path `id`) running `transform`, sends it `{}` and checks that the
/// sender got the answer of any failed transform; the server and the request's record, once logged.
async fn fail_once(id: &str, transform: Value) -> (Hookgate, Value) {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": id, "match": {"path": id}, "transform": transform}]),
    );
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let failed = server
        .hook(&format!("/hooks/{id}"))
        .json(&json!({}))
        .send()
        .await;
    let failed = failed.unwrap();
    let record = record_of(&server, &failed).await;
    assert_eq!(
        answer_of(failed).await,
        (
            500,
            r#"{"ok":false,"error":"hook mapping failed"}"#.to_string()
        )
    );
    (server, record)
}

#[tokio::test]
async fn a_failed_transform_keeps_its_own_error_and_the_sender_gets_the_same_answer() {
    // The hostile fixture answers an error of its own words where it finds no environment.
    let transform = json!({"module": "hostile.wasm", "config": {"mode": "env"}});
    let (server, record) = fail_once("env", transform).await;
    assert_eq!(record["error"], "hook mapping failed");
    assert_eq!(record["transform"]["failure"], "error");
    assert_eq!(record["reason"], "no environment", "{record}");

    let id = record["id"].as_str().unwrap();
    let out = std::process::Command::new(binary())
        .args(["requests", "show", id, "--url", &server.base])
        .env("HOOKGATE_GATEWAY_TOKEN", GATEWAY_TOKEN)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    let line = shown.lines().find(|l| l.starts_with("reason"));
    assert!(
        line.is_some_and(|l| l.ends_with("  no environment")),
        "{shown}"
    );
}

/// One write to stdout larger than the mapping's whole `logBytes` is refused by the host, and the
/// call fails as a limit breach (docs/transforms.md): the sender gets the answer of any failed
/// transform, the record and the log say `output`. The write asks for no room first, so the pipe
/// stays empty: only the refused write itself tells this breach from a trap.
#[tokio::test]
async fn one_write_larger_than_the_log_limit_fails_as_an_output_breach() {
    let transform = json!({"module": "hostile.wasm",
                           "config": {"mode": "oversized-write", "bytes": 65536},
                           "limits": {"logBytes": 1024}});
    let (server, record) = fail_once("loud", transform).await;
    assert_eq!(record["transform"]["failure"], "output", "{record}");
    assert_eq!(
        record["reason"], "output limit exceeded: stdout/stderr over 1024 bytes",
        "{record}"
    );
    let (_, log) = server.terminate();
    assert!(
        log.lines().any(|l| l.contains("transform failed")
            && l.contains("mapping=loud")
            && l.contains("cause=\"output\"")),
        "{log}"
    );
}

#[tokio::test]
async fn an_unauthorized_request_is_recorded_with_why_and_answered_as_before() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "gh", "match": {"path": "gh"}, "messageTemplate": "push {{ref}}",
                "signature": {"scheme": "github", "secret": SECRET, "acceptToken": false}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = br#"{"ref":"main"}"#;
    let unauthorized = (401, "Unauthorized".to_string());
    let send = async |path: &str, headers: &[(String, String)], token: Option<&str>| {
        let mut request = client().post(server.url(path)).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let record = record_of(&server, &response).await;
        (answer_of(response).await, record["reason"].clone())
    };

    let mut forged = sign("github", "not-the-secret", body, 0, "d-1");
    let reason = "signature refused: signature does not match";
    assert_eq!(
        send("/hooks/gh", &forged, None).await,
        (unauthorized.clone(), json!(reason))
    );
    forged.retain(|(name, _)| name != "x-hub-signature-256");
    let reason = "signature refused: missing header x-hub-signature-256";
    assert_eq!(
        send("/hooks/gh", &forged, None).await,
        (unauthorized.clone(), json!(reason))
    );
    // The mapping refuses the hook token: a policy of its own.
    let reason = "mapping gh accepts its signature only, not the hook token";
    assert_eq!(
        send("/hooks/gh", &[], Some(HOOK_TOKEN)).await,
        (unauthorized.clone(), json!(reason))
    );
    let reason = "the token does not match";
    assert_eq!(
        send("/hooks/wake", &[], Some("wrong")).await,
        (unauthorized.clone(), json!(reason))
    );
    let reason = "no token presented";
    assert_eq!(
        send("/hooks/wake", &[], None).await,
        (unauthorized, json!(reason))
    );
}
