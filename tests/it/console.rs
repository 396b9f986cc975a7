//! The console in a real browser: headless Chromium driven through chromedriver's WebDriver
//! protocol (Debian's `chromium` and `chromium-driver`, which `.ci/run` installs).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// A chromedriver process and one headless Chromium session; both end when dropped.
pub(crate) struct Browser {
    driver: Child,
    session: String,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver) must be installed");
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            session: String::new(),
            base,
            _profile: profile,
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    // Nothing but loopback is reachable: no background connections to refuse.
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-quic", "--no-first-run",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            },
        }}});
        let (limit, every) = (Duration::from_secs(20), Duration::from_millis(100));
        let session = eventually_within("chromedriver to answer", limit, every, async || {
            let session = client()
                .post(format!("{}/session", browser.base))
                .json(&capabilities)
                .send()
                .await
                .map_err(|err| format!("chromedriver did not answer: {err}"))?;
            Ok(session.json::<Value>().await.unwrap())
        })
        .await;
        browser.session = session["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {session}"))
            .to_string();
        browser
    }

    pub(crate) async fn command(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let request = client().request(method.clone(), url);
        // chromedriver refuses a GET that carries a body.
        let request = match method {
            reqwest::Method::GET => request,
            _ => request.json(&body),
        };
        let response = request.send().await.unwrap();
        let answer: Value = response.json().await.unwrap();
        answer["value"].clone()
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, body).await
    }

    pub(crate) async fn go(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) async fn run(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// The element `css` selects, once it exists.
    pub(crate) async fn element(&self, css: &str) -> String {
        let mut found = String::new();
        eventually(&format!("{css} to appear"), async || {
            let value = self
                .post("/element", json!({"using": "css selector", "value": css}))
                .await;
            match value.as_object().and_then(|o| o.values().next()) {
                Some(Value::String(id)) if value.get("error").is_none() => {
                    found = id.clone();
                    true
                }
                _ => false,
            }
        })
        .await;
        found
    }

    pub(crate) async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.post(&format!("/element/{id}/click"), json!({})).await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.post(&format!("/element/{id}/value"), json!({"text": text}))
            .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let id = self.element(css).await;
        let value = self
            .command(
                reqwest::Method::GET,
                &format!("/element/{id}/text"),
                Value::Null,
            )
            .await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// Waits until the element `css` shows text containing `wanted`.
    pub(crate) async fn wait_for_text(&self, css: &str, wanted: &str) -> String {
        eventually_within(
            &format!("{css} showing {wanted:?}"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let seen = self.text(css).await;
                if seen.contains(wanted) {
                    Ok(seen)
                } else {
                    Err(format!("it shows {seen:?}"))
                }
            },
        )
        .await
    }

    async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let value = self
            .command(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn chromium() -> &'static str {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .expect("chromium (Debian package chromium) must be installed")
}

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
        0 => crate::fake::Answer::Text(500, "overloaded".into()),
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
        .wait_for_text(&row, "provider answered 500: overloaded")
        .await;

    browser.click(&format!("{row} button")).await;
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
