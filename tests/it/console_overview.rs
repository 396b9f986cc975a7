//! The console's overview (docs/operations.md#the-overview): `GET /api/overview` after known
//! traffic, on both stores, and its charts in headless Chromium at a desktop's and a phone's
//! width.

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::fake::Fake;
use crate::harness::*;
use crate::runtime::{Backend, finished, with_provider};

/// Mappings `ci` (a wake, only for `{"kind": "deploy"}`: anything else is filtered) and `github`
/// (agent runs, one an hour: the next is held).
fn config(provider: &Fake) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "ci", "match": {"path": "ci", "payload": {"/kind": "deploy"}},
             "action": "wake", "textTemplate": "deploy"},
            {"id": "github", "match": {"path": "github"}, "action": "agent",
             "messageTemplate": "event {{n}}", "deliver": false, "wakeMode": "next-heartbeat",
             "runs": {"maxConcurrent": 1, "maxQueued": 5},
             "budget": {"runsPerHour": 1}},
        ]),
    );
    config
}

/// Sends 4 deploys and 1 run (5 accepted), 3 filtered, 2 refused 401 and 1 held run; returns
/// the held run's id.
async fn known_traffic(server: &Hookgate) -> String {
    for _ in 0..4 {
        let sent = server.hook("/hooks/ci").json(&json!({"kind": "deploy"}));
        assert_eq!(sent.send().await.unwrap().status(), 200);
    }
    for _ in 0..3 {
        let sent = server.hook("/hooks/ci").json(&json!({"kind": "test"}));
        assert_eq!(sent.send().await.unwrap().status(), 204);
    }
    for _ in 0..2 {
        let forged = client()
            .post(server.url("/hooks/ci"))
            .bearer_auth("not-the-token")
            .json(&json!({"kind": "deploy"}));
        assert_eq!(forged.send().await.unwrap().status(), 401);
    }
    let (status, first) = server.hook_json("/hooks/github", &json!({"n": 1})).await;
    assert_eq!(status, 200, "{first}");
    finished(server, first["runId"].as_str().unwrap()).await;
    let (status, second) = server.hook_json("/hooks/github", &json!({"n": 2})).await;
    assert_eq!(status, 200, "{second}");
    second["runId"].as_str().unwrap().to_string()
}

/// The overview once it shows every request sent (the log is written behind the answers).
async fn overview_of(server: &Hookgate, requests: u64) -> Value {
    let mut overview = Value::Null;
    eventually("the overview to count every request", async || {
        let (status, answer) = server.api_json("/api/overview").await;
        assert_eq!(status, 200, "{answer}");
        let totals = &answer["requests"]["totals"];
        let counted: u64 = totals
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        let held = answer["oldestHeld"].is_object();
        overview = answer;
        counted == requests && held
    })
    .await;
    overview
}

async fn the_overview_counts_requests_runs_and_budgets(backend: Backend) {
    let provider = Fake::provider("done").await;
    let (server, _dir) = backend.start(&config(&provider));
    let held = known_traffic(&server).await;
    let overview = overview_of(&server, 11).await;

    assert_eq!(
        overview["requests"]["totals"],
        json!({"accepted": 5, "filtered": 3, "batched": 0, "limited": 0, "refused": 0,
               "held": 1, "clientErrors": 2, "serverErrors": 0})
    );
    let minutes = overview["requests"]["minutes"].as_array().unwrap();
    assert!(!minutes.is_empty() && minutes.len() <= 2, "{minutes:?}");
    assert_eq!(
        overview["budgets"],
        json!([{"scope": "mapping", "id": "github", "limit": "runsPerHour", "max": 1,
                "used": 1, "onExceeded": "hold"}])
    );
    let github = overview["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|lane| lane["mappingId"] == "github")
        .unwrap();
    assert_eq!(github["held"], 1, "{github}");
    assert_eq!(github["maxConcurrent"], 1);
    assert_eq!(github["maxQueued"], 5);
    let runs_in = |status: &str| {
        overview["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["status"] == status)
            .unwrap()["runs"]
            .clone()
    };
    assert_eq!(runs_in("ok"), 1);
    assert_eq!(runs_in("held"), 1);
    assert_eq!(overview["oldestHeld"]["runId"], held.as_str());
    assert_eq!(
        overview["oldestHeld"]["heldBy"],
        "mapping:runsPerHour:github"
    );
    assert!(overview["oldestHeld"]["waitedSeconds"].is_u64());
    assert_eq!(overview["spend"][0]["mappingId"], "github");
    assert_eq!(overview["spend"][0]["runs"], 2);

    // A window it does not count is refused, and says what it takes.
    for hours in ["0", "25", "three"] {
        let (status, answer) = server
            .api_json(&format!("/api/overview?hours={hours}"))
            .await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"], "hours must be an integer from 1 to 24");
    }
    let (status, _) = json_of(
        client()
            .get(server.url("/api/overview"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401, "behind the gateway token");
}

on_both_stores!(the_overview_counts_requests_runs_and_budgets);

/// The overview's charts show the known traffic: the bars' data and titles carry the counts,
/// the budget's bar is full, the held run's age is shown; at a phone's width nothing needs a
/// sideways scroll.
#[tokio::test]
async fn the_overview_charts_known_traffic_on_a_desktop_and_a_phone() {
    let provider = Fake::provider("done").await;
    let (server, _dir) = Hookgate::start(&config(&provider));
    let held = known_traffic(&server).await;
    overview_of(&server, 11).await;

    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=overview]").await;

    let legend = browser
        .wait_for_text("#requests-legend", "accepted 5")
        .await;
    for words in [
        "filtered 3",
        "held 1",
        "4xx 2",
        "5xx 0",
        "limited (lane full) 0",
    ] {
        assert!(legend.contains(words), "{words} in {legend}");
    }
    let drawn = browser
        .run(
            "const sum = (key) => [...document.querySelectorAll('#requests-chart g.minute')]
               .reduce((n, g) => n + Number(g.dataset[key]), 0);
             const titles = [...document.querySelectorAll('#requests-chart g.minute > title')]
               .map((t) => t.textContent).join(' | ');
             return {total: sum('total'), accepted: sum('accepted'), filtered: sum('filtered'),
                     clientErrors: sum('clientErrors'), held: sum('held'), titles,
                     rects: document.querySelectorAll('#requests-chart rect[class^=o-]').length};",
        )
        .await;
    assert_eq!(drawn["total"], 11, "{drawn}");
    assert_eq!(drawn["accepted"], 5, "{drawn}");
    assert_eq!(drawn["filtered"], 3, "{drawn}");
    assert_eq!(drawn["clientErrors"], 2, "{drawn}");
    assert_eq!(drawn["held"], 1, "{drawn}");
    assert!(drawn["rects"].as_u64().unwrap() >= 4, "{drawn}");
    let titles = drawn["titles"].as_str().unwrap();
    assert!(
        titles.contains("accepted") && titles.contains("4xx"),
        "{titles}"
    );

    let budget = "#budgets-list li[data-budget=\"mapping:github:runsPerHour\"]";
    let words = browser.wait_for_text(budget, "1 of 1 runs an hour").await;
    assert!(words.contains("spent, runs held"), "{words}");
    let fill = browser
        .run(&format!(
            "return document.querySelector('{budget} rect.fill').getAttribute('width')"
        ))
        .await;
    assert_eq!(fill, "100");
    browser
        .wait_for_text(
            "#lanes-list li[data-lane=github]",
            "0 running of 1, 0 queued of 5, 1 held",
        )
        .await;
    browser
        .wait_for_text("#runs-list li[data-status=held]", "1")
        .await;
    let age = browser.wait_for_text("#oldest-held", "Waiting ").await;
    assert!(
        age.contains("held by the budget mapping github runsPerHour"),
        "{age}"
    );
    assert_eq!(
        browser
            .run("return document.getElementById('oldest-held').dataset.run")
            .await,
        held.as_str()
    );
    browser
        .wait_for_text("#overview-health", "Needs a look")
        .await;
    assert_eq!(
        browser
            .run("return document.querySelectorAll('main [style]').length")
            .await,
        0,
        "no style attribute: the CSP allows none"
    );
    save("overview-desktop", &browser.screenshot().await);

    // A phone: the page reflows to its width, nothing wider than the screen.
    browser
        .post("/window/rect", json!({"width": 390, "height": 1400}))
        .await;
    eventually("the page to take the phone's width", async || {
        browser
            .run("return window.innerWidth")
            .await
            .as_u64()
            .is_some_and(|width| width < 500)
    })
    .await;
    let widths = browser
        .run("return [document.documentElement.scrollWidth, window.innerWidth]")
        .await;
    assert!(widths[0].as_u64() <= widths[1].as_u64(), "{widths}");
    browser
        .wait_for_text("#lanes-list li[data-lane=github]", "1 held")
        .await;
    save("overview-phone", &browser.screenshot().await);

    // The oldest held run opens in the runs view.
    browser.click("#oldest-held button").await;
    browser.wait_for_text("#run-id", &held).await;
}

/// Writes a screenshot to the temporary directory (`HOOKGATE_SCREENSHOTS`, else the system's)
/// for a person to look at.
fn save(name: &str, png: &[u8]) {
    let dir = std::env::var_os("HOOKGATE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// The overview's script and style are served as the console's are: the same strict CSP, and
/// nothing parsed as HTML.
#[tokio::test]
async fn the_overview_assets_are_locked_down() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/console/overview.js", "/console/overview.css"] {
        let response = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            policy.starts_with("default-src 'none'; script-src 'self'"),
            "{policy}"
        );
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("innerHTML") && !text.contains("style="),
            "{path}"
        );
    }
}
