//! docs/hooks.md "Mapped hooks": what one action's templates may render to, live and in a dry
//! run (docs/operations.md "Trying a change on recorded traffic").

use serde_json::{Value, json};

use crate::dry_run::{dry_run, logged};
use crate::harness::*;

/// The bound on what one action's templates render to (docs/hooks.md).
const MAX_RENDERED_BYTES: usize = 1024 * 1024;

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
    let refused = format!("hook mapping templates render to more than {MAX_RENDERED_BYTES} bytes");
    assert_eq!(answer["error"], refused.as_str(), "{answer}");
    assert!(server.wake_texts().await.is_empty(), "nothing was woken");
    // Within the bound, the same mapping still renders.
    let (status, answer) = server.hook_json("/hooks/big", &json!({"x": "b"})).await;
    assert_eq!(status, 200, "{answer}");
    logged(&server, 2).await;
    let (_, page) = server.api_json("/api/requests?limit=10").await;
    let record = &page["requests"][1];
    assert_eq!(record["status"], 400, "{page}");
    assert_eq!(record["error"], refused.as_str(), "{page}");
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
    let refused = format!("hook mapping templates render to more than {MAX_RENDERED_BYTES} bytes");
    assert_eq!(now["error"], refused.as_str(), "{answer}");
    assert_eq!(answer["totals"]["nowFailing"], 1, "{answer}");
}
