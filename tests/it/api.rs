//! The operator API and health endpoints.

use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn operator_api_requires_the_gateway_token() {
    let (server, _dir) = Hookgate::start(&base_config());
    let none = client()
        .get(server.url("/api/sessions/main/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), 401);
    let wrong = client()
        .get(server.url("/api/runs/x"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
}

#[tokio::test]
async fn hook_token_does_not_open_the_operator_api() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = client()
        .get(server.url("/api/sessions/main/events"))
        .bearer_auth(HOOK_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = client()
        .get(server.url("/api/sessions/main/events"))
        .header("x-service-token", GATEWAY_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "only a bearer gateway token opens the API");
}

#[tokio::test]
async fn operator_api_failures_lock_the_client_out() {
    let (server, _dir) = Hookgate::start(&base_config());
    for _ in 0..20 {
        let r = client()
            .get(server.url("/api/runs/x"))
            .bearer_auth("guess")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = client()
        .get(server.url("/api/runs/x"))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
    // The hook lockout is separate: hooks still answer 401 to a wrong token, not 429.
    let r = client()
        .post(server.url("/hooks/wake"))
        .bearer_auth("guess")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn operator_api_is_closed_without_a_gateway_token() {
    let mut config = base_config();
    config["gateway"] = json!({});
    let (server, _dir) = Hookgate::start(&config);
    let r = client()
        .get(server.url("/api/runs/x"))
        .bearer_auth("")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn unknown_run_is_404() {
    let (server, _dir) = Hookgate::start(&base_config());
    let r = server
        .api("/api/runs/00000000-0000-0000-0000-000000000000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn events_paging_parameters_are_validated() {
    let (server, _dir) = Hookgate::start(&base_config());
    for query in ["after=x", "limit=0", "limit=1001", "limit=-1"] {
        let r = server
            .api(&format!("/api/sessions/main/events?{query}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{query}");
    }
}

#[tokio::test]
async fn livez_and_readyz_answer_without_auth() {
    let (server, _dir) = Hookgate::start(&base_config());
    for path in ["/livez", "/readyz"] {
        let r = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(json_of(r).await, (200, json!({"ok": true})), "{path}");
    }
}

#[cfg(unix)]
#[tokio::test]
async fn readyz_is_503_when_the_store_cannot_be_written() {
    let (server, dir) = Hookgate::start(&base_config());
    let db = dir.path().join("state/hookgate.db");
    // Swapping the file out from under the open connection is not enough (SQLite keeps its
    // descriptor); making the database read-only at the SQLite level is: a second process holds
    // an exclusive lock on it.
    let locker = rusqlite::Connection::open(&db).unwrap();
    locker
        .execute_batch("PRAGMA busy_timeout=5000; BEGIN EXCLUSIVE;")
        .unwrap();
    let r = client().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    locker.execute_batch("COMMIT;").unwrap();
    let r = client().get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

/// `/readyz` needs no token, so a loop of probes must not make the store sync for each: a
/// writable store takes one probe write a second at most (docs/operations.md#health).
#[tokio::test]
async fn a_loop_of_readiness_probes_writes_once_a_second_at_most() {
    let (server, _dir) = Hookgate::start(&base_config());
    let commits = async || {
        let metrics = server.metrics().await;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("hookgate_store_commit_seconds_count "))
            .unwrap_or("0")
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let before = commits().await;
    let started = std::time::Instant::now();
    for _ in 0..200 {
        let r = client().get(server.url("/readyz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let seconds = started.elapsed().as_secs();
    let written = commits().await - before;
    assert!(
        written <= seconds + 2,
        "{written} commits for 200 probes in {seconds} s"
    );
}
