//! Metrics in the Prometheus (OpenMetrics) text format: what requests, hooks, transforms, the
//! store and the runtime are doing. Label values are bounded: hook names are those the
//! configuration knows, never whatever a client puts in a URL.

mod edge;
mod process;

use std::time::Duration;

pub use edge::EdgeMetrics;
pub use process::ProcessMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub hook: String,
    pub outcome: &'static str,
}

/// How a hook request ended, as `hookgate_hook_requests_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookOutcome {
    /// 200: accepted and committed.
    Accepted,
    /// 204: a transform skipped it.
    Skipped,
    /// 204: mappings matched its path, none its conditions (docs/hooks.md#conditions).
    Filtered,
    /// 401, or 429 after repeated authentication failures.
    Unauthorized,
    /// 429: a mapping's lane or a budget refused the run.
    Limited,
    /// Another 4xx.
    Rejected,
    /// 5xx.
    Failed,
    Other,
}

impl HookOutcome {
    /// The outcome of an answer with `status` and no more said about it: a 204 is a transform's
    /// skip and a 429 a lockout unless the caller knows otherwise.
    pub fn of_status(status: u16) -> HookOutcome {
        match status {
            200 => HookOutcome::Accepted,
            204 => HookOutcome::Skipped,
            401 | 429 => HookOutcome::Unauthorized,
            400..=499 => HookOutcome::Rejected,
            500..=599 => HookOutcome::Failed,
            _ => HookOutcome::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HookOutcome::Accepted => "accepted",
            HookOutcome::Skipped => "skipped",
            HookOutcome::Filtered => "filtered",
            HookOutcome::Unauthorized => "unauthorized",
            HookOutcome::Limited => "limited",
            HookOutcome::Rejected => "rejected",
            HookOutcome::Failed => "failed",
            HookOutcome::Other => "other",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MappingLabels {
    pub mapping: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub mapping: String,
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// `sent`, `failed` (given up) or `uncertain` (given up, maybe delivered).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RelayLabels {
    /// `wake` or `agent`.
    pub kind: &'static str,
    /// `forwarded`, `retried` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLogLabels {
    /// `recorded`, `suppressed` (a refusal flood, counted only), `dropped` (the log's queue
    /// was full), `pruned`; on a NATS store also `published`, `unpublished` (kept by this node
    /// only) and `indexed` (another node's, from the cluster's request stream).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BulkReplayLabels {
    /// `succeeded` (answered 2xx) or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// The run's agent: one the configuration knows, or the default agent.
    pub agent: String,
    /// The mapping that admitted the run; empty for a run of `/hooks/agent`.
    pub mapping: String,
    /// The model id that answered when the configuration names it, else `other`.
    pub model: String,
    /// `input` or `output`.
    pub direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BudgetLabels {
    /// `mapping` or `agent`: whose budget refused.
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// `no_request` (the connection never completed a request) or `idle` (idle since its
    /// last answer for 0.5 s at least).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
    pub wasmtime: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: String,
}

/// The request log's outcomes every store counts, shown at 0 from the start; a NATS store's
/// own (`published`, `unpublished`, `indexed`) show at their first.
const REQUEST_LOG_OUTCOMES: [&str; 4] = ["recorded", "suppressed", "dropped", "pruned"];

/// Every metric hookgate exports. Cheap to clone (each metric is a shared handle).
#[derive(Clone)]
pub struct Metrics {
    registry: std::sync::Arc<Registry>,
    pub http_duration: Family<RouteLabels, Histogram>,
    pub hook_requests: Family<HookLabels, Counter>,
    pub transform_duration: Family<MappingLabels, Histogram>,
    pub transform_failures: Family<FailureLabels, Counter>,
    pub store_commit: Histogram,
    pub runs: Family<StatusLabels, Gauge>,
    pub queue_depth: Gauge,
    pub relays: Family<RelayLabels, Counter>,
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub request_log: Family<RequestLogLabels, Counter>,
    /// Requests bulk replays replayed (docs/operations.md#replaying-in-bulk).
    pub bulk_replays: Family<BulkReplayLabels, Counter>,
    pub model_tokens: Family<TokenLabels, Counter>,
    /// Requests a full lane refused, by mapping.
    pub lane_refusals: Family<MappingLabels, Counter>,
    /// Queued runs by the mapping that admitted them, set at each scrape.
    pub lane_queued: Family<MappingLabels, Gauge>,
    pub budget_refusals: Family<BudgetLabels, Counter>,
    /// Connections closed to give their slot to a new one, by why they could go (the accept
    /// loop shows each reason at 0 from its start).
    pub connections_evicted: Family<EvictionLabels, Counter>,
    /// CPU, memory and file descriptors, read at each scrape.
    pub process: ProcessMetrics,
    /// The link between an edge and its private node (docs/edge.md).
    pub edge: EdgeMetrics,
}

fn latency_histogram() -> Histogram {
    // 50 µs to ~13 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 19))
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Metrics::unregistered();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        register_build_info(&mut registry);
        metrics.process.register(&mut registry);
        metrics.edge.register(&mut registry);
        Metrics {
            registry: std::sync::Arc::new(registry),
            ..metrics
        }
    }
}

impl Metrics {
    /// Every metric at its start, in an empty registry of its own.
    fn unregistered() -> Metrics {
        // Shown at 0 from the start: an alert on their increase then sees the first one
        // (a series that appears at 1 has no increase to show).
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        for outcome in ["sent", "failed", "uncertain"] {
            drop(deliveries.get_or_create(&DeliveryLabels { outcome }));
        }
        let request_log = Family::<RequestLogLabels, Counter>::default();
        for outcome in REQUEST_LOG_OUTCOMES {
            drop(request_log.get_or_create(&RequestLogLabels { outcome }));
        }
        let relays = Family::<RelayLabels, Counter>::default();
        for kind in ["wake", "agent"] {
            for outcome in ["forwarded", "retried", "failed"] {
                drop(relays.get_or_create(&RelayLabels { kind, outcome }));
            }
        }
        Metrics {
            registry: Default::default(),
            http_duration: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            hook_requests: Family::default(),
            transform_duration: Family::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            ),
            transform_failures: Family::default(),
            store_commit: latency_histogram(),
            runs: Family::default(),
            queue_depth: Gauge::default(),
            relays,
            deliveries,
            request_log,
            bulk_replays: Family::default(),
            model_tokens: Family::default(),
            lane_refusals: Family::default(),
            lane_queued: Family::default(),
            budget_refusals: Family::default(),
            connections_evicted: Family::default(),
            process: ProcessMetrics::default(),
            edge: EdgeMetrics::default(),
        }
    }

    /// Registers the metrics of requests, hooks, transforms, the store and the runtime in
    /// `registry`, in the order of the text a scrape gets.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "http_server_request_duration_seconds",
            "Time to answer an HTTP request, by route template and status",
            self.http_duration.clone(),
        );
        registry.register(
            "hookgate_hook_requests",
            "Hook requests by hook name and outcome",
            self.hook_requests.clone(),
        );
        registry.register(
            "hookgate_transform_duration_seconds",
            "Time of one transform call, by mapping, from its wait for a call slot to its outcome (an instantiation included when no kept instance serves it)",
            self.transform_duration.clone(),
        );
        registry.register(
            "hookgate_transform_failures",
            "Transform calls that failed, by mapping and cause (trap, timeout, memory, output, error)",
            self.transform_failures.clone(),
        );
        registry.register(
            "hookgate_store_commit_seconds",
            "Time of one store transaction (a group commit of every waiting write)",
            self.store_commit.clone(),
        );
        registry.register("hookgate_runs", "Agent runs by status", self.runs.clone());
        registry.register(
            "hookgate_queue_depth",
            "Work waiting: queued runs plus pending outbox sends",
            self.queue_depth.clone(),
        );
        registry.register(
            "hookgate_forward_relays",
            "Forward mode's relay attempts by kind and outcome: forwarded (the upstream took it), \
             retried (it will be sent again) or failed (the upstream refused it)",
            self.relays.clone(),
        );
        registry.register(
            "hookgate_deliveries",
            "Replies to chat channels that ended: sent, failed (given up: the run's summary says \
             so) or uncertain (given up after an attempt that may have reached the channel); \
             counted by the embedded store's outbox",
            self.deliveries.clone(),
        );
        registry.register(
            "hookgate_request_log_records",
            "Hook requests the request log recorded, counted without recording (suppressed: a \
             client's refusals over the flood threshold) or lost (dropped: its queue was full); \
             on a NATS store, published to the cluster or not (unpublished), and indexed from \
             other nodes",
            self.request_log.clone(),
        );
        registry.register(
            "hookgate_bulk_replays",
            "Requests bulk replays replayed, by outcome: succeeded (answered 2xx) or failed",
            self.bulk_replays.clone(),
        );
        self.register_admission(registry);
        registry.register(
            "hookgate_connections_evicted",
            "Connections closed, without an answer, to give their slot to a new one when every \
             slot was held, by reason: no_request (it never completed a request; closed at \
             once) or idle (idle for 0.5 s at least since its last answer)",
            self.connections_evicted.clone(),
        );
    }

    /// Registers the metrics of what agent runs cost and what admission refused for it:
    /// tokens, lanes and budgets.
    fn register_admission(&self, registry: &mut Registry) {
        registry.register(
            "hookgate_model_tokens",
            "Tokens agent runs used as their providers reported them, by agent, mapping, model \
             and direction (input, output); counted once per turn a model answered, by the node \
             that ran it",
            self.model_tokens.clone(),
        );
        registry.register(
            "hookgate_lane_refusals",
            "Hook requests answered 429 because their mapping's lane held runs.maxQueued waiting runs, by mapping",
            self.lane_refusals.clone(),
        );
        registry.register(
            "hookgate_lane_queued",
            "Queued runs (not started) by the mapping that admitted them",
            self.lane_queued.clone(),
        );
        registry.register(
            "hookgate_budget_refusals",
            "Runs refused (429, nothing stored) by a spent budget with onExceeded: refuse, by \
             whose budget it was: mapping or agent (held runs are hookgate_runs{status=\"held\"})",
            self.budget_refusals.clone(),
        );
    }
}

/// Registers `hookgate_build_info`, which says which build this is.
fn register_build_info(registry: &mut Registry) {
    let build_info = Family::<BuildLabels, Gauge>::default();
    build_info
        .get_or_create(&BuildLabels {
            version: crate::build::VERSION,
            commit: crate::build::GIT_COMMIT,
            wasmtime: crate::build::WASMTIME_VERSION,
        })
        .set(1);
    registry.register(
        "hookgate_build_info",
        "Always 1; the labels say which build this is",
        build_info,
    );
}

impl Metrics {
    /// Records one answered request.
    pub fn observe_request(&self, route: String, status: u16, elapsed: Duration) {
        self.http_duration
            .get_or_create(&RouteLabels { route, status })
            .observe(elapsed.as_secs_f64());
    }

    /// Records one hook request's outcome.
    pub fn count_hook(&self, hook: String, outcome: HookOutcome) {
        self.hook_requests
            .get_or_create(&HookLabels {
                hook,
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Shows `hook`'s failed requests (0 until it has one), so that the alert on its failure
    /// ratio counts its first failure too.
    pub fn show_hook(&self, hook: &str) {
        drop(self.hook_requests.get_or_create(&HookLabels {
            hook: hook.to_string(),
            outcome: HookOutcome::Failed.as_str(),
        }));
    }

    /// Shows `mapping`'s transform calls and its failures of each of `causes` (0 until
    /// counted), so that the alert on its failure ratio counts its first failure too.
    pub fn show_transform(&self, mapping: &str, causes: &[&'static str]) {
        drop(self.transform_duration.get_or_create(&MappingLabels {
            mapping: mapping.to_string(),
        }));
        for &cause in causes {
            drop(self.transform_failures.get_or_create(&FailureLabels {
                mapping: mapping.to_string(),
                cause,
            }));
        }
    }

    /// Counts one request a full lane of `mapping` refused.
    pub fn count_lane_refusal(&self, mapping: &str) {
        self.lane_refusals
            .get_or_create(&MappingLabels {
                mapping: mapping.to_string(),
            })
            .inc();
    }

    /// Counts a run refused by a spent budget of `scope` (`mapping` or `agent`).
    pub fn budget_refused(&self, scope: &'static str) {
        self.budget_refusals
            .get_or_create(&BudgetLabels { scope })
            .inc();
    }

    /// The registry in the text exposition format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
