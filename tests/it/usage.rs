//! What runs cost (docs/runtime.md#what-runs-cost): the tokens each run's provider reported, in
//! both wire formats and from the fallback that answered, on the run record of both stores.

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::runtime::{Backend, agent, finished};

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

on_both_stores!(usage_is_recorded_from_both_wire_formats_and_the_model_that_answered);
