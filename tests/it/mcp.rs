//! docs/mcp.md: the MCP server, driven by the official MCP SDK (`@modelcontextprotocol/sdk`,
//! installed by `npm ci` in tests/mcp-client) as a real client, over streamable HTTP against
//! the running binary and over stdio by spawning `hookgate mcp`; and an agent session, a model
//! on loopback calling the tools, whose transcript is the one docs/mcp.md shows.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::harness::*;

pub const READER: &str = "mcp-reader-token-4f1c";
pub const OPERATOR: &str = "mcp-operator-token-9a2e";

/// tests/mcp-client with its packages installed (`npm ci` when they are missing).
pub fn mcp_client() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-client");
        if !dir.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .status()
                .expect("run npm (is Node.js installed?)");
            assert!(status.success(), "npm ci in tests/mcp-client failed");
        }
        dir
    })
}

/// Runs `script` of tests/mcp-client with `plan`; what it printed, as JSON.
pub async fn node(script: &str, plan: Value) -> Value {
    let dir = mcp_client();
    let script = dir.join(script);
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .arg(plan.to_string())
            .output()
            .expect("run node")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A configuration with two MCP credentials, `reader` (read) and `operator` (read, replay),
/// and a mapping `deploys` whose requests are captured, `/password` redacted.
pub fn mcp_config() -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "mcp.tokens",
        json!([
            {"name": "reader", "token": READER, "scopes": ["read"]},
            {"name": "operator", "token": OPERATOR, "scopes": ["read", "replay"]},
        ]),
    );
    set(
        &mut config,
        "hooks.capture",
        json!({"enabled": true, "redact": ["/password"]}),
    );
    config
}

fn deploys() -> Value {
    json!([{"id": "deploys", "match": {"path": "deploys"}, "action": "wake",
        "textTemplate": "deploy of {{service}}"}])
}

/// Every step of a client session: list the tools and resources, call each tool, read each
/// resource.
fn every_step(request_id: &str, run_id: &str) -> Value {
    json!([
        {"listTools": {}},
        {"listResources": {}},
        {"callTool": {"name": "search_requests", "arguments": {"hook": "deploys", "limit": 5}}},
        {"callTool": {"name": "show_request", "arguments": {"id": request_id}}},
        {"callTool": {"name": "list_runs", "arguments": {"limit": 5}}},
        {"callTool": {"name": "show_run", "arguments": {"runId": run_id}}},
        {"callTool": {"name": "spend", "arguments": {}}},
        {"callTool": {"name": "dry_run", "arguments": {"config": "{}"}}},
        {"callTool": {"name": "replay_request", "arguments": {"id": request_id}}},
        {"callTool": {"name": "search_requests", "arguments": {"status": "9xx"}}},
        {"readResource": {"uri": "hookgate://requests/recent"}},
    ])
}

fn tool_names(listed: &Value) -> Vec<&str> {
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

/// What each step of [`every_step`] returned, checked for a credential with `replay` or not.
fn check_session(results: &Value, request_id: &str, may_replay: bool) {
    let results = results.as_array().unwrap();
    assert_eq!(results[0]["connected"]["name"], "hookgate", "{results:?}");
    let mut tools = vec![
        "search_requests",
        "show_request",
        "list_runs",
        "show_run",
        "spend",
        "dry_run",
    ];
    if may_replay {
        tools.insert(5, "replay_request");
    }
    assert_eq!(tool_names(&results[1]), tools);
    for tool in results[1]["tools"].as_array().unwrap() {
        assert!(tool["description"].as_str().unwrap().len() > 40, "{tool}");
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    assert_eq!(results[2]["resources"].as_array().unwrap().len(), 2);
    let found = &structured(&results[3])["requests"];
    assert_eq!(found[0]["id"], request_id, "{found}");
    let shown = structured(&results[4]);
    let captured = shown["capture"]["body"].as_str().unwrap_or_default();
    assert!(captured.contains(r#""password":"[redacted]""#), "{shown}");
    assert!(!results[4].to_string().contains("hunter2"));
    let runs = &structured(&results[5])["runs"];
    assert!(!runs.as_array().unwrap().is_empty(), "{runs}");
    assert_eq!(structured(&results[6])["runId"], runs[0]["runId"]);
    assert!(structured(&results[7]).is_object());
    // A candidate that is not a valid configuration: the API's 400, as a tool error.
    assert_eq!(results[8]["isError"], true, "{:?}", results[8]);
    let replayed = &results[9];
    if may_replay {
        assert_eq!(structured(replayed)["replayOf"], request_id, "{replayed}");
        assert_eq!(structured(replayed)["status"], 200, "{replayed}");
    } else {
        assert_eq!(replayed["isError"], true, "{replayed}");
        let text = replayed["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("needs the replay scope"), "{text}");
    }
    let invalid = &results[10];
    assert_eq!(invalid["isError"], true, "{invalid}");
    assert!(invalid.to_string().contains("status"), "{invalid}");
    let recent = results[11]["contents"][0]["text"].as_str().unwrap();
    assert!(recent.contains(request_id), "{recent}");
}

/// Starts a server on [`mcp_config`] and sends it a captured request and an agent run; the
/// server, the request's id and the run's id.
async fn start_with_a_request() -> (Hookgate, ConfigDir, String, String) {
    let mut config = mcp_config();
    set(&mut config, "hooks.mappings", deploys());
    let (server, dir) = Hookgate::start(&config);
    let body = json!({"service": "api", "password": "hunter2"});
    let response = server
        .hook("/hooks/deploys")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = request_id(&response);
    // An agent run, which fails: no model is configured.
    let agent = server
        .hook_json("/hooks/agent", &json!({"message": "hi"}))
        .await
        .1;
    let run_id = agent["runId"].as_str().unwrap().to_string();
    eventually("the request logged", async || {
        server.api_json(&format!("/api/requests/{id}")).await.0 == 200
    })
    .await;
    (server, dir, id, run_id)
}

#[tokio::test]
async fn the_sdk_over_http_sees_its_scopes_tools_and_is_refused_the_others() {
    let (server, _dir, id, run_id) = start_with_a_request().await;
    let steps = every_step(&id, &run_id);
    let url = server.url("/mcp");
    let reader = node(
        "client.mjs",
        json!({"http": url, "token": READER, "steps": steps}),
    )
    .await;
    check_session(&reader, &id, false);
    let operator = node(
        "client.mjs",
        json!({"http": url, "token": OPERATOR, "steps": steps}),
    )
    .await;
    check_session(&operator, &id, true);
    // Neither the gateway token nor the hook token opens /mcp.
    for token in [GATEWAY_TOKEN, HOOK_TOKEN, "wrong"] {
        let refused = node(
            "client.mjs",
            json!({"http": url, "token": token, "steps": []}),
        )
        .await;
        assert!(refused[0]["error"].is_string(), "{refused}");
        let answer = client()
            .post(&url)
            .bearer_auth(token)
            .json(&json!({}))
            .send()
            .await;
        assert_eq!(answer.unwrap().status(), 401);
    }
    // Every call is in the request log, with the credential that made it, never its token.
    let mut calls = Value::Null;
    eventually("the calls logged", async || {
        calls = server
            .api_json("/api/requests?error=credential&limit=100")
            .await
            .1;
        calls["requests"].as_array().map_or(0, Vec::len) >= 18
    })
    .await;
    let text = calls.to_string();
    assert!(
        text.contains("mcp tools/call replay_request by credential reader"),
        "{text}"
    );
    assert!(
        text.contains("mcp tools/call replay_request by credential operator"),
        "{text}"
    );
    assert!(!text.contains(READER) && !text.contains(OPERATOR), "{text}");
    let refused = server
        .api_json("/api/requests?status=4xx&error=gateway+token")
        .await
        .1;
    assert_eq!(refused["requests"][0]["target"], "/mcp", "{refused}");
}

#[tokio::test]
async fn the_sdk_over_stdio_spawns_hookgate_mcp() {
    let (server, _dir, id, run_id) = start_with_a_request().await;
    let stdio = |token: &str| {
        json!({"command": binary(), "args": ["mcp"],
            "env": {"HOOKGATE_URL": server.base, "HOOKGATE_MCP_TOKEN": token, "PATH": "/usr/bin:/bin"}})
    };
    let steps = every_step(&id, &run_id);
    let reader = node(
        "client.mjs",
        json!({"stdio": stdio(READER), "steps": steps}),
    )
    .await;
    check_session(&reader, &id, false);
    let operator = node(
        "client.mjs",
        json!({"stdio": stdio(OPERATOR), "steps": steps}),
    )
    .await;
    check_session(&operator, &id, true);
    let refused = node(
        "client.mjs",
        json!({"stdio": stdio(GATEWAY_TOKEN), "steps": []}),
    )
    .await;
    assert!(
        refused[0]["error"].as_str().unwrap().contains("401"),
        "{refused}"
    );
}

/// docs/http-contract.md#the-mcp-endpoint: each status, and an MCP token opens neither the
/// hooks nor the operator API.
#[tokio::test]
async fn the_endpoint_answers_its_documented_statuses() {
    let (server, _dir) = Hookgate::start(&mcp_config());
    let url = server.url("/mcp");
    let post = |accept: &'static str, body: &str| {
        client()
            .post(&url)
            .bearer_auth(READER)
            .header("accept", accept)
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let both = "application/json, text/event-stream";
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#;
    let status =
        async |request: reqwest::RequestBuilder| request.send().await.unwrap().status().as_u16();
    assert_eq!(status(post(both, initialize)).await, 200);
    let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(status(post(both, notification)).await, 202);
    assert_eq!(status(post("application/json", initialize)).await, 406);
    assert_eq!(status(post(both, "not json")).await, 415);
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let old = post(both, list).header("mcp-protocol-version", "1999-01-01");
    assert_eq!(status(old).await, 400);
    assert_eq!(status(client().get(&url).bearer_auth(READER)).await, 405);
    let refused = client().post(&url).bearer_auth(GATEWAY_TOKEN);
    let refused = refused
        .header("accept", both)
        .body(initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    let hook = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth(READER)
        .json(&json!({"text": "x"}));
    assert_eq!(status(hook).await, 401);
    assert_eq!(
        status(
            client()
                .get(server.url("/api/requests"))
                .bearer_auth(READER)
        )
        .await,
        401
    );
}

#[test]
fn a_config_refuses_an_mcp_token_that_is_another_credential() {
    for (token, scopes) in [
        (GATEWAY_TOKEN, json!(["read"])),
        (HOOK_TOKEN, json!(["read"])),
        (READER, json!(["write"])),
    ] {
        let mut config = base_config();
        set(
            &mut config,
            "mcp.tokens",
            json!([{"token": token, "scopes": scopes}]),
        );
        let (status, stderr, _dir) = check(&config);
        assert!(!status.success(), "{stderr}");
        assert!(stderr.contains("mcp.tokens[0]"), "{stderr}");
        assert_no_secrets(&stderr, &[token]);
    }
}
