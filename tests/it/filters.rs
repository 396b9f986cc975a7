//! docs/hooks.md#conditions: mappings that apply only when conditions on a request's headers
//! and payload hold; a request its path matched but no mapping's conditions let in is answered
//! `204`, recorded as `filtered` and makes nothing. GitHub's own example deliveries
//! (tests/it/fixtures/github) stand for what the provider sends.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::*;
use crate::requests::{cli, recorded};
use crate::signatures::sign;

pub(crate) fn github(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/github");
    std::fs::read(dir.join(format!("{name}.json"))).unwrap()
}

/// The issue's example: only issues and pull requests opened or reopened wake the agent.
fn issues_opened() -> Value {
    json!({
        "id": "github-issues",
        "match": {
            "path": "github",
            "headers": {"X-GitHub-Event": ["issues", "pull_request"]},
            "payload": {"/action": ["opened", "reopened"]},
        },
        "messageTemplate": "Issue #{{issue.number}} {{action}}: {{issue.title}}",
        "deliver": false,
    })
}

fn with_mappings(mappings: Value) -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.mappings", mappings);
    config
}

pub(crate) async fn deliver(server: &Hookgate, event: &str, fixture: &str) -> reqwest::Response {
    server
        .hook("/hooks/github")
        .header("x-github-event", event)
        .header("content-type", "application/json")
        .body(github(fixture))
        .send()
        .await
        .unwrap()
}

/// `body` as GitHub delivers event `event`, signed with `secret`.
fn signed(server: &Hookgate, secret: &str, event: &str, body: &[u8]) -> reqwest::RequestBuilder {
    let mut request = client()
        .post(server.url("/hooks/github"))
        .body(body.to_vec());
    for (name, value) in sign("github", secret, body, 0, "delivery") {
        let value = match name.as_str() {
            "x-github-event" => event.to_string(),
            _ => value,
        };
        request = request.header(name, value);
    }
    request
}

/// A `204` with nothing in it.
async fn assert_filtered(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), 204, "{what}");
    assert_eq!(response.text().await.unwrap(), "", "{what}");
}

async fn runs(server: &Hookgate) -> Vec<Value> {
    let (status, body) = server.api_json("/api/runs?limit=100").await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_github_example_wakes_the_agent_for_opened_issues_only() {
    let (server, _dir) = Hookgate::start(&with_mappings(json!([issues_opened()])));
    let (status, opened) = json_of(deliver(&server, "issues", "issues-opened").await).await;
    assert_eq!(status, 200, "{opened}");
    assert_filtered(
        deliver(&server, "issues", "issues-edited").await,
        "an issue edited",
    )
    .await;
    assert_filtered(deliver(&server, "star", "star-created").await, "a star").await;
    assert_filtered(deliver(&server, "push", "push").await, "a push").await;

    let runs = runs(&server).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["runId"], opened["runId"]);
    assert!(server.wake_texts().await.is_empty());

    let records = recorded(&server, "hook=github", 4).await;
    let became: Vec<(u64, &Value, &Value)> = records
        .iter()
        .map(|r| (r["status"].as_u64().unwrap(), &r["outcome"], &r["reason"]))
        .collect();
    let why = |unmet: &str| {
        json!(format!(
            "no mapping's conditions held: github-issues ({unmet})"
        ))
    };
    assert_eq!(
        became,
        [
            (204, &json!("filtered"), &why("header x-github-event")),
            (204, &json!("filtered"), &why("header x-github-event")),
            (204, &json!("filtered"), &why("payload /action")),
            (200, &Value::Null, &Value::Null),
        ],
        "newest first"
    );
    for filtered in &records[..3] {
        assert_eq!(filtered["runIds"], json!([]));
        assert_eq!(filtered["mappingId"], Value::Null);
        assert_eq!(filtered["transform"], Value::Null);
    }
    let metrics = server.metrics().await;
    for line in [
        r#"hookgate_hook_requests_total{hook="github",outcome="filtered"} 3"#,
        r#"hookgate_hook_requests_total{hook="github",outcome="accepted"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let filtered = recorded(&server, "outcome=filtered", 3).await;
    assert_eq!(filtered.len(), 3, "{filtered:?}");
    let (status, refused) = server.api_json("/api/requests?outcome=skipped").await;
    assert_eq!(status, 400, "{refused}");
    let (ok, out, err) = cli(&server, &["requests", "list", "--outcome", "filtered"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "a heading and the 3 filtered: {out}");
    assert!(
        lines[1].contains(
            "filtered: no mapping's conditions held: github-issues (header x-github-event)"
        ),
        "{out}"
    );
}

/// Header names are compared without regard to case, on the wire as in the configuration.
#[tokio::test]
async fn a_header_name_in_another_case_still_matches() {
    use tokio::io::AsyncWriteExt;
    let (server, _dir) = Hookgate::start(&with_mappings(json!([issues_opened()])));
    let body = github("issues-opened");
    let head = format!(
        "POST /hooks/github HTTP/1.1\r\nHost: hookgate\r\nAuthorization: Bearer {HOOK_TOKEN}\r\n\
         X-GITHUB-EVENT: issues\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    assert_eq!(read_answer_status(&mut stream).await, 200);
    assert_eq!(runs(&server).await.len(), 1);
}

/// Mappings are tried in order: the first whose conditions all hold wins, and a later one
/// catches what an earlier one's conditions let through. Lists take any of their values,
/// `{exists}` tells present (even `null`) from absent, header values are compared exactly.
#[tokio::test]
async fn mappings_are_tried_in_order_with_lists_and_exists() {
    let wake = |id: &str, conditions: Value| {
        let mut mapping = json!({"id": id, "match": {"path": "ci"}, "action": "wake", "textTemplate": format!("{id} {{{{n}}}}")});
        mapping["match"]
            .as_object_mut()
            .unwrap()
            .extend(conditions.as_object().unwrap().clone());
        mapping
    };
    let (server, _dir) = Hookgate::start(&with_mappings(json!([
        wake(
            "deploys",
            json!({"payload": {"/kind": "deploy", "/approval": {"exists": true}}})
        ),
        wake(
            "failures",
            json!({"headers": {"x-ci": "main"}, "payload": {"/status": ["failed", "errored"]}})
        ),
        wake(
            "non-drafts",
            json!({"payload": {"/draft": {"exists": false}}})
        ),
    ])));
    let send = |ci: &'static str, body: Value| {
        server
            .hook("/hooks/ci")
            .header("x-ci", ci)
            .json(&body)
            .send()
    };
    let sent = [
        (
            "main",
            json!({"n": 1, "kind": "deploy", "approval": null, "status": "failed"}),
        ),
        (
            "main",
            json!({"n": 2, "kind": "deploy", "status": "errored"}),
        ),
        ("main", json!({"n": 4, "status": "ok"})),
    ];
    for (ci, body) in sent {
        assert_eq!(
            send(ci, body.clone()).await.unwrap().status(),
            200,
            "{body}"
        );
    }
    assert_filtered(
        send("Main", json!({"n": 3, "status": "errored", "draft": false}))
            .await
            .unwrap(),
        "no mapping's conditions hold",
    )
    .await;
    let mut texts = server.event_texts().await;
    texts.sort();
    assert_eq!(texts, ["deploys 1", "failures 2", "non-drafts 4"]);
    let records = recorded(&server, "hook=ci&status=2xx", 4).await;
    assert_eq!(
        records[0]["reason"],
        "no mapping's conditions held: deploys (payload /approval), failures (header x-ci), non-drafts (payload /draft)"
    );
    let other = server.hook("/hooks/cd").json(&json!({"n": 5})).send().await;
    assert_eq!(
        other.unwrap().status(),
        404,
        "a name no mapping's path matches is not filtered"
    );
}

/// Conditions are checked before the transform runs: a filtered request never reaches one,
/// here one that traps on every call.
#[tokio::test]
async fn a_filtered_request_reaches_no_transform() {
    let dir = ConfigDir::new(&with_mappings(json!([{
        "id": "alerts",
        "match": {"path": "alerts", "headers": {"x-severity": ["critical", "major"]}},
        "transform": {"module": "hostile.wasm", "config": {"mode": "trap", "action": "wake"}},
    }])));
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let alert = json!({"alert": "disk full"});
    let minor = server
        .hook("/hooks/alerts")
        .header("x-severity", "minor")
        .json(&alert);
    assert_filtered(minor.send().await.unwrap(), "a minor alert").await;
    let critical = server
        .hook("/hooks/alerts")
        .header("x-severity", "critical")
        .json(&alert);
    assert_eq!(
        critical.send().await.unwrap().status(),
        500,
        "the transform traps when it is called"
    );
    let records = recorded(&server, "hook=alerts", 2).await;
    assert_eq!(records[0]["transform"]["outcome"], "failed");
    assert_eq!(records[1]["outcome"], "filtered");
    assert_eq!(records[1]["transform"], Value::Null);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"hookgate_transform_failures_total{mapping="alerts",cause="trap"} 1"#),
        "{metrics}"
    );
}

/// A provider's signature is verified before the conditions: an unsigned or wrongly signed
/// request is 401 whatever it carries, and a signed delivery that is filtered is remembered
/// like any other, so that its redelivery gets the same empty 204 and makes nothing either.
#[tokio::test]
async fn a_signed_delivery_is_verified_first_and_its_redelivery_filtered_again() {
    let mut mapping = issues_opened();
    mapping["signature"] = json!({"scheme": "github", "secret": "gh-secret"});
    let (server, _dir) = Hookgate::start(&with_mappings(json!([mapping])));
    let star = github("star-created");
    let post = |secret: &str, event: &str, body: &[u8]| signed(&server, secret, event, body).send();
    let unsigned = client()
        .post(server.url("/hooks/github"))
        .header("x-github-event", "star");
    assert_eq!(
        unsigned.body(star.clone()).send().await.unwrap().status(),
        401
    );
    assert_eq!(post("wrong", "star", &star).await.unwrap().status(), 401);
    assert_filtered(
        post("gh-secret", "star", &star).await.unwrap(),
        "a signed star",
    )
    .await;
    assert_filtered(
        post("gh-secret", "star", &star).await.unwrap(),
        "its redelivery",
    )
    .await;
    let records = recorded(&server, "hook=github&status=2xx", 2).await;
    assert_eq!(records[0]["repeat"], "redelivery");
    assert_eq!(records[1]["outcome"], "filtered");
    assert_eq!(
        records[1]["signature"],
        json!({"scheme": "github", "verified": true, "secret": "current"})
    );
    assert!(runs(&server).await.is_empty());
    let opened = github("issues-opened");
    assert_eq!(
        post("gh-secret", "issues", &opened).await.unwrap().status(),
        200
    );
    assert_eq!(runs(&server).await.len(), 1);
}

/// A `204` tells a sender no more than a `401` would: a request the mappings it matched would
/// refuse (here the hook token on a mapping that takes its signature only) gets their refusal.
#[tokio::test]
async fn a_request_its_mappings_would_refuse_is_refused_not_filtered() {
    let mut mapping = issues_opened();
    mapping["signature"] = json!({"scheme": "github", "secret": "gh-secret", "acceptToken": false});
    let (server, _dir) = Hookgate::start(&with_mappings(json!([mapping])));
    assert_eq!(deliver(&server, "star", "star-created").await.status(), 401);
    assert_eq!(
        deliver(&server, "issues", "issues-opened").await.status(),
        401
    );
    let records = recorded(&server, "hook=github", 2).await;
    assert_eq!(
        records[1]["reason"],
        "mapping github-issues accepts its signature only, not the hook token"
    );
    assert_eq!(records[1]["outcome"], Value::Null);
}

/// The example of docs/hooks.md#conditions works as it says.
#[tokio::test]
async fn the_documented_example_wakes_triage_for_opened_issues_only() {
    let doc = include_str!("../../docs/hooks.md");
    let block = doc
        .split("```json5\n")
        .find(|block| block.starts_with("{ id: \"github-triage\""))
        .and_then(|block| block.split("```").next())
        .expect("the conditions example in docs/hooks.md");
    let mapping: Value = json5::from_str(block).unwrap();
    let mut config = with_mappings(json!([mapping]));
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main"}, {"id": "triage"}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let (status, run) = json_of(deliver(&server, "issues", "issues-opened").await).await;
    assert_eq!(status, 200, "{run}");
    let run = server.run_of(&run).await;
    assert_eq!(run["agentId"], "triage", "{run}");
    assert_filtered(deliver(&server, "issues", "issues-edited").await, "an edit").await;
    assert_filtered(deliver(&server, "push", "push").await, "a push").await;
}

/// Several mappings of one provider may share its secret and split its events by condition:
/// the signature that verified a delivery admits each of them, and no mapping that checks
/// signatures otherwise.
#[tokio::test]
async fn mappings_that_share_a_secret_split_a_signed_providers_events() {
    let with_secret = |mut mapping: Value, secret: &str| {
        mapping["signature"] = json!({"scheme": "github", "secret": secret});
        mapping
    };
    let prs = json!({
        "id": "github-prs",
        "match": {"path": "github", "headers": {"x-github-event": "pull_request"}},
        "messageTemplate": "PR #{{number}} {{action}}",
        "deliver": false,
    });
    let stars = json!({
        "id": "github-stars",
        "match": {"path": "github", "headers": {"x-github-event": "star"}},
        "action": "wake",
        "textTemplate": "starred",
    });
    let mut issues = issues_opened();
    issues["match"]["headers"] = json!({"X-GitHub-Event": "issues"});
    let (server, _dir) = Hookgate::start(&with_mappings(json!([
        with_secret(issues, "gh-secret"),
        with_secret(prs, "gh-secret"),
        with_secret(stars, "another-secret"),
    ])));
    let post = |event: &str, body: &[u8]| signed(&server, "gh-secret", event, body).send();
    let pr = post("pull_request", &github("pull-request-opened"))
        .await
        .unwrap();
    assert_eq!(pr.status(), 200);
    let star = post("star", &github("star-created")).await.unwrap();
    assert_eq!(star.status(), 401, "a mapping with another secret");
    let records = recorded(&server, "hook=github", 2).await;
    assert_eq!(records[1]["mappingId"], "github-prs");
    assert_eq!(
        records[0]["reason"],
        "signed for mapping github-issues, but the payload matched mapping github-stars"
    );
    assert!(server.wake_texts().await.is_empty());
    assert_eq!(runs(&server).await.len(), 1);
}

/// On NATS JetStream as on the embedded store: a filtered signed delivery makes nothing in the
/// cluster, and its redelivery to another node gets the same `204` from the shared record.
#[tokio::test]
async fn a_cluster_filters_alike_and_shares_the_filtered_answer() {
    let nats = crate::nats::NatsServer::start();
    let provider = crate::fake::Fake::provider("triaged").await;
    let mut config = crate::cluster::node_config_at(&nats.url(), &provider);
    let mut mapping = issues_opened();
    mapping["signature"] = json!({"scheme": "github", "secret": "gh-secret"});
    set(&mut config, "hooks.mappings", json!([mapping]));
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let star = github("star-created");
    let on =
        |node: &Hookgate, event: &str, body: &[u8]| signed(node, "gh-secret", event, body).send();
    assert_filtered(on(&a, "star", &star).await.unwrap(), "a star on a").await;
    assert_filtered(on(&b, "star", &star).await.unwrap(), "its redelivery to b").await;
    let redelivered = recorded(&b, "hook=github", 1).await;
    assert_eq!(redelivered[0]["repeat"], "redelivery");
    let opened = on(&b, "issues", &github("issues-opened")).await.unwrap();
    let (status, opened) = json_of(opened).await;
    assert_eq!(status, 200, "{opened}");
    eventually("a's view shows the one run", async || {
        runs(&a).await.len() == 1
    })
    .await;
    assert_eq!(runs(&a).await[0]["runId"], opened["runId"]);
}

/// Conditions change with a reload; the requests filtered before it took no idempotency key,
/// so the first that a new condition lets in makes its run.
#[tokio::test]
async fn conditions_change_live_and_a_filtered_request_takes_no_idempotency_key() {
    let mut mapping = issues_opened();
    let mut config = with_mappings(json!([mapping.clone()]));
    let (server, dir) = Hookgate::start(&config);
    let edited = || {
        server
            .hook("/hooks/github")
            .header("x-github-event", "issues")
            .header("idempotency-key", "delivery-7")
            .header("content-type", "application/json")
            .body(github("issues-edited"))
    };
    assert_filtered(edited().send().await.unwrap(), "an edit before the reload").await;
    mapping["match"]["payload"]["/action"] = json!(["opened", "edited"]);
    set(&mut config, "hooks.mappings", json!([mapping]));
    dir.write(&config);
    eventually_200("the edit let in after the reload", edited).await;
    let (status, again) = json_of(edited().send().await.unwrap()).await;
    assert_eq!(status, 200);
    let runs = runs(&server).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        again["runId"], runs[0]["runId"],
        "the key names the run it made"
    );

    // A bad condition refuses the whole reload, naming its key; the conditions in force stay.
    mapping["match"]["payload"]["/action"] = json!([]);
    mapping["match"]["headers"] = json!({"x-github-event": "push"});
    set(&mut config, "hooks.mappings", json!([mapping]));
    dir.write(&config);
    let key = "hooks.mappings[0].match.payload./action: must list at least one value";
    eventually("the refused reload", async || {
        let (_, status) = server.api_json("/api/config").await;
        status["lastError"].to_string().contains(key)
    })
    .await;
    let (status, other) = json_of(deliver(&server, "issues", "issues-edited").await).await;
    assert_eq!(status, 200, "{other}");
    assert_ne!(other["runId"], again["runId"], "a new edit, a new run");
}

#[test]
fn check_names_each_bad_condition_and_never_its_value() {
    let (status, out, _dir) = check(&with_mappings(json!([{
        "match": {
            "path": "github",
            "headers": {"x bad": "s3cr3t-1", "x-empty": [], "x-number": 5},
            "payload": {
                "action": "s3cr3t-2",
                "/none": [],
                "/typo": {"exist": true},
                "/kind": {"exists": "s3cr3t-3"},
            },
        },
        "messageTemplate": "m",
    }])));
    assert!(!status.success(), "{out}");
    for expected in [
        "hooks.mappings[0].match.headers.x-number: a header value (a string) or a list of them",
        "hooks.mappings[0].match.headers.x bad: must be a header name",
        "hooks.mappings[0].match.headers.x-empty: must list at least one value",
        "hooks.mappings[0].match.payload./kind.exists: expected true or false",
        "hooks.mappings[0].match.payload./none: must list at least one value",
        "hooks.mappings[0].match.payload./typo.exist: unknown field, expected `exists`",
        "hooks.mappings[0].match.payload.action: must be a JSON pointer",
    ] {
        assert!(out.contains(expected), "{expected} in {out}");
    }
    assert!(!out.contains("s3cr3t"), "{out}");
}
