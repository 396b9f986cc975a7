//! Repeats under replay (docs/operations.md#replay): a request answered with an earlier
//! request's work (a provider's redelivery, a `409 delivery in progress` copy, an idempotency
//! repeat) is never replayed, alone or in bulk; its original is, once.

use serde_json::{Value, json};

use crate::bulk_replay::{alert, bulk, filter, fix_by_reload, replay_all, start_failing};
use crate::harness::*;
use crate::requests::recorded;

/// The secret of [`start_github`]'s mapping.
const GITHUB_SECRET: &str = "gh-secret";

/// A mapping `github` signed by GitHub's scheme, a run per delivery, its requests captured;
/// `transform`, when given, is its transform.
fn start_github(transform: Option<Value>) -> (Hookgate, ConfigDir) {
    let mut mapping = json!({
        "id": "github", "match": {"path": "github"}, "messageTemplate": "delivery {{id}}",
        "capture": {}, "signature": {"scheme": "github", "secrets": [GITHUB_SECRET]},
    });
    if let Some(transform) = transform {
        mapping["transform"] = transform;
    }
    let mut config = base_config();
    set(&mut config, "hooks.mappings", json!([mapping]));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile"]);
    (Hookgate::start_in(&dir), dir)
}

/// GitHub's delivery `delivery` of `body`, signed; returns the request's id and the answer.
async fn github(server: &Hookgate, body: &[u8], delivery: &str) -> (String, u16, Value) {
    let mut request = client()
        .post(server.url("/hooks/github"))
        .body(body.to_vec());
    for (name, value) in crate::signatures::sign("github", GITHUB_SECRET, body, 0, delivery) {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let id = request_id(&response);
    let (status, answer) = json_of(response).await;
    (id, status, answer)
}

/// `POST /api/requests/{id}/replay`.
async fn replay_one(server: &Hookgate, id: &str) -> (u16, Value) {
    let path = format!("/api/requests/{id}/replay");
    let request = client().post(server.url(&path)).bearer_auth(GATEWAY_TOKEN);
    json_of(request.send().await.unwrap()).await
}

/// How many requests a bulk replay of `query` matches, and how many it would replay.
async fn dry_run(server: &Hookgate, query: &str) -> (u64, u64) {
    let (status, plan) = bulk(server, json!({"filter": filter(query), "dryRun": true})).await;
    assert_eq!(status, 200, "{plan}");
    let count = |key: &str| plan[key].as_u64().unwrap_or_else(|| panic!("{plan}"));
    (count("matched"), count("replayable"))
}

/// What a replay of a repeat of a signed delivery is refused with.
const REDELIVERY_REFUSED: &str = "the request repeated an earlier one (the same signed delivery), \
    and a replay would run that one's work again: replay the original request";

#[tokio::test]
async fn a_redelivery_is_never_replayed_and_its_original_once() {
    let (server, _dir) = start_github(None);
    let body = br#"{"id":"push-1"}"#;
    let (original, status, first) = github(&server, body, "d-42").await;
    assert_eq!(status, 200, "{first}");
    // GitHub redelivers with the same X-GitHub-Delivery: answered from the replay memory.
    let (redelivery, status, again) = github(&server, body, "d-42").await;
    assert_eq!((status, &again), (200, &first));
    let records = recorded(&server, "mapping=github", 2).await;
    assert_eq!(records[0]["repeat"], "redelivery", "{records:?}");

    let (status, refused) = replay_one(&server, &redelivery).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"], REDELIVERY_REFUSED);
    let (_, record) = server
        .api_json(&format!("/api/requests/{redelivery}"))
        .await;
    assert_eq!(record["replayRefusal"], REDELIVERY_REFUSED, "{record}");

    let job = replay_all(&server, "mapping=github", 10, false).await;
    assert_eq!(job["state"], "finished", "{job}");
    assert_eq!(job["total"], 1, "only the original: {job}");
    assert_eq!(job["items"][0]["original"], original.as_str(), "{job}");
    assert_eq!(job["items"][0]["status"], 200, "{job}");
    let (_, plan) = bulk(
        &server,
        json!({"filter": filter("mapping=github"), "dryRun": true, "again": true}),
    )
    .await;
    assert_eq!(
        plan["notReplayable"],
        json!([
            {"reason": "the request is itself a replay", "count": 1},
            {"reason": REDELIVERY_REFUSED, "count": 1},
        ]),
        "{plan}"
    );
    let (_, runs) = server.api_json("/api/runs").await;
    assert_eq!(
        runs["runs"].as_array().unwrap().len(),
        2,
        "the delivery and one replay of it: {runs}"
    );
}

#[tokio::test]
async fn a_copy_answered_409_while_its_delivery_runs_is_not_replayed() {
    // The transform spins for its whole limit: the first copy holds the delivery that long.
    let spin = json!({"module": "hostile.wasm", "config": {"mode": "loop"},
                      "limits": {"timeoutMs": 3000}});
    let (server, _dir) = start_github(Some(spin));
    let body = br#"{"id":"push-2"}"#;
    let (first, copy) = tokio::join!(github(&server, body, "d-43"), github(&server, body, "d-43"));
    let mut statuses = [first.1, copy.1];
    statuses.sort_unstable();
    assert_eq!(statuses, [409, 500], "{first:?} {copy:?}");
    let records = recorded(&server, "mapping=github", 2).await;
    let in_progress = records.iter().find(|r| r["status"] == 409).unwrap();
    assert_eq!(
        in_progress["error"], "delivery in progress",
        "{in_progress}"
    );
    assert_eq!(in_progress["repeat"], "redelivery", "{in_progress}");
    let (status, refused) = replay_one(&server, in_progress["id"].as_str().unwrap()).await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!(REDELIVERY_REFUSED))
    );
    assert_eq!(
        dry_run(&server, "mapping=github").await,
        (2, 1),
        "a repeat and its original"
    );
}

#[tokio::test]
async fn an_idempotency_repeat_is_not_replayed() {
    let (server, dir, config) = start_failing("agent");
    fix_by_reload(&server, &dir, config, "agent").await;
    let (original, status) = alert(&server, "deploy", Some("deploy-43")).await;
    assert_eq!(status, 200);
    let (repeat, status) = alert(&server, "deploy", Some("deploy-43")).await;
    assert_eq!(status, 200);
    let records = recorded(&server, "mapping=alerts", 2).await;
    assert_eq!(records[0]["repeat"], "idempotency", "{records:?}");

    let (status, refused) = replay_one(&server, &repeat).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["error"],
        "the request repeated an earlier one (the same idempotency key), and a replay would run \
         that one's work again: replay the original request"
    );
    assert_eq!(
        dry_run(&server, "mapping=alerts").await,
        (2, 1),
        "a repeat and its original"
    );
    let job = replay_all(&server, "mapping=alerts", 10, false).await;
    assert_eq!(job["items"][0]["original"], original.as_str(), "{job}");
    assert_eq!(job["total"], 1, "{job}");
}
