//! docs/mcp.md#subscriptions: an agent manages subscriptions through the official MCP SDK
//! (tests/mcp-client): its tools are listed only with the `subscriptions` scope; it creates,
//! tests, pauses and deletes one within `mcp.subscriptions`; what is over a cap, a change of a
//! subscription the operator made and a call without the scope are refused as tool errors; the
//! changes are audited and every call is in the request log under the credential's name.

use serde_json::{Value, json};

use crate::harness::*;
use crate::mcp::{READER, mcp_config, node};

const SCOUT: &str = "mcp-scout-token-77d0";

/// The subscription tools, in the order they are listed.
const SUBSCRIPTION_TOOLS: [&str; 6] = [
    "list_subscriptions",
    "create_subscription",
    "test_subscription",
    "pause_subscription",
    "resume_subscription",
    "delete_subscription",
];

/// [`mcp_config`] with a third credential, `scout` (read, subscriptions), the sealing key and
/// caps of one agent-made subscription, 5000 tokens a day and 3 runs an hour.
fn config() -> Value {
    let mut config = mcp_config();
    set(
        &mut config,
        "mcp.tokens",
        json!([
            {"name": "reader", "token": READER, "scopes": ["read"]},
            {"name": "scout", "token": SCOUT, "scopes": ["read", "subscriptions"]},
        ]),
    );
    set(
        &mut config,
        "mcp.subscriptions",
        json!({"maxSubscriptions": 1, "budget": {"tokensPerDay": 5000, "runsPerHour": 3}}),
    );
    set(
        &mut config,
        "gateway.secretsKey",
        json!("sealing-key-0123456789abcdef0123456789"),
    );
    config
}

fn names(listed: &Value) -> Vec<&str> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn structured(result: &Value) -> &Value {
    assert_ne!(result["isError"], true, "{result}");
    &result["structuredContent"]
}

/// A tool error's text, which carries the API's answer and status.
fn refusal(result: &Value) -> &str {
    assert_eq!(result["isError"], true, "{result}");
    result["content"][0]["text"].as_str().unwrap()
}

fn create(name: &str, mapping: Value) -> Value {
    json!({"callTool": {"name": "create_subscription", "arguments": {
        "name": name, "provider": "github", "events": ["issues"],
        "template": "New issue: {{issue.title}}", "mapping": mapping}}})
}

fn on(tool: &str, name: &str) -> Value {
    json!({"callTool": {"name": tool, "arguments": {"name": name}}})
}

#[tokio::test]
async fn an_agent_makes_tests_pauses_and_deletes_a_subscription_within_its_caps() {
    let (server, _dir) = Hookgate::start(&config());
    let made = client()
        .post(server.url("/api/hooks"))
        .bearer_auth(GATEWAY_TOKEN)
        .json(&json!({"name": "ops", "provider": "github", "template": "t"}))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let url = server.url("/mcp");
    let steps = json!([
        {"listTools": {}},
        create("issues", json!({"budget": {"tokensPerDay": 99999}})),
        create("issues", json!({"runs": {"priority": "high"}})),
        create("issues", json!({"callback": {"url": "https://example.com/x", "secret": "s"}})),
        create("issues", json!({})),
        create("second", json!({})),
        {"callTool": {"name": "list_subscriptions", "arguments": {}}},
        on("test_subscription", "issues"),
        on("pause_subscription", "ops"),
        on("delete_subscription", "ops"),
        on("pause_subscription", "issues"),
        on("resume_subscription", "issues"),
        on("delete_subscription", "issues"),
        {"callTool": {"name": "list_subscriptions", "arguments": {}}},
    ]);
    let scout = node(
        "client.mjs",
        json!({"http": url, "token": SCOUT, "steps": steps}),
    )
    .await;
    let scout = scout.as_array().unwrap();
    let listed = names(&scout[1]);
    for tool in SUBSCRIPTION_TOOLS {
        assert!(listed.contains(&tool), "{listed:?}");
    }
    assert!(!listed.contains(&"replay_request"), "{listed:?}");
    let create_tool = scout[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "create_subscription")
        .unwrap();
    let schema = &create_tool["inputSchema"]["properties"];
    assert!(schema["provider"]["description"].is_string(), "{schema}");
    assert!(
        create_tool["description"]
            .as_str()
            .unwrap()
            .contains("shown this once")
    );

    // Over a cap: refused, naming the cap, and nothing made.
    let over = refusal(&scout[2]);
    assert!(
        over.contains("mcp.subscriptions.budget.tokensPerDay: 5000"),
        "{over}"
    );
    assert!(over.contains("status 403"), "{over}");
    assert!(refusal(&scout[3]).contains("mcp.subscriptions.runs.priority"));
    assert!(refusal(&scout[4]).contains("mapping.callback"));

    // Within them: made, the caps given where it set none, its secret shown this once.
    let issued = structured(&scout[5]);
    assert_eq!(issued["createdBy"], "mcp:scout", "{issued}");
    let budget = json!({"tokensPerDay": 5000, "runsPerHour": 3});
    assert_eq!(issued["mapping"]["budget"], budget, "{issued}");
    assert_eq!(issued["mapping"]["runs"]["maxConcurrent"], 1, "{issued}");
    assert!(issued["url"].as_str().unwrap().ends_with("/hooks/issues"));
    let secret = issued["secret"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 64, "{issued}");
    let too_many = refusal(&scout[6]);
    assert!(too_many.contains("maxSubscriptions"), "{too_many}");

    let hooks = &structured(&scout[7])["hooks"];
    let by: Vec<(&str, &str)> = hooks
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap(),
                h["createdBy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(by, [("issues", "mcp:scout"), ("ops", "gateway-token")]);
    let tested = structured(&scout[8]);
    assert_eq!(tested["event"], "issues", "{tested}");
    assert_eq!(tested["status"], 200, "{tested}");
    assert_eq!(tested["record"]["mappingId"], "issues", "{tested}");
    // The operator's subscription is the operator's.
    for step in [9, 10] {
        let text = refusal(&scout[step]);
        assert!(
            text.contains("not made by an agent") && text.contains("status 403"),
            "{text}"
        );
    }
    assert_eq!(structured(&scout[11])["paused"], true);
    assert_eq!(structured(&scout[12])["paused"], false);
    assert_eq!(structured(&scout[13])["deleted"], "issues");
    let left = &structured(&scout[14])["hooks"];
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    // No answer after the one that made it shows the secret.
    let later = serde_json::to_string(&scout[6..]).unwrap();
    assert!(!later.contains(&secret));

    // A credential without the scope sees none of the tools and is refused each.
    let steps = json!([{"listTools": {}}, create("sneaky", json!({})),
        {"callTool": {"name": "list_subscriptions", "arguments": {}}}]);
    let reader = node(
        "client.mjs",
        json!({"http": url, "token": READER, "steps": steps}),
    )
    .await;
    let listed = names(&reader[1]);
    assert!(
        SUBSCRIPTION_TOOLS.iter().all(|t| !listed.contains(t)),
        "{listed:?}"
    );
    for step in [2, 3] {
        let text = refusal(&reader[step]);
        assert!(text.contains("needs the subscriptions scope"), "{text}");
    }

    // The audit names the agent's credential for each change it made.
    let (_, audit) = server.api_json("/api/audit").await;
    let mut changes: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["by"]["credential"] == "mcp:scout")
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["subscription"].as_str().unwrap(),
            )
        })
        .collect();
    changes.reverse();
    let expected = ["create", "test", "pause", "resume", "delete"].map(|a| (a, "issues"));
    assert_eq!(changes, expected, "{audit}");

    // Every call is in the request log with the credential's name and the status it came to,
    // and no record holds the secret or a token.
    let mut calls = Value::Null;
    eventually("the calls logged", async || {
        calls = server.api_json("/api/requests?error=mcp&limit=100").await.1;
        calls["requests"].as_array().map_or(0, Vec::len) >= 15
    })
    .await;
    let reasons: Vec<(String, u64)> = calls["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["reason"].as_str().unwrap().to_string(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    for (reason, status) in [
        (
            "mcp tools/call create_subscription by credential scout",
            403,
        ),
        (
            "mcp tools/call create_subscription by credential scout",
            201,
        ),
        ("mcp tools/call test_subscription by credential scout", 200),
        ("mcp tools/call pause_subscription by credential scout", 403),
        (
            "mcp tools/call delete_subscription by credential scout",
            200,
        ),
        (
            "mcp tools/call create_subscription by credential reader",
            403,
        ),
    ] {
        assert!(
            reasons.contains(&(reason.to_string(), status)),
            "{reason} {status}: {reasons:?}"
        );
    }
    let text = calls.to_string();
    assert!(!text.contains(&secret) && !text.contains(SCOUT), "{text}");
}

/// Without `mcp.subscriptions` an agent creates nothing, and is told which key the operator
/// has not set.
#[tokio::test]
async fn without_caps_an_agent_creates_no_subscription() {
    let mut config = config();
    config["mcp"]
        .as_object_mut()
        .unwrap()
        .remove("subscriptions");
    let (server, _dir) = Hookgate::start(&config);
    let steps = json!([create("issues", json!({}))]);
    let url = server.url("/mcp");
    let scout = node(
        "client.mjs",
        json!({"http": url, "token": SCOUT, "steps": steps}),
    )
    .await;
    let text = refusal(&scout[1]);
    assert!(
        text.contains("mcp.subscriptions") && text.contains("status 403"),
        "{text}"
    );
    let (_, hooks) = server.api_json("/api/hooks").await;
    assert_eq!(hooks["hooks"], json!([]));
}
