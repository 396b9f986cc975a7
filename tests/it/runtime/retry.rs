//! Recovering what failed (docs/operations.md#retrying-failed-work): a run whose model call
//! failed runs again, a given-up reply is sent to the route as it resolves at the retry. The
//! embedded store's own, but for a run's turn, which a NATS cluster runs again too.

use super::*;

/// `POST /api/runs/<runId>/retry`: its status and answer.
async fn retry(server: &Hookgate, run_id: &str) -> (u16, Value) {
    json_of(
        client()
            .post(server.url(&format!("/api/runs/{run_id}/retry")))
            .bearer_auth(GATEWAY_TOKEN)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// On both stores: a refused turn (no later call of its own mends it) runs again once the
/// operator mended the cause.
pub(super) async fn a_run_whose_model_call_failed_runs_again_as_its_second_attempt(
    backend: Backend,
) {
    let provider = Fake::start(|_, i| match i {
        0 => Answer::Text(400, "unknown model".into()),
        _ => Answer::Json(200, chat_reply("fixed it")),
    })
    .await;
    let host = provider.base.strip_prefix("http://").unwrap().to_string();
    let (server, _kept) = backend.start(&with_provider(&provider));
    // No heartbeat: the provider's calls are the run's alone.
    let body =
        json!({"message": "m", "name": "Deploy", "deliver": false, "wakeMode": "next-heartbeat"});
    let run_id = agent(&server, body).await;
    let failed = finished(&server, &run_id).await;
    assert_eq!(
        (&failed["status"], &failed["attempts"], &failed["retry"]),
        (&json!("error"), &json!(1), &json!("run")),
        "{failed}"
    );
    assert_eq!(
        summaries(&server).await,
        [format!(
            "Hook Deploy (error): provider {host} answered 400: unknown model"
        )]
    );

    let (status, answer) = retry(&server, &run_id).await;
    assert_eq!(
        (status, answer),
        (200, json!({"ok": true, "runId": run_id, "retried": "run"}))
    );
    let run = finished(&server, &run_id).await;
    assert_eq!(
        (
            &run["status"],
            &run["reply"],
            &run["attempts"],
            &run["error"]
        ),
        (&json!("ok"), &json!("fixed it"), &json!(2), &Value::Null),
        "{run}"
    );
    assert_eq!(provider.requests().len(), 2);
    // No heartbeat took the failure's summary: the second attempt's replaces it.
    assert_eq!(summaries(&server).await, ["Hook Deploy: fixed it"]);

    // Nothing of it failed now.
    assert_eq!(run["retry"], Value::Null);
    let (status, refused) = retry(&server, &run_id).await;
    assert_eq!(
        (status, &refused["error"]),
        (409, &json!("nothing of this run failed"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_reply_to_last_goes_to_the_route_set_since_it_was_given_up() {
    let provider = Fake::provider("the reply").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let (server, _dir) = Hookgate::start(&config);
    // `last` with no route set and no default route: the first channel, and no recipient.
    let body = json!({"message": "m", "wakeMode": "next-heartbeat"});
    let run_id = agent(&server, body).await;
    let run = finished(&server, &run_id).await;
    assert_eq!(
        (&run["delivery"]["status"], &run["delivery"]["to"]),
        (&json!("failed"), &Value::Null),
        "{run}"
    );
    assert_eq!(run["retry"], "delivery");
    assert!(chat.requests().is_empty());
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_deliveries_total{outcome=\"failed\"} 1"),
        "{metrics}"
    );

    let put = client()
        .put(server.url("/api/sessions/main/route"))
        .bearer_auth(GATEWAY_TOKEN)
        .json(&json!({"channel": "slack", "to": "C9"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let (status, answer) = retry(&server, &run_id).await;
    assert_eq!((status, &answer["retried"]), (200, &json!("delivery")));
    let run = finished(&server, &run_id).await;
    assert_eq!(
        (
            &run["delivery"]["status"],
            &run["delivery"]["channel"],
            &run["delivery"]["to"]
        ),
        (&json!("sent"), &json!("slack"), &json!("C9")),
        "{run}"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("hookgate_deliveries_total{outcome=\"sent\"} 1"),
        "{metrics}"
    );
    let sent = chat.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/chat.postMessage");
    assert_eq!(sent[0].body, json!({"channel": "C9", "text": "the reply"}));
}
