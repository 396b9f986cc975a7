use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_runs_are_resumed_and_finish_once_with_one_summary_each() {
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_secs(60),
            Box::new(Answer::Json(200, chat_reply("too late"))),
        )
    })
    .await;
    let dir = ConfigDir::new(&with_provider(&provider));
    let server = Hookgate::start_in(&dir);
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            agent(
                &server,
                json!({"message": format!("job {i}"), "deliver": false, "name": format!("Job{i}")}),
            )
            .await,
        );
    }
    eventually("all runs to be in flight", async || {
        provider.requests().len() == 4
    })
    .await;
    server.kill();

    provider.respond_with(|_, _| Answer::Json(200, chat_reply("done")));
    let server = Hookgate::start_in(&dir);
    for id in &ids {
        let run = finished(&server, id).await;
        assert_eq!(
            (run["status"].as_str(), run["reply"].as_str()),
            (Some("ok"), Some("done"))
        );
    }
    let mut texts = summaries(&server).await;
    texts.sort();
    assert_eq!(
        texts,
        [
            "Hook Job0: done",
            "Hook Job1: done",
            "Hook Job2: done",
            "Hook Job3: done"
        ]
    );
    // Another restart finds nothing to resume and adds nothing.
    server.terminate();
    let server = Hookgate::start_in(&dir);
    assert_eq!(summaries(&server).await.len(), 4);
    assert_eq!(provider.requests().len(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_in_progress_at_sigterm_is_finished_not_abandoned() {
    let provider = Fake::provider("deliver me").await;
    let chat = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(800),
            Box::new(Answer::Json(200, json!({"ok": true}))),
        )
    })
    .await;
    let mut config = with_provider(&provider);
    config["channels"] = all_channels(&chat);
    let dir = ConfigDir::new(&config);
    let server = Hookgate::start_in(&dir);
    let run_id = agent(
        &server,
        json!({"message": "m", "channel": "telegram", "to": "42"}),
    )
    .await;
    eventually("the send to start", async || !chat.requests().is_empty()).await;
    let (status, _) = server.terminate();
    assert!(status.success());
    let server = Hookgate::start_in(&dir);
    let run = finished(&server, &run_id).await;
    assert_eq!(run["delivery"]["status"], "sent", "{run}");
    assert_eq!(chat.requests().len(), 1);
}
