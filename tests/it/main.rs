//! Integration tests: each starts the real `hookgate` binary on 127.0.0.1 and speaks HTTP to it.

/// Generates each named test, an `async fn(Backend)` of the module it is used in, on the
/// embedded store (`embedded::<test>`) and on a NATS JetStream node of its own
/// (`nats::<test>`).
macro_rules! on_both_stores {
    ($($test:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::Embedded).await
                }
            )+
        }
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::Backend::Nats).await
                }
            )+
        }
    };
}

mod browser;
mod fake;
mod harness;
mod nats;
mod processes;

mod admission;
mod agent;
mod api;
mod batch_callbacks;
mod batch_cluster;
mod batch_failures;
mod batches;
mod budgets;
mod bulk_replay;
mod cluster;
mod config;
mod config_schema;
mod connections;
mod console;
mod console_overview;
mod contract;
mod contrib;
mod conventions;
mod crash;
mod credentials;
mod day_two;
mod disk_full;
mod dry_run;
mod dry_run_bounds;
mod dry_run_env;
mod dry_run_files;
mod dry_run_live;
mod dry_run_render;
mod dry_run_unchanged;
mod durability;
mod edge;
mod edge_guard;
mod edge_openclaw;
mod edge_windows;
mod example;
mod failover;
mod failures;
mod files;
mod filters;
mod forms;
mod heartbeat_spend;
mod held_batches;
mod hostile;
mod js;
mod lanes;
mod limits;
mod mapped;
mod mcp;
mod mcp_agent;
mod mcp_subscriptions;
mod metrics;
mod notify;
mod openclaw;
mod openclaw_config;
mod openclaw_controls;
mod openclaw_outbound;
mod outbound;
mod outbound_console;
mod outbound_forward;
mod outbound_refused;
mod parity;
mod pipeline;
mod reload;
mod replay_repeats;
mod request_log_cluster;
mod request_log_size;
mod request_search;
mod request_search_scale;
mod requests;
mod retention;
mod run_events;
mod runs_bulk;
mod runtime;
mod scaffold;
mod security;
mod sender_names;
mod signatures;
mod subscription_store;
mod subscriptions;
mod transform_output;
mod transforms;
mod transforms_abi;
mod usage;
mod wake;
