//! What runs cost (docs/runtime.md#what-runs-cost): the tokens each run's provider reported, in
//! both wire formats and from the fallback that answered, on the run record of both stores.

use serde_json::{Value, json};

use crate::day_two::cli;
use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{Backend, agent, finished, with_provider};

/// A chat-completions answer that reports `input` prompt and `output` completion tokens.
fn openai_answer(reply: &str, input: u64, output: u64) -> Answer {
    let mut body = chat_reply(reply);
    body["usage"] = json!({"prompt_tokens": input, "completion_tokens": output,
                           "total_tokens": input + output});
    Answer::Json(200, body)
}

/// A Messages API answer that reports its tokens as Anthropic does: the cache's input apart.
fn anthropic_answer(reply: &str) -> Answer {
    Answer::Json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": reply}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 7,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1000},
        }),
    )
}

/// Providers of both wire formats, one that is down and one that reports no usage; the default
/// model is the one that is down, with the OpenAI-style one as its fallback.
struct Providers {
    openai: Fake,
    anthropic: Fake,
    down: Fake,
    plain: Fake,
}

impl Providers {
    async fn start() -> Providers {
        Providers {
            openai: Fake::start(|_, _| openai_answer("from openai", 120, 30)).await,
            anthropic: Fake::start(|_, _| anthropic_answer("from anthropic")).await,
            // Overloaded, with a usage in its error body that is no answer's.
            down: Fake::start(|_, _| {
                Answer::Json(
                    529,
                    json!({"error": "overloaded", "usage": {"prompt_tokens": 9}}),
                )
            })
            .await,
            plain: Fake::provider("no usage here").await,
        }
    }

    fn config(&self) -> Value {
        let mut config = base_config();
        set(
            &mut config,
            "models.providers",
            json!({
                "openai": {"baseUrl": self.openai.base},
                "anthropic": {"baseUrl": self.anthropic.base, "api": "anthropic-messages"},
                "down": {"baseUrl": self.down.base},
                "plain": {"baseUrl": self.plain.base},
            }),
        );
        set(
            &mut config,
            "agents.defaults.model",
            json!({"primary": "down/one", "fallbacks": ["openai/two"]}),
        );
        config
    }
}

/// A finished run of `body` (no delivery, no heartbeat: only the run's own turns reach the
/// providers).
async fn run(server: &Hookgate, mut body: Value) -> Value {
    body["deliver"] = json!(false);
    body["wakeMode"] = json!("next-heartbeat");
    finished(server, &agent(server, body).await).await
}

async fn usage_is_recorded_from_both_wire_formats_and_the_model_that_answered(backend: Backend) {
    let providers = Providers::start().await;
    let (server, _kept) = backend.start(&providers.config());

    let fell_back = run(&server, json!({"message": "m"})).await;
    assert_eq!(
        (&fell_back["status"], &fell_back["answeredBy"]),
        (&json!("ok"), &json!("openai/two")),
        "{fell_back}"
    );
    assert_eq!(providers.down.requests().len(), 1, "the primary was tried");
    assert_eq!(
        fell_back["usage"],
        json!({"inputTokens": 120, "outputTokens": 30}),
        "the fallback's usage, not the failed primary's"
    );

    let anthropic = run(
        &server,
        json!({"message": "m", "model": "anthropic/claude"}),
    )
    .await;
    assert_eq!(anthropic["reply"], "from anthropic", "{anthropic}");
    assert_eq!(
        anthropic["usage"],
        json!({"inputTokens": 1010, "outputTokens": 7}),
        "cached input counts as input"
    );

    let plain = run(&server, json!({"message": "m", "model": "plain/x"})).await;
    assert_eq!(plain["reply"], "no usage here", "{plain}");
    assert_eq!(plain["usage"], Value::Null, "not reported is not zero");

    providers
        .down
        .respond_with(|_, _| Answer::Json(400, json!({"error": "bad request"})));
    let failed = run(&server, json!({"message": "m"})).await;
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["usage"], Value::Null, "no model answered");

    // The listing shows the same as the run.
    let (status, page) = server.api_json("/api/runs?status=ok").await;
    assert_eq!(status, 200);
    let listed: Vec<&Value> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| &run["usage"])
        .collect();
    assert_eq!(
        listed,
        [
            &Value::Null,
            &json!({"inputTokens": 1010, "outputTokens": 7}),
            &json!({"inputTokens": 120, "outputTokens": 30}),
        ]
    );
}

/// The provider's configuration with two agent mappings and a wake mapping.
fn with_mappings(providers: &Providers) -> Value {
    let mut config = providers.config();
    let agent = |id: &str| {
        json!({"id": id, "match": {"path": id}, "action": "agent",
               "messageTemplate": "{{payload.text}}", "deliver": false,
               "wakeMode": "next-heartbeat"})
    };
    set(
        &mut config,
        "hooks.mappings",
        json!([agent("github"), agent("quiet"),
               {"id": "ping", "match": {"path": "ping"}, "action": "wake",
                "textTemplate": "ping"}]),
    );
    config
}

/// The value of the metric line that starts with `series`, if the scrape has one.
fn sample(metrics: &str, series: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn tokens_are_measured_and_summed_per_mapping(backend: Backend) {
    let providers = Providers::start().await;
    let (server, _kept) = backend.start(&with_mappings(&providers));
    for _ in 0..2 {
        let (status, reply) = server
            .hook_json("/hooks/github", &json!({"text": "opened"}))
            .await;
        assert_eq!(status, 200, "{reply}");
        let run = finished(&server, reply["runId"].as_str().unwrap()).await;
        assert_eq!(run["mappingId"], "github", "{run}");
    }
    let direct = run(
        &server,
        json!({"message": "m", "model": "anthropic/claude"}),
    )
    .await;
    assert_eq!(direct["status"], "ok", "{direct}");

    let metrics = server.metrics().await;
    let tokens = |labels: &str| {
        sample(
            &metrics,
            &format!("hookgate_model_tokens_total{{{labels}}}"),
        )
    };
    assert_eq!(
        (
            tokens(r#"agent="main",mapping="github",model="openai/two",direction="input""#),
            tokens(r#"agent="main",mapping="github",model="openai/two",direction="output""#),
        ),
        (Some(240), Some(60)),
        "{metrics}"
    );
    // A model the configuration does not name (no allowlist: the request chose it) is `other`.
    assert_eq!(
        tokens(r#"agent="main",mapping="",model="other",direction="input""#),
        Some(1010),
        "{metrics}"
    );
    assert!(!metrics.contains("anthropic/claude"), "{metrics}");
    assert!(
        !metrics.contains(r#"model="down/one""#),
        "a failed model used nothing"
    );

    let (status, spend) = server.api_json("/api/spend").await;
    assert_eq!(status, 200, "{spend}");
    assert_eq!(
        spend["mappings"],
        json!([
            {"mappingId": "github", "runs": 2, "inputTokens": 240, "outputTokens": 60},
            {"mappingId": "quiet", "runs": 0, "inputTokens": 0, "outputTokens": 0},
        ]),
        "each agent mapping, in order; the direct run has none"
    );
    let (status, later) = server
        .api_json("/api/spend?since=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(status, 200, "{later}");
    assert_eq!(later["mappings"][0]["runs"], 0, "{later}");
    assert_eq!(later["since"], "2999-01-01T00:00:00.000Z");
    let (status, refused) = server.api_json("/api/spend?since=yesterday").await;
    assert_eq!(
        (status, &refused["error"]),
        (400, &json!("since must be an RFC 3339 time"))
    );

    // The command line shows the same.
    let row = |table: &str, first: &str| -> Vec<String> {
        let line = table.lines().find(|line| line.starts_with(first));
        let line = line.unwrap_or_else(|| panic!("no {first} in {table}"));
        line.split_whitespace().map(String::from).collect()
    };
    let spend = cli(&server, &["runs", "spend"]);
    assert_eq!(
        row(&spend, "MAPPING")[1..],
        ["RUNS", "INPUT", "TOKENS", "OUTPUT", "TOKENS"]
    );
    assert_eq!(row(&spend, "github"), ["github", "2", "240", "60"]);
    let listed = cli(&server, &["runs", "list", "--status", "ok"]);
    assert_eq!(row(&listed, "CREATED")[5], "TOKENS", "{listed}");
    let tokens: Vec<String> = listed
        .lines()
        .skip(1)
        .map(|line| row(line, "")[5].clone())
        .collect();
    assert_eq!(tokens, ["1010/7", "120/30", "120/30"], "{listed}");
}

/// In forward mode the upstream runs the model: a run's usage and the spend's tokens are not
/// known here, and say so (null) rather than zero; the runs are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_counts_runs_and_knows_no_tokens() {
    let upstream =
        Fake::start(|_, _| Answer::Json(200, json!({"ok": true, "runId": "upstream-1"}))).await;
    let providers = Providers::start().await;
    let mut config = with_mappings(&providers);
    set(&mut config, "gateway.mode", json!("forward"));
    set(
        &mut config,
        "gateway.forward",
        json!({"url": upstream.base, "token": "upstream-token"}),
    );
    let (server, _dir) = Hookgate::start(&config);
    let (status, reply) = server
        .hook_json("/hooks/github", &json!({"text": "opened"}))
        .await;
    assert_eq!(status, 200, "{reply}");
    let run = finished(&server, reply["runId"].as_str().unwrap()).await;
    assert_eq!(
        (&run["status"], &run["usage"]),
        (&json!("forwarded"), &Value::Null),
        "{run}"
    );
    let (_, spend) = server.api_json("/api/spend").await;
    assert_eq!(
        spend["mappings"][0],
        json!({"mappingId": "github", "runs": 1, "inputTokens": null, "outputTokens": null})
    );
    assert!(providers.openai.requests().is_empty(), "no model ran here");
}

/// Two nodes on one stream: each node's spend counts the cluster's runs, and each run's tokens
/// are counted in the metrics once, by the node that ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusters_spend_counts_every_nodes_runs_and_each_run_once() {
    let nats = crate::nats::NatsServer::start();
    let providers = Providers::start().await;
    let mut config = with_mappings(&providers);
    set(
        &mut config,
        "gateway.store",
        json!({"kind": "nats", "url": nats.url()}),
    );
    let (a, _dir_a) = Hookgate::start(&config);
    let (b, _dir_b) = Hookgate::start(&config);
    for node in [&a, &b, &a, &b] {
        let (status, reply) = node
            .hook_json("/hooks/github", &json!({"text": "opened"}))
            .await;
        assert_eq!(status, 200, "{reply}");
        finished(node, reply["runId"].as_str().unwrap()).await;
    }
    let every_run = json!({"mappingId": "github", "runs": 4, "inputTokens": 480,
                           "outputTokens": 120});
    for node in [&a, &b] {
        let mut seen = Value::Null;
        eventually("the node's view to hold every run's outcome", async || {
            seen = node.api_json("/api/spend").await.1["mappings"][0].clone();
            seen == every_run
        })
        .await;
    }
    let series = r#"hookgate_model_tokens_total{agent="main",mapping="github",model="openai/two",direction="input"}"#;
    let mut counted = 0;
    for node in [&a, &b] {
        counted += sample(&node.metrics().await, series).unwrap_or(0);
    }
    assert_eq!(counted, 480, "each run once, on one node");
}

/// The most tokens a turn is counted for, in each direction (docs/runtime.md#what-runs-cost).
const TURN_BOUND: u64 = 100_000_000;

/// A provider that reports 9e18 prompt tokens a turn (two such turns sum past the largest
/// integer SQLite sums) breaks neither the admission of its agent's runs, whose budget reads
/// the agent's tokens, nor `GET /api/spend`: each turn counts at most the bound.
async fn absurd_usage_is_counted_at_most_the_bound(backend: Backend) {
    let absurd = 9_000_000_000_000_000_000;
    let provider = Fake::start(move |_, _| openai_answer("done", absurd, 1)).await;
    let mut config = with_provider(&provider);
    set(&mut config, "agents.defaults.heartbeat.every", json!("0"));
    let mapping = json!({"id": "github", "match": {"path": "github"}, "action": "agent",
        "messageTemplate": "{{text}}", "deliver": false, "wakeMode": "next-heartbeat"});
    set(&mut config, "hooks.mappings", json!([mapping]));
    // Above one absurd count: before the bound, the second run ran and the third request's
    // budget read overflowed (500).
    let budget = json!({"tokensPerDay": 9_100_000_000_000_000_000u64});
    set(
        &mut config,
        "agents.list",
        json!([{"id": "main", "default": true, "budget": budget}]),
    );
    let (server, _kept) = backend.start(&config);
    for _ in 0..3 {
        let (status, reply) = server
            .hook_json("/hooks/github", &json!({"text": "opened"}))
            .await;
        assert_eq!(status, 200, "admitted after absurd usage: {reply}");
        let run = finished(&server, reply["runId"].as_str().unwrap()).await;
        assert_eq!(run["status"], "ok", "{run}");
        assert_eq!(
            run["usage"],
            json!({"inputTokens": TURN_BOUND, "outputTokens": 1})
        );
    }
    let expected = json!({"mappingId": "github", "runs": 3, "inputTokens": 3 * TURN_BOUND,
                          "outputTokens": 3});
    let mut seen = Value::Null;
    eventually("the spend to count the three runs", async || {
        let (status, spend) = server.api_json("/api/spend").await;
        assert_eq!(status, 200, "{spend}");
        seen = spend["mappings"][0].clone();
        seen == expected
    })
    .await;
}

/// Generates each named test once per store that runs agents.
macro_rules! on_both_stores {
    ($($test:ident),+ $(,)?) => {
        $(
            mod $test {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn embedded() {
                    super::$test(super::Backend::Embedded).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn nats() {
                    super::$test(super::Backend::Nats).await
                }
            }
        )+
    };
}

on_both_stores!(
    usage_is_recorded_from_both_wire_formats_and_the_model_that_answered,
    tokens_are_measured_and_summed_per_mapping,
    absurd_usage_is_counted_at_most_the_bound,
);
