//! The link between an edge and its private node (docs/edge.md#what-the-operator-sees), as both
//! sides export it: on the edge as its queue stands, on the private node as its last pull
//! found it.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::gateway::edge_queue::EdgeStatus;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundLabels {
    pub bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TakenLabels {
    pub outcome: &'static str,
}

/// The edge link's metrics; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct EdgeMetrics {
    pub connected: Gauge,
    pub backlog: Gauge,
    pub oldest_waiting_seconds: Gauge<f64, AtomicU64>,
    pub last_acked: Gauge,
    pub stored: Counter,
    pub refusals: Family<BoundLabels, Counter>,
    pub taken: Family<TakenLabels, Counter>,
}

impl EdgeMetrics {
    /// Sets the gauges from `status`.
    pub fn show(&self, status: &EdgeStatus) {
        self.connected.set(i64::from(status.connected));
        self.backlog
            .set(i64::try_from(status.backlog).unwrap_or(i64::MAX));
        self.oldest_waiting_seconds
            .set(status.oldest_waiting_ms as f64 / 1000.0);
        self.last_acked.set(status.last_acked);
    }

    /// Counts a request the edge refused to store, by the bound that refused it (or `store`).
    pub fn refused(&self, bound: &'static str) {
        self.refusals.get_or_create(&BoundLabels { bound }).inc();
    }

    /// Counts a delivery the private node took: `run` through its pipeline, or `repeat` (taken
    /// before, acknowledged without running).
    pub fn took(&self, outcome: &'static str) {
        self.taken.get_or_create(&TakenLabels { outcome }).inc();
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "hookgate_edge_connected",
            "1 while the private node is connected to the edge (on either side)",
            self.connected.clone(),
        );
        registry.register(
            "hookgate_edge_backlog",
            "Requests stored at the edge and not yet acknowledged by the private node",
            self.backlog.clone(),
        );
        registry.register(
            "hookgate_edge_oldest_waiting_seconds",
            "How long the oldest request stored at the edge has waited for the private node",
            self.oldest_waiting_seconds.clone(),
        );
        registry.register(
            "hookgate_edge_last_acked_seq",
            "The edge sequence number the private node last acknowledged",
            self.last_acked.clone(),
        );
        registry.register(
            "hookgate_edge_stored",
            "Requests the edge stored for its private node",
            self.stored.clone(),
        );
        registry.register(
            "hookgate_edge_refusals",
            "Requests the edge refused to store, by the bound reached (overall, route, bytes) or store",
            self.refusals.clone(),
        );
        registry.register(
            "hookgate_edge_taken",
            "Edge deliveries the private node took: run through its pipeline, or repeat (taken before)",
            self.taken.clone(),
        );
    }
}
