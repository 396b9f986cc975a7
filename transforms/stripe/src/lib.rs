//! Stripe events as one-line wakes, for the event types the operator lists.
//!
//! `transform.config`: `{ "events": ["invoice.payment_failed", ...] }`; without it, a default
//! list of events that usually need a human. Other event types are skipped (204).

use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit", world: "transform" });

use exports::hookgate::transform::handler::Guest;
use hookgate::transform::types::{Action, Outcome, Request, Wake};

/// Event types woken on when the config names none.
pub const DEFAULT_EVENTS: &[&str] = &[
    "checkout.session.completed",
    "invoice.payment_failed",
    "customer.subscription.deleted",
    "charge.dispute.created",
];

struct Stripe;

impl Guest for Stripe {
    fn transform(req: Request) -> Result<Outcome, String> {
        let events = configured_events(req.config.as_deref())?;
        let payload: Value =
            serde_json::from_slice(&req.body).map_err(|e| format!("body is not JSON: {e}"))?;
        Ok(match describe(&payload, &events) {
            Some(text) => Outcome::Run(Action::Wake(Wake { text, mode: None })),
            None => Outcome::Skip,
        })
    }
}

// Native builds (the crate's unit tests) leave the component's exports out: their symbol names
// (`hookgate:transform/handler@0.2.0#transform`) are not valid in a native linker's version script.
#[cfg(target_family = "wasm")]
export!(Stripe);

/// The event types from `transform.config`, or the defaults.
pub fn configured_events(config: Option<&str>) -> Result<Vec<String>, String> {
    let Some(config) = config else {
        return Ok(DEFAULT_EVENTS.iter().map(|s| s.to_string()).collect());
    };
    let config: Value = serde_json::from_str(config).map_err(|e| format!("config: {e}"))?;
    match config.get("events") {
        None => Ok(DEFAULT_EVENTS.iter().map(|s| s.to_string()).collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or("config.events must be strings".to_string())
            })
            .collect(),
        Some(_) => Err("config.events must be an array of event types".into()),
    }
}

/// The wake text for a listed event, `None` for others. Pure, so it is tested natively.
pub fn describe(p: &Value, events: &[String]) -> Option<String> {
    let kind = p["type"].as_str()?;
    if !events.iter().any(|e| e == kind) {
        return None;
    }
    let object = &p["data"]["object"];
    let mut line = format!("Stripe {kind}: {}", object["id"].as_str().unwrap_or("?"));
    let amount = object["amount_due"]
        .as_i64()
        .or(object["amount_total"].as_i64())
        .or(object["amount"].as_i64());
    if let (Some(amount), Some(currency)) = (amount, object["currency"].as_str()) {
        line.push_str(&format!(
            ", {}.{:02} {}",
            amount / 100,
            (amount % 100).abs(),
            currency.to_uppercase()
        ));
    }
    if let Some(customer) = object["customer"].as_str() {
        line.push_str(&format!(", customer {customer}"));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> Vec<String> {
        configured_events(None).unwrap()
    }

    #[test]
    fn listed_event_becomes_one_line() {
        let p = json!({"type": "invoice.payment_failed", "data": {"object": {"id": "in_1", "amount_due": 2050, "currency": "usd", "customer": "cus_9"}}});
        assert_eq!(
            describe(&p, &defaults()).unwrap(),
            "Stripe invoice.payment_failed: in_1, 20.50 USD, customer cus_9"
        );
    }

    #[test]
    fn unlisted_event_is_skipped() {
        assert_eq!(
            describe(&json!({"type": "charge.succeeded"}), &defaults()),
            None
        );
    }

    #[test]
    fn config_lists_the_events() {
        let events = configured_events(Some(r#"{"events": ["charge.succeeded"]}"#)).unwrap();
        assert_eq!(events, ["charge.succeeded"]);
        assert!(configured_events(Some(r#"{"events": "x"}"#)).is_err());
        assert!(configured_events(Some("nope")).is_err());
    }
}
