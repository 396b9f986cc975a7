//! docs/operations.md "Trying a change on recorded traffic": the configuration in force, tried
//! unchanged on varied recorded traffic (wakes, agent runs, requests filtered by conditions,
//! signed and not, batched ones, signed redeliveries, a budget's refusal, a bad signature),
//! differs on no request; one mapping changed, exactly its requests differ.

use serde_json::{Value, json};

use crate::dry_run::{dry_run, ids_where, logged};
use crate::fake::Fake;
use crate::harness::*;
use crate::runtime::with_provider;
use crate::signatures::sign;

/// Every kind of mapping the traffic takes, every request captured.
fn config(provider: &Fake, alert_template: &str) -> Value {
    let mut config = with_provider(provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let mappings = json!([
        {"id": "gh", "match": {"path": "gh", "payload": {"/action": ["opened"]}},
         "messageTemplate": "gh {{action}}", "deliver": false,
         "signature": {"scheme": "github", "secret": "gh-secret"}},
        {"id": "ci", "match": {"path": "ci"}, "sessionKey": "hook:ci",
         "messageTemplate": "ci {{n}}", "deliver": false, "batch": {"window": "60s"},
         "signature": {"scheme": "github", "secret": "ci-secret"}},
        {"id": "alerts", "match": {"path": "alerts", "payload": {"/level": ["high"]}},
         "messageTemplate": alert_template, "deliver": false},
        {"id": "capped", "match": {"path": "capped"}, "messageTemplate": "capped {{n}}",
         "deliver": false, "budget": {"runsPerHour": 1, "onExceeded": "refuse"}},
        {"id": "notes", "match": {"path": "notes"}, "action": "wake", "textTemplate": "note {{n}}"},
    ]);
    set(&mut config, "hooks.mappings", mappings);
    config
}

/// Posts `body` to `path` signed by GitHub with `secret` as delivery `delivery`: its status and
/// request id.
async fn signed(
    server: &Hookgate,
    path: &str,
    secret: &str,
    body: &Value,
    delivery: &str,
) -> (u16, String) {
    let body = serde_json::to_vec(body).unwrap();
    let at = chrono::Utc::now().timestamp();
    let mut request = client().post(server.url(path)).body(body.clone());
    for (name, value) in sign("github", secret, &body, at, delivery) {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), request_id(&response))
}

/// Posts `body` to `path` with the hook token: its status and request id.
async fn posted(server: &Hookgate, path: &str, body: Value) -> (u16, String) {
    let response = server.hook(path).json(&body).send().await.unwrap();
    (response.status().as_u16(), request_id(&response))
}

/// The trial of request `id` in a dry run's answer.
fn trial<'a>(answer: &'a Value, id: &str) -> &'a Value {
    let requests = answer["requests"].as_array().unwrap();
    requests.iter().find(|r| r["id"] == id).unwrap()
}

async fn try_unchanged(server: &Hookgate, candidate: &Value) -> Value {
    let body = json!({"config": serde_json::to_string(candidate).unwrap()});
    let (status, answer) = dry_run(server, &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_in_force_differs_on_no_request_and_a_change_on_exactly_its_own() {
    let provider = Fake::provider("done").await;
    let live = config(&provider, "alert {{level}}");
    let (server, _dir) = Hookgate::start(&live);
    let mut sent = Vec::new();
    let mut expect = |(status, id): (u16, String), expected: u16| {
        assert_eq!(status, expected, "{id}");
        sent.push(id.clone());
        id
    };
    expect(
        posted(&server, "/hooks/wake", json!({"text": "w"})).await,
        200,
    );
    expect(
        posted(&server, "/hooks/agent", json!({"message": "a"})).await,
        200,
    );
    let opened = json!({"action": "opened"});
    expect(
        signed(&server, "/hooks/gh", "gh-secret", &opened, "d-1").await,
        200,
    );
    let closed = json!({"action": "closed"});
    let gh_filtered = expect(
        signed(&server, "/hooks/gh", "gh-secret", &closed, "d-2").await,
        204,
    );
    let gh_again = expect(
        signed(&server, "/hooks/gh", "gh-secret", &opened, "d-1").await,
        200,
    );
    expect(
        signed(&server, "/hooks/gh", "wrong", &opened, "d-9").await,
        401,
    );
    for (n, delivery) in [(1, "c-1"), (2, "c-2")] {
        let body = json!({"n": n});
        expect(
            signed(&server, "/hooks/ci", "ci-secret", &body, delivery).await,
            200,
        );
    }
    // A redelivery of the batch's second request: its run is the batch's, opened by the first.
    let ci_again = expect(
        signed(&server, "/hooks/ci", "ci-secret", &json!({"n": 2}), "c-2").await,
        200,
    );
    let high = expect(
        posted(&server, "/hooks/alerts", json!({"level": "high"})).await,
        200,
    );
    expect(
        posted(&server, "/hooks/alerts", json!({"level": "low"})).await,
        204,
    );
    expect(posted(&server, "/hooks/capped", json!({"n": 1})).await, 200);
    let refused = expect(posted(&server, "/hooks/capped", json!({"n": 2})).await, 429);
    expect(posted(&server, "/hooks/notes", json!({"n": 1})).await, 200);
    logged(&server, sent.len()).await;

    let answer = try_unchanged(&server, &live).await;
    let differing = ids_where(&answer, |r| r["differs"] == true);
    assert!(differing.is_empty(), "{differing:?} differ in {answer:#}");
    assert_eq!(answer["totals"]["differing"], 0, "{answer}");
    assert_eq!(answer["totals"]["requests"], sent.len(), "{answer}");
    // Filtered by the conditions of the mapping its signature admitted: named then and now.
    let filtered = trial(&answer, &gh_filtered);
    assert_eq!(filtered["then"]["mappingId"], "gh", "{filtered}");
    assert_eq!(filtered["now"]["mappingId"], "gh", "{filtered}");
    assert_eq!(filtered["now"]["ending"], "filtered", "{filtered}");
    // Redeliveries are their originals' work: the originals are the ones tried.
    for again in [&gh_again, &ci_again] {
        assert_eq!(trial(&answer, again)["untried"], "repeat", "{answer}");
    }
    assert_eq!(trial(&answer, &refused)["then"]["outcome"], "refused");

    // One mapping's template changed: exactly its request that made a run differs.
    let candidate = config(&provider, "ALERT {{level}}");
    let answer = try_unchanged(&server, &candidate).await;
    let differing = ids_where(&answer, |r| r["differs"] == true);
    assert_eq!(differing, std::slice::from_ref(&high), "{answer}");
    assert_eq!(
        trial(&answer, &high)["now"]["actions"][0]["message"],
        "ALERT high"
    );
}
