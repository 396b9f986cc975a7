//! `outbound` and the mappings' `callback`s built into the [`OutboundSettings`] the outbox sends
//! by: the hosts messages may go to, the endpoints and their events, each destination's signing
//! secrets (decoded `whsec_` keys, several during a rotation) and the retry bounds.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use super::ConfigError;
use super::model::{CallbackConfig, FileConfig, SecretValue};
use super::secret::ConfigFiles;
use super::signature::SecretList;
use crate::hook::signature::Scheme;

/// The default of `outbound.retry.for`.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
/// The default of `outbound.retry.maxDelay`.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(600);
/// The default of `outbound.endpoints[].refusedPerMinute`.
pub const DEFAULT_REFUSED_PER_MINUTE: u32 = 60;

/// What `outbound` and the mappings' callbacks make.
#[derive(Debug, Clone, Default)]
pub struct OutboundSettings {
    pub allow: AllowHosts,
    pub endpoints: Vec<Endpoint>,
    /// Callbacks by their mapping's id.
    pub callbacks: BTreeMap<String, Callback>,
    /// How long a message is retried after it was written.
    pub retry_for: Duration,
    /// The longest wait between two attempts.
    pub max_delay: Duration,
    /// Whether any endpoint subscribes to `request.refused`: read once per refused hook
    /// request, so that a refusal nobody subscribes to costs nothing more.
    pub refusals_wanted: bool,
}

impl OutboundSettings {
    /// Whether any run may have something to send: no callback and no endpoint leaves a run's
    /// end without a look at the outbox.
    pub fn is_active(&self) -> bool {
        !self.endpoints.is_empty() || !self.callbacks.is_empty()
    }

    /// The endpoints subscribed to `event` of a run of `mapping` and `agent`.
    pub fn subscribers<'a>(
        &'a self,
        event: Event,
        mapping: Option<&'a str>,
        agent: &'a str,
    ) -> impl Iterator<Item = &'a Endpoint> {
        self.endpoints
            .iter()
            .filter(move |e| e.wants(event, mapping, agent))
    }

    /// The endpoints subscribed to `request.refused` of a refusal attributed to `mapping`
    /// (`None`: refused before any mapping matched). A refusal made no run, so it has no agent:
    /// an endpoint with an `agents` filter gets none.
    pub fn refused_subscribers<'a>(
        &'a self,
        mapping: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Endpoint> {
        self.endpoints.iter().filter(move |e| {
            e.events.contains(&Event::RequestRefused) && e.agents.is_none() && e.covers(mapping)
        })
    }
}

/// A lifecycle event an endpoint subscribes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    RunStarted,
    RunFinished,
    RunFailed,
    RunHeld,
    DeliveryFailed,
    RequestRefused,
    RelayFailed,
}

crate::hook::wire::wire_names!(Event {
    RunStarted => "run.started",
    RunFinished => "run.finished",
    RunFailed => "run.failed",
    RunHeld => "run.held",
    DeliveryFailed => "delivery.failed",
    RequestRefused => "request.refused",
    RelayFailed => "relay.failed",
});

/// An `outbound.endpoints` entry, built.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub id: String,
    pub url: String,
    pub secrets: Vec<Vec<u8>>,
    pub events: Vec<Event>,
    pub mappings: Option<Vec<String>>,
    pub agents: Option<Vec<String>>,
    /// `request.refused` messages written per minute at most (`refusedPerMinute`).
    pub refused_per_minute: u32,
}

impl Endpoint {
    /// Whether its `mappings` filter lets through what `mapping` (`None`: no mapping) did.
    fn covers(&self, mapping: Option<&str>) -> bool {
        self.mappings
            .as_ref()
            .is_none_or(|m| mapping.is_some_and(|id| m.iter().any(|x| x == id)))
    }

    fn wants(&self, event: Event, mapping: Option<&str>, agent: &str) -> bool {
        self.events.contains(&event)
            && self.covers(mapping)
            && self
                .agents
                .as_ref()
                .is_none_or(|a| a.iter().any(|x| x == agent))
    }
}

/// A mapping's `callback`, built (its URL template stays on the mapping).
#[derive(Debug, Clone)]
pub struct Callback {
    pub secrets: Vec<Vec<u8>>,
    pub format: CallbackFormat,
}

/// What a callback's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CallbackFormat {
    /// hookgate's run outcome (docs/outbound.md).
    Outcome,
    /// `{"response_type": "in_channel", "text": reply}`, as Slack's `response_url` takes it.
    Slack,
}

/// `outbound.allowHosts`: the hosts messages may go to, and the non-public addresses listed.
#[derive(Debug, Clone, Default)]
pub struct AllowHosts {
    names: Vec<String>,
    /// `*.example.com` as `.example.com`.
    suffixes: Vec<String>,
    addresses: Vec<IpAddr>,
}

impl AllowHosts {
    /// Whether a URL's host (lower case; an IP literal without brackets) is listed.
    pub fn host_allowed(&self, host: &str) -> bool {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.addresses.contains(&canonical(ip));
        }
        self.names.iter().any(|n| n == host) || self.suffixes.iter().any(|s| host.ends_with(s))
    }

    /// Whether a message may be sent to `ip`: a public address, or one listed itself.
    pub fn address_allowed(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        is_public(ip) || self.addresses.contains(&ip)
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`) or written IPv4-compatible
/// (`::a.b.c.d`) is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .or_else(|| compatible(v6))
            .map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The IPv4 address of an IPv4-compatible IPv6 address (`::a.b.c.d`, not `::` or `::1`).
fn compatible(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let v4 = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    (s[..6] == [0; 6] && u32::from(v4) > 1).then_some(v4)
}

/// The IPv4 address a translating IPv6 address leads to: NAT64's well-known prefix
/// (`64:ff9b::/96`, RFC 6052) and 6to4 (`2002::/16`, RFC 3056). A gateway on the way turns it
/// into that IPv4 address, so it is judged by it.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// Whether `ip` is reachable on the public internet: not loopback, private, link-local
/// (cloud metadata), shared (CGNAT), benchmarking (198.18/15), reserved (240/4), unique local,
/// multicast, broadcast or unspecified. An IPv6 address that leads to an IPv4 address (NAT64,
/// 6to4) is judged by that address; NAT64's local-use prefix (`64:ff9b:1::/48`, RFC 8215),
/// whose IPv4 part the operator places, is never public.
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_public_v4(v4);
            }
            let [first, second, third, ..] = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first, second, third) == (0x64, 0xff9b, 1))
        }
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, ..] = v4.octets();
    !(v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_multicast()
        || v4.is_documentation()
        || a == 0
        || a >= 240
        || (a == 198 && (b == 18 || b == 19))
        || (a == 100 && (64..128).contains(&b)))
}

/// Builds `outbound` and the mappings' callbacks, reporting each problem by its key.
pub(super) fn outbound_settings(
    file: &FileConfig,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> OutboundSettings {
    let config = &file.outbound;
    let mut allow = AllowHosts::default();
    for (i, entry) in config.allow_hosts.iter().enumerate() {
        let entry = entry.trim().trim_start_matches('[').trim_end_matches(']');
        let entry = entry.to_ascii_lowercase();
        if let Ok(ip) = entry.parse::<IpAddr>() {
            allow.addresses.push(canonical(ip));
        } else if let Some(domain) = entry.strip_prefix("*.").filter(|d| valid_name(d)) {
            allow.suffixes.push(format!(".{domain}"));
        } else if valid_name(&entry) {
            allow.names.push(entry);
        } else {
            problems.push(ConfigError::invalid(
                format!("outbound.allowHosts[{i}]"),
                "must be a host name, *.domain or an IP address",
            ));
        }
    }
    let endpoints = config
        .endpoints
        .iter()
        .enumerate()
        .filter_map(|(i, e)| endpoint(e, i, files, problems))
        .collect::<Vec<_>>();
    for (i, e) in endpoints.iter().enumerate() {
        if endpoints[..i].iter().any(|earlier| earlier.id == e.id) {
            problems.push(ConfigError::invalid(
                format!("outbound.endpoints[{i}].id"),
                "must be unique",
            ));
        }
    }
    let mut callbacks = BTreeMap::new();
    for (i, mapping) in file.hooks.mappings.iter().enumerate() {
        if let Some(callback) = &mapping.callback {
            let id = mapping
                .id
                .as_deref()
                .map(str::trim)
                .filter(|id| !id.is_empty());
            let id = id.map_or_else(|| format!("mapping-{}", i + 1), String::from);
            let key = format!("hooks.mappings[{i}].callback");
            callbacks.insert(id, self::callback(callback, &key, files, problems));
        }
    }
    let retry = config.retry.clone().unwrap_or_default();
    let mut duration = |text: Option<&str>, key: &str, default: Duration| match text {
        None => default,
        Some(text) => match humantime::parse_duration(text.trim()) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                problems.push(ConfigError::invalid(
                    key,
                    "must be a duration like 24h or 10m",
                ));
                default
            }
        },
    };
    let retry_for = duration(
        retry.retry_for.as_deref(),
        "outbound.retry.for",
        DEFAULT_RETRY_FOR,
    );
    let max_delay = duration(
        retry.max_delay.as_deref(),
        "outbound.retry.maxDelay",
        DEFAULT_MAX_DELAY,
    );
    let refusals_wanted = endpoints
        .iter()
        .any(|e| e.events.contains(&Event::RequestRefused));
    OutboundSettings {
        allow,
        endpoints,
        callbacks,
        retry_for,
        max_delay,
        refusals_wanted,
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

fn endpoint(
    config: &super::model::EndpointConfig,
    i: usize,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<Endpoint> {
    let key = format!("outbound.endpoints[{i}]");
    let id = config.id.trim().to_string();
    if id.is_empty() {
        problems.push(ConfigError::invalid(
            format!("{key}.id"),
            "must not be blank",
        ));
    }
    check_url(&config.url, &format!("{key}.url"), problems);
    let mut events = Vec::new();
    for (j, name) in config.events.iter().enumerate() {
        match Event::from_wire(name.trim()) {
            Some(event) => events.push(event),
            None => problems.push(ConfigError::invalid(
                format!("{key}.events[{j}]"),
                "must be one of run.started, run.finished, run.failed, run.held, \
                 delivery.failed, request.refused, relay.failed",
            )),
        }
    }
    if config.events.is_empty() {
        problems.push(ConfigError::invalid(
            format!("{key}.events"),
            "must name at least one event",
        ));
    }
    let secrets = secrets(&config.secret, &config.secrets, &key, files, problems);
    let refused_per_minute = match config.refused_per_minute {
        None => DEFAULT_REFUSED_PER_MINUTE,
        Some(0) => {
            problems.push(ConfigError::invalid(
                format!("{key}.refusedPerMinute"),
                "must be at least 1",
            ));
            DEFAULT_REFUSED_PER_MINUTE
        }
        Some(n) => n,
    };
    Some(Endpoint {
        id,
        url: config.url.trim().to_string(),
        secrets,
        events,
        mappings: config.mappings.clone(),
        agents: config.agents.clone(),
        refused_per_minute,
    })
}

fn callback(
    config: &CallbackConfig,
    key: &str,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Callback {
    if !config.url.contains("{{") {
        check_url(&config.url, &format!("{key}.url"), problems);
    }
    let format = match config.format.as_deref().map(str::trim) {
        None | Some("outcome") => CallbackFormat::Outcome,
        Some("slack") => CallbackFormat::Slack,
        Some(_) => {
            problems.push(ConfigError::invalid(
                format!("{key}.format"),
                "must be outcome or slack",
            ));
            CallbackFormat::Outcome
        }
    };
    Callback {
        secrets: secrets(&config.secret, &config.secrets, key, files, problems),
        format,
    }
}

/// A fixed URL must be `http` or `https` with a host.
fn check_url(url: &str, key: &str, problems: &mut Vec<ConfigError>) {
    let ok = reqwest::Url::parse(url.trim())
        .ok()
        .is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if !ok {
        problems.push(ConfigError::invalid(key, "must be an http or https URL"));
    }
}

/// `secret` and `secrets` of `key`, decoded as Standard Webhooks keys; at least one is
/// required.
fn secrets(
    one: &Option<SecretValue>,
    many: &Option<Vec<SecretValue>>,
    key: &str,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Vec<Vec<u8>> {
    let read = SecretList {
        one,
        many,
        scheme: &Scheme::StandardWebhooks,
        malformed: "is malformed (signing secrets are whsec_<base64>)",
    };
    read.decode(key, files, problems).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_refused_unless_listed() {
        let mut allow = AllowHosts::default();
        allow.addresses.push("127.0.0.1".parse().unwrap());
        assert!(allow.address_allowed("127.0.0.1".parse().unwrap()));
        assert!(allow.address_allowed("::ffff:127.0.0.1".parse().unwrap()));
        for private in [
            "10.0.0.1",
            "169.254.169.254",
            "192.168.1.1",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "0.0.0.0",
            // Benchmarking and reserved IPv4.
            "198.18.0.1",
            "198.19.255.254",
            "240.0.0.1",
            "255.255.255.254",
            // IPv4 inside IPv6: mapped, compatible, NAT64, 6to4.
            "::ffff:10.0.0.1",
            "::10.0.0.1",
            "::127.0.0.2",
            "64:ff9b::a00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::5db8:d822",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "2002:c0a8:101::1",
        ] {
            assert!(
                !allow.address_allowed(private.parse().unwrap()),
                "{private}"
            );
        }
        for public in [
            "93.184.216.34",
            "198.20.0.1",
            "223.255.255.1",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "::ffff:93.184.216.34",
            "2606:4700::1111",
        ] {
            assert!(allow.address_allowed(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn hosts_match_names_wildcards_and_addresses() {
        let allow = AllowHosts {
            names: vec!["hooks.slack.com".into()],
            suffixes: vec![".example.com".into()],
            addresses: vec!["127.0.0.1".parse().unwrap()],
        };
        assert!(allow.host_allowed("hooks.slack.com"));
        assert!(allow.host_allowed("a.example.com"));
        assert!(!allow.host_allowed("example.com"));
        assert!(!allow.host_allowed("evilexample.com"));
        assert!(allow.host_allowed("127.0.0.1"));
        assert!(!allow.host_allowed("10.0.0.1"));
    }
}
