//! docs/hooks.md "Mapped hooks": what one request's templates may render to, live and in a dry
//! run (docs/operations.md "Trying a change on recorded traffic").

use serde_json::{Value, json};

use crate::dry_run::{dry_run, logged};
use crate::harness::*;

/// The bound on what one request's templates render to under the default `hooks.maxBodyBytes`
/// (docs/hooks.md).
const MAX_RENDERED_BYTES: usize = 1024 * 1024;

/// The answer to a request whose templates render past `limit` bytes.
fn refusal(limit: usize) -> String {
    format!("hook mapping templates render to more than {limit} bytes")
}

/// Waits for two records in the request log and checks that the older keeps `refused`.
async fn older_of_two_refused(server: &Hookgate, refused: &str) {
    logged(server, 2).await;
    let (_, page) = server.api_json("/api/requests?limit=10").await;
    let record = &page["requests"][1];
    assert_eq!(record["status"], 400, "{page}");
    assert_eq!(record["error"], refused, "{page}");
}

/// `{{x}}` `times` times: a small template that repeats a payload field.
fn repeated(times: usize) -> String {
    "{{x}}".repeat(times)
}

/// A wake mapping `big` rendering `template`, every request captured.
fn template_config(template: &str) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let big = json!({"id": "big", "match": {"path": "big"}, "action": "wake",
                     "textTemplate": template});
    set(&mut config, "hooks.mappings", json!([big]));
    config
}

#[tokio::test]
async fn a_live_request_whose_templates_render_past_the_bound_is_refused() {
    let (server, _dir) = Hookgate::start(&template_config(&repeated(2000)));
    // 2,000 copies of 1 KiB: twice the bound, from a body of 1 KiB.
    let x = "a".repeat(1024);
    let (status, answer) = server.hook_json("/hooks/big", &json!({"x": x})).await;
    assert_eq!(status, 400, "{answer}");
    let refused = refusal(MAX_RENDERED_BYTES);
    assert_eq!(answer["error"], refused.as_str(), "{answer}");
    assert!(server.wake_texts().await.is_empty(), "nothing was woken");
    // Within the bound, the same mapping still renders.
    let (status, answer) = server.hook_json("/hooks/big", &json!({"x": "b"})).await;
    assert_eq!(status, 200, "{answer}");
    older_of_two_refused(&server, &refused).await;
}

#[tokio::test]
async fn a_candidate_whose_templates_render_past_the_bound_reports_the_refusal() {
    let (server, _dir) = Hookgate::start(&template_config("{{x}}"));
    // The request: a captured body of 60 KB.
    let x = "a".repeat(60_000);
    let (status, answer) = server.hook_json("/hooks/big", &json!({"x": x})).await;
    assert_eq!(status, 200, "{answer}");
    logged(&server, 1).await;
    // 25 KB of template asking for 300 MB.
    let candidate = template_config(&repeated(5000));
    let body = json!({"config": serde_json::to_string(&candidate).unwrap()});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let now = &answer["requests"][0]["now"];
    assert_eq!(now["ending"], "refused", "{answer}");
    assert_eq!(now["status"], 400, "{answer}");
    let refused = refusal(MAX_RENDERED_BYTES);
    assert_eq!(now["error"], refused.as_str(), "{answer}");
    assert_eq!(answer["totals"]["nowFailing"], 1, "{answer}");
}

/// An agent mapping `list` making one run per element of `items`, each run's message
/// `{{items[0].x}}` `times` times; every request captured.
fn for_each_config(times: usize) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let list = json!({"id": "list", "match": {"path": "list"}, "forEach": "items",
                      "messageTemplate": "{{items[0].x}}".repeat(times)});
    set(&mut config, "hooks.mappings", json!([list]));
    config
}

/// `count` elements of `items`, each with an `x` of `bytes` bytes.
fn items(count: usize, bytes: usize) -> Value {
    let item = json!({"x": "a".repeat(bytes)});
    json!({"items": vec![item; count]})
}

#[tokio::test]
async fn a_for_each_request_whose_actions_together_pass_the_bound_is_refused() {
    let (server, _dir) = Hookgate::start(&for_each_config(16));
    // 16 copies of 8 KiB: 128 KiB an action, an eighth of the bound; ten actions pass it.
    let (status, answer) = server.hook_json("/hooks/list", &items(10, 8192)).await;
    assert_eq!(status, 400, "{answer}");
    let refused = refusal(MAX_RENDERED_BYTES);
    assert_eq!(answer["error"], refused.as_str(), "{answer}");
    let (_, runs) = server.api_json("/api/runs").await;
    assert_eq!(runs["runs"], json!([]), "the refused request stored no run");
    // Seven actions (896 KiB) fit: the same mapping still makes its runs.
    let (status, answer) = server.hook_json("/hooks/list", &items(7, 8192)).await;
    assert_eq!(status, 200, "{answer}");
    older_of_two_refused(&server, &refused).await;
    // A dry run holds the candidate to the same bound over the captured request that fit, even
    // when the candidate raises its body limit (and with it its own bound).
    let mut candidate = for_each_config(24);
    set(&mut candidate, "hooks.maxBodyBytes", json!(8 * 1024 * 1024));
    let body = json!({"config": serde_json::to_string(&candidate).unwrap()});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    let tried = answer["requests"].as_array().unwrap();
    let now = &tried.last().unwrap()["now"];
    assert_eq!(now["status"], 400, "{answer}");
    assert_eq!(now["error"], refused.as_str(), "{answer}");
}

#[tokio::test]
async fn a_larger_body_limit_admits_a_render_within_four_bodies() {
    let mut config = base_config();
    set(&mut config, "hooks.maxBodyBytes", json!(512 * 1024));
    let wake = |id: &str, times: usize| json!({"id": id, "match": {"path": id}, "action": "wake", "textTemplate": repeated(times)});
    set(
        &mut config,
        "hooks.mappings",
        json!([wake("three", 3), wake("six", 6)]),
    );
    let (server, _dir) = Hookgate::start(&config);
    // Three copies of 400 KiB: 1.2 MiB, past the default bound, within 4 × 512 KiB.
    let x = "a".repeat(400 * 1024);
    let (status, answer) = server.hook_json("/hooks/three", &json!({"x": x})).await;
    assert_eq!(status, 200, "{answer}");
    let woken = server.wake_texts().await;
    let lengths: Vec<usize> = woken.iter().map(String::len).collect();
    assert_eq!(lengths, [3 * x.len()]);
    // Six copies (2.4 MiB) pass it: refused, naming the bound in force.
    let (status, answer) = server.hook_json("/hooks/six", &json!({"x": x})).await;
    assert_eq!(status, 400, "{answer}");
    let refused = refusal(4 * 512 * 1024);
    assert_eq!(answer["error"], refused.as_str(), "{answer}");
}
