//! docs/subscriptions.md#where-they-are-kept: a change the store does not keep is not put in
//! force. The store is the real `subscriptions.db`, made to refuse writes by a trigger added
//! while the server runs (as a full or failing disk would).

use serde_json::json;

use crate::harness::*;

/// What a request to hook `name` with the hook token is answered: 404 when no mapping serves
/// the name, 401 while the subscription (which takes its signature alone) is served.
async fn served(server: &Hookgate, name: &str) -> u16 {
    let path = format!("/hooks/{name}");
    let response = server.hook(&path).json(&json!({})).send().await.unwrap();
    response.status().as_u16()
}

async fn api_post(server: &Hookgate, path: &str, body: serde_json::Value) -> u16 {
    let request = client().post(server.url(path)).bearer_auth(GATEWAY_TOKEN);
    request.json(&body).send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn a_change_the_store_does_not_keep_is_not_put_in_force() {
    let mut config = base_config();
    set(
        &mut config,
        "gateway.secretsKey",
        json!("sealing-key-0123456789abcdef0123456789"),
    );
    let (server, dir) = Hookgate::start(&config);
    let made = json!({"name": "gh", "provider": "github", "template": "t"});
    assert_eq!(api_post(&server, "/api/hooks", made).await, 201);
    assert_eq!(served(&server, "gh").await, 401);
    assert_eq!(served(&server, "fresh").await, 404);

    let db = rusqlite::Connection::open(dir.path().join("state/subscriptions.db")).unwrap();
    db.execute_batch(
        "CREATE TRIGGER no_insert BEFORE INSERT ON subscriptions
             BEGIN SELECT RAISE(ABORT, 'the disk refuses'); END;
         CREATE TRIGGER no_delete BEFORE DELETE ON subscriptions
             BEGIN SELECT RAISE(ABORT, 'the disk refuses'); END;",
    )
    .unwrap();

    // Not kept, so not served: nobody was told its secret.
    let fresh = json!({"name": "fresh", "provider": "github", "template": "t"});
    assert_eq!(api_post(&server, "/api/hooks", fresh).await, 500);
    assert_eq!(served(&server, "fresh").await, 404);
    // Neither paused nor deleted while the store still holds it live.
    assert_eq!(
        api_post(&server, "/api/hooks/gh/pause", json!({})).await,
        500
    );
    assert_eq!(served(&server, "gh").await, 401);
    let delete = client().delete(server.url("/api/hooks/gh"));
    let deleted = delete.bearer_auth(GATEWAY_TOKEN).send().await.unwrap();
    assert_eq!(deleted.status(), 500);
    assert_eq!(served(&server, "gh").await, 401);
    let (_, listed) = server.api_json("/api/hooks").await;
    assert_eq!(listed["hooks"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["hooks"][0]["paused"], false, "{listed}");

    // Once the store keeps changes again, they are made.
    db.execute_batch("DROP TRIGGER no_insert; DROP TRIGGER no_delete;")
        .unwrap();
    assert_eq!(
        api_post(&server, "/api/hooks/gh/pause", json!({})).await,
        200
    );
    assert_eq!(served(&server, "gh").await, 404);
}
