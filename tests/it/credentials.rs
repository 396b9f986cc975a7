//! What a signature or the hook token admits, and what of a credential reaches the request log,
//! a template or a replay (docs/hooks.md#provider-signatures, docs/operations.md#the-request-log):
//! no signature or secret header is ever kept, a replay admits no more than its original was
//! admitted for, and a signed mapping may refuse the hook token.

use serde_json::{Value, json};

use crate::harness::*;
use crate::signatures::sign;

const GITLAB_SECRET: &str = "gitlab-shared-secret-0123";
const GITHUB_SECRET: &str = "github-signing-secret-4567";

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Posts `body` to `path` with `headers` and no hook token.
async fn post(server: &Hookgate, path: &str, body: &[u8], headers: &[(String, String)]) -> u16 {
    let mut request = client().post(server.url(path)).body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    request.send().await.unwrap().status().as_u16()
}

/// Waits until the configuration in force is generation `generation` (the first is 1).
async fn reloaded_to(server: &Hookgate, generation: u64) {
    eventually(&format!("generation {generation}"), async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        status["generation"] == generation
    })
    .await;
}

/// Every run, newest first.
async fn runs(server: &Hookgate) -> Vec<Value> {
    let (status, body) = json_of(server.api("/api/runs?limit=100").send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().unwrap().clone()
}

/// The record of the newest request, once there are `count`.
async fn newest(server: &Hookgate, count: usize) -> Value {
    let mut id = String::new();
    eventually(&format!("{count} records"), async || {
        let (_, page) = json_of(server.api("/api/requests").send().await.unwrap()).await;
        let records = page["requests"].as_array().unwrap();
        if records.len() < count {
            return false;
        }
        id = records[0]["id"].as_str().unwrap().to_string();
        true
    })
    .await;
    record_of(server, &id).await
}

/// `GET /api/requests/<id>`, which must find it.
async fn record_of(server: &Hookgate, id: &str) -> Value {
    let (status, record) = json_of(
        server
            .api(&format!("/api/requests/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{record}");
    record
}

async fn replay(server: &Hookgate, id: &str) -> (u16, Value) {
    json_of(
        client()
            .post(server.url(&format!("/api/requests/{id}/replay")))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await
}

fn header_names(record: &Value) -> Vec<String> {
    record["capture"]["headers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair[0].as_str().unwrap().to_string())
        .collect()
}

/// Two mappings on one path: GitLab's signed one, and one the payload can steer to.
fn steerable() -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "gl", "match": {"path": "gl", "source": "gitlab"}, "messageTemplate": "gitlab {{text}}",
             "signature": {"scheme": "gitlab", "secret": GITLAB_SECRET}},
            {"id": "gl-other", "match": {"path": "gl"}, "action": "wake", "textTemplate": "other {{text}}"},
        ]),
    );
    config
}

#[tokio::test]
async fn a_steered_signed_request_keeps_no_secret_and_cannot_be_replayed() {
    let (server, _dir) = Hookgate::start(&steerable());
    let headers = [("x-gitlab-token".to_string(), GITLAB_SECRET.to_string())];
    let status = post(&server, "/hooks/gl", br#"{"text":"steered"}"#, &headers).await;
    assert_eq!(status, 401, "a signature admits its own mapping only");

    let record = newest(&server, 1).await;
    assert_eq!(record["mappingId"], "gl-other");
    assert_eq!(record["captured"], true, "{record}");
    assert!(!header_names(&record).contains(&"x-gitlab-token".to_string()));
    assert!(!record.to_string().contains(GITLAB_SECRET), "{record}");
    let refusal = record["replayRefusal"].as_str().unwrap();
    assert!(
        refusal.contains("refused for its authentication"),
        "{refusal}"
    );

    let id = record["id"].as_str().unwrap();
    let (status, answer) = replay(&server, id).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"], refusal);
    assert!(
        server.wake_texts().await.is_empty(),
        "nothing was queued: {:?}",
        server.wake_texts().await
    );
}

#[tokio::test]
async fn a_verified_github_signature_is_not_kept_beside_its_body() {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "gh", "match": {"path": "gh"}, "messageTemplate": "push {{ref}}",
                "signature": {"scheme": "github", "secret": GITHUB_SECRET}}]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = br#"{"ref":"refs/heads/main"}"#;
    let mut headers = sign("github", GITHUB_SECRET, body, now(), "d-1");
    headers.push(("x-hub-signature".into(), "sha1=0123456789abcdef".into()));
    assert_eq!(post(&server, "/hooks/gh", body, &headers).await, 200);

    let record = newest(&server, 1).await;
    let names = header_names(&record);
    assert!(names.contains(&"x-github-event".to_string()), "{names:?}");
    for kept_out in ["x-hub-signature-256", "x-hub-signature"] {
        assert!(!names.contains(&kept_out.to_string()), "{names:?}");
    }
    assert!(record["replayRefusal"].is_null(), "{record}");

    // The replay runs the mapping its signature admitted, and carries that admission on.
    let (status, answer) = replay(&server, record["id"].as_str().unwrap()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], 200, "{answer}");
    let replayed = newest(&server, 2).await;
    assert_eq!(replayed["mappingId"], "gh");
    assert_eq!(replayed["signature"]["verified"], true, "{replayed}");
    assert_eq!(
        server.run_of(&answer["answer"]).await["message"],
        "push refs/heads/main"
    );
}

#[tokio::test]
async fn a_signed_replay_runs_its_own_mapping_or_nothing() {
    let mapping = |id: &str, source: Option<&str>| {
        let mut mapping = json!({"id": id, "match": {"path": "events"}, "messageTemplate": id});
        if let Some(source) = source {
            mapping["match"]["source"] = json!(source);
            mapping["signature"] = json!({"scheme": "github", "secret": GITHUB_SECRET});
        }
        mapping
    };
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.mappings",
        json!([mapping("partner", Some("partner"))]),
    );
    let (server, dir) = Hookgate::start(&config);
    let body = br#"{"source":"partner"}"#;
    let headers = sign("github", GITHUB_SECRET, body, now(), "d-2");
    assert_eq!(post(&server, "/hooks/events", body, &headers).await, 200);
    let original = newest(&server, 1).await;
    let id = original["id"].as_str().unwrap().to_string();

    // A mapping that catches everything on the path now comes first: the replay must not run it.
    set(
        &mut config,
        "hooks.mappings",
        json!([
            mapping("internal", None),
            mapping("partner", Some("partner"))
        ]),
    );
    dir.write(&config);
    reloaded_to(&server, 2).await;
    let (status, answer) = replay(&server, &id).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], 401, "{answer}");

    // The mapping its signature admitted is gone: nothing to replay into.
    set(
        &mut config,
        "hooks.mappings",
        json!([mapping("internal", None)]),
    );
    dir.write(&config);
    reloaded_to(&server, 3).await;
    let (status, answer) = replay(&server, &id).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no longer configured"),
        "{answer}"
    );
    let runs = runs(&server).await;
    assert_eq!(runs.len(), 1, "only the original ran: {runs:?}");
}

#[tokio::test]
async fn a_shared_secret_header_reaches_no_template_of_any_mapping() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "gl", "match": {"path": "gl"}, "messageTemplate": "gl",
             "signature": {"scheme": "gitlab", "secret": GITLAB_SECRET}},
            {"id": "echo", "match": {"path": "echo"}, "action": "wake",
             "textTemplate": "token [{{headers.x-gitlab-token}}] custom [{{headers.x-acme-signature}}]"},
            {"id": "acme", "match": {"path": "acme"}, "messageTemplate": "acme",
             "signature": {"scheme": "hmac-sha256", "secret": "acme-key", "header": "X-Acme-Signature"}},
        ]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let response = server
        .hook("/hooks/echo")
        .header("x-gitlab-token", GITLAB_SECRET)
        .header("x-acme-signature", "acme-secretish")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.wake_texts().await, ["token [] custom []"]);
}

#[tokio::test]
async fn a_signed_mapping_may_refuse_the_hook_token() {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "gh", "match": {"path": "gh"}, "messageTemplate": "push {{ref}}",
             "signature": {"scheme": "github", "secret": GITHUB_SECRET, "acceptToken": false}},
            {"id": "open", "match": {"path": "open"}, "messageTemplate": "open",
             "signature": {"scheme": "github", "secret": GITHUB_SECRET}},
        ]),
    );
    let (server, _dir) = Hookgate::start(&config);
    let body = br#"{"ref":"main"}"#;
    let by_token = |path: &str| {
        server
            .hook(path)
            .body(body.to_vec())
            .header("content-type", "application/json")
            .send()
    };
    assert_eq!(by_token("/hooks/gh").await.unwrap().status(), 401);
    assert_eq!(by_token("/hooks/open").await.unwrap().status(), 200);
    let headers = sign("github", GITHUB_SECRET, body, now(), "d-3");
    assert_eq!(post(&server, "/hooks/gh", body, &headers).await, 200);
    assert_eq!(
        runs(&server).await.len(),
        2,
        "the open mapping's and the signed one"
    );
}

/// A capture an older version kept with a signature or secret header in it (they stripped
/// fewer) is shown and replayed without it.
#[tokio::test]
async fn a_credential_an_older_version_kept_is_never_shown_or_replayed() {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "echo", "match": {"path": "echo"}, "action": "wake",
                "textTemplate": "token [{{headers.x-gitlab-token}}]"}]),
    );
    let (server, dir) = Hookgate::start(&config);
    let response = server
        .hook("/hooks/echo")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = request_id(&response);
    eventually_200("the record", || server.api(&format!("/api/requests/{id}"))).await;
    let (status, _) = server.terminate();
    assert!(status.success());

    // What a version before this one could have written.
    let log = rusqlite::Connection::open(dir.path().join("state/requests.db")).unwrap();
    let headers = json!([
        ["x-hub-signature-256", "sha256=00ff"],
        ["x-gitlab-token", GITLAB_SECRET],
        ["x-github-event", "push"]
    ]);
    log.execute(
        "UPDATE requests SET headers = ?1 WHERE id = ?2",
        rusqlite::params![headers.to_string(), id],
    )
    .unwrap();
    drop(log);

    let server = Hookgate::start_in(&dir);
    let record = record_of(&server, &id).await;
    assert_eq!(header_names(&record), ["x-github-event"], "{record}");
    let (status, answer) = replay(&server, &id).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(server.wake_texts().await.last().unwrap(), "token []");
}
