//! The gateway runtime over real HTTP: runs against a fake model provider, heartbeats, delivery to
//! fake chat APIs, the outbox's retries, crash and resume, and forward mode to a second hookgate.
//!
//! The behaviour tests (runs, delivery, heartbeats) run against both stores that run agents: the
//! embedded SQLite file and a NATS JetStream cluster of one node, so that both backends keep the
//! same contract. Restart and forward-mode tests are the embedded store's own.

mod delivery;
mod forward;
mod heartbeat;
mod outages;
mod providers;
mod restart;
mod retry;
mod runs;

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::nats::NatsServer;

pub(crate) use forward::free_port;

/// The store a behaviour test runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    Embedded,
    /// A NATS server of the test's own, with JetStream.
    Nats,
}

/// What a started server needs kept alive: its configuration directory and, on NATS, the
/// server. Dropped after the hookgate process.
pub(crate) struct Kept {
    _dir: ConfigDir,
    _nats: Option<NatsServer>,
}

impl Kept {
    /// The configuration directory: rewriting its file reloads the server.
    pub(crate) fn dir(&self) -> &ConfigDir {
        &self._dir
    }
}

impl Backend {
    /// Starts hookgate with `config` on this store.
    pub(crate) fn start(self, config: &Value) -> (Hookgate, Kept) {
        let mut config = config.clone();
        let nats = match self {
            Backend::Embedded => None,
            Backend::Nats => {
                let nats = NatsServer::start();
                set(
                    &mut config,
                    "gateway.store",
                    json!({"kind": "nats", "url": nats.url()}),
                );
                Some(nats)
            }
        };
        let (server, dir) = Hookgate::start(&config);
        (
            server,
            Kept {
                _dir: dir,
                _nats: nats,
            },
        )
    }
}

/// Generates each named behaviour test twice: in `embedded` and in `nats`.
macro_rules! on_every_store {
    ($($module:ident :: $test:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$module::$test(super::Backend::Embedded).await
                }
            )+
        }
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$module::$test(super::Backend::Nats).await
                }
            )+
        }
    };
}

on_every_store!(
    runs::run_sends_its_prompt_and_records_reply_and_summary,
    runs::run_without_model_uses_the_agent_default_and_per_agent_provider,
    runs::provider_failures_end_the_run_with_its_error_and_a_summary,
    runs::malformed_provider_response_is_an_error,
    runs::slow_provider_past_the_timeout_ends_the_run_as_timeout,
    runs::without_a_provider_runs_end_with_an_error,
    runs::runs_of_one_session_key_never_overlap_and_concurrency_is_bounded,
    runs::runs_can_be_listed_by_status,
    runs::a_session_key_with_a_backlog_does_not_hold_up_other_keys,
    delivery::every_channel_adapter_speaks_its_api,
    delivery::the_last_route_belongs_to_the_owner_not_to_hook_runs,
    delivery::acknowledgement_replies_are_not_sent_but_summarised,
    delivery::failed_sends_are_retried_with_backoff,
    delivery::a_send_that_keeps_failing_is_recorded_and_summarised,
    delivery::an_unconfigured_channel_fails_without_retries,
    heartbeat::wake_now_runs_a_heartbeat_over_pending_events_and_delivers_its_reply,
    heartbeat::heartbeat_requests_close_together_make_one_heartbeat,
    providers::named_providers_speak_their_wire_format_and_take_the_model_without_prefix,
    providers::a_failing_model_falls_back_in_order_and_a_refusal_does_not,
    providers::a_timeout_under_a_second_counts_as_one,
    heartbeat::a_wake_now_run_asks_for_a_heartbeat_even_when_its_reply_is_delivered,
    heartbeat::replies_that_start_or_end_with_heartbeat_ok_and_say_little_are_acknowledgements,
    heartbeat::periodic_heartbeats_run_while_events_are_pending,
    delivery::a_refusal_is_given_up_at_once_with_the_apis_reason,
    delivery::a_throttled_send_waits_for_its_retry_after,
    delivery::a_long_reply_is_split_to_the_channels_limit_in_order,
    delivery::msteams_refuses_a_recipient_and_records_none,
    delivery::a_retried_split_reply_sends_only_the_parts_not_yet_sent,
    retry::a_run_whose_model_call_failed_runs_again_as_its_second_attempt,
    outages::runs_sent_while_the_provider_is_down_end_ok_once_it_is_up,
    outages::an_overloaded_provider_is_called_again_and_the_run_ends_ok,
    outages::a_throttled_provider_is_called_again_after_its_retry_after,
    outages::a_refusal_is_not_called_again,
    outages::a_provider_down_past_the_deadline_names_itself_and_the_cause,
);

pub(crate) fn with_provider(provider: &Fake) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "agents.defaults.provider",
        json!({"baseUrl": provider.base, "apiKey": "sk-test"}),
    );
    set(&mut config, "agents.defaults.model", json!("default-model"));
    config
}

/// Queues an agent run on `server`; its run id.
pub(crate) async fn agent(server: &Hookgate, body: Value) -> String {
    let (status, reply) = server.hook_json("/hooks/agent", &body).await;
    assert_eq!(status, 200, "{reply}");
    reply["runId"].as_str().unwrap().to_string()
}

/// Waits until the run is known and has left `queued`/`running`/`forwarding` (and, when it is to
/// be delivered, until the delivery settles), then returns it.
pub(crate) async fn finished(server: &Hookgate, run_id: &str) -> Value {
    let mut run = Value::Null;
    eventually("the run to finish", async || {
        run = server.api_json(&format!("/api/runs/{run_id}")).await.1;
        // On NATS a run shows once this node's view applied it: until then it is not found.
        let done = !matches!(
            run["status"].as_str(),
            None | Some("queued" | "running" | "forwarding")
        );
        done && run["delivery"]["status"] != "pending"
    })
    .await;
    run
}

pub(crate) async fn summaries(server: &Hookgate) -> Vec<String> {
    server
        .events()
        .await
        .iter()
        .filter(|e| e["kind"] == "summary")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

/// Every chat channel, pointed at `fake`.
pub(crate) fn all_channels(fake: &Fake) -> Value {
    json!({
        "telegram": {"botToken": "tg-token", "apiBase": fake.base},
        "slack": {"botToken": "xoxb-1", "apiBase": fake.base},
        "discord": {"botToken": "dc-token", "apiBase": fake.base},
        "mattermost": {"baseUrl": fake.base, "token": "mm-token"},
        "msteams": {"webhookUrl": format!("{}/teams-webhook", fake.base)},
        "signal": {"baseUrl": fake.base, "number": "+15550000"},
        "whatsapp": {"accessToken": "wa-token", "phoneNumberId": "1055", "apiBase": fake.base},
        "imessage": {"baseUrl": fake.base, "password": "bb-pass"},
    })
}
