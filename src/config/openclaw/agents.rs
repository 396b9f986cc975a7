//! OpenClaw's `agents`: the keys hookgate implements kept, the keyed `entries` made the list.

use serde_json::{Map, Value};

use super::{ConfigNotice, keep_only, keep_only_as};

/// Adopts `agents` (see the module's documentation).
pub(super) fn adopt(agents: &mut Map<String, Value>, notices: &mut Vec<ConfigNotice>) {
    if let Some(Value::Object(defaults)) = agents.get_mut("defaults") {
        keep_only(defaults, &["agents", "defaults"], notices, |_| {
            "hookgate's agent turn is one model call with the prompt".into()
        });
        if let Some(Value::Object(heartbeat)) = defaults.get_mut("heartbeat") {
            keep_only(
                heartbeat,
                &["agents", "defaults", "heartbeat"],
                notices,
                |_| {
                    "a heartbeat is one turn over the main session's pending events, replied to the owner's route"
                    .into()
                },
            );
        }
    }
    // OpenClaw's keyed form of the agent list.
    if let Some(Value::Object(entries)) = agents.shift_remove("entries") {
        let mut list = match agents.shift_remove("list") {
            Some(Value::Array(list)) => list,
            _ => Vec::new(),
        };
        for (id, entry) in entries {
            let mut entry = match entry {
                Value::Object(entry) => entry,
                _ => Map::new(),
            };
            let key = format!("agents.entries.{id}");
            keep_only_as(&mut entry, &["agents", "list", "[]"], &key, notices, |_| {
                "hookgate's agents differ only in model, provider and budget".into()
            });
            entry.insert("id".into(), Value::String(id));
            list.push(Value::Object(entry));
        }
        agents.insert("list".into(), Value::Array(list));
    }
    if let Some(Value::Array(list)) = agents.get_mut("list") {
        for (i, entry) in list.iter_mut().enumerate() {
            if let Value::Object(entry) = entry {
                let key = format!("agents.list[{i}]");
                keep_only_as(entry, &["agents", "list", "[]"], &key, notices, |_| {
                    "hookgate's agents differ only in model, provider and budget".into()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::openclaw::tests::adopted;
    use serde_json::json;

    #[test]
    fn agent_entries_become_the_list_and_unknown_defaults_are_noticed() {
        let (value, notices, _) = adopted(json!({"agents": {
            "defaults": {"workspace": "~/w", "maxConcurrent": 2, "heartbeat": {"every": "1h", "target": "last"}},
            "entries": {"ops": {"model": "a/b", "workspace": "~/o"}},
        }}));
        assert_eq!(
            value["agents"],
            json!({"defaults": {"maxConcurrent": 2, "heartbeat": {"every": "1h"}},
                   "list": [{"model": "a/b", "id": "ops"}]})
        );
        for key in [
            "agents.defaults.workspace",
            "agents.defaults.heartbeat.target",
            "agents.entries.ops.workspace",
        ] {
            assert!(
                notices.iter().any(|n| n.starts_with(key)),
                "{key}: {notices:?}"
            );
        }
    }
}
