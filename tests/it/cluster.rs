//! Several hookgate nodes on one NATS JetStream server (`gateway.store.kind: nats`): both
//! accept hooks and share the runs, a retry on the other node gets the first answer, a killed
//! node's runs are finished by the other once each. NATS killed under load is in `failover`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::nats::NatsServer;
use crate::runtime::agent;

/// A node's configuration: the fake provider, the NATS store, a short run timeout (so that a
/// dead node's runs are handed over after 2 + 5 s).
fn node_config(nats: &NatsServer, provider: &Fake) -> Value {
    node_config_at(&nats.url(), provider)
}

/// [`node_config`] for the NATS servers at `url` (a comma-separated list for a cluster).
pub(crate) fn node_config_at(url: &str, provider: &Fake) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "gateway.store",
        json!({"kind": "nats", "url": url}),
    );
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("m"));
    set(&mut config, "agents.defaults.timeoutSeconds", json!(2));
    set(&mut config, "agents.defaults.maxConcurrent", json!(2));
    set(&mut config, "hooks.allowRequestSessionKey", json!(true));
    config
}

/// Every event of the main session, paged through.
pub(crate) async fn all_events(node: &Hookgate) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let path = format!("/api/sessions/main/events?after={after}&limit=1000");
        let (status, page) = json_of(node.api(&path).send().await.unwrap()).await;
        assert_eq!(status, 200, "{page}");
        let page = page["events"].as_array().unwrap().clone();
        let Some(last) = page.last() else {
            return events;
        };
        after = last["seq"].as_i64().unwrap();
        events.extend(page);
    }
}

async fn run(node: &Hookgate, run_id: &str) -> Value {
    json_of(
        node.api(&format!("/api/runs/{run_id}"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .1
}

/// Waits, up to `limit`, until every run in `run_ids` is `ok` on `node`.
pub(crate) async fn all_ok(node: &Hookgate, run_ids: &[String], limit: Duration) {
    let every = Duration::from_millis(100);
    eventually_within("every run ok", limit, every, async || {
        let mut pending = Vec::new();
        for id in run_ids {
            let record = run(node, id).await;
            if record["status"] != "ok" {
                pending.push(format!("{id}: {}", record["status"]));
            }
        }
        if pending.is_empty() {
            Ok(())
        } else {
            Err(format!("runs not ok in time: {pending:?}"))
        }
    })
    .await
}

/// Summary events per run id, from the text `Hook <name>: ...` of runs named after their id.
pub(crate) fn summaries_per_run(events: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for event in events.iter().filter(|e| e["kind"] == "summary") {
        let text = event["text"].as_str().unwrap();
        let name = text
            .strip_prefix("Hook ")
            .and_then(|t| t.split(':').next())
            .unwrap();
        *counts.entry(name.to_string()).or_default() += 1;
    }
    counts
}

/// Provider requests whose body contains `text`: the runs with that message (heartbeats, which
/// also call the provider, carry event texts, not run messages).
fn asked(provider: &Fake, text: &str) -> usize {
    provider
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains(text))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_intake_and_runs_and_show_the_same_state() {
    let nats = NatsServer::start();
    // A little latency, so that one node's two slots cannot take every run.
    let provider = Fake::start(|_, _| {
        Answer::After(
            Duration::from_millis(100),
            Box::new(Answer::Json(200, chat_reply("done"))),
        )
    })
    .await;
    let config = node_config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let nodes = [&a, &b];

    let mut run_ids = Vec::new();
    for i in 0..20 {
        let node = nodes[i % 2];
        let (status, reply) = json_of(
            node.hook("/hooks/wake")
                .json(&json!({"text": format!("wake {i}"), "mode": "next-heartbeat"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        run_ids.push(
            agent(
                node,
                json!({"message": format!("task {i}"), "name": format!("r{i}"), "deliver": false}),
            )
            .await,
        );
    }
    all_ok(&a, &run_ids, Duration::from_secs(30)).await;
    all_ok(&b, &run_ids, Duration::from_secs(10)).await;

    // Both views hold the same events with the same sequence numbers.
    let mut views = Vec::new();
    for node in nodes {
        let mut events = Vec::new();
        eventually("every summary in the view", async || {
            events = all_events(node).await;
            events.len() == 40
        })
        .await;
        views.push(events);
    }
    assert_eq!(views[0], views[1], "the two views differ");
    let wakes: BTreeSet<_> = views[0]
        .iter()
        .filter(|e| e["kind"] == "system")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(wakes.len(), 20);
    let summaries = summaries_per_run(&views[0]);
    assert_eq!(summaries.len(), 20, "{summaries:?}");
    assert!(summaries.values().all(|n| *n == 1), "{summaries:?}");
    assert_eq!(asked(&provider, "task "), 20, "every run ran once");

    // Both nodes did some of the runs.
    let (_, log_a) = a.terminate();
    let (_, log_b) = b.terminate();
    let ran = |log: &str| log.matches("run finished").count();
    assert_eq!(ran(&log_a) + ran(&log_b), 20);
    assert!(
        ran(&log_a) > 0 && ran(&log_b) > 0,
        "a: {}, b: {}",
        ran(&log_a),
        ran(&log_b)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_reused_on_the_other_node_gets_the_first_run() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node_config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let body = json!({"message": "deploy", "name": "once", "deliver": false});
    let mut ids = BTreeSet::new();
    for node in [&a, &b, &a, &b] {
        let (status, reply) = json_of(
            node.hook("/hooks/agent")
                .header("idempotency-key", "deploy-42")
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        ids.insert(reply["runId"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let ids: Vec<String> = ids.into_iter().collect();
    all_ok(&a, &ids, Duration::from_secs(10)).await;
    all_ok(&b, &ids, Duration::from_secs(10)).await;
    for node in [&a, &b] {
        let (_, runs) = json_of(node.api("/api/runs?limit=100").send().await.unwrap()).await;
        assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    }
    assert_eq!(asked(&provider, "deploy"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_redelivery_to_the_other_node_gets_the_first_answer() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut config = node_config(&nats, &provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "signed", "match": {"path": "signed"}, "messageTemplate": "delivery {{id}}",
                "signature": {"scheme": "github", "secrets": ["gh-secret"]}}]),
    );
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    let body = br#"{"id":"evt_9"}"#;
    let headers = crate::signatures::sign("github", "gh-secret", body, 0, "delivery-9");
    let mut answers = Vec::new();
    for node in [&a, &b] {
        let mut request = client().post(node.url("/hooks/signed")).body(body.to_vec());
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.unwrap();
        answers.push((response.status().as_u16(), response.text().await.unwrap()));
    }
    assert_eq!(answers[0].0, 200, "{answers:?}");
    assert_eq!(answers[0], answers[1]);
    let run_id = serde_json::from_str::<Value>(&answers[0].1).unwrap()["runId"]
        .as_str()
        .unwrap()
        .to_string();
    all_ok(&b, &[run_id], Duration::from_secs(10)).await;
    let (_, runs) = json_of(b.api("/api/runs?limit=100").send().await.unwrap()).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
}

/// A provider that answers nothing for two minutes until the flag is set, and at once after:
/// the runs of a node are in flight when the test stops it.
async fn provider_stalling_until_told() -> (Fake, Arc<std::sync::atomic::AtomicBool>) {
    let told = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&told);
    let provider = Fake::start(move |_, _| {
        if flag.load(Ordering::SeqCst) {
            Answer::Json(200, chat_reply("done"))
        } else {
            Answer::After(
                Duration::from_secs(120),
                Box::new(Answer::Json(200, chat_reply("late"))),
            )
        }
    })
    .await;
    (provider, told)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_runs_are_finished_by_the_other_once_each() {
    let nats = NatsServer::start();
    // Until the first node is killed its runs are in flight; afterwards they end at once.
    let (provider, killed) = provider_stalling_until_told().await;
    let mut config = node_config(&nats, &provider);
    // Long enough that no run times out on the first node before the last one reaches the
    // provider, however slowly the three are accepted: the node is killed with all in flight.
    set(&mut config, "agents.defaults.timeoutSeconds", json!(10));
    let (a, _dir_a) = Hookgate::start(&config);
    // Two runs of one session key: the second waits for the first, across the handover.
    let mut run_ids = Vec::new();
    for (name, key) in [("x1", "hook:x"), ("x2", "hook:x"), ("y", "hook:y")] {
        run_ids.push(
            agent(
                &a,
                json!({"message": name, "name": name, "sessionKey": key, "deliver": false}),
            )
            .await,
        );
    }
    eventually("two runs at the provider", async || {
        provider.requests().len() == 2
    })
    .await;
    killed.store(true, Ordering::SeqCst);
    a.kill();
    // Runs of one session key may start out of arrival order (docs/cluster.md, "One at a
    // time"): whichever of x1 and x2 the dead node started is the one in flight.
    let (first, second) = if asked(&provider, "x1\\n") == 1 {
        ("x1", "x2")
    } else {
        ("x2", "x1")
    };
    assert_eq!(
        (
            asked(&provider, "x1\\n") + asked(&provider, "x2\\n"),
            asked(&provider, "y\\n")
        ),
        (1, 1),
        "one run of each session key in flight on the dead node"
    );

    let (b, _dir_b) = Hookgate::start(&config);
    // The runs come back after the ack wait (run timeout 10 s + 5 s).
    all_ok(&b, &run_ids, Duration::from_secs(60)).await;
    let events = all_events(&b).await;
    let summaries = summaries_per_run(&events);
    assert_eq!(
        summaries,
        BTreeMap::from([("x1".into(), 1), ("x2".into(), 1), ("y".into(), 1)]),
        "one summary per run"
    );
    let asked = |message: &str| asked(&provider, &format!("{message}\\n"));
    // The runs in flight on the dead node ran again; the other of its key never started there.
    assert_eq!((asked(first), asked(second), asked("y")), (2, 1, 2));
    let index = |name: &str| if name == "x1" { 0 } else { 1 };
    let first_run = run(&b, &run_ids[index(first)]).await;
    let second_run = run(&b, &run_ids[index(second)]).await;
    assert!(
        first_run["finishedAt"].as_str() <= second_run["startedAt"].as_str(),
        "{second} started before {first} finished: {first_run} {second_run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_creates_the_stream_and_buckets_keeps_operator_limits_and_names_an_unreachable_store()
{
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node_config(&nats, &provider);
    let (status, output, _dir) = check(&config);
    assert!(status.success(), "{output}");
    assert!(
        output.contains("ok: nats: stream HOOKGATE")
            && output
                .contains("buckets hookgate-{idempotency,replay,locks,sends,batches,webhooks}")
            && output.contains("ack wait 7 s"),
        "{output}"
    );
    // A limit an operator sets on the stream survives the next check (and start).
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let mut stream = js.get_stream("HOOKGATE").await.unwrap();
    let mut limited = stream.info().await.unwrap().config.clone();
    limited.max_age = Duration::from_secs(3600);
    js.update_stream(limited).await.unwrap();
    let (status, output, _dir) = check(&config);
    assert!(status.success(), "{output}");
    let mut stream = js.get_stream("HOOKGATE").await.unwrap();
    let kept = stream.info().await.unwrap().config.clone();
    assert_eq!(kept.max_age, Duration::from_secs(3600));
    assert_eq!(kept.subjects, ["HOOKGATE.>"]);

    let mut unreachable = config.clone();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    set(
        &mut unreachable,
        "gateway.store.url",
        json!(format!("nats://user:s3cret-pass@127.0.0.1:{port}")),
    );
    let (status, output, _dir) = check(&unreachable);
    assert!(!status.success());
    assert!(
        output.contains("error: gateway.store: nats: cannot connect"),
        "{output}"
    );
    assert!(!output.contains("s3cret-pass"), "{output}");
}

async fn post_wakes(node: &Hookgate, texts: &[&str]) {
    for text in texts {
        let response = node
            .hook("/hooks/wake")
            .json(&json!({"text": text, "mode": "next-heartbeat"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_is_kept_across_restarts_and_rebuilt_for_a_recreated_stream() {
    let mut first = NatsServer::start();
    let provider = Fake::provider("done").await;
    let dir = ConfigDir::new(&node_config(&first, &provider));
    let node = Hookgate::start_in(&dir);
    post_wakes(&node, &["old 1", "old 2", "old 3"]).await;
    eventually("the wakes in the view", async || {
        node.wake_texts().await.len() == 3
    })
    .await;
    node.terminate();

    // NATS restarted, the stream updated by a start, NATS restarted again (a 2.9 server then
    // reports a new creation time): the same stream, the same view.
    first.kill();
    first.start_again();
    let node = Hookgate::start_in(&dir);
    node.terminate();
    first.kill();
    first.start_again();
    let node = Hookgate::start_in(&dir);
    assert_eq!(node.wake_texts().await, ["old 1", "old 2", "old 3"]);

    // The stream deleted and created again under the running node: its view starts afresh.
    let js = async_nats::jetstream::new(async_nats::connect(first.url()).await.unwrap());
    js.delete_stream("HOOKGATE").await.unwrap();
    let (status, output) = check_in(&dir);
    assert!(status.success(), "{output}");
    post_wakes(&node, &["new"]).await;
    eventually("the new wake in the rebuilt view", async || {
        node.wake_texts().await == ["new"]
    })
    .await;
    let (_, log) = node.terminate();
    assert_eq!(log.matches("rebuilding it").count(), 1, "{log}");

    // Another, empty, NATS: the view (one fact applied) is ahead of its stream.
    let second = NatsServer::start();
    dir.write(&node_config(&second, &provider));
    let node = Hookgate::start_in(&dir);
    post_wakes(&node, &["other"]).await;
    eventually("the wake in the view of the other stream", async || {
        node.wake_texts().await == ["other"]
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_hands_its_runs_back_at_once() {
    let nats = NatsServer::start();
    let (provider, stopped) = provider_stalling_until_told().await;
    let mut config = node_config(&nats, &provider);
    // An ack wait of 65 s: runs that come back within the test's bound were handed back.
    set(&mut config, "agents.defaults.timeoutSeconds", json!(60));
    let (a, _dir_a) = Hookgate::start(&config);
    let mut run_ids = Vec::new();
    for name in ["p", "q"] {
        run_ids.push(agent(&a, json!({"message": name, "name": name, "deliver": false})).await);
    }
    eventually("both runs at the provider", async || {
        provider.requests().len() == 2
    })
    .await;
    stopped.store(true, Ordering::SeqCst);
    let (status, _) = a.terminate();
    assert!(status.success());

    let (b, _dir_b) = Hookgate::start(&config);
    all_ok(&b, &run_ids, Duration::from_secs(20)).await;
    let summaries = summaries_per_run(&all_events(&b).await);
    assert_eq!(
        summaries,
        BTreeMap::from([("p".into(), 1), ("q".into(), 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_and_heartbeats_are_delivered_once_across_nodes() {
    let nats = NatsServer::start();
    let provider = Fake::provider("All good.").await;
    let chat = Fake::start(|_, _| Answer::Json(200, json!({"ok": true}))).await;
    let mut config = node_config(&nats, &provider);
    config["channels"] = json!({
        "telegram": {"botToken": "tg-token", "apiBase": chat.base},
        "defaultRoute": {"channel": "telegram", "to": "42"},
    });
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);

    let mut run_ids = Vec::new();
    for i in 0..10 {
        let node = [&a, &b][i % 2];
        let body = json!({"message": format!("task {i}"), "channel": "telegram", "to": "42", "wakeMode": "next-heartbeat"});
        run_ids.push(agent(node, body).await);
    }
    for node in [&a, &b] {
        eventually("every reply sent", async || {
            let mut sent = 0;
            for id in &run_ids {
                sent += usize::from(run(node, id).await["delivery"]["status"] == "sent");
            }
            sent == run_ids.len()
        })
        .await;
    }
    assert_eq!(chat.requests().len(), 10, "one message per run");

    // A heartbeat over the pending events, on one node, delivered once.
    let wake = async |node: &Hookgate, text: &str, mode: &str| {
        let response = node
            .hook("/hooks/wake")
            .json(&json!({"text": text, "mode": mode}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    };
    wake(&a, "later one", "next-heartbeat").await;
    wake(&b, "Deploy done", "now").await;
    eventually("the heartbeat's reply delivered", async || {
        chat.requests().len() == 11
    })
    .await;
    wake(&a, "third", "now").await;
    eventually("a second heartbeat delivered", async || {
        chat.requests().len() == 12
    })
    .await;
    let heartbeats: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .filter(|body| body.contains("System (untrusted)"))
        .collect();
    let with = |text: &str| heartbeats.iter().filter(|b| b.contains(text)).count();
    assert_eq!(
        // The bodies are JSON: the envelope's line breaks are escaped in them.
        (
            with("Deploy done"),
            with("later one"),
            with("---\\nthird\\n")
        ),
        (1, 1, 1),
        "each event in one heartbeat: {heartbeats:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_is_ready_once_its_view_holds_what_the_stream_held() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let config = node_config(&nats, &provider);
    let (a, _dir_a) = Hookgate::start(&config);
    let texts: Vec<String> = (0..300).map(|i| format!("early {i}")).collect();
    post_wakes(&a, &texts.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let (b, _dir_b) = Hookgate::start(&config);
    eventually_200("the new node ready", || client().get(b.url("/readyz"))).await;
    // Ready means caught up: no waiting for the view from here on.
    assert_eq!(all_events(&b).await.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_too_large_for_one_nats_message_gets_413() {
    let nats = NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut config = node_config(&nats, &provider);
    set(&mut config, "hooks.maxBodyBytes", json!(4 * 1024 * 1024));
    let (node, _dir) = Hookgate::start(&config);
    // Within the body limit, over the server's 1 MiB message limit.
    let text = "x".repeat(1536 * 1024);
    let (status, body) = json_of(
        node.hook("/hooks/wake")
            .json(&json!({"text": text, "mode": "next-heartbeat"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body),
        (413, json!({"ok": false, "error": "payload too large"}))
    );
    // Smaller ones still pass.
    post_wakes(&node, &["small"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_too_large_for_one_nats_message_is_recorded_cut() {
    let nats = NatsServer::start();
    let reply = format!("First line.\n{}", "y".repeat(1536 * 1024));
    let provider = Fake::start(move |_, _| Answer::Json(200, chat_reply(&reply))).await;
    let config = node_config(&nats, &provider);
    let (node, _dir) = Hookgate::start(&config);
    let run_id = agent(
        &node,
        json!({"message": "m", "name": "big", "deliver": false, "wakeMode": "next-heartbeat"}),
    )
    .await;
    all_ok(
        &node,
        std::slice::from_ref(&run_id),
        Duration::from_secs(20),
    )
    .await;
    let record = run(&node, &run_id).await;
    let recorded = record["reply"].as_str().unwrap();
    assert!(recorded.starts_with("First line.\nyyy"));
    assert!(recorded.ends_with("[cut: too long for one NATS message]"));
    assert!(recorded.len() < 1024 * 1024, "{}", recorded.len());
    assert_eq!(record["summary"], "First line.");
}
