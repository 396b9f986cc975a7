//! `gateway.store`: where accepted hooks are kept, the embedded SQLite file of one node or a NATS
//! JetStream cluster shared by several.

use super::ConfigError;
use super::model::defaults::{DEFAULT_BUCKET, DEFAULT_REPLICAS, DEFAULT_STREAM};
use super::model::{FileConfig, StoreConfig};

/// The store the gateway runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreSettings {
    /// One SQLite file in `gateway.stateDir`; one node.
    #[default]
    Embedded,
    /// A JetStream stream and key-value buckets; any number of nodes.
    Nats(NatsSettings),
}

/// How to reach JetStream and what to call what hookgate keeps there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSettings {
    /// Comma-separated server URLs, as the NATS client takes them.
    pub url: String,
    /// The stream every accepted hook and every change of a run is published to.
    pub stream: String,
    /// The prefix of the key-value buckets (`<bucket>-idempotency`, `<bucket>-replay`, ...).
    pub bucket: String,
    /// Replicas of the stream and the buckets: acknowledged only once this many servers have it.
    pub replicas: usize,
}

impl StoreSettings {
    /// The stream and bucket names the cluster's nodes share, if on NATS.
    pub fn nats(&self) -> Option<&NatsSettings> {
        match self {
            StoreSettings::Nats(nats) => Some(nats),
            StoreSettings::Embedded => None,
        }
    }
}

/// Stream and bucket names are one NATS subject token each: no dots, spaces or wildcards.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Validates `gateway.store`, pushing a problem per wrong key.
pub(super) fn store_settings(file: &FileConfig, problems: &mut Vec<ConfigError>) -> StoreSettings {
    let Some(store) = &file.gateway.store else {
        return StoreSettings::Embedded;
    };
    match store.kind.as_str() {
        "embedded" => {
            for (key, set) in [
                ("url", store.url.is_some()),
                ("stream", store.stream.is_some()),
                ("bucket", store.bucket.is_some()),
                ("replicas", store.replicas.is_some()),
            ] {
                if set {
                    problems.push(ConfigError::invalid(
                        format!("{}.{key}", key!(StoreConfig)),
                        "applies only to kind nats",
                    ));
                }
            }
            StoreSettings::Embedded
        }
        "nats" => nats_settings(file, store, problems),
        _ => {
            problems.push(ConfigError::invalid(
                key!(StoreConfig.kind),
                "must be embedded or nats (a NATS server's address goes in gateway.store.url)",
            ));
            StoreSettings::Embedded
        }
    }
}

fn nats_settings(
    file: &FileConfig,
    store: &StoreConfig,
    problems: &mut Vec<ConfigError>,
) -> StoreSettings {
    if file.gateway.mode.as_deref() == Some("forward") {
        problems.push(ConfigError::invalid(
            key!(StoreConfig.kind),
            "nats runs agents on the cluster's nodes; it cannot be combined with gateway.mode forward",
        ));
    }
    let url = match store.url.as_deref().map(str::trim) {
        Some(url) if !url.is_empty() => url.to_string(),
        _ => {
            problems.push(ConfigError::invalid(
                key!(StoreConfig.url),
                "is required when gateway.store.kind is nats",
            ));
            String::new()
        }
    };
    let mut name = |key: &str, value: Option<&String>, default: &str| {
        let value = value.map_or(default, String::as_str);
        if !valid_name(value) {
            problems.push(ConfigError::invalid(
                format!("{}.{key}", key!(StoreConfig)),
                "must be 1 to 64 letters, digits, '-' or '_'",
            ));
        }
        value.to_string()
    };
    let stream = name("stream", store.stream.as_ref(), DEFAULT_STREAM);
    let bucket = name("bucket", store.bucket.as_ref(), DEFAULT_BUCKET);
    let replicas = match store.replicas.unwrap_or(DEFAULT_REPLICAS) {
        n @ 1..=5 => usize::from(n),
        _ => {
            problems.push(ConfigError::invalid(
                key!(StoreConfig.replicas),
                "must be between 1 and 5",
            ));
            1
        }
    };
    StoreSettings::Nats(NatsSettings {
        url,
        stream,
        bucket,
        replicas,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StoreSettings, Vec<String>> {
        let file: FileConfig = json5::from_str(text).unwrap();
        let mut problems = Vec::new();
        let store = store_settings(&file, &mut problems);
        if problems.is_empty() {
            Ok(store)
        } else {
            Err(problems.iter().map(ToString::to_string).collect())
        }
    }

    #[test]
    fn embedded_is_the_default() {
        assert_eq!(parse("{}"), Ok(StoreSettings::Embedded));
        assert_eq!(
            parse("{gateway: {store: {kind: 'embedded'}}}"),
            Ok(StoreSettings::Embedded)
        );
    }

    #[test]
    fn nats_takes_defaults_for_names() {
        let store = parse("{gateway: {store: {kind: 'nats', url: 'nats://127.0.0.1:4222'}}}");
        assert_eq!(
            store,
            Ok(StoreSettings::Nats(NatsSettings {
                url: "nats://127.0.0.1:4222".into(),
                stream: "HOOKGATE".into(),
                bucket: "hookgate".into(),
                replicas: 1,
            }))
        );
    }

    #[test]
    fn wrong_keys_are_named() {
        let problems = parse(
            "{gateway: {mode: 'forward', store: {kind: 'nats', stream: 'a.b', bucket: '', replicas: 7}}}",
        )
        .unwrap_err()
        .join("\n");
        for key in [
            "gateway.store.kind",
            "gateway.store.url",
            "gateway.store.stream",
            "gateway.store.bucket",
            "gateway.store.replicas",
        ] {
            assert!(problems.contains(key), "{key} missing from {problems}");
        }
        let problems = parse("{gateway: {store: {kind: 'embedded', url: 'nats://x'}}}");
        assert!(problems.unwrap_err()[0].contains("gateway.store.url"));
        let problems = parse("{gateway: {store: {kind: 'redis'}}}");
        assert!(problems.unwrap_err()[0].contains("must be embedded or nats"));
    }
}
