//! Test deliveries: a sample of the provider's own (its ping, or an event of the kind the
//! subscription admits), signed with the subscription's secret as the provider signs.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use super::record::Provider;

/// A delivery as the provider would send it.
pub struct Delivery {
    /// Lower-case header names and their values, the signature's among them.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The event type it carries.
    pub event: String,
}

/// A sample delivery from `provider`, of the first of `events` (its ping or most common event
/// when none is named), signed with `secret` at `now_unix`.
pub fn delivery(provider: Provider, events: &[String], secret: &str, now_unix: i64) -> Delivery {
    let event = events
        .first()
        .cloned()
        .unwrap_or_else(|| default_event(provider).into());
    let body = body(provider, &event).to_string().into_bytes();
    let ts = now_unix.to_string();
    let headers = match provider {
        Provider::Github => vec![
            ("x-github-event".into(), event.clone()),
            ("x-github-delivery".into(), uuid::Uuid::new_v4().to_string()),
            (
                "x-hub-signature-256".into(),
                format!("sha256={}", hex::encode(mac(secret.as_bytes(), &[&body]))),
            ),
        ],
        Provider::Stripe => {
            let signature = hex::encode(mac(secret.as_bytes(), &[ts.as_bytes(), b".", &body]));
            vec![("stripe-signature".into(), format!("t={ts},v1={signature}"))]
        }
        Provider::Slack => {
            let signature = hex::encode(mac(
                secret.as_bytes(),
                &[b"v0:", ts.as_bytes(), b":", &body],
            ));
            vec![
                ("x-slack-request-timestamp".into(), ts),
                ("x-slack-signature".into(), format!("v0={signature}")),
            ]
        }
        Provider::Gitlab => vec![
            ("x-gitlab-event".into(), event.clone()),
            ("x-gitlab-token".into(), secret.to_string()),
        ],
        Provider::Standard => {
            let key = secret
                .strip_prefix("whsec_")
                .and_then(|k| BASE64.decode(k).ok())
                .unwrap_or_default();
            let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
            let signature = BASE64.encode(mac(
                &key,
                &[id.as_bytes(), b".", ts.as_bytes(), b".", &body],
            ));
            vec![
                ("webhook-id".into(), id),
                ("webhook-timestamp".into(), ts),
                ("webhook-signature".into(), format!("v1,{signature}")),
            ]
        }
    };
    let mut headers = headers;
    headers.push(("content-type".into(), "application/json".into()));
    Delivery {
        headers,
        body,
        event,
    }
}

/// The event a test sends when the subscription names none: the provider's ping where it has
/// one.
fn default_event(provider: Provider) -> &'static str {
    match provider {
        Provider::Github => "ping",
        Provider::Stripe => "charge.succeeded",
        Provider::Slack => "app_mention",
        Provider::Gitlab => "Push Hook",
        Provider::Standard => "test.event",
    }
}

/// A small payload of the shape the provider sends for `event`.
fn body(provider: Provider, event: &str) -> serde_json::Value {
    let sender = json!({ "login": "octocat", "id": 1, "type": "User" });
    let repository =
        json!({ "id": 1296269, "name": "Hello-World", "full_name": "octocat/Hello-World" });
    match provider {
        Provider::Github => match event {
            "ping" => {
                json!({ "zen": "Keep it logically awesome.", "hook_id": 1, "repository": repository, "sender": sender })
            }
            "push" => {
                json!({ "ref": "refs/heads/main", "before": "0000000", "after": "6dcb09b", "commits": [{ "id": "6dcb09b", "message": "Fix all the bugs" }], "repository": repository, "sender": sender })
            }
            "pull_request" => {
                json!({ "action": "opened", "number": 1347, "pull_request": { "number": 1347, "title": "Amazing new feature", "body": "Please pull these awesome changes in!", "user": sender }, "repository": repository, "sender": sender })
            }
            _ => {
                json!({ "action": "opened", "issue": { "number": 1347, "title": "Found a bug", "body": "I'm having a problem with this.", "user": sender }, "repository": repository, "sender": sender })
            }
        },
        Provider::Stripe => json!({
            "id": format!("evt_test_{}", uuid::Uuid::new_v4().simple()),
            "object": "event",
            "type": event,
            "livemode": false,
            "data": { "object": { "id": "ch_test", "object": "charge", "amount": 2000, "currency": "usd" } }
        }),
        Provider::Slack => json!({
            "type": "event_callback",
            "event": { "type": event, "user": "U061F7AUR", "text": "<@U0LAN0Z89> is it everything a river should be?", "channel": "C0LAN2Q65" }
        }),
        Provider::Gitlab => json!({
            "object_kind": "push",
            "ref": "refs/heads/main",
            "user_username": "jsmith",
            "project": { "name": "Diaspora", "path_with_namespace": "mike/diaspora" },
            "commits": [{ "id": "b6568db1", "message": "Update Catalan translation" }]
        }),
        Provider::Standard => {
            json!({ "type": event, "timestamp": "2026-01-01T00:00:00Z", "data": { "test": true } })
        }
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}
