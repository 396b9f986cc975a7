//! docs/operations.md#searching-the-request-log: the request log searched by a captured header's
//! value, a captured JSON body's value at a pointer, text in the error, and how a request ended,
//! each alone, together and across pages, through the API, the CLI and the console. GitHub's
//! own example deliveries (tests/it/fixtures/github) stand for what the provider sends; the
//! outcomes are produced for real by a batch, a full lane and two spent budgets.

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::filters::{self, github};
use crate::harness::*;
use crate::lanes::GatedProvider;
use crate::requests::{cli, recorded};

/// The `github` mapping, captured (a mapping's `capture` is on unless it says otherwise);
/// `/hooks/wake` is not.
fn github_config() -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "github", "match": {"path": "github"}, "action": "wake",
                "textTemplate": "a GitHub delivery", "capture": {}}]),
    );
    config
}

/// Delivers GitHub's example `fixture` as event `event`; the id of its record.
async fn deliver(server: &Hookgate, event: &str, fixture: &str) -> String {
    let response = filters::deliver(server, event, fixture).await;
    assert_eq!(response.status(), 200, "{fixture}");
    request_id(&response)
}

/// The deliveries of [`fill`], by what they are.
struct Log {
    issue_opened: String,
    issue_edited: String,
    pull_request_opened: String,
    push: String,
    /// `x-github-event: issues` to `/hooks/wake`, which captures nothing.
    uncaptured: String,
    /// No token: `Unauthorized`, reason `no token presented`.
    unauthorized: String,
    /// `/hooks/wake` without text: `text required`.
    invalid: String,
}

async fn fill(server: &Hookgate) -> Log {
    let issue_opened = deliver(server, "issues", "issues-opened").await;
    let pull_request_opened = deliver(server, "pull_request", "pull-request-opened").await;
    let push = deliver(server, "push", "push").await;
    let issue_edited = deliver(server, "issues", "issues-edited").await;
    let uncaptured = server
        .hook("/hooks/wake")
        .header("x-github-event", "issues")
        .json(&json!({"text": "opened", "action": "opened"}))
        .send()
        .await
        .unwrap();
    assert_eq!(uncaptured.status(), 200);
    let unauthorized = client()
        .post(server.url("/hooks/github"))
        .header("x-github-event", "issues")
        .body(github("issues-opened"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
    let invalid = server
        .hook("/hooks/wake")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(invalid.status(), 400);
    let log = Log {
        issue_opened,
        issue_edited,
        pull_request_opened,
        push,
        uncaptured: request_id(&uncaptured),
        unauthorized: request_id(&unauthorized),
        invalid: request_id(&invalid),
    };
    recorded(server, "", 7).await;
    log
}

/// The ids `GET /api/requests?{query}` lists, and its `next`.
async fn page(server: &Hookgate, query: &str) -> (Vec<String>, Value) {
    let (status, body) = server.api_json(&format!("/api/requests?{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    let ids = body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    (ids, body["next"].clone())
}

async fn ids(server: &Hookgate, query: &str) -> Vec<String> {
    page(server, query).await.0
}

#[tokio::test]
async fn captured_github_deliveries_are_found_by_header_body_and_error() {
    let (server, _dir) = Hookgate::start(&github_config());
    let log = fill(&server).await;
    let issues = vec![log.issue_edited.clone(), log.issue_opened.clone()];
    assert_eq!(ids(&server, "header=x-github-event:issues").await, issues);
    assert_eq!(
        ids(&server, "header=X-GitHub-Event:%20issues").await,
        issues,
        "a name in any case, the space after the colon left out"
    );
    assert!(
        ids(&server, "header=x-github-event:Issues")
            .await
            .is_empty()
    );
    assert_eq!(
        ids(&server, "header=x-github-event:push").await,
        [log.push.as_str()]
    );

    let opened = vec![log.pull_request_opened.clone(), log.issue_opened.clone()];
    assert_eq!(ids(&server, "body=/action:opened").await, opened);
    assert_eq!(ids(&server, "body=/issue/number:1").await, issues);
    assert_eq!(
        ids(
            &server,
            "body=/pull_request/number:2&hook=github&status=2xx"
        )
        .await,
        [log.pull_request_opened.as_str()]
    );
    assert_eq!(
        ids(&server, "body=/action:opened&header=x-github-event:issues").await,
        [log.issue_opened.as_str()]
    );
    assert!(ids(&server, "body=/action:%22opened%22").await.is_empty());
    // The uncaptured wake carries both the header and `"action": "opened"`: never a match.
    let everything = ids(&server, "limit=100").await;
    assert!(everything.contains(&log.uncaptured));

    assert_eq!(
        ids(&server, "error=UNAUTHOR").await,
        [log.unauthorized.as_str()]
    );
    assert_eq!(
        ids(&server, "error=no%20token").await,
        [log.unauthorized.as_str()],
        "the reason is searched too"
    );
    assert_eq!(
        ids(&server, "error=required&status=4xx").await,
        [log.invalid.as_str()]
    );
    assert!(ids(&server, "error=required&status=5xx").await.is_empty());
}

#[tokio::test]
async fn a_search_pages_by_cursor_and_a_bad_filter_is_a_400_naming_it() {
    let (server, _dir) = Hookgate::start(&github_config());
    let log = fill(&server).await;
    for filter in ["header=x-github-event:issues", "body=/issue/number:1"] {
        let (first, next) = page(&server, &format!("{filter}&limit=1")).await;
        assert_eq!(first, [log.issue_edited.as_str()], "{filter}");
        assert_eq!(next, json!(log.issue_edited), "{filter}");
        let (second, next) = page(
            &server,
            &format!("{filter}&limit=1&before={}", log.issue_edited),
        )
        .await;
        assert_eq!(second, [log.issue_opened.as_str()], "{filter}");
        let (third, last) = page(
            &server,
            &format!("{filter}&limit=1&before={}", next.as_str().unwrap()),
        )
        .await;
        assert!(third.is_empty(), "{filter}: {third:?}");
        assert_eq!(last, Value::Null, "{filter}");
    }

    for (query, named) in [
        ("body=action:opened", "body must be a JSON pointer"),
        ("body=/a~2b:x", "body must be a JSON pointer"),
        ("body=/action", "body must be a JSON pointer"),
        ("header=x-github-event", "header must be a header name"),
        ("header=bad%20name:x", "header must be a header name"),
        (
            "outcome=lost",
            "outcome must be one of filtered|batched|limited|refused|held",
        ),
    ] {
        let (status, body) = server.api_json(&format!("/api/requests?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["ok"], false);
        let error = body["error"].as_str().unwrap();
        assert!(error.starts_with(named), "{query}: {error}");
    }
}

/// A batch mapping (batches of three, so the test's two stay open), a lane of one running and
/// one queued run, and two mappings with a budget of one run an hour, one refusing past it,
/// one holding.
fn outcomes_config(provider: &GatedProvider) -> Value {
    let mut config = base_config();
    let defaults = json!({
        "provider": {"baseUrl": provider.base, "apiKey": "sk-test"},
        "model": "default-model",
        "maxConcurrent": 8,
    });
    set(&mut config, "agents.defaults", defaults);
    let mapping = |id: &str, extra: Value| {
        let mut mapping = json!({"id": id, "match": {"path": id}, "action": "agent",
            "messageTemplate": "{{n}}", "deliver": false, "sessionKey": format!("hook:{id}")});
        let fields = mapping.as_object_mut().unwrap();
        fields.extend(extra.as_object().unwrap().clone());
        mapping
    };
    let budget = |on: &str| json!({"budget": {"runsPerHour": 1, "onExceeded": on}});
    set(
        &mut config,
        "hooks.mappings",
        json!([
            mapping("inbox", json!({"batch": {"window": "1h", "maxItems": 3}})),
            mapping(
                "lane",
                json!({"runs": {"maxConcurrent": 1, "maxQueued": 1}})
            ),
            mapping("refusing", budget("refuse")),
            mapping("holding", budget("hold")),
        ]),
    );
    config
}

/// Sends `{"n": n}` to hook `path`, expecting `status`; the answer's request id and body.
async fn send(server: &Hookgate, path: &str, n: u32, status: u16) -> (String, Value) {
    let response = server
        .hook(&format!("/hooks/{path}"))
        .json(&json!({"n": n}))
        .send()
        .await
        .unwrap();
    let id = request_id(&response);
    let (got, body) = json_of(response).await;
    assert_eq!(got, status, "{path} {n}: {body}");
    (id, body)
}

#[tokio::test]
async fn outcomes_are_recorded_where_admission_decides_them_and_searched() {
    let provider = GatedProvider::start().await;
    let (server, _dir) = Hookgate::start(&outcomes_config(&provider));
    let (opened, first) = send(&server, "inbox", 1, 200).await;
    let (joined, second) = send(&server, "inbox", 2, 200).await;
    assert_eq!(
        (&first["batched"], &second["batched"]),
        (&json!(1), &json!(2))
    );

    send(&server, "lane", 1, 200).await;
    eventually("the lane's first run to start", async || {
        provider.in_flight() >= 1
    })
    .await;
    send(&server, "lane", 2, 200).await;
    let (limited, _) = send(&server, "lane", 3, 429).await;

    send(&server, "refusing", 1, 200).await;
    let (refused, _) = send(&server, "refusing", 2, 429).await;
    send(&server, "holding", 1, 200).await;
    let (held, answer) = send(&server, "holding", 2, 200).await;
    let held_run = answer["runId"].as_str().unwrap().to_string();
    recorded(&server, "", 9).await;

    assert_eq!(ids(&server, "outcome=batched").await, [joined, opened]);
    assert_eq!(ids(&server, "outcome=limited").await, [limited.as_str()]);
    assert_eq!(ids(&server, "outcome=refused").await, [refused.as_str()]);
    assert_eq!(ids(&server, "outcome=held").await, [held.as_str()]);
    assert_eq!(
        ids(&server, "outcome=refused&error=budget%20exceeded").await,
        [refused.as_str()]
    );
    assert_eq!(
        ids(&server, "error=maxQueued").await,
        [limited.as_str()],
        "the lane's reason"
    );
    let (status, run) = server.api_json(&format!("/api/runs/{held_run}")).await;
    assert_eq!((status, &run["status"]), (200, &json!("held")), "{run}");

    let (ok, out, err) = cli(&server, &["requests", "list", "--outcome", "held"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(&held) && out.contains(&format!("held, run {held_run}")),
        "{out}"
    );
    assert!(!out.contains(&refused), "{out}");

    let browser = console(&server).await;
    browser
        .run("document.getElementById('filter-outcome').value = 'held'")
        .await;
    browser.click("#request-filters button[type=submit]").await;
    let wanted = json!([held]);
    eventually("the list to show the held request alone", async || {
        listed(&browser).await == wanted
    })
    .await;
    browser
        .wait_for_text(
            &format!("#requests-table tr[data-id=\"{held}\"]"),
            &format!("held, run {held_run}"),
        )
        .await;
    provider.release(16);
}

#[tokio::test]
async fn the_cli_searches_with_the_apis_filters() {
    let (server, _dir) = Hookgate::start(&github_config());
    let log = fill(&server).await;
    let list = |args: &[&str]| {
        let mut all = vec!["requests", "list"];
        all.extend(args);
        cli(&server, &all)
    };
    let (ok, out, err) = list(&[
        "--header",
        "x-github-event:issues",
        "--body",
        "/action:opened",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains(&log.issue_opened), "{out}");
    for other in [&log.issue_edited, &log.pull_request_opened, &log.uncaptured] {
        assert!(!out.contains(other.as_str()), "{out}");
    }
    let (ok, out, err) = list(&["--error", "unauthorized", "--json"]);
    assert!(ok, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["requests"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(page["requests"][0]["id"], json!(log.unauthorized));
    let (ok, _, err) = list(&["--body", "action:opened"]);
    assert!(!ok);
    assert!(err.contains("body must be a JSON pointer"), "{err}");
}

/// The console, logged in with the gateway token.
async fn console(server: &Hookgate) -> Browser {
    let browser = Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser
}

/// The ids of the rows the console's request list shows, in order.
async fn listed(browser: &Browser) -> Value {
    let script = "return [...document.querySelectorAll('#requests-table tbody tr')]\
                  .map((row) => row.dataset.id)";
    browser.run(script).await
}

#[tokio::test]
async fn the_console_filters_its_request_list() {
    let (server, _dir) = Hookgate::start(&github_config());
    let log = fill(&server).await;
    let browser = console(&server).await;
    let row = |id: &str| format!("#requests-table tr[data-id=\"{id}\"]");
    browser.wait_for_text(&row(&log.push), "wake").await;

    browser
        .type_into("#filter-header", "x-github-event:issues")
        .await;
    browser.type_into("#filter-body", "/action:opened").await;
    browser.click("#request-filters button[type=submit]").await;
    let wanted = json!([log.issue_opened]);
    eventually("the list to show the opened issue alone", async || {
        listed(&browser).await == wanted
    })
    .await;

    browser
        .run("document.getElementById('filter-body').value = ''")
        .await;
    browser.type_into("#filter-body", "action").await;
    browser.click("#request-filters button[type=submit]").await;
    browser
        .wait_for_text("#status", "body must be a JSON pointer")
        .await;
}
