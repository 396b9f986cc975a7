//! docs/hooks.md and docs/runtime.md "Batches": a batch mapping's requests gathered into one
//! run per window or per `maxItems`, each request stored before its answer, every message in
//! its own envelope of the run's prompt, numbered, oldest first.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::Fake;
use crate::harness::*;

/// A configuration whose `inbox` mapping batches with `batch`, its runs sent to `provider`.
pub(crate) fn config(provider: &Fake, batch: Value) -> Value {
    let mut config = base_config();
    config["agents"] =
        json!({"defaults": {"provider": {"baseUrl": provider.base}, "model": "test-model"}});
    config["hooks"]["mappings"] = json!([{
        "id": "inbox",
        "match": {"path": "inbox"},
        "name": "Inbox",
        "sessionKey": "hook:inbox",
        "messageTemplate": "{{subject}}",
        "wakeMode": "next-heartbeat",
        "deliver": false,
        "batch": batch,
    }]);
    config
}

/// The prompts of the batch runs the provider was asked, in the order it was.
pub(crate) fn batch_prompts(provider: &Fake) -> Vec<String> {
    provider
        .requests()
        .iter()
        .filter_map(|request| {
            let prompt = request.body["messages"].as_array()?.last()?["content"].as_str()?;
            prompt.contains(" | Batch: ").then(|| prompt.to_string())
        })
        .collect()
}

/// The messages of a batch prompt, in the order it numbers them, after checking that message
/// `i` is numbered `i` and is in an envelope of its own.
pub(crate) fn messages_of(prompt: &str) -> Vec<String> {
    let count = prompt.matches("\nMessage ").count();
    assert!(
        prompt.contains(&format!("| Batch: {count} messages, oldest first")),
        "{prompt}"
    );
    (1..=count)
        .map(|i| {
            let head = format!("\nMessage {i} of {count} | Received: ");
            let at = prompt
                .find(&head)
                .unwrap_or_else(|| panic!("{head} in {prompt}"));
            let rest = &prompt[at + head.len()..];
            let start = rest.find("\n<<<EXTERNAL_UNTRUSTED_CONTENT id=\"").unwrap();
            let body = &rest[start..];
            let content = &body[body.find("\n---\n").unwrap() + 5..];
            let end = content
                .find("\n<<<END_EXTERNAL_UNTRUSTED_CONTENT id=\"")
                .unwrap();
            content[..end].to_string()
        })
        .collect()
}

pub(crate) async fn send(server: &Hookgate, subject: &str) -> Value {
    let (status, answer) = server
        .hook_json("/hooks/inbox", &json!({"subject": subject}))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Sends `subject` with the idempotency key `key`.
pub(crate) async fn send_keyed(server: &Hookgate, key: &str, subject: &str) -> Value {
    let response = server
        .hook("/hooks/inbox")
        .header("idempotency-key", key)
        .json(&json!({"subject": subject}))
        .send()
        .await
        .unwrap();
    let (status, answer) = json_of(response).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Waits until the provider has been asked `count` batch prompts, and returns them.
pub(crate) async fn prompts(provider: &Fake, count: usize) -> Vec<String> {
    eventually_within(
        "the batch runs",
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let prompts = batch_prompts(provider);
            match prompts.len() {
                n if n == count => Ok(prompts),
                n if n > count => panic!("{n} batch runs, not {count}"),
                n => Err(format!("{n} so far")),
            }
        },
    )
    .await
}

/// The subjects each run's requests were answered with, in the order of their positions,
/// after checking that each run's positions are 1, 2, ... once each.
pub(crate) fn by_run(answers: Vec<(String, Value)>) -> BTreeMap<String, Vec<String>> {
    let mut runs: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
    for (subject, answer) in answers {
        let position = answer["batched"]
            .as_u64()
            .unwrap_or_else(|| panic!("{answer}"));
        let run_id = answer["runId"].as_str().unwrap().to_string();
        runs.entry(run_id).or_default().push((position, subject));
    }
    runs.into_iter()
        .map(|(run_id, mut items)| {
            items.sort();
            let positions: Vec<u64> = items.iter().map(|(p, _)| *p).collect();
            assert_eq!(positions, (1..=items.len() as u64).collect::<Vec<_>>());
            (run_id, items.into_iter().map(|(_, s)| s).collect())
        })
        .collect()
}

/// Checks that the prompt of run `run_id` among `prompts` holds `subjects`, in order.
pub(crate) fn assert_prompt(prompts: &[String], run_id: &str, subjects: &[String]) {
    let prompt = prompts
        .iter()
        .find(|p| p.contains(&format!("Job ID: {run_id} |")))
        .unwrap_or_else(|| panic!("no prompt of {run_id}"));
    assert_eq!(messages_of(prompt), subjects);
}

#[tokio::test]
async fn a_burst_of_100_becomes_two_runs_of_50_numbered_oldest_first() {
    let provider = Fake::provider("done").await;
    let (server, _dir) =
        Hookgate::start(&config(&provider, json!({"window": "1h", "maxItems": 50})));
    let server = &server;
    let answers = futures_util::future::join_all((0..100).map(|n| async move {
        (
            format!("mail-{n}"),
            send(server, &format!("mail-{n}")).await,
        )
    }))
    .await;
    // Each run's positions are 1..=50, once each; the subject at each position is the message
    // its prompt numbers so.
    let runs = by_run(answers);
    assert_eq!(runs.len(), 2, "{runs:?}");
    let prompts = prompts(&provider, 2).await;
    for (run_id, subjects) in runs {
        assert_eq!(subjects.len(), 50);
        assert_prompt(&prompts, &run_id, &subjects);
        let run = server.run_of(&json!({"runId": run_id})).await;
        assert_eq!(run["sessionKey"], "hook:inbox");
        assert!(
            run["message"]
                .as_str()
                .unwrap()
                .starts_with("Message 1 of 50:\n")
        );
    }
    // Nothing else reached the model: 100 requests, 2 turns.
    assert_eq!(provider.requests().len(), 2);
}

#[tokio::test]
async fn a_batch_closes_when_its_window_ends() {
    let provider = Fake::provider("done").await;
    let (server, _dir) =
        Hookgate::start(&config(&provider, json!({"window": "1s", "maxItems": 50})));
    let first = send(&server, "one").await;
    assert_eq!(first["batched"], 1);
    let run = server.run_of(&first).await;
    assert_eq!(run["status"], "batching", "{run}");
    let second = send(&server, "two").await;
    assert_eq!(
        (&second["runId"], &second["batched"]),
        (&first["runId"], &json!(2))
    );
    let closed = prompts(&provider, 1).await;
    assert_eq!(messages_of(&closed[0]), ["one", "two"]);
    eventually("the batch run finished", async || {
        server.run_of(&first).await["status"] == "ok"
    })
    .await;
    // The next request opens a batch of its own.
    let third = send(&server, "three").await;
    assert_ne!(third["runId"], first["runId"]);
    assert_eq!(third["batched"], 1);
    let both = prompts(&provider, 2).await;
    assert_eq!(messages_of(&both[1]), ["three"]);
}

#[tokio::test]
async fn a_retried_request_keeps_its_run_and_position() {
    let provider = Fake::provider("done").await;
    let (server, _dir) =
        Hookgate::start(&config(&provider, json!({"window": "1h", "maxItems": 3})));
    let keyed = async |key: &str, subject: &str| send_keyed(&server, key, subject).await;
    let a = keyed("key-a", "a").await;
    let b = keyed("key-b", "b").await;
    let retried = keyed("key-b", "b").await;
    assert_eq!(
        (&retried["runId"], &retried["batched"]),
        (&b["runId"], &json!(2))
    );
    assert_eq!(b["runId"], a["runId"]);
    // The retry took no place: the third request is third, and fills the batch.
    let c = keyed("key-c", "c").await;
    assert_eq!((&c["runId"], &c["batched"]), (&a["runId"], &json!(3)));
    let prompts = prompts(&provider, 1).await;
    assert_eq!(messages_of(&prompts[0]), ["a", "b", "c"]);
    // A retry once the batch has run still gets its place.
    let late = keyed("key-a", "a").await;
    assert_eq!((&late["runId"], &late["batched"]), (&a["runId"], &json!(1)));
}

/// SIGKILL with a batch open: after the restart the batch is still open with every request it
/// had, the next request joins it at the next position and fills it, and its run has them all.
#[tokio::test]
async fn a_crash_while_a_batch_is_open_loses_none_of_its_requests() {
    let provider = Fake::provider("done").await;
    let dir = ConfigDir::new(&config(&provider, json!({"window": "1h", "maxItems": 4})));
    let server = Hookgate::start_in(&dir);
    let mut first = Value::Null;
    for subject in ["before-1", "before-2", "before-3"] {
        let answer = send(&server, subject).await;
        if first.is_null() {
            first = answer;
        }
    }
    assert_eq!(server.run_of(&first).await["status"], "batching");
    server.kill();
    let server = Hookgate::start_in(&dir);
    let after = send(&server, "after").await;
    assert_eq!(
        (&after["runId"], &after["batched"]),
        (&first["runId"], &json!(4))
    );
    let prompts = prompts(&provider, 1).await;
    assert_eq!(
        messages_of(&prompts[0]),
        ["before-1", "before-2", "before-3", "after"]
    );
    eventually("the batch run finished", async || {
        server.run_of(&first).await["status"] == "ok"
    })
    .await;
}

#[test]
fn check_names_each_bad_batch_key_without_its_value() {
    let mut config = base_config();
    // The templated key needs its prefixes, or check would refuse that instead.
    config["hooks"]["allowedSessionKeyPrefixes"] = json!(["hook:"]);
    config["hooks"]["mappings"] = json!([
        {"match": {"path": "a"}, "sessionKey": "hook:a", "batch": {"window": "0s", "maxItems": 0}},
        {"match": {"path": "b"}, "action": "wake", "textTemplate": "t", "batch": {"window": "later-please"}},
        {"match": {"path": "c"}, "sessionKey": "hook:{{id}}", "batch": {"window": "30s"}},
    ]);
    let (status, output, _dir) = check(&config);
    assert!(!status.success(), "{output}");
    for expected in [
        "hooks.mappings[0].batch.window: must be a duration greater than 0",
        "hooks.mappings[0].batch.maxItems: must be a whole number from 1 to 1000",
        "hooks.mappings[1].batch: applies to agent mappings only",
        "hooks.mappings[1].batch.window: must be a duration",
        "hooks.mappings[2].batch: needs a sessionKey that is the same for every request",
    ] {
        assert!(output.contains(expected), "{expected} not in {output}");
    }
    assert!(
        !output.contains("later-please") && !output.contains("{{id}}"),
        "{output}"
    );
}

/// The cost of a burst, batched and not (docs/runtime.md "Batches"): 100 requests at once to a
/// provider that answers after a second and reports a usage of a token per 4 bytes of what it
/// was sent. Prints runs, tokens and the wall time until every run finished; asserts only the
/// runs. Ignored: it takes half a minute (`cargo test --test it -- --ignored batches::measure`).
#[tokio::test]
#[ignore]
async fn measure_a_burst_batched_and_not() {
    for batch in [Value::Null, json!({"window": "30s", "maxItems": 50})] {
        let provider = Fake::start(|request, _| {
            let sent = request.body.to_string().len() as u64;
            let mut reply = crate::fake::chat_reply("done");
            reply["usage"] = json!({"prompt_tokens": sent / 4, "completion_tokens": 1});
            crate::fake::Answer::After(
                Duration::from_secs(1),
                Box::new(crate::fake::Answer::Json(200, reply)),
            )
        })
        .await;
        let mut config = config(&provider, batch.clone());
        if batch.is_null() {
            // Unbatched, each message its own session (as the gmail preset's): up to
            // maxConcurrent (4) run at once.
            let mapping = &mut config["hooks"]["mappings"][0];
            mapping.as_object_mut().unwrap().remove("batch");
            mapping["sessionKey"] = json!("hook:inbox:{{subject}}");
            config["hooks"]["allowedSessionKeyPrefixes"] = json!(["hook:"]);
            config["hooks"]["allowRequestSessionKey"] = json!(true);
        }
        let (server, _dir) = Hookgate::start(&config);
        let started = std::time::Instant::now();
        let server = &server;
        let answers = futures_util::future::join_all(
            (0..100).map(|n| async move { send(server, &format!("mail-{n}")).await }),
        )
        .await;
        let runs: std::collections::BTreeSet<String> = answers
            .iter()
            .map(|a| a["runId"].as_str().unwrap().to_string())
            .collect();
        for run_id in &runs {
            eventually_within(
                "every run finished",
                Duration::from_secs(120),
                Duration::from_millis(50),
                async || {
                    let status = server.run_of(&json!({"runId": run_id})).await["status"].clone();
                    (status == "ok")
                        .then_some(())
                        .ok_or_else(|| status.to_string())
                },
            )
            .await;
        }
        let elapsed = started.elapsed();
        let calls = provider.requests();
        let input: u64 = calls
            .iter()
            .map(|r| r.body.to_string().len() as u64 / 4)
            .sum();
        assert_eq!(runs.len(), if batch.is_null() { 100 } else { 2 });
        println!(
            "batch {batch}: {} runs, {} model calls, {} input + {} output tokens, every run finished after {:.1} s",
            runs.len(),
            calls.len(),
            input,
            calls.len(),
            elapsed.as_secs_f64()
        );
    }
}

/// Two nodes on one NATS server share the batches: 25 requests spread over both, with
/// `maxItems` 10, are three runs (10, 10, and 5 when the window ends), each request at a
/// position of its own, each run's prompt with every one of its requests in position order,
/// and each run started once in the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_their_batches_and_start_each_run_once() {
    let nats = crate::nats::NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut node = crate::cluster::node_config_at(&nats.url(), &provider);
    node["hooks"]["mappings"] =
        config(&provider, json!({"window": "2s", "maxItems": 10}))["hooks"]["mappings"].clone();
    let (a, _dir_a) = Hookgate::start(&node);
    let (b, _dir_b) = Hookgate::start(&node);
    let nodes = [&a, &b];
    let answers = futures_util::future::join_all((0..25).map(|n| async move {
        let subject = format!("mail-{n}");
        (subject.clone(), send(nodes[n % 2], &subject).await)
    }))
    .await;
    let runs = by_run(answers);
    let mut sizes: Vec<usize> = runs.values().map(Vec::len).collect();
    sizes.sort();
    assert_eq!(sizes, [5, 10, 10], "{runs:?}");
    let prompts = prompts(&provider, 3).await;
    for (run_id, subjects) in runs {
        assert_prompt(&prompts, &run_id, &subjects);
        for node in nodes {
            eventually("the batch run ok on every node", async || {
                node.run_of(&json!({"runId": run_id})).await["status"] == "ok"
            })
            .await;
        }
    }
    assert_eq!(batch_prompts(&provider).len(), 3, "a batch ran twice");
}

/// On a NATS cluster, a retry on the other node gets the first answer, and a node killed with
/// its batch open loses none of it: the other node closes the batch when its window ends and
/// runs it with every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_a_batch_is_open_loses_none_of_its_requests() {
    let nats = crate::nats::NatsServer::start();
    let provider = Fake::provider("done").await;
    let mut node = crate::cluster::node_config_at(&nats.url(), &provider);
    node["hooks"]["mappings"] =
        config(&provider, json!({"window": "2s", "maxItems": 50}))["hooks"]["mappings"].clone();
    let (a, _dir_a) = Hookgate::start(&node);
    let (b, _dir_b) = Hookgate::start(&node);
    let keyed = async |node: &Hookgate, subject: &str| {
        (
            subject.to_string(),
            send_keyed(node, subject, subject).await,
        )
    };
    let mut answers = Vec::new();
    for (node, subject) in [(&a, "a-1"), (&b, "b-1"), (&a, "a-2")] {
        answers.push(keyed(node, subject).await);
    }
    let (_, retried) = keyed(&b, "a-2").await;
    assert_eq!(
        (&retried["runId"], &retried["batched"]),
        (&answers[2].1["runId"], &json!(3))
    );
    a.kill();
    answers.push(keyed(&b, "b-2").await);
    let runs = by_run(answers);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let prompts = prompts(&provider, 1).await;
    for (run_id, subjects) in runs {
        assert_eq!(subjects, ["a-1", "b-1", "a-2", "b-2"]);
        assert_prompt(&prompts, &run_id, &subjects);
        eventually("the batch run ok", async || {
            b.run_of(&json!({"runId": run_id})).await["status"] == "ok"
        })
        .await;
    }
}

/// `batch` reloads live: an open batch keeps the `maxItems` it opened with, the next one
/// opens with the new value.
#[tokio::test]
async fn a_reload_applies_to_the_batches_opened_after_it() {
    let provider = Fake::provider("done").await;
    let dir = ConfigDir::new(&config(&provider, json!({"window": "1h", "maxItems": 3})));
    let server = Hookgate::start_in(&dir);
    let first = send(&server, "a").await;
    send(&server, "b").await;
    dir.write(&config(&provider, json!({"window": "1h", "maxItems": 2})));
    eventually("the reload", async || {
        let (_, status) = json_of(server.api("/api/config").send().await.unwrap()).await;
        status["generation"] == 2
    })
    .await;
    let third = send(&server, "c").await;
    assert_eq!(
        (&third["runId"], &third["batched"]),
        (&first["runId"], &json!(3))
    );
    let fourth = send(&server, "d").await;
    let fifth = send(&server, "e").await;
    assert_eq!(
        (&fifth["runId"], &fifth["batched"]),
        (&fourth["runId"], &json!(2))
    );
    let prompts = prompts(&provider, 2).await;
    assert_prompt(
        &prompts,
        first["runId"].as_str().unwrap(),
        &["a", "b", "c"].map(String::from),
    );
    assert_prompt(
        &prompts,
        fourth["runId"].as_str().unwrap(),
        &["d", "e"].map(String::from),
    );
}
