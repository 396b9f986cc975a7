//! `gateway.*` connection bounds and the trusted proxies: what a client may hold of the server
//! before and while it is authenticated (docs/configuration.md, "Connections").

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::model::{
    DEFAULT_CONNECTION_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MIN_RECEIVE_RATE, GatewayConfig,
};
use super::{ConfigError, seconds};
use crate::client::{ForwardedHeader, TrustedProxies};

/// Bounds on connections, read again for each accepted connection (and, for the shutdown
/// deadline, when the stop begins), so that a reload applies to the connections that follow.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionSettings {
    /// Connections served at once; when every one is held, a new connection takes the slot of
    /// the one idle longest (holding no request), or waits for one to end.
    pub max: usize,
    /// Connections one client (an address, an IPv6 /64) may hold at once; trusted proxies are
    /// exempt, since every client behind them shares their address.
    pub per_client: usize,
    /// Time a client has to send a request's headers; also bounds an idle keep-alive connection.
    pub header_timeout: Duration,
    /// Time a response may wait for the client to read it before the connection is closed.
    pub write_timeout: Duration,
    /// A request body must arrive at least this fast, in bytes per second, after a grace of
    /// [`RECEIVE_GRACE`].
    pub min_receive_rate: u64,
    /// Time a stop gives requests in flight and the outbox's current sends, together.
    pub shutdown_timeout: Duration,
}

/// How long a body may take before the minimum receive rate starts to count.
pub const RECEIVE_GRACE: Duration = Duration::from_secs(2);

impl ConnectionSettings {
    pub(super) fn build(gateway: &GatewayConfig, problems: &mut Vec<ConfigError>) -> Self {
        let count =
            |value: Option<u32>, key: &str, default: usize, problems: &mut Vec<_>| match value {
                None => default,
                Some(0) => {
                    problems.push(ConfigError::invalid(key, "must be greater than 0"));
                    default
                }
                Some(n) => n as usize,
            };
        let max = count(
            gateway.max_connections,
            &key!(GatewayConfig.max_connections),
            DEFAULT_MAX_CONNECTIONS as usize,
            problems,
        );
        // Half by default: one client never holds every slot, and a busy one (a load balancer
        // not listed as a proxy, a benchmark) still gets most of them.
        let per_client = count(
            gateway.max_connections_per_client,
            &key!(GatewayConfig.max_connections_per_client),
            max.div_ceil(2),
            problems,
        );
        ConnectionSettings {
            max,
            per_client,
            header_timeout: seconds(
                gateway.header_timeout_seconds,
                &key!(GatewayConfig.header_timeout_seconds),
                DEFAULT_CONNECTION_TIMEOUT,
                problems,
            ),
            write_timeout: seconds(
                gateway.write_timeout_seconds,
                &key!(GatewayConfig.write_timeout_seconds),
                DEFAULT_CONNECTION_TIMEOUT,
                problems,
            ),
            min_receive_rate: gateway
                .min_receive_bytes_per_second
                .unwrap_or(DEFAULT_MIN_RECEIVE_RATE),
            shutdown_timeout: seconds(
                gateway.shutdown_timeout_seconds,
                &key!(GatewayConfig.shutdown_timeout_seconds),
                DEFAULT_CONNECTION_TIMEOUT,
                problems,
            ),
        }
    }

    /// When the `received`-th byte of a body is due at the latest, counted from the start of
    /// the body; `None` when no minimum rate applies (`minReceiveBytesPerSecond: 0`).
    pub fn receive_deadline(&self, received: u64) -> Option<Duration> {
        (self.min_receive_rate > 0).then(|| {
            RECEIVE_GRACE + Duration::from_secs_f64(received as f64 / self.min_receive_rate as f64)
        })
    }
}

/// `gateway.trustedProxies` and `gateway.forwardedHeader`.
pub(super) fn trusted_proxies(
    gateway: &GatewayConfig,
    problems: &mut Vec<ConfigError>,
) -> TrustedProxies {
    let mut nets = Vec::new();
    for (i, entry) in gateway.trusted_proxies.iter().enumerate() {
        let entry = entry.trim();
        match entry
            .parse::<IpNet>()
            .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
        {
            Ok(net) => nets.push(net),
            Err(_) => problems.push(ConfigError::invalid(
                format!("{}[{i}]", key!(GatewayConfig.trusted_proxies)),
                "must be an IP address or a CIDR range",
            )),
        }
    }
    let header = match gateway.forwarded_header.as_deref() {
        None => ForwardedHeader::default(),
        Some(name) => ForwardedHeader::named(name).unwrap_or_else(|| {
            problems.push(ConfigError::invalid(
                key!(GatewayConfig.forwarded_header),
                "must be \"x-forwarded-for\" or \"forwarded\"",
            ));
            ForwardedHeader::default()
        }),
    };
    TrustedProxies::new(nets, header)
}
