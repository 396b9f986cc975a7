//! The console in a real browser: headless Chromium driven through chromedriver
//! (`crate::browser`).

use serde_json::json;

use crate::browser::Browser;
use crate::harness::*;

#[tokio::test]
async fn the_console_shows_requests_safely_and_replays_a_fixed_one() {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let (server, dir) = start_with_trapping_alerts(config, json!({}));
    let root = dir.path().join("hooks/transforms");

    let hostile_text = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>";
    let woke = server
        .hook("/hooks/wake")
        .json(&json!({"text": hostile_text}))
        .send()
        .await
        .unwrap();
    let wake_id = request_id(&woke);
    let failed = server
        .hook("/hooks/alerts")
        .json(&json!({"alert": "disk full"}))
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 500);
    let failed_id = request_id(&failed);

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;

    // The request the test just sent is listed, with what it became.
    let row = format!("#requests-table tr[data-id=\"{wake_id}\"]");
    browser.wait_for_text(&row, "wake queued").await;
    let failed_row = format!("#requests-table tr[data-id=\"{failed_id}\"]");
    // A transform's failure in words, with its own error.
    let became = browser
        .wait_for_text(&failed_row, "transform failed after ")
        .await;
    assert!(became.contains(" ms: trap: "), "{became}");
    if std::env::var_os("HOOKGATE_UPDATE_SCREENSHOT").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console.png");
        std::fs::write(docs, browser.screenshot().await).unwrap();
    }

    // Its payload is shown as text, and nothing in it ran.
    browser.click(&format!("{row} button")).await;
    let body = browser.wait_for_text("#request-body", "<script>").await;
    assert!(
        body.contains("<img src=x onerror='window.pwned = 2'>"),
        "{body}"
    );
    assert_eq!(browser.run("return window.pwned === undefined").await, true);
    assert_eq!(
        browser
            .run("return document.querySelectorAll('main img, main script').length")
            .await,
        0
    );

    // The failed request, replayed after the operator fixed its transform.
    browser.click("#request-close").await;
    fix_alerts(&dir);
    eventually("the fixed transform to load", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        let sha = status["transforms"][0]["sha256"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let passthrough = std::fs::read(root.join("passthrough.wasm")).unwrap();
        use sha2::Digest as _;
        sha == hex::encode(sha2::Sha256::digest(&passthrough))
    })
    .await;
    browser.click(&format!("{failed_row} button")).await;
    let fields = browser
        .wait_for_text("#request-fields", "transform failed after ")
        .await;
    assert!(!fields.contains("\"outcome\""), "not as JSON: {fields}");
    // A replay may start agent work: the first button only asks for confirmation.
    browser.click("#replay").await;
    browser
        .wait_for_text("#replay-result", "may start agent work")
        .await;
    let (_, listed) = server.api_json("/api/requests?mapping=alerts").await;
    assert_eq!(
        listed["requests"].as_array().unwrap().len(),
        1,
        "no replay yet"
    );
    browser.click("#replay-confirm").await;
    let result = browser.wait_for_text("#replay-result", "Replayed as").await;
    assert!(result.contains(": 200 "), "{result}");
    assert!(result.contains("\"eventOutcome\":\"queued\""), "{result}");
    let texts = server.wake_texts().await;
    assert!(texts.iter().any(|t| t.contains("disk full")), "{texts:?}");

    // A request refused for its authentication is not offered for replay, and the page says why.
    browser.click("#request-close").await;
    let forged = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("not-the-token")
        .json(&json!({"text": "forged"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let forged_row = format!("#requests-table tr[data-id=\"{}\"]", request_id(&forged));
    browser.wait_for_text(&forged_row, "401").await;
    browser.click(&format!("{forged_row} button")).await;
    browser
        .wait_for_text("#replay-result", "refused for its authentication")
        .await;
    assert_eq!(
        browser
            .run("return document.getElementById('replay').disabled")
            .await,
        true
    );

    // The transforms view shows the call counts.
    browser.click("#request-close").await;
    browser.click("nav button[data-view=system]").await;
    browser
        .wait_for_text("#transforms-table", "live.wasm")
        .await;
}

#[tokio::test]
async fn the_console_shows_a_runs_error_and_runs_it_again_once_confirmed() {
    let provider = crate::fake::Fake::start(|_, i| match i {
        0 => crate::fake::Answer::Text(400, "unknown model".into()),
        _ => crate::fake::Answer::Json(200, crate::fake::chat_reply("fixed it")),
    })
    .await;
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults",
        json!({"provider": {"baseUrl": provider.base}, "model": "m"}),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let (_, queued) = server.hook_json("/hooks/agent", &body).await;
    let run_id = queued["runId"].as_str().unwrap().to_string();

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=runs]").await;
    let row = format!("#runs-table tr[data-id=\"{run_id}\"]");
    browser
        .wait_for_text(&row, "answered 400: unknown model")
        .await;

    browser.click(&format!("{row} button")).await;
    // Each call to the provider, in words: the model, the provider, why it failed.
    let host = provider.base.strip_prefix("http://").unwrap();
    browser
        .wait_for_text("#run-fields", &format!("1. m ({host}) at "))
        .await;
    assert_eq!(
        browser.wait_for_text("#retry", "Run again").await,
        "Run again"
    );
    browser.click("#retry").await;
    browser
        .wait_for_text("#retry-result", "starts agent work")
        .await;
    assert_eq!(
        provider.requests().len(),
        1,
        "nothing runs before the confirmation"
    );
    browser.click("#retry-confirm").await;
    browser
        .wait_for_text("#retry-result", "Queued to run again")
        .await;
    eventually("the run to end ok on its second attempt", async || {
        let (_, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
        run["status"] == "ok" && run["attempts"] == 2
    })
    .await;
}

/// A request no mapping's conditions let in is listed as filtered, with why
/// (docs/hooks.md#conditions).
#[tokio::test]
async fn the_console_says_why_a_request_was_filtered() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "deploys", "match": {"path": "ci", "payload": {"/kind": "deploy"}},
                "action": "wake", "textTemplate": "deploy"}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let filtered = server
        .hook("/hooks/ci")
        .json(&json!({"kind": "test"}))
        .send()
        .await
        .unwrap();
    assert_eq!(filtered.status(), 204);
    let id = request_id(&filtered);

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    let row = format!("#requests-table tr[data-id=\"{id}\"]");
    let why = "no mapping's conditions held: deploys (payload /kind)";
    browser
        .wait_for_text(&row, &format!("filtered: {why}"))
        .await;
    browser.click(&format!("{row} button")).await;
    browser
        .wait_for_text("#request-became", &format!("filtered, nothing made: {why}"))
        .await;
}

#[tokio::test]
async fn the_console_page_is_static_and_locked_down() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/console", "/console/console.js", "/console/console.css"] {
        let response = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        let text = response.text().await.unwrap();
        assert!(!text.contains(GATEWAY_TOKEN));
        assert!(
            !text.contains("innerHTML"),
            "{path} never parses text as HTML"
        );
    }
    let page = client()
        .get(server.url("/console"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains("<script>"), "no inline script");
}

#[tokio::test]
async fn the_console_shows_each_mappings_spend_and_a_runs_tokens() {
    let provider = crate::fake::Fake::start(|_, _| {
        let mut body = crate::fake::chat_reply("done");
        body["usage"] = json!({"prompt_tokens": 1200, "completion_tokens": 34});
        crate::fake::Answer::Json(200, body)
    })
    .await;
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "github", "match": {"path": "github"}, "action": "agent",
                "messageTemplate": "{{payload.text}}", "deliver": false,
                "wakeMode": "next-heartbeat"}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let (_, queued) = server
        .hook_json("/hooks/github", &json!({"text": "opened"}))
        .await;
    let run_id = queued["runId"].as_str().unwrap().to_string();
    eventually("the run to end", async || {
        let (_, run) = server.api_json(&format!("/api/runs/{run_id}")).await;
        run["status"] == "ok"
    })
    .await;

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=runs]").await;
    let spent = browser
        .wait_for_text("#spend-table tr[data-mapping=\"github\"]", "github")
        .await;
    assert_eq!(spent, "github 1 1200 34");

    browser
        .click(&format!("#runs-table tr[data-id=\"{run_id}\"] button"))
        .await;
    browser
        .wait_for_text("#run-fields", "1200 input, 34 output tokens")
        .await;
}

/// A held run shows the budget that held it, and its buttons release or cancel it.
#[tokio::test]
async fn the_console_releases_and_cancels_held_runs() {
    let provider = crate::fake::Fake::provider("done").await;
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults",
        json!({"provider": {"baseUrl": provider.base}, "model": "m", "heartbeat": {"every": "0"}}),
    );
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true, "budget": {"runsPerHour": 1}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = json!({"message": "m", "deliver": false, "wakeMode": "next-heartbeat"});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (_, queued) = server.hook_json("/hooks/agent", &body).await;
        ids.push(queued["runId"].as_str().unwrap().to_string());
    }

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=runs]").await;
    for (run_id, button, result) in [
        (&ids[1], "#release", "Released: queued to run"),
        (&ids[2], "#cancel-run", "Cancelled: it will never run"),
    ] {
        let row = format!("#runs-table tr[data-id=\"{run_id}\"]");
        browser.wait_for_text(&row, "held").await;
        browser.click(&format!("{row} button")).await;
        browser
            .wait_for_text("#held", "agent main runsPerHour")
            .await;
        browser.click(button).await;
        browser.wait_for_text("#held-result", result).await;
        browser.click("#run-close").await;
    }
    eventually("the released run to end ok", async || {
        let (_, run) = server.api_json(&format!("/api/runs/{}", ids[1])).await;
        run["status"] == "ok"
    })
    .await;
    let (_, cancelled) = server.api_json(&format!("/api/runs/{}", ids[2])).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(provider.requests().len(), 2, "the cancelled run never ran");
}
