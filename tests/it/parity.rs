//! The same requests sent to the real OpenClaw gateway (2026.9.6, from the npm registry, installed
//! by `scripts/install-openclaw`) and to hookgate, both started on one `openclaw.json`, get the
//! same answers: status and body, run ids aside. The differences hookgate keeps on purpose are in
//! docs/coming-from-openclaw.md and are not sent here. One mapping's transform is a JavaScript
//! module written for OpenClaw (transforms/fixtures/js/partial.mjs): OpenClaw imports it, hookgate
//! runs the component built from it.

use serde_json::{Value, json};

use crate::harness::*;
use crate::js::js_transforms;
use crate::openclaw::OpenClaw;

const TOKEN: &str = "parity-hook-token-0123456789abcdef";
const GW_TOKEN: &str = "parity-gateway-token-0123456789ab";

/// The one configuration file both gateways run.
fn openclaw_json(state: &std::path::Path) -> Value {
    json!({
        "gateway": {"mode": "local", "bind": "loopback", "auth": {"mode": "token", "token": GW_TOKEN}},
        "hooks": {
            "enabled": true,
            "token": TOKEN,
            "defaultSessionKey": "hook:ingress",
            "allowRequestSessionKey": true,
            "allowedSessionKeyPrefixes": ["hook:"],
            "presets": ["gmail"],
            "mappings": [
                {"id": "deploy", "match": {"path": "deploy"}, "action": "wake", "wakeMode": "next-heartbeat",
                 "textTemplate": "Deployed {{service}} {{version}} {{meta}}"},
                {"id": "empty", "match": {"path": "empty"}, "action": "agent", "messageTemplate": "m",
                 "sessionKey": "{{ missing }}"},
                {"id": "blank", "match": {"path": "blank"}, "action": "wake", "textTemplate": "{{ missing }}"},
                {"id": "wake-key", "match": {"path": "wake-key"}, "action": "wake",
                 "wakeMode": "next-heartbeat", "sessionKey": "hook:later", "textTemplate": "t"},
                {"id": "partial", "match": {"path": "partial"}, "action": "agent",
                 "messageTemplate": "base {{case}}", "transform": {"module": "partial.mjs"}},
                {"id": "named", "match": {"path": "named"}, "action": "agent", "messageTemplate": "m",
                 "transform": {"module": "partial.mjs", "export": "named"}},
                {"id": "not-a-function", "match": {"path": "not-a-function"}, "action": "agent",
                 "messageTemplate": "m", "transform": {"module": "partial.mjs", "export": "notAFunction"}},
            ],
        },
        "logging": {"file": state.join("openclaw.log")},
    })
}

/// One request: its path and its body, as bytes.
struct Exchange {
    path: &'static str,
    body: Vec<u8>,
}

fn post(path: &'static str, body: Value) -> Exchange {
    Exchange {
        path,
        body: body.to_string().into_bytes(),
    }
}

/// Status and body, with run ids replaced (they are each gateway's own).
async fn answer(base: &str, exchange: &Exchange) -> (u16, Value) {
    let response = client()
        .post(format!("{base}{}", exchange.path))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(exchange.body.clone())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let mut body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if let Some(id) = body.get_mut("runId") {
        *id = json!("<run id>");
    }
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_requests_get_the_same_answers() {
    // Each gateway's transforms directory is hooks/transforms beside its openclaw.json: OpenClaw's
    // gets the module, hookgate's the component built from it.
    let built = js_transforms();
    let mut openclaw = OpenClaw::start_with(|state| {
        let transforms = state.join("hooks/transforms");
        std::fs::create_dir_all(&transforms).unwrap();
        std::fs::copy(built.join("partial.mjs"), transforms.join("partial.mjs")).unwrap();
        openclaw_json(state)
    });
    // hookgate ignores `logging`, with a warning: any path will do.
    let dir = ConfigDir::new(&openclaw_json(std::path::Path::new("/tmp")));
    install_from(built, &dir, &["partial"]);
    let hookgate = Hookgate::start_in(&dir);
    openclaw.ready().await;

    let exchanges = [
        // Wakes: the event outcome, and OpenClaw's newer fields.
        post(
            "/hooks/wake",
            json!({"text": "A", "mode": "next-heartbeat"}),
        ),
        post(
            "/hooks/wake",
            json!({"text": " A ", "mode": "next-heartbeat"}),
        ),
        post(
            "/hooks/wake",
            json!({"text": "B", "mode": "next-heartbeat"}),
        ),
        post("/hooks/wake", json!({})),
        post("/hooks/wake", json!({"text": "t", "agentId": ""})),
        post("/hooks/wake", json!({"text": "t", "sessionKey": 5})),
        post(
            "/hooks/wake",
            json!({"text": "t", "sessionKey": "hook:x", "mode": "next-heartbeat"}),
        ),
        post("/hooks/wake", json!({"text": "t", "sessionKey": "other:x"})),
        Exchange {
            path: "/hooks/wake",
            body: b"\xef\xbb\xbf{\"text\":\"with a byte-order mark\",\"mode\":\"next-heartbeat\"}"
                .to_vec(),
        },
        // Agent fields, in OpenClaw's order of checks.
        post(
            "/hooks/agent",
            json!({"message": "m", "waitForCompletion": "yes"}),
        ),
        post("/hooks/agent", json!({})),
        post("/hooks/agent", json!({"message": "m", "agentId": 5})),
        post(
            "/hooks/agent",
            json!({"message": "m", "sessionMode": "shared"}),
        ),
        post(
            "/hooks/agent",
            json!({"message": "m", "sessionMode": "persistent"}),
        ),
        post(
            "/hooks/agent",
            json!({"message": "m", "sessionKey": "other:x"}),
        ),
        // (No channel is sent: OpenClaw takes only the channels whose plugins it runs, none here,
        // and lists them in its message.)
        post("/hooks/agent", json!({"message": "m", "model": ""})),
        // Kept as the run's own, or not (the run records show which: `a_request_timeout_...`).
        post("/hooks/agent", json!({"message": "m", "timeoutSeconds": 0})),
        post(
            "/hooks/agent",
            json!({"message": "m", "timeoutSeconds": 0.5}),
        ),
        post("/hooks/agent", json!({"message": "m", "thinking": "hgih"})),
        // Mapped hooks.
        post(
            "/hooks/deploy",
            json!({"service": "api", "version": 10.0, "meta": {"b": 1, "2": 2}}),
        ),
        post("/hooks/empty", json!({})),
        post("/hooks/blank", json!({})),
        post("/hooks/wake-key", json!({})),
        post("/hooks/gmail", json!({"messages": []})),
        post("/hooks/gmail", json!({})),
        post("/hooks/nothing-maps-this", json!({})),
        // A JavaScript transform: what it returns, merged into the mapping's action.
        post("/hooks/partial", json!({"case": "to"})),
        post("/hooks/partial", json!({"case": "undeliver"})),
        post("/hooks/partial", json!({"case": "wrong-types"})),
        post("/hooks/partial", json!({"case": "blank-message"})),
        post("/hooks/partial", json!({"case": "to-wake"})),
        post("/hooks/partial", json!({"case": "to-wake-text"})),
        post("/hooks/partial", json!({"case": "weird-session-mode"})),
        post("/hooks/partial", json!({"case": "key"})),
        post("/hooks/partial", json!({"case": "static-key"})),
        post("/hooks/partial", json!({"case": "blank-key"})),
        post("/hooks/partial", json!({"case": "string"})),
        post("/hooks/partial", json!({"case": "empty"})),
        post("/hooks/partial", json!({"case": "null"})),
        post("/hooks/partial?x=1", json!({"case": "url"})),
        post("/hooks/partial", json!({"case": "throw"})),
        post("/hooks/named", json!({"case": "n"})),
        post("/hooks/not-a-function", json!({})),
    ];
    let mut differences = Vec::new();
    for exchange in &exchanges {
        let theirs = answer(&openclaw.url(), exchange).await;
        let ours = answer(&hookgate.base, exchange).await;
        if theirs != ours {
            differences.push(format!(
                "{} {}\n  OpenClaw: {theirs:?}\n  hookgate: {ours:?}",
                exchange.path,
                String::from_utf8_lossy(&exchange.body)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} answers differ:\n{}\n{}",
        differences.len(),
        exchanges.len(),
        differences.join("\n"),
        openclaw.log()
    );
}
