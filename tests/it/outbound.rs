//! Callbacks and lifecycle webhooks (docs/outbound.md) received by a receiver on 127.0.0.1 that
//! verifies every message with the official Standard Webhooks library (npm `standardwebhooks`,
//! installed by this test in `tests/it/fixtures/webhook-receiver`, as CI does): a receiver down
//! while 100 runs end, a hookgate killed in the middle of a delivery, callbacks to private
//! addresses, a Slack `response_url`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::processes::dies_with_its_test;
use crate::runtime::{Backend, free_port};

pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The secret rotated to: messages carry a signature by each while both are configured.
const NEXT_SECRET: &str = "whsec_c2VjcmV0LW9mLXRoZS1uZXh0LWtleS0xMjM0NTY=";

/// The receiver's directory, its packages installed once per test process.
fn receiver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/webhook-receiver");
        if !dir.join("node_modules/standardwebhooks").is_dir() {
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .status()
                .expect("run npm (is Node.js installed?)");
            assert!(status.success(), "npm ci of the webhook receiver failed");
        }
        dir
    })
}

/// The Node.js receiver on `port`, verifying under each of `secrets`.
pub(crate) struct Receiver {
    child: Child,
    base: String,
}

impl Receiver {
    pub(crate) fn start(port: u16, secrets: &[&str]) -> Receiver {
        Receiver::start_on("127.0.0.1", port, secrets)
    }

    fn start_on(host: &str, port: u16, secrets: &[&str]) -> Receiver {
        let mut child = dies_with_its_test(&mut Command::new("node"))
            .arg(receiver_dir().join("receiver.mjs"))
            .env("HOST", host)
            .env("PORT", port.to_string())
            .env("SECRETS", secrets.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn node");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line.trim(), "listening", "the receiver did not start");
        Receiver {
            child,
            base: format!("http://{host}:{port}"),
        }
    }

    /// Every message received, in order.
    pub(crate) async fn received(&self) -> Vec<Value> {
        let url = format!("{}/_received", self.base);
        let answer = client().get(url).send().await.unwrap();
        answer.json::<Vec<Value>>().await.unwrap()
    }

    async fn hold(&self) {
        let url = format!("{}/_hold", self.base);
        assert_eq!(client().post(url).send().await.unwrap().status(), 204);
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The payloads among `received` of run `run` that reached `path`, in the order received.
pub(crate) fn payloads_of(received: &[Value], run: &str, path: &str) -> Vec<Value> {
    received
        .iter()
        .filter(|m| m["payload"]["data"]["runId"] == run && m["path"] == path)
        .map(|m| m["payload"].clone())
        .collect()
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A receiver on a free port of 127.0.0.1 verifying under [`SECRET`], and the `outbound`
/// settings of an endpoint `ops` there (`/events`) subscribed to `events`, 127.0.0.1 allowed.
pub(crate) fn endpoint_receiver(events: &[&str]) -> (Receiver, Value) {
    let port = free_port();
    let receiver = Receiver::start(port, &[SECRET]);
    let outbound = json!({
        "allowHosts": ["127.0.0.1"],
        "endpoints": [{
            "id": "ops", "url": format!("http://127.0.0.1:{port}/events"),
            "secret": SECRET, "events": events,
        }],
    });
    (receiver, outbound)
}

/// A configuration whose mapping `cb` runs against `provider` and posts each run's outcome to
/// the payload's `callbackUrl`; 127.0.0.1 allowed, retries at most a second apart.
pub(crate) fn callback_config(provider: &Fake, secrets: Value) -> Value {
    let mut config = crate::runtime::with_provider(provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{
            "id": "cb",
            "match": {"path": "cb"},
            "messageTemplate": "Do {{n}}",
            "deliver": false,
            "callback": {"url": "{{callbackUrl}}", "secrets": secrets},
        }]),
    );
    set(
        &mut config,
        "outbound",
        json!({"allowHosts": ["127.0.0.1"], "retry": {"maxDelay": "1s"}}),
    );
    config
}

pub(crate) async fn start_run(server: &Hookgate, url: &str, n: usize) -> String {
    let body = json!({"callbackUrl": url, "n": n});
    let (status, reply) = server.hook_json("/hooks/cb", &body).await;
    assert_eq!(status, 200, "{reply}");
    reply["runId"].as_str().unwrap().to_string()
}

async fn outbound(server: &Hookgate, query: &str) -> Vec<Value> {
    let (status, list) = server.api_json(&format!("/api/outbound{query}")).await;
    assert_eq!(status, 200, "{list}");
    list["messages"].as_array().unwrap().clone()
}

async fn callbacks_of_runs_that_ended_while_the_receiver_was_down_arrive_once_each(
    backend: Backend,
) {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("done"))).await;
    let port = free_port();
    let config = callback_config(&provider, json!([SECRET, NEXT_SECRET]));
    let (server, _kept) = backend.start(&config);
    let url = format!("http://127.0.0.1:{port}/callback");
    let mut runs = BTreeSet::new();
    for n in 0..100 {
        runs.insert(start_run(&server, &url, n).await);
    }
    eventually_within(
        "100 runs to end with their callbacks failing",
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let pending = outbound(&server, "?status=pending&limit=1000").await;
            let tried = pending.iter().filter(|m| m["attempts"].as_u64() >= Some(1));
            match tried.count() {
                100 => Ok(()),
                n => Err(format!("{n} tried")),
            }
        },
    )
    .await;
    let pending = outbound(&server, "?status=pending&limit=1000").await;
    assert!(
        pending[0]["lastError"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{pending:?}"
    );

    // Signed by both secrets of the rotation: each verifies on its own.
    let receiver = Receiver::start(port, &[SECRET, NEXT_SECRET]);
    let received = eventually_within(
        "every callback to arrive",
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            match received.len() {
                100.. => Ok(received),
                n => Err(format!("{n} received")),
            }
        },
    )
    .await;
    let mut by_run = BTreeMap::new();
    for message in &received {
        assert_eq!(message["verified"], true, "{message}");
        assert_eq!(message["path"], "/callback");
        let data = &message["payload"]["data"];
        assert_eq!(message["payload"]["type"], "run.finished");
        assert_eq!(data["status"], "ok");
        assert_eq!(data["reply"], "done");
        assert_eq!(data["mapping"], "cb");
        assert!(data["finishedAt"].is_string() && data["createdAt"].is_string());
        // The request that admitted the run, as its answer's X-Request-Id named it.
        assert!(
            data["requestId"].as_str().is_some_and(|id| !id.is_empty()),
            "{data}"
        );
        let id = message["id"].as_str().unwrap().to_string();
        let earlier = by_run.insert(data["runId"].as_str().unwrap().to_string(), id);
        assert!(
            earlier.is_none(),
            "a run's callback arrived twice: {message}"
        );
    }
    let delivered: BTreeSet<String> = by_run.keys().cloned().collect();
    assert_eq!(delivered, runs);
    eventually("the outbox to record them done", async || {
        outbound(&server, "?status=done&limit=1000").await.len() == 100
    })
    .await;
    // Nothing more comes: one message per webhook-id.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.received().await.len(), 100);
}

async fn a_delivery_cut_by_a_kill_is_sent_again_with_the_same_webhook_id(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("done"))).await;
    let port = free_port();
    let config = callback_config(&provider, json!([SECRET]));
    let (server, kept) = backend.start(&config);
    let receiver = Receiver::start(port, &[SECRET]);
    receiver.hold().await;
    let url = format!("http://127.0.0.1:{port}/callback");
    start_run(&server, &url, 1).await;
    eventually("the callback to be under way", async || {
        !receiver.received().await.is_empty()
    })
    .await;
    let cut = receiver.received().await[0].clone();
    assert_eq!(cut["verified"], true, "{cut}");
    server.kill();
    receiver.stop();

    let receiver = Receiver::start(port, &[SECRET]);
    let restarted = Hookgate::start_in(kept.dir());
    let received = eventually_within(
        "the callback to be sent again",
        // On NATS, once the attempt the killed node took has expired (30 s).
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            received.first().cloned().ok_or_else(String::new)
        },
    )
    .await;
    assert_eq!(received["verified"], true, "{received}");
    eventually("the outbox to record it done", async || {
        outbound(&restarted, "?status=done").await.len() == 1
    })
    .await;
    let done = outbound(&restarted, "?status=done").await;
    // The message killed mid-send and the one sent after the start are one: the same id, the
    // same body.
    assert_eq!(received["id"], cut["id"]);
    assert_eq!(received["body"], cut["body"]);
    assert_eq!(done[0]["webhookId"], cut["id"]);
    assert_eq!(receiver.received().await.len(), 1);
}

async fn a_callback_to_a_private_address_is_refused_unless_listed(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("done"))).await;
    let port = free_port();
    // Another loopback address than the refused ones: the one the operator listed.
    let receiver = Receiver::start_on("127.0.0.2", port, &[SECRET]);
    let mut config = callback_config(&provider, json!([SECRET]));
    // `localhost` is listed as a name, but resolves to 127.0.0.1 (and ::1): only an address
    // listed itself lets a message go to a loopback address, whatever name leads there.
    set(
        &mut config,
        "outbound.allowHosts",
        json!(["127.0.0.2", "localhost"]),
    );
    let (server, _kept) = backend.start(&config);
    let refused = [
        (
            format!("http://10.0.0.1:{port}/x"),
            "10.0.0.1 is a private address",
        ),
        (
            "http://169.254.169.254/latest/meta-data".to_string(),
            "169.254.169.254 is a private address",
        ),
        (
            format!("http://127.0.0.1:{port}/x"),
            "127.0.0.1 is a private address",
        ),
        (
            "http://93.184.215.14/x".to_string(),
            "host 93.184.215.14 is not in",
        ),
        (
            format!("http://localhost:{port}/x"),
            "a private address not in outbound.allowHosts",
        ),
        (
            "http://example.invalid/x".to_string(),
            "host example.invalid is not in",
        ),
    ];
    let mut refused_runs = Vec::new();
    for (n, (url, _)) in refused.iter().enumerate() {
        refused_runs.push(start_run(&server, url, n).await);
    }
    let allowed = format!("http://127.0.0.2:{port}/allowed");
    start_run(&server, &allowed, 9).await;
    let failed = eventually_within(
        "the refused callbacks to fail",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let failed = outbound(&server, "?status=failed").await;
            match failed.len() {
                6 => Ok(failed),
                n => Err(format!("{n} failed")),
            }
        },
    )
    .await;
    for (url, why) in &refused {
        let message = failed.iter().find(|m| &m["url"] == url).unwrap();
        let error = message["lastError"].as_str().unwrap();
        assert!(error.contains(why), "{url}: {error}");
        // A refusal is final: not tried again.
        assert_eq!(message["attempts"], 1, "{message}");
    }
    // The run's record shows its callback and why it was refused.
    let (_, run) = server
        .api_json(&format!("/api/runs/{}", refused_runs[0]))
        .await;
    assert_eq!(run["status"], "ok", "{run}");
    assert_eq!(run["outbound"][0]["status"], "failed", "{run}");
    assert_eq!(run["outbound"][0]["destination"], "callback:cb", "{run}");
    let why = run["outbound"][0]["lastError"].as_str().unwrap();
    assert!(why.contains("10.0.0.1 is a private address"), "{why}");
    eventually("the allowed callback to arrive", async || {
        receiver.received().await.len() == 1
    })
    .await;
    assert_eq!(receiver.received().await[0]["path"], "/allowed");

    // The operator's retry: a failed message pending again with its id (refused again here);
    // a message that has not failed, or none, is not retried.
    let id = failed[0]["id"].as_i64().unwrap();
    let retry = |id: String| {
        client()
            .post(server.url(&format!("/api/outbound/{id}/retry")))
            .bearer_auth(GATEWAY_TOKEN)
    };
    assert_eq!(retry(id.to_string()).send().await.unwrap().status(), 200);
    let webhook_id = failed_id(&failed, id);
    eventually("the retried message to fail again", async || {
        let again = outbound(&server, "?status=failed").await;
        again.len() == 6 && failed_id(&again, id) == webhook_id
    })
    .await;
    let done = outbound(&server, "?status=done").await;
    let done_id = done[0]["id"].as_i64().unwrap();
    assert_eq!(
        retry(done_id.to_string()).send().await.unwrap().status(),
        409
    );
    assert_eq!(retry("999999".into()).send().await.unwrap().status(), 404);
    let (status, _) = server.api_json("/api/outbound?status=lost").await;
    assert_eq!(status, 400);

    // The same from a terminal.
    let (ok, listed, _) =
        crate::requests::cli(&server, &["outbound", "list", "--status", "failed"]);
    assert!(ok, "{listed}");
    assert_eq!(
        listed.lines().filter(|l| l.contains("failed")).count(),
        6,
        "{listed}"
    );
    assert!(listed.contains("10.0.0.1 is a private address"), "{listed}");
    let (ok, retried, _) = crate::requests::cli(&server, &["outbound", "retry", &id.to_string()]);
    assert!(ok && retried.contains("pending again"), "{retried}");
    let (ok, _, error) =
        crate::requests::cli(&server, &["outbound", "retry", &done_id.to_string()]);
    assert!(!ok && error.contains("has not failed"), "{error}");
    let log = server.terminate().1;
    assert!(log.contains("10.0.0.1 is a private address"), "{log}");
}

fn failed_id(failed: &[Value], id: i64) -> Value {
    failed.iter().find(|m| m["id"] == id).unwrap()["webhookId"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_slash_command_gets_the_reply_at_its_response_url() {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("Deployed to staging."))).await;
    let slack = Fake::start(|_, _| Answer::Text(200, "ok".into())).await;
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([{
            "id": "slash",
            "match": {"path": "slack/command"},
            "messageTemplate": "{{user_name}} asks: {{text}}",
            "deliver": false,
            "callback": {"url": "{{response_url}}", "secret": SECRET, "format": "slack"},
        }]),
    );
    set(&mut config, "outbound.allowHosts", json!(["127.0.0.1"]));
    let (server, _dir) = Hookgate::start(&config);
    let response_url = format!("{}/commands/T1/42/xyz", slack.base);
    // The form Slack posts a slash command as (its documented fields, URL-encoded), which a
    // mapped hook reads as an object of strings (docs/hooks.md#website-forms).
    let command = [
        ("token", "gIkuvaNzQIHg97ATvDxqgjtO"),
        ("team_id", "T0001"),
        ("team_domain", "example"),
        ("channel_id", "C2147483705"),
        ("channel_name", "test"),
        ("user_id", "U2147483697"),
        ("user_name", "ada"),
        ("command", "/deploy"),
        ("text", "staging now"),
        ("api_app_id", "A123456"),
        ("response_url", response_url.as_str()),
        ("trigger_id", "13345224609.738474920.8088930838d88f008e0"),
    ];
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(command)
        .finish();
    let answer = server
        .hook("/hooks/slack/command")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, reply) = (answer.status(), answer.text().await.unwrap());
    assert_eq!(status, 200, "{reply}");
    eventually("the reply to reach the response_url", async || {
        !slack.requests().is_empty()
    })
    .await;
    let sent = &slack.requests()[0];
    assert_eq!(sent.path, "/commands/T1/42/xyz");
    assert_eq!(
        sent.body,
        json!({"response_type": "in_channel", "text": "Deployed to staging."})
    );
    assert!(sent.header("webhook-signature").unwrap().starts_with("v1,"));
    // The prompt was made of the form's fields.
    let asked = provider.requests()[0].body.to_string();
    assert!(asked.contains("ada asks: staging now"), "{asked}");
}

async fn endpoints_get_the_events_they_subscribe_to_in_order_per_run(backend: Backend) {
    let provider = Fake::start(|request, _| {
        if request.body.to_string().contains("please fail") {
            Answer::Json(400, json!({"error": {"message": "refused"}}))
        } else {
            Answer::Json(200, chat_reply("done"))
        }
    })
    .await;
    let events = ["run.started", "run.finished", "run.failed"];
    let (receiver, mut outbound) = endpoint_receiver(&events);
    outbound["endpoints"][0]["mappings"] = json!(["watched"]);
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "hooks.mappings",
        json!([
            {"id": "watched", "match": {"path": "watched"}, "messageTemplate": "{{text}}", "deliver": false},
            {"id": "other", "match": {"path": "other"}, "messageTemplate": "{{text}}", "deliver": false},
        ]),
    );
    set(&mut config, "outbound", outbound);
    let (server, _kept) = backend.start(&config);
    let mut runs = Vec::new();
    for (path, text) in [
        ("watched", "hello"),
        ("watched", "please fail"),
        ("other", "hi"),
    ] {
        let (status, reply) = server
            .hook_json(&format!("/hooks/{path}"), &json!({"text": text}))
            .await;
        assert_eq!(status, 200, "{reply}");
        runs.push(reply["runId"].as_str().unwrap().to_string());
    }
    for run in &runs {
        crate::runtime::finished(&server, run).await;
    }
    let received = eventually_within(
        "the four events to arrive",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            match received.len() {
                4.. => Ok(received),
                n => Err(format!("{n} received")),
            }
        },
    )
    .await;
    let events_of = |run: &str| -> Vec<String> {
        received
            .iter()
            .filter(|m| m["payload"]["data"]["runId"] == run)
            .map(|m| {
                assert_eq!(m["verified"], true, "{m}");
                m["payload"]["type"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(events_of(&runs[0]), ["run.started", "run.finished"]);
    assert_eq!(events_of(&runs[1]), ["run.started", "run.failed"]);
    // Not subscribed: the endpoint names `watched` only.
    assert!(events_of(&runs[2]).is_empty());
    let ids: BTreeSet<&str> = received.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), received.len(), "one webhook-id per message");
    let failed = received
        .iter()
        .find(|m| m["payload"]["type"] == "run.failed")
        .unwrap();
    assert!(failed["payload"]["data"]["error"].is_string(), "{failed}");
}

async fn an_endpoint_hears_of_a_reply_that_could_not_be_delivered(backend: Backend) {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("the reply"))).await;
    let telegram = Fake::start(|_, _| {
        Answer::Json(
            400,
            json!({"ok": false, "description": "Bad Request: chat not found"}),
        )
    })
    .await;
    let (receiver, outbound) = endpoint_receiver(&["delivery.failed"]);
    let mut config = crate::runtime::with_provider(&provider);
    set(
        &mut config,
        "channels.telegram",
        json!({"botToken": "tg-token", "apiBase": telegram.base}),
    );
    set(&mut config, "outbound", outbound);
    let (server, _kept) = backend.start(&config);
    let body = json!({"message": "hi", "channel": "telegram", "to": "42"});
    let run_id = crate::runtime::agent(&server, body).await;
    let received = eventually_within(
        "delivery.failed to arrive",
        Duration::from_secs(20),
        Duration::from_millis(100),
        async || {
            let received = receiver.received().await;
            received.first().cloned().ok_or_else(String::new)
        },
    )
    .await;
    assert_eq!(received["verified"], true, "{received}");
    assert_eq!(received["payload"]["type"], "delivery.failed");
    let data = &received["payload"]["data"];
    assert_eq!(data["runId"], run_id.as_str());
    assert!(
        data["error"].as_str().unwrap().contains("chat not found"),
        "{data}"
    );
    assert_eq!(receiver.received().await.len(), 1);
}

on_both_stores!(
    callbacks_of_runs_that_ended_while_the_receiver_was_down_arrive_once_each,
    a_delivery_cut_by_a_kill_is_sent_again_with_the_same_webhook_id,
    a_callback_to_a_private_address_is_refused_unless_listed,
    endpoints_get_the_events_they_subscribe_to_in_order_per_run,
    an_endpoint_hears_of_a_reply_that_could_not_be_delivered,
);
