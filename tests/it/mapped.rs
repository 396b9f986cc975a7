//! docs/hooks.md: mapped hooks with templates and the gmail preset (no transforms here).

use serde_json::{Value, json};

use crate::harness::*;

fn with_mappings(mappings: Value) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.mappings", mappings);
    config
}

/// Lets payloads choose session keys (a templated mapping key, the gmail preset's), under `hook:`.
fn allowing_payload_keys(mut config: Value) -> Value {
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    config
}

#[tokio::test]
async fn wake_mapping_renders_every_template_root() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([{
        "match": {"path": "deploy"}, "action": "wake", "wakeMode": "next-heartbeat",
        "textTemplate": "{{path}}: {{service}} v{{payload.version}} by {{headers.x-user}} to {{query.env}} {{meta}}",
    }])));
    let r = server
        .hook("/hooks/deploy?env=staging&env=prod")
        .header("x-user", "ana")
        .json(&json!({"service": "api", "version": 3, "meta": {"a": [1, true]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!({"ok": true, "mode": "next-heartbeat", "eventOutcome": "queued"})
        )
    );
    let events = server.events().await;
    assert_eq!(
        events[0]["text"],
        r#"deploy: api v3 by ana to prod {"a":[1,true]}"#
    );
    assert_eq!(events[0]["source"], "hook:deploy");
}

/// Values render as the OpenClaw gateway's templates render them: a repeated header's values
/// joined with `, `, whole floats without `.0`, objects with integer-like keys first; integers
/// keep every digit (there, past 2^53 they are rounded).
#[tokio::test]
async fn values_render_as_in_the_openclaw_gateway() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([{
        "match": {"path": "m"}, "action": "wake",
        "textTemplate": "{{headers.x-tag}}|{{n}}|{{small}}|{{big}}|{{o}}",
    }])));
    let body = r#"{"n": 10.0, "small": 1e-7, "big": 12345678901234567890, "o": {"b": 1, "10": 2, "2": 3.50}}"#;
    let r = server
        .hook("/hooks/m/")
        .header("x-tag", "one")
        .header("x-tag", "two")
        .header("content-type", "application/json")
        .body(format!("\u{feff}{body}"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "a trailing slash and a byte-order mark change nothing"
    );
    assert_eq!(
        server.event_texts().await,
        [r#"one, two|10|1e-7|12345678901234567890|{"2":3.5,"10":2,"b":1}"#]
    );
}

#[tokio::test]
async fn now_root_renders_rfc3339() {
    let (server, _dir) = Hookgate::start(&with_mappings(
        json!([{"match": {"path": "t"}, "action": "wake", "textTemplate": "{{now}}"}]),
    ));
    server
        .hook("/hooks/t")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let text = server.events().await[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        chrono::DateTime::parse_from_rfc3339(&text).is_ok(),
        "{text}"
    );
}

#[tokio::test]
async fn prototype_keys_render_nothing() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([{
        "match": {"path": "p"}, "action": "wake", "textTemplate": "[{{__proto__.x}}][{{a.constructor}}][{{a.prototype}}]ok",
    }])));
    server
        .hook("/hooks/p")
        .json(&json!({"__proto__": {"x": 1}, "a": {"constructor": 2, "prototype": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(server.events().await[0]["text"], "[][][]ok");
}

#[tokio::test]
async fn agent_mapping_queues_a_run_like_a_direct_one() {
    let (server, _dir) = Hookgate::start(&allowing_payload_keys(with_mappings(json!([{
        "id": "ci", "match": {"path": "ci"}, "name": " CI {{pipeline}} ", "messageTemplate": "Build {{status}}",
        "sessionKey": "hook:ci:{{pipeline}}", "channel": "telegram", "to": "{{chat}}", "deliver": false,
        "thinking": "low", "timeoutSeconds": 60.7, "wakeMode": "next-heartbeat",
    }]))));
    let (status, reply) = json_of(
        server
            .hook("/hooks/ci")
            .json(&json!({"pipeline": "p1", "status": "red", "chat": " "}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let run = server.run_of(&reply).await;
    assert_eq!(run["hookName"], "CI p1");
    assert_eq!(run["message"], "Build red");
    assert_eq!(run["sessionKey"], "hook:ci:p1");
    assert_eq!(run["channel"], "telegram");
    assert_eq!(run["to"], Value::Null);
    assert_eq!(run["deliver"], false);
    assert_eq!(run["thinking"], "low");
    assert_eq!(run["timeoutSeconds"], 60);
    assert_eq!(run["wakeMode"], "next-heartbeat");
    // The name came from the payload: the task line names the mapping, the name is enveloped.
    let prompt = run["prompt"].as_str().unwrap();
    assert!(prompt.starts_with("Task: ci | Job ID: "), "{prompt}");
    assert!(
        prompt.contains("\nSource: Webhook\nName: CI p1\n---\nBuild red\n<<<END_EXTERNAL"),
        "{prompt}"
    );
}

#[tokio::test]
async fn mapping_session_keys_are_checked_against_prefixes() {
    let config = allowing_payload_keys(with_mappings(
        json!([{"match": {"path": "x"}, "messageTemplate": "m", "sessionKey": "other:{{id}}"}]),
    ));
    let (server, _dir) = Hookgate::start(&config);
    let r = server
        .hook("/hooks/x")
        .json(&json!({"id": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            400,
            json!({"ok": false, "error": "sessionKey must start with one of: hook:"})
        )
    );
}

#[tokio::test]
async fn match_source_routes_a_generic_ingest_endpoint() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([
        {"match": {"path": "ingest", "source": "ci"}, "action": "wake", "textTemplate": "from ci"},
        {"match": {"path": "ingest", "source": "cd"}, "action": "wake", "textTemplate": "from cd"},
    ])));
    server
        .hook("/hooks/ingest")
        .json(&json!({"source": "cd"}))
        .send()
        .await
        .unwrap();
    server
        .hook("/hooks/ingest")
        .json(&json!({"source": "ci"}))
        .send()
        .await
        .unwrap();
    let r = server
        .hook("/hooks/ingest")
        .json(&json!({"source": "qa"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(server.event_texts().await, ["from cd", "from ci"]);
}

#[tokio::test]
async fn first_matching_mapping_is_final() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([
        {"match": {"path": "x"}, "action": "wake", "textTemplate": "{{missing}}"},
        {"match": {"path": "x"}, "action": "wake", "textTemplate": "second"},
    ])));
    let r = server
        .hook("/hooks/x")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            400,
            json!({"ok": false, "error": "hook mapping requires text"})
        )
    );
}

#[tokio::test]
async fn mapping_without_rules_matches_every_name_but_wake_and_agent() {
    let (server, _dir) = Hookgate::start(&with_mappings(
        json!([{"action": "wake", "textTemplate": "any {{path}}"}]),
    ));
    server
        .hook("/hooks/anything")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let r = server
        .hook("/hooks/wake")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (400, json!({"ok": false, "error": "text required"}))
    );
    assert_eq!(server.events().await[0]["text"], "any anything");
}

#[tokio::test]
async fn hook_mapping_requires_message() {
    let (server, _dir) = Hookgate::start(&with_mappings(
        json!([{"match": {"path": "x"}, "messageTemplate": "{{nothing}}"}]),
    ));
    let r = server
        .hook("/hooks/x")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            400,
            json!({"ok": false, "error": "hook mapping requires message"})
        )
    );
}

#[tokio::test]
async fn mapped_model_goes_through_the_allowlist() {
    let mut config = with_mappings(
        json!([{"match": {"path": "x"}, "messageTemplate": "m", "model": "{{model}}"}]),
    );
    set(
        &mut config,
        "agents.defaults.models",
        json!({"openai/gpt-4.1-mini": {"alias": "mini"}}),
    );
    let (server, _dir) = Hookgate::start(&config);
    let (_, reply) = json_of(
        server
            .hook("/hooks/x")
            .json(&json!({"model": "mini"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(server.run_of(&reply).await["model"], "openai/gpt-4.1-mini");
    let r = server
        .hook("/hooks/x")
        .json(&json!({"model": "big"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (400, json!({"ok": false, "error": "model not allowed: big"}))
    );
}

#[tokio::test]
async fn mapped_agent_runs_are_idempotent() {
    let (server, _dir) = Hookgate::start(&with_mappings(
        json!([{"match": {"path": "x"}, "messageTemplate": "m"}]),
    ));
    let send = || {
        server
            .hook("/hooks/x")
            .header("idempotency-key", "d-1")
            .json(&json!({}))
            .send()
    };
    let (_, a) = json_of(send().await.unwrap()).await;
    let (_, b) = json_of(send().await.unwrap()).await;
    assert_eq!(a["runId"], b["runId"]);
}

#[tokio::test]
async fn unsafe_external_content_gives_the_bare_message() {
    let (server, _dir) = Hookgate::start(&with_mappings(
        json!([{"match": {"path": "x"}, "messageTemplate": "raw {{v}}", "allowUnsafeExternalContent": true}]),
    ));
    let (_, reply) = json_of(
        server
            .hook("/hooks/x")
            .json(&json!({"v": 1}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(server.run_of(&reply).await["prompt"], "raw 1");
}

fn gmail_payload() -> Value {
    json!({"messages": [{"id": "18c1", "from": "ana@example.com", "subject": "Invoice", "snippet": "Please pay", "body": "Full text"}]})
}

#[tokio::test]
async fn gmail_preset_makes_an_email_run() {
    let mut config = base_config();
    set(&mut config, "hooks.presets", json!(["gmail"]));
    let (server, _dir) = Hookgate::start(&allowing_payload_keys(config));
    let (status, reply) = json_of(
        server
            .hook("/hooks/gmail")
            .json(&gmail_payload())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let run = server.run_of(&reply).await;
    assert_eq!(run["hookName"], "Gmail");
    assert_eq!(run["sessionKey"], "hook:gmail:18c1");
    assert_eq!(
        run["message"],
        "New email from ana@example.com\nSubject: Invoice\nPlease pay\nFull text"
    );
    assert_eq!(run["source"], "email");
    assert_eq!(run["wakeMode"], "now");
    assert!(
        run["prompt"]
            .as_str()
            .unwrap()
            .contains("\nSource: Email\n---\nNew email from")
    );
}

#[tokio::test]
async fn explicit_mappings_come_before_presets() {
    let mut config = with_mappings(
        json!([{"match": {"path": "gmail"}, "action": "wake", "textTemplate": "mine"}]),
    );
    set(&mut config, "hooks.presets", json!(["gmail"]));
    let (server, _dir) = Hookgate::start(&config);
    let r = server
        .hook("/hooks/gmail")
        .json(&gmail_payload())
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_of(r).await,
        (
            200,
            json!({"ok": true, "mode": "now", "eventOutcome": "queued"})
        )
    );
    assert_eq!(server.events().await[0]["text"], "mine");
}

#[test]
fn mapping_with_an_unknown_channel_is_refused_at_startup() {
    let (status, output, _dir) = check(&with_mappings(json!([{"channel": "fax"}])));
    assert!(!status.success());
    assert!(
        output.contains("hooks.mappings[0]: channel must be last|"),
        "{output}"
    );
}

#[test]
fn unknown_preset_is_refused() {
    let mut config = base_config();
    set(&mut config, "hooks.presets", json!(["hotmail"]));
    let (status, output, _dir) = check(&config);
    assert!(!status.success());
    assert!(
        output.contains("hooks.presets[0]: must be one of gmail") && !output.contains("hotmail"),
        "{output}"
    );
}

/// A mapping key with a template expression is chosen by the payload: external input, under the
/// rule of request keys (docs/hooks.md, as in the OpenClaw gateway 2026.9.6).
#[tokio::test]
async fn templated_session_keys_are_external_input() {
    let mappings = json!([
        {"match": {"path": "t"}, "messageTemplate": "m", "sessionKey": "hook:t:{{id}}"},
        {"match": {"path": "s"}, "messageTemplate": "m", "sessionKey": "hook:static"},
        {"match": {"path": "e"}, "messageTemplate": "m", "sessionKey": "{{ missing }}"},
    ]);
    let mut config = with_mappings(mappings.clone());
    let (status, output, _dir) = check(&config);
    assert!(!status.success());
    assert!(
        output.contains("error: hooks.allowedSessionKeyPrefixes is required when a hook mapping sessionKey uses templates, even if hooks.allowRequestSessionKey=true"),
        "{output}"
    );

    set(
        &mut config,
        "hooks.allowedSessionKeyPrefixes",
        json!(["hook:"]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let post = |path: &'static str| server.hook(path).json(&json!({"id": 7})).send();
    let disabled = "sessionKey is disabled for externally supplied hook payload values; set hooks.allowRequestSessionKey=true to enable";
    assert_eq!(
        json_of(post("/hooks/t").await.unwrap()).await,
        (400, json!({"ok": false, "error": disabled}))
    );
    let (status, reply) = json_of(post("/hooks/s").await.unwrap()).await;
    assert_eq!(status, 200, "a fixed key is the operator's: {reply}");
    assert_eq!(server.run_of(&reply).await["sessionKey"], "hook:static");
    assert_eq!(
        json_of(post("/hooks/e").await.unwrap()).await,
        (
            400,
            json!({"ok": false, "error": "hook mapping sessionKey template rendered empty"})
        )
    );
    drop(server);

    let (server, _dir) = Hookgate::start(&allowing_payload_keys(with_mappings(mappings)));
    let (status, reply) = json_of(
        server
            .hook("/hooks/t")
            .json(&json!({"id": 7}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(server.run_of(&reply).await["sessionKey"], "hook:t:7");
}

/// The gmail preset makes one run per message, and answers a batch as the OpenClaw gateway does;
/// no messages is a 204. A retried batch (same idempotency key) finds its runs again.
#[tokio::test]
async fn the_gmail_preset_makes_one_run_per_message() {
    let mut config = base_config();
    set(&mut config, "hooks.presets", json!(["gmail"]));
    let (server, _dir) = Hookgate::start(&allowing_payload_keys(config));
    let message = |id: &str| json!({"id": id, "from": "ana@example.com", "subject": id, "snippet": "s", "body": "b"});
    let batch = json!({"messages": [message("a1"), message("a2"), message("a2")]});
    let post = |body: Value| {
        server
            .hook("/hooks/gmail")
            .header("idempotency-key", "batch-1")
            .json(&body)
            .send()
    };
    let (status, reply) = json_of(post(batch.clone()).await.unwrap()).await;
    assert_eq!(status, 200, "{reply}");
    let ids: Vec<String> = reply["runIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 3, "two equal messages are two runs");
    assert_eq!(reply["runId"], ids[0]);
    assert_eq!(reply["dispatched"], 3);
    let mut keys = Vec::new();
    for id in &ids {
        let run = server.run_of(&json!({"runId": id})).await;
        assert_eq!(run["mappingId"], "gmail", "the run names its mapping");
        keys.push(run["sessionKey"].as_str().unwrap().to_string());
    }
    assert_eq!(keys, ["hook:gmail:a1", "hook:gmail:a2", "hook:gmail:a2"]);
    let (_, again) = json_of(post(batch).await.unwrap()).await;
    assert_eq!(
        again["runIds"], reply["runIds"],
        "the retried batch replays"
    );

    let (status, one) = json_of(post(json!({"messages": [message("b1")]})).await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(
        one.as_object().unwrap().len(),
        2,
        "one message answers as one run: {one}"
    );
    for empty in [json!({"messages": []}), json!({}), json!({"messages": "x"})] {
        let r = post(empty).await.unwrap();
        assert_eq!(r.status(), 204);
        assert!(r.bytes().await.unwrap().is_empty());
    }
}

/// A mapping's `sessionMode: "persistent"` continues its session key's conversation; without a
/// key, `defaultSessionKey` or a transform the mapping is refused at start (OpenClaw's rules).
#[tokio::test]
async fn persistent_mappings_continue_their_conversation() {
    let provider = crate::fake::Fake::provider("seen").await;
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{"match": {"path": "thread"}, "messageTemplate": "note {{n}}",
                "sessionKey": "hook:thread", "sessionMode": "persistent", "deliver": false}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    for n in [1, 2] {
        let (status, reply) = json_of(
            server
                .hook("/hooks/thread")
                .json(&json!({"n": n}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        let run_id = reply["runId"].as_str().unwrap().to_string();
        eventually("the run ends", async || {
            server.run_of(&json!({"runId": run_id})).await["status"] == "ok"
        })
        .await;
    }
    let second = &provider.requests()[1].body["messages"];
    assert_eq!(second.as_array().unwrap().len(), 3, "{second}");
    assert!(second[0]["content"].as_str().unwrap().contains("note 1"));
    assert!(second[2]["content"].as_str().unwrap().contains("note 2"));

    let mut keyless = base_config();
    set(
        &mut keyless,
        "hooks.mappings",
        json!([{"match": {"path": "t"}, "messageTemplate": "m", "sessionMode": "persistent"}]),
    );
    let (status, output, _dir) = check(&keyless);
    assert!(!status.success());
    assert!(
        output.contains("hooks.mappings[0].sessionMode: persistent hook mappings require sessionKey, hooks.defaultSessionKey, or a transform"),
        "{output}"
    );
}
