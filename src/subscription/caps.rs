//! `mcp.subscriptions` ([`AgentCaps`]) applied to the mapping an agent asks a subscription
//! for (docs/mcp.md#what-an-agent-may-subscribe-to): a key above its cap is refused, naming
//! the cap; a capped key left unset is given the cap, so that no agent-made run goes
//! unbudgeted. Pure: the count of agent-made subscriptions is the caller's.

use serde_json::{Map, Value};

use super::SubscriptionError;
use crate::config::lanes::Priority;
use crate::config::mcp_caps::AgentCaps;
use crate::mapping::ActionKind;

/// The keys of a mapping an agent-made subscription may not set at all, and why.
const WITHHELD: &[(&str, &str)] = &[
    (
        "allowUnsafeExternalContent",
        "it would take the payload out of the untrusted-content envelope",
    ),
    (
        "callback",
        "it would send every run's outcome to an address of the agent's choosing",
    ),
    ("form", "it would admit website forms with no signature"),
];

/// Whether an agent may make a subscription with `mapping` when agents have `made` already;
/// the mapping given its caps where it leaves them unset.
pub fn admit(
    caps: &AgentCaps,
    mapping: &mut Map<String, Value>,
    made: usize,
) -> Result<(), SubscriptionError> {
    if made >= caps.max_subscriptions as usize {
        return Err(refused(format!(
            "agents have made {made} subscriptions, the most mcp.subscriptions.maxSubscriptions \
             allows ({}); delete one first",
            caps.max_subscriptions
        )));
    }
    if let Some((key, why)) = WITHHELD.iter().find(|(key, _)| set(mapping, key)) {
        return Err(refused(format!(
            "an agent-made subscription may not set mapping.{key}: {why}"
        )));
    }
    let action = mapping
        .get("action")
        .and_then(Value::as_str)
        .and_then(|a| ActionKind::from_wire(a.trim()));
    if !action.is_some_and(|a| caps.actions.contains(&a)) {
        let allowed: Vec<&str> = caps.actions.iter().map(|a| a.as_str()).collect();
        return Err(refused(format!(
            "mapping.action must be one of mcp.subscriptions.actions: {}",
            allowed.join(", ")
        )));
    }
    let fill = action == Some(ActionKind::Agent);
    let budget = section(mapping, "budget")?;
    capped(budget, "budget", "tokensPerDay", caps.tokens_per_day, fill)?;
    let runs_per_hour = u64::from(caps.runs_per_hour);
    capped(budget, "budget", "runsPerHour", runs_per_hour, fill)?;
    let runs = section(mapping, "runs")?;
    capped(runs, "runs", "maxQueued", u64::from(caps.max_queued), fill)?;
    // Filled no higher than the queue asked for: a lane's maxQueued is at least maxConcurrent.
    let queued = runs
        .get("maxQueued")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX);
    let concurrent = u64::from(caps.max_concurrent).min(queued);
    capped(runs, "runs", "maxConcurrent", concurrent, fill)?;
    priority(runs, caps.priority, fill)?;
    if !fill {
        mapping.retain(|key, value| !matches!(key.as_str(), "budget" | "runs") || !empty(value));
    }
    Ok(())
}

fn refused(message: String) -> SubscriptionError {
    SubscriptionError::Forbidden(message)
}

/// Whether `key` is set to something other than null or `false`.
fn set(mapping: &Map<String, Value>, key: &str) -> bool {
    !matches!(
        mapping.get(key),
        None | Some(Value::Null | Value::Bool(false))
    )
}

fn empty(value: &Value) -> bool {
    value.as_object().is_some_and(Map::is_empty)
}

/// `mapping[key]` as an object, made empty when absent.
fn section<'a>(
    mapping: &'a mut Map<String, Value>,
    key: &str,
) -> Result<&'a mut Map<String, Value>, SubscriptionError> {
    let value = mapping
        .entry(key)
        .or_insert_with(|| Value::Object(Map::new()));
    value
        .as_object_mut()
        .ok_or_else(|| SubscriptionError::Invalid(format!("mapping.{key} must be an object")))
}

/// `section.field` no higher than `cap`; set to `cap` when unset and `fill`. A value that is
/// not a whole number is left for the mapping's own validation to refuse.
fn capped(
    section: &mut Map<String, Value>,
    name: &str,
    field: &str,
    cap: u64,
    fill: bool,
) -> Result<(), SubscriptionError> {
    match section.get(field) {
        None | Some(Value::Null) if fill => {
            section.insert(field.into(), cap.into());
        }
        Some(value) if value.as_u64().is_some_and(|n| n > cap) => {
            return Err(refused(format!(
                "mapping.{name}.{field} {value} is above the most an agent-made subscription may \
                 set (mcp.subscriptions.{name}.{field}: {cap})"
            )));
        }
        _ => {}
    }
    Ok(())
}

/// `runs.priority` no higher than `cap`; when unset and `fill`, `normal` or `cap`, whichever
/// is lower.
fn priority(
    runs: &mut Map<String, Value>,
    cap: Priority,
    fill: bool,
) -> Result<(), SubscriptionError> {
    match runs.get("priority").and_then(Value::as_str) {
        None if fill => {
            runs.insert("priority".into(), cap.max(Priority::Normal).as_str().into());
        }
        Some(text) if Priority::parse(text).is_some_and(|p| p < cap) => {
            return Err(refused(format!(
                "mapping.runs.priority {} is above the most an agent-made subscription may set \
                 (mcp.subscriptions.runs.priority: {})",
                Priority::parse(text).map_or("", Priority::as_str),
                cap.as_str()
            )));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn caps() -> AgentCaps {
        AgentCaps {
            max_subscriptions: 2,
            actions: vec![ActionKind::Agent, ActionKind::Notify],
            tokens_per_day: 5000,
            runs_per_hour: 3,
            max_concurrent: 1,
            max_queued: 10,
            priority: Priority::Normal,
        }
    }

    fn admitted(mapping: Value, made: usize) -> Result<Value, String> {
        let Value::Object(mut mapping) = mapping else {
            unreachable!()
        };
        admit(&caps(), &mut mapping, made)
            .map(|()| Value::Object(mapping))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn an_agent_run_left_unbudgeted_gets_the_caps() {
        let made = admitted(json!({"action": "agent"}), 0).unwrap();
        assert_eq!(
            made["budget"],
            json!({"tokensPerDay": 5000, "runsPerHour": 3})
        );
        let lane = json!({"maxQueued": 10, "maxConcurrent": 1, "priority": "normal"});
        assert_eq!(made["runs"], lane);
        let small = admitted(json!({"action": "agent", "runs": {"maxQueued": 1}}), 1).unwrap();
        assert_eq!(small["runs"]["maxConcurrent"], 1);
    }

    #[test]
    fn what_is_above_a_cap_is_refused_naming_the_cap() {
        for (mapping, cap) in [
            (
                json!({"action": "agent", "budget": {"tokensPerDay": 5001}}),
                "budget.tokensPerDay",
            ),
            (
                json!({"action": "agent", "budget": {"runsPerHour": 4}}),
                "budget.runsPerHour",
            ),
            (
                json!({"action": "agent", "runs": {"maxConcurrent": 2}}),
                "runs.maxConcurrent",
            ),
            (
                json!({"action": "agent", "runs": {"maxQueued": 11}}),
                "runs.maxQueued",
            ),
            (
                json!({"action": "agent", "runs": {"priority": "high"}}),
                "runs.priority",
            ),
            (json!({"action": "wake"}), "actions"),
            (json!({"action": "agent"}), "maxSubscriptions"),
        ] {
            let made = if cap == "maxSubscriptions" { 2 } else { 0 };
            let error = admitted(mapping, made).unwrap_err();
            assert!(
                error.contains(&format!("mcp.subscriptions.{cap}")),
                "{error}"
            );
        }
    }

    #[test]
    fn keys_that_widen_what_a_subscription_reaches_are_refused() {
        for key in ["callback", "form", "allowUnsafeExternalContent"] {
            let mut mapping = json!({"action": "agent"});
            mapping[key] = json!(true);
            let error = admitted(mapping, 0).unwrap_err();
            assert!(error.contains(key), "{error}");
        }
    }

    #[test]
    fn a_notify_subscription_is_given_no_lane_or_budget() {
        let made = admitted(json!({"action": "notify"}), 0).unwrap();
        assert!(
            made.get("budget").is_none() && made.get("runs").is_none(),
            "{made}"
        );
    }
}
