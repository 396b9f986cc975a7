//! An `openclaw.json` as it is: the keys of the OpenClaw gateway's configuration (2026.9.6) that
//! hookgate does not implement as such are adopted before the file is read (docs/
//! coming-from-openclaw.md). Each is either translated into hookgate's own form (a named `bind`,
//! `agents.entries`, an env SecretRef, a channel's differently named token) or left out with a
//! notice naming it and saying what hookgate does instead. A key neither gateway knows is left
//! for the reader to refuse, with the closest known key.
//!
//! Pure: a function of the document's value; the notices are logged by whoever loads it.

use serde_json::{Map, Value};

use super::ConfigError;

mod agents;
mod channels;

/// A key that was accepted but means something else here, or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigNotice {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ConfigNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Why a section hookgate has no part of is left out, by OpenClaw top-level key.
const SECTIONS: &[(&str, &str)] = &[
    ("meta", "OpenClaw's own bookkeeping"),
    ("wizard", "OpenClaw's onboarding state"),
    (
        "diagnostics",
        "hookgate's log level is RUST_LOG and its metrics are /metrics",
    ),
    (
        "logging",
        "hookgate logs to stderr; set RUST_LOG and --log-format",
    ),
    ("update", "hookgate does not update itself"),
    ("telemetry", "hookgate sends no telemetry"),
    ("browser", "hookgate's agents have no browser"),
    (
        "ui",
        "hookgate's console, /console, has no appearance settings",
    ),
    (
        "secrets",
        "hookgate reads secrets from ${ENV}, { file } and env SecretRefs only",
    ),
    ("auth", "provider keys are models.providers.<name>.apiKey"),
    ("accessGroups", "hookgate reads no chat messages"),
    ("acp", "hookgate has no ACP runtime"),
    ("nodeHost", "hookgate pairs no nodes"),
    ("worktreeRoot", "hookgate's agents have no worktrees"),
    (
        "worktreeAcceleration",
        "hookgate's agents have no worktrees",
    ),
    ("tools", "hookgate's agent turns call no tools"),
    ("security", "see hookgate's SECURITY.md"),
    ("bindings", "hookgate routes replies by channel and to"),
    ("broadcast", "hookgate reads no chat messages"),
    ("attachments", "hookgate stores no media"),
    (
        "messages",
        "hookgate sends each reply as one message, split at the channel's limit",
    ),
    ("tts", "hookgate speaks nothing"),
    ("commands", "hookgate reads no chat commands"),
    ("approvals", "hookgate's agent turns ask for no approval"),
    ("session", "hookgate keeps one main session per agent"),
    (
        "cron",
        "hookgate schedules only heartbeats (agents.defaults.heartbeat.every)",
    ),
    ("transcripts", "hookgate records no meetings"),
    ("discovery", "hookgate does not advertise itself"),
    ("talk", "hookgate has no voice mode"),
    ("cloudWorkers", "hookgate runs agent turns itself"),
    ("desktop", "hookgate observes no desktop"),
    (
        "memory",
        "hookgate's agents keep no memory beyond the main session",
    ),
    ("skills", "hookgate's agent turns load no skills"),
    (
        "plugins",
        "hookgate's extensions are WebAssembly transforms (hooks.mappings[].transform)",
    ),
    ("surfaces", "hookgate reads no chat messages"),
    ("proxy", "hookgate's outbound calls use HTTPS_PROXY"),
];

/// Keys under sections hookgate implements in part, by path (`*`: any key or element).
const KEYS: &[(&str, &str)] = &[
    ("gateway.publicOrigin", "hookgate serves no pages"),
    ("gateway.portals", "hookgate serves no portals"),
    (
        "gateway.controlUi",
        "hookgate's console is /console, always on, used with the gateway token",
    ),
    ("gateway.cliAgents", "hookgate's console starts no sessions"),
    ("gateway.terminal", "hookgate serves no terminal"),
    (
        "gateway.roles",
        "the operator API has one role, the gateway token's",
    ),
    (
        "gateway.auth.password",
        "the operator API takes the gateway token only",
    ),
    (
        "gateway.auth.allowTailscale",
        "the operator API takes the gateway token only",
    ),
    (
        "gateway.auth.identityScopes",
        "the operator API takes the gateway token only",
    ),
    (
        "gateway.auth.trustedProxy",
        "the operator API takes the gateway token only",
    ),
    (
        "gateway.auth.rateLimit",
        "20 failures in 60 s lock a client out for 60 s",
    ),
    (
        "gateway.allowRealIpFallback",
        "clients are identified by gateway.forwardedHeader only",
    ),
    ("gateway.tools", "hookgate's agent turns call no tools"),
    // OpenClaw's MCP servers for its agents; hookgate's own `mcp` is its MCP endpoint's.
    ("mcp.servers", "hookgate's agent turns call no tools"),
    (
        "gateway.tailscale",
        "expose hookgate through your own proxy or tunnel",
    ),
    (
        "gateway.remote",
        "hookgate relays to another gateway with gateway.mode: forward",
    ),
    (
        "gateway.reload",
        "hookgate always reloads a changed file, all or nothing",
    ),
    (
        "gateway.tls",
        "terminate TLS at a reverse proxy; hookgate speaks HTTP/1.1",
    ),
    (
        "gateway.http",
        "hookgate serves the hooks and the operator API only",
    ),
    ("gateway.push", "hookgate notifies no devices"),
    ("gateway.nodes", "hookgate pairs no nodes"),
    (
        "hooks.gmail",
        "hookgate does not watch a Gmail account: run the watcher (`openclaw webhooks gmail run`, gog) with its hook URL at <hooks.path>/gmail and hooks.token as its hook token; a Pub/Sub push cannot send that token",
    ),
    ("hooks.internal", "hookgate has no internal event hooks"),
    ("models.catalogRefresh", "hookgate keeps no model catalogue"),
    (
        "models.providers.*.auth",
        "hookgate sends apiKey as the provider expects it",
    ),
    (
        "models.providers.*.headers",
        "hookgate sends no extra headers",
    ),
    (
        "models.providers.*.maxTokens",
        "hookgate lets the provider choose",
    ),
    (
        "models.providers.*.timeoutSeconds",
        "runs are bounded by agents.defaults.timeoutSeconds",
    ),
    (
        "models.providers.*.region",
        "give the region's endpoint as baseUrl",
    ),
    (
        "models.providers.*.injectNumCtxForOpenAICompat",
        "hookgate sends no num_ctx",
    ),
    (
        "models.providers.*.params",
        "hookgate sends no extra parameters",
    ),
    (
        "models.providers.*.agentRuntime",
        "hookgate runs agent turns itself",
    ),
    (
        "models.providers.*.localService",
        "start the local model server yourself",
    ),
    (
        "models.providers.*.request",
        "hookgate sends requests as the api's wire format says",
    ),
    ("agents.ownership", "OpenClaw's own bookkeeping"),
    (
        "agents.defaults.models.*.params",
        "hookgate sends no extra parameters",
    ),
    (
        "agents.defaults.models.*.agentRuntime",
        "hookgate runs agent turns itself",
    ),
    (
        "agents.defaults.models.*.pickerRuntimes",
        "hookgate's console picks no models",
    ),
    (
        "agents.defaults.models.*.codeMode",
        "hookgate's agent turns call no tools",
    ),
    (
        "agents.defaults.models.*.streaming",
        "hookgate waits for the whole reply",
    ),
    (
        "channels.defaults",
        "hookgate only sends replies; it reads no chat messages",
    ),
    (
        "channels.modelByChannel",
        "a run's model is its request's, its mapping's or the default",
    ),
];

/// Adopts the OpenClaw keys of `document` (see the module's documentation). Refusals (a value
/// hookgate cannot honour, such as `gateway.mode: "remote"`) go to `problems`.
pub fn adopt(document: &mut Value, problems: &mut Vec<ConfigError>) -> Vec<ConfigNotice> {
    let mut notices = Vec::new();
    let Some(root) = document.as_object_mut() else {
        return notices;
    };
    // An editor's schema hint; nothing to say about it.
    root.shift_remove("$schema");
    secret_refs(root, &mut String::new(), problems);
    for (section, why) in SECTIONS {
        if root.shift_remove(*section).is_some() {
            notices.push(ignored(section, why));
        }
    }
    if let Some(Value::Object(gateway)) = root.get_mut("gateway") {
        adopt_gateway(gateway, &mut notices, problems);
    }
    if let Some(Value::Object(agents)) = root.get_mut("agents") {
        agents::adopt(agents, &mut notices);
    }
    if let Some(Value::Object(channels)) = root.get_mut("channels") {
        channels::adopt(channels, &mut notices);
    }
    for (path, why) in KEYS {
        let segments: Vec<&str> = path.split('.').collect();
        remove_matching(document, &segments, &mut String::new(), why, &mut notices);
    }
    notices
}

fn ignored(key: &str, why: &str) -> ConfigNotice {
    ConfigNotice {
        key: key.to_string(),
        message: format!("ignored: {why}"),
    }
}

/// Removes every key matching `segments` (`*`: any key or element), with a notice each.
fn remove_matching(
    node: &mut Value,
    segments: &[&str],
    path: &mut String,
    why: &str,
    notices: &mut Vec<ConfigNotice>,
) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    let len = path.len();
    match node {
        Value::Object(map) if rest.is_empty() => {
            let keys: Vec<String> = if *first == "*" {
                map.keys().cloned().collect()
            } else {
                map.contains_key(*first)
                    .then(|| first.to_string())
                    .into_iter()
                    .collect()
            };
            for key in keys {
                map.shift_remove(&key);
                notices.push(ignored(&join(path, &key), why));
            }
        }
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if *first == "*" || key == first {
                    *path = join(path, key);
                    remove_matching(child, rest, path, why, notices);
                    path.truncate(len);
                }
            }
        }
        Value::Array(items) if *first == "*" => {
            for (i, child) in items.iter_mut().enumerate() {
                path.push_str(&format!("[{i}]"));
                remove_matching(child, rest, path, why, notices);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// OpenClaw SecretRefs, `{ source: "env", provider, id }`, become `${id}`, read from the
/// environment like any other reference; the other sources (a secrets provider's file, a
/// command, OpenClaw's store) are refused naming the key.
fn secret_refs(map: &mut Map<String, Value>, path: &mut String, problems: &mut Vec<ConfigError>) {
    // Refused references are left out, so that the reader does not refuse them a second time.
    let mut refused = Vec::new();
    for (key, value) in map.iter_mut() {
        let len = path.len();
        *path = join(path, key);
        if path.ends_with(".transform.config") {
            // The transform's own JSON: whatever its shape, it is handed over as written.
            path.truncate(len);
            continue;
        }
        match value {
            Value::Object(inner) if is_secret_ref(inner) => {
                match (inner.get("source").and_then(Value::as_str), inner.get("id")) {
                    (Some("env"), Some(Value::String(id))) => {
                        *value = Value::String(format!("${{{id}}}"));
                    }
                    _ => {
                        problems.push(ConfigError::invalid(
                            path.clone(),
                            "a SecretRef must have source \"env\" here; put other secrets in the environment or a file ({ file: \"path\" })",
                        ));
                        refused.push(key.clone());
                    }
                }
            }
            Value::Object(inner) => secret_refs(inner, path, problems),
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let Value::Object(inner) = item {
                        let at = path.len();
                        path.push_str(&format!("[{i}]"));
                        secret_refs(inner, path, problems);
                        path.truncate(at);
                    }
                }
            }
            _ => {}
        }
        path.truncate(len);
    }
    for key in refused {
        map.shift_remove(&key);
    }
}

fn is_secret_ref(map: &Map<String, Value>) -> bool {
    map.contains_key("source")
        && map.contains_key("id")
        && map
            .keys()
            .all(|k| matches!(k.as_str(), "source" | "provider" | "id"))
}

fn adopt_gateway(
    gateway: &mut Map<String, Value>,
    notices: &mut Vec<ConfigNotice>,
    problems: &mut Vec<ConfigError>,
) {
    match gateway.get("mode").and_then(Value::as_str) {
        Some("local") => {
            gateway.shift_remove("mode");
            notices.push(ConfigNotice {
                key: "gateway.mode".into(),
                message: "\"local\" is hookgate's embedded mode: runs and heartbeats happen here"
                    .into(),
            });
        }
        Some("remote") => {
            gateway.shift_remove("mode");
            problems.push(ConfigError::invalid(
                "gateway.mode",
                "\"remote\" makes an OpenClaw gateway a client of another; hookgate serves hooks itself (embedded) or relays them (forward, with gateway.forward)",
            ));
        }
        _ => {}
    }
    let custom = gateway.shift_remove("customBindHost");
    let named = gateway
        .get("bind")
        .and_then(Value::as_str)
        .map(String::from);
    let address = match named.as_deref() {
        Some("loopback") => Some(Ok("127.0.0.1")),
        Some("lan") => Some(Ok("0.0.0.0")),
        Some("auto") => Some(Ok("127.0.0.1")),
        Some("custom") => match custom.as_ref().and_then(Value::as_str) {
            Some(host) => Some(Ok(host)),
            None => Some(Err("\"custom\" needs gateway.customBindHost")),
        },
        Some("tailnet") => Some(Err(
            "\"tailnet\": hookgate does not look up a Tailscale address; give the address to listen on",
        )),
        _ => None,
    };
    match address {
        Some(Ok(address)) => {
            let address = address.to_string();
            notices.push(ConfigNotice {
                key: "gateway.bind".into(),
                message: format!("\"{}\" listens on {address}", named.unwrap_or_default()),
            });
            gateway.insert("bind".into(), Value::String(address));
        }
        Some(Err(why)) => {
            gateway.shift_remove("bind");
            problems.push(ConfigError::invalid("gateway.bind", why));
        }
        None => {}
    }
    if let Some(Value::Object(auth)) = gateway.get_mut("auth")
        && let Some(mode) = auth.shift_remove("mode")
    {
        let message = match mode.as_str() {
            Some("token") => "\"token\" is implied: the operator API takes the gateway token",
            _ => "ignored: the operator API takes the gateway token only (none configured: closed)",
        };
        notices.push(ConfigNotice {
            key: "gateway.auth.mode".into(),
            message: message.into(),
        });
    }
}

/// Leaves out every key of `map` that hookgate's section at `section` does not read (its type's
/// fields: a key added there is kept without a second edit), with a notice saying `why`.
fn keep_only(
    map: &mut Map<String, Value>,
    section: &[&str],
    notices: &mut Vec<ConfigNotice>,
    why: impl Fn(&str) -> String,
) {
    keep_only_as(map, section, &section.join("."), notices, why);
}

/// [`keep_only`] for a map the notices name at `path` rather than at its section.
fn keep_only_as(
    map: &mut Map<String, Value>,
    section: &[&str],
    path: &str,
    notices: &mut Vec<ConfigNotice>,
    why: impl Fn(&str) -> String,
) {
    let kept = crate::config::schema::keys_at(section);
    let dropped: Vec<String> = map.keys().filter(|k| !kept.contains(k)).cloned().collect();
    for key in dropped {
        map.shift_remove(&key);
        notices.push(ignored(&join(path, &key), &why(&key)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(super) fn adopted(mut value: Value) -> (Value, Vec<String>, Vec<String>) {
        let mut problems = Vec::new();
        let notices = adopt(&mut value, &mut problems);
        (
            value,
            notices.iter().map(ToString::to_string).collect(),
            problems.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn named_binds_become_addresses_or_are_refused() {
        let (value, notices, _) = adopted(json!({"gateway": {"bind": "lan", "mode": "local"}}));
        assert_eq!(value, json!({"gateway": {"bind": "0.0.0.0"}}));
        assert!(notices.contains(&"gateway.bind: \"lan\" listens on 0.0.0.0".to_string()));
        let (value, _, _) =
            adopted(json!({"gateway": {"bind": "custom", "customBindHost": "10.0.0.5"}}));
        assert_eq!(value, json!({"gateway": {"bind": "10.0.0.5"}}));
        let (_, _, problems) = adopted(json!({"gateway": {"bind": "tailnet"}}));
        assert!(
            problems[0].starts_with("gateway.bind: \"tailnet\""),
            "{problems:?}"
        );
        let (value, notices, _) = adopted(json!({"gateway": {"bind": "127.0.0.1"}}));
        assert_eq!(value, json!({"gateway": {"bind": "127.0.0.1"}}));
        assert!(notices.is_empty());
    }

    #[test]
    fn env_secret_refs_become_references_and_others_are_refused() {
        let (value, _, problems) = adopted(json!({
            "gateway": {"auth": {"token": {"source": "env", "provider": "default", "id": "GW"}}},
            "models": {"providers": {"o": {"apiKey": {"source": "file", "provider": "f", "id": "/k"}}}},
        }));
        assert_eq!(value["gateway"]["auth"]["token"], "${GW}");
        let config = json!({"source": "env", "id": "NOT_A_SECRET"});
        let (value, _, _) = adopted(json!({"hooks": {"mappings": [
            {"transform": {"module": "t.wasm", "config": config.clone()}}]}}));
        assert_eq!(value["hooks"]["mappings"][0]["transform"]["config"], config);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("models.providers.o.apiKey: a SecretRef"));
    }

    #[test]
    fn sections_hookgate_has_no_part_of_are_noticed_once() {
        let (value, notices, _) = adopted(json!({
            "$schema": "x", "logging": {"file": "/tmp/x"}, "update": {}, "hooks": {"gmail": {"account": "a"}},
        }));
        assert_eq!(value, json!({"hooks": {}}));
        assert_eq!(notices.len(), 3, "{notices:?}");
    }
}
