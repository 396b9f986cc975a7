//! The durable pull consumers that share work between nodes, and the settings each is created
//! with on the stream.

use std::time::Duration;

use async_nats::jetstream::consumer;

use super::Names;

/// A run that waits for its session key is offered again with growing delays; on its last
/// offer (after about 80 minutes) it is given up with an error outcome.
const RUNNER_MAX_DELIVER: i64 = 1000;

/// Offers of a heartbeat request or a delivery; a delivery's last offer gives it up.
const MAX_DELIVER: i64 = 100;

/// A durable pull consumer on the stream: each message it holds is handed to one node at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    /// Agent runs (`<stream>.run`).
    Runner,
    /// Heartbeat requests (`<stream>.beat`).
    Heartbeat,
    /// Chat deliveries of finished runs and heartbeats (`<stream>.out.>`).
    Delivery,
}

impl Consumer {
    /// Every consumer, in the order they are created.
    pub const ALL: [Consumer; 3] = [Consumer::Runner, Consumer::Heartbeat, Consumer::Delivery];

    /// The durable name the servers know the consumer by. Existing streams hold consumers under
    /// these names (with their pending and redelivered messages): changing one would leave
    /// that work behind in a consumer no node reads.
    pub fn durable_name(self) -> &'static str {
        match self {
            Consumer::Runner => "runner",
            Consumer::Heartbeat => "heartbeat",
            Consumer::Delivery => "delivery",
        }
    }

    /// The subject suffix of the messages it holds: `<stream>.<filter>`.
    fn filter(self) -> &'static str {
        match self {
            Consumer::Runner => "run",
            Consumer::Heartbeat => "beat",
            Consumer::Delivery => "out.>",
        }
    }

    /// How many times a message is offered before the server gives it up.
    pub(super) fn max_deliver(self) -> i64 {
        match self {
            Consumer::Runner => RUNNER_MAX_DELIVER,
            Consumer::Heartbeat | Consumer::Delivery => MAX_DELIVER,
        }
    }

    /// How many of its messages may be in hand at once in the whole cluster.
    fn max_ack_pending(self) -> i64 {
        match self {
            // One heartbeat at a time across the cluster: two would consume the same events.
            Consumer::Heartbeat => 1,
            Consumer::Runner | Consumer::Delivery => 10_000,
        }
    }

    /// Its configuration on the stream `names.stream`: explicit acks, a message handed to
    /// another node when `ack_wait` passes without an ack or progress.
    pub(super) fn config(self, names: &Names, ack_wait: Duration) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(self.durable_name().to_string()),
            filter_subject: names.subject(self.filter()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait,
            max_deliver: self.max_deliver(),
            max_ack_pending: self.max_ack_pending(),
            ..Default::default()
        }
    }
}

/// Its durable name, as in logs and errors.
impl std::fmt::Display for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.durable_name())
    }
}

#[cfg(test)]
mod tests {
    use super::Consumer;

    /// Running clusters hold their pending work under these names.
    #[test]
    fn durable_names_are_those_existing_streams_hold() {
        let names = Consumer::ALL.map(Consumer::durable_name);
        assert_eq!(names, ["runner", "heartbeat", "delivery"]);
    }
}
