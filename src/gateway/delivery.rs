//! Delivering a reply to a chat channel, shared by every backend: the job, the record of what
//! became of it, where `last` goes, the send itself with a typed failure, and when to try again.
//!
//! One HTTP request per message, to each chat service's own API. A failure says whether sending
//! again can help ([`SendError::is_permanent`]); the retry policy never reads error text.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::records::SummaryEvent;
use crate::config::runtime::{ChannelEndpoint, ChannelSettings, RetryPolicy, Route};
use crate::hook::Channel;

/// A chat API that accepts the connection and never answers must not hold up the outbox.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// A reply to send: a run's (with the summary to record if it cannot be delivered) or a
/// heartbeat's. Stored as JSON in the outbox and on the NATS stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryJob {
    /// The run whose reply this is; `None` for a heartbeat's.
    pub run_id: Option<String>,
    /// The agent whose main session is told when the reply cannot be delivered.
    pub agent: String,
    pub channel: Channel,
    pub to: Option<String>,
    pub text: String,
    /// The run's summary event, recorded instead of the reply when it is not delivered.
    pub summary: Option<SummaryEvent>,
    /// The run asked for a heartbeat once its reply is settled.
    pub wake_now: bool,
}

impl DeliveryJob {
    /// The route the job goes to.
    pub fn route(&self) -> Route {
        Route {
            channel: self.channel,
            to: self.to.clone(),
        }
    }
}

/// What became of delivering a run's reply, as `GET /api/runs/{id}` shows it under `delivery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum DeliveryRecord {
    /// Nothing is sent, for the reason given.
    Skipped { reason: SkipReason },
    /// In the outbox.
    Pending {
        channel: Channel,
        to: Option<String>,
    },
    /// The channel accepted it.
    Sent {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
    },
    /// Given up: a refusal no retry mends, or every attempt failed.
    Failed {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
        error: String,
    },
    /// A send cut off by a stop: it may have arrived, so it is not made again.
    Uncertain {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
        error: String,
    },
}

impl DeliveryRecord {
    /// The record of a job given up after `attempts`: `uncertain` when the last attempt may have
    /// reached the channel, `failed` otherwise.
    pub fn given_up(job: &DeliveryJob, attempts: u32, error: &SendError) -> DeliveryRecord {
        let (channel, to, text) = (job.channel, job.to.clone(), error.to_string());
        if *error == SendError::Interrupted {
            DeliveryRecord::Uncertain {
                channel,
                to,
                attempts,
                error: text,
            }
        } else {
            DeliveryRecord::Failed {
                channel,
                to,
                attempts,
                error: text,
            }
        }
    }

    /// The record of a job the channel accepted.
    pub fn sent(job: &DeliveryJob, attempts: u32) -> DeliveryRecord {
        DeliveryRecord::Sent {
            channel: job.channel,
            to: job.to.clone(),
            attempts,
        }
    }
}

/// Why a run's reply is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    #[serde(rename = "deliver is false")]
    NotAsked,
    #[serde(rename = "the run did not succeed")]
    RunFailed,
    #[serde(rename = "the reply is an acknowledgement")]
    Acknowledgement,
    /// On a NATS cluster: the reply did not fit in one message even when cut.
    #[serde(rename = "the reply was too large to record")]
    TooLarge,
}

/// Why a send did not happen. The message says what the service answered, never credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error("channel {} is not configured", .0.as_str())]
    NotConfigured(Channel),
    #[error("no recipient for {}", .0.as_str())]
    NoRecipient(Channel),
    /// No answer: connection refused or reset, DNS, the send timeout.
    #[error("{service} unreachable: {detail}")]
    Unreachable {
        service: &'static str,
        detail: String,
    },
    /// An HTTP status other than success.
    #[error("{service} answered {status}: {body}")]
    Status {
        service: &'static str,
        status: u16,
        body: String,
    },
    /// A success status whose body says no (Slack's `{"ok":false}`).
    #[error("{service} refused: {reason}")]
    Refused {
        service: &'static str,
        reason: String,
    },
    /// The process stopped while the send was under way.
    #[error("interrupted by a stop; not sent again to avoid a duplicate")]
    Interrupted,
}

impl SendError {
    /// Whether sending the same thing again cannot help: a missing channel or recipient, a
    /// refusal, or a 4xx other than 408 (timeout) and 429 (slow down).
    pub fn is_permanent(&self) -> bool {
        match self {
            SendError::NotConfigured(_) | SendError::NoRecipient(_) | SendError::Refused { .. } => {
                true
            }
            SendError::Status { status, .. } => {
                (400..500).contains(status) && !matches!(status, 408 | 429)
            }
            SendError::Unreachable { .. } | SendError::Interrupted => false,
        }
    }

    /// An answer's status and body, the body cut to a length fit for a record.
    pub fn status(service: &'static str, status: u16, body: &str) -> SendError {
        SendError::Status {
            service,
            status,
            body: body.chars().take(300).collect(),
        }
    }

    /// A request that got no answer.
    pub fn unreachable(service: &'static str, err: reqwest::Error) -> SendError {
        SendError::Unreachable {
            service,
            detail: err.without_url().to_string(),
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again after this long.
    RetryAfter(Duration),
    /// Stop: the failure is permanent or the attempts are spent.
    GiveUp,
}

/// After the `attempts`-th attempt failed with `error`: give up when no retry can help or the
/// policy's attempts are spent (`limit` caps them further, for a queue that offers a message a
/// bounded number of times), else wait the policy's exponential backoff, capped at `max_delay`,
/// with jitter so that many failures at once do not come back at once.
pub fn next_attempt(
    policy: &RetryPolicy,
    attempts: u32,
    error: &SendError,
    max_delay: Duration,
) -> Next {
    if error.is_permanent() || attempts >= policy.attempts {
        return Next::GiveUp;
    }
    let backoff = policy
        .base_delay
        .saturating_mul(1 << attempts.saturating_sub(1).min(16))
        .min(max_delay);
    // Equal jitter: at least half the backoff, at most all of it.
    let half = backoff / 2;
    let jitter = half.mul_f64(rand::random::<f64>());
    Next::RetryAfter(half + jitter)
}

/// Sends a job's text to its route. The route must name a configured channel.
pub async fn deliver(
    http: &reqwest::Client,
    channels: &ChannelSettings,
    job: &DeliveryJob,
) -> Result<(), SendError> {
    let endpoint = channels
        .endpoint(job.channel)
        .ok_or(SendError::NotConfigured(job.channel))?;
    send(http, endpoint, job.to.as_deref(), &job.text).await
}

/// Sends `text` to `to` through `endpoint`.
pub async fn send(
    http: &reqwest::Client,
    endpoint: &ChannelEndpoint,
    to: Option<&str>,
    text: &str,
) -> Result<(), SendError> {
    let channel = endpoint.channel();
    let service = channel.as_str();
    let recipient = || to.ok_or(SendError::NoRecipient(channel));
    let request = match endpoint {
        ChannelEndpoint::Telegram { api_base, bot_token } => http
            .post(format!("{api_base}/bot{bot_token}/sendMessage"))
            .json(&json!({"chat_id": recipient()?, "text": text})),
        ChannelEndpoint::Slack { api_base, bot_token } => http
            .post(format!("{api_base}/chat.postMessage"))
            .bearer_auth(bot_token)
            .json(&json!({"channel": recipient()?, "text": text})),
        ChannelEndpoint::Discord { api_base, bot_token } => http
            .post(format!("{api_base}/channels/{}/messages", recipient()?))
            .header("authorization", format!("Bot {bot_token}"))
            .json(&json!({"content": text})),
        ChannelEndpoint::Mattermost { base_url, token } => http
            .post(format!("{base_url}/api/v4/posts"))
            .bearer_auth(token)
            .json(&json!({"channel_id": recipient()?, "message": text})),
        ChannelEndpoint::Msteams { webhook_url } => http.post(webhook_url).json(&json!({"text": text})),
        ChannelEndpoint::Signal { base_url, number } => http
            .post(format!("{base_url}/v2/send"))
            .json(&json!({"message": text, "number": number, "recipients": [recipient()?]})),
        ChannelEndpoint::Whatsapp { api_base, access_token, phone_number_id } => http
            .post(format!("{api_base}/{phone_number_id}/messages"))
            .bearer_auth(access_token)
            .json(&json!({
                "messaging_product": "whatsapp", "to": recipient()?, "type": "text",
                "text": {"body": text},
            })),
        ChannelEndpoint::Imessage { base_url, password } => http
            .post(format!("{base_url}/api/v1/message/text"))
            .query(&[("password", password)])
            .json(&json!({"chatGuid": recipient()?, "message": text, "tempGuid": uuid::Uuid::new_v4().to_string()})),
    };
    let response = request
        .timeout(SEND_TIMEOUT)
        .send()
        .await
        .map_err(|e| SendError::unreachable(service, e))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(SendError::status(service, status.as_u16(), &body));
    }
    // Slack answers 200 with {"ok":false,"error":...} for refusals.
    if matches!(endpoint, ChannelEndpoint::Slack { .. }) {
        let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if value["ok"] != Value::Bool(true) {
            return Err(SendError::Refused {
                service,
                reason: value["error"].as_str().unwrap_or("unknown error").into(),
            });
        }
    }
    Ok(())
}

/// Where a reply for `channel`/`to` goes. The main session's route belongs to its owner: the
/// route set through the operator API (`owner`), else `channels.defaultRoute`. No hook run changes
/// it, so a hook-token holder cannot redirect later replies.
///
/// An explicit channel is kept, its recipient taken from the owner's route when that is on the
/// same channel; `last` goes to the owner's route, else the first configured channel, else
/// `whatsapp`. An explicit `to` always wins.
pub fn resolve_route(
    channel: Channel,
    to: Option<String>,
    owner: Option<Route>,
    settings: &ChannelSettings,
) -> Route {
    let owner = owner.or_else(|| settings.default_route.clone());
    if channel != Channel::Last {
        let to = to.or_else(|| owner.filter(|o| o.channel == channel).and_then(|o| o.to));
        return Route { channel, to };
    }
    let fallback = owner
        .or_else(|| {
            settings.endpoints.first().map(|e| Route {
                channel: e.channel(),
                to: None,
            })
        })
        .unwrap_or(Route {
            channel: Channel::Whatsapp,
            to: None,
        });
    Route {
        channel: fallback.channel,
        to: to.or(fallback.to),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_permanent_and_throttling_or_outages_are_not() {
        let status = |status| SendError::status("slack", status, "");
        for permanent in [400, 401, 403, 404, 413, 422] {
            assert!(status(permanent).is_permanent(), "{permanent}");
        }
        for transient in [408, 429, 500, 502, 503] {
            assert!(!status(transient).is_permanent(), "{transient}");
        }
        assert!(SendError::NoRecipient(Channel::Slack).is_permanent());
        assert!(!SendError::Interrupted.is_permanent());
    }

    #[test]
    fn backoff_doubles_with_jitter_within_the_cap_and_attempts() {
        let policy = RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_secs(2),
        };
        let transient = SendError::status("telegram", 503, "");
        let cap = Duration::from_secs(5);
        for (attempts, full) in [(1, 2), (2, 4), (3, 5)] {
            let Next::RetryAfter(wait) = next_attempt(&policy, attempts, &transient, cap) else {
                panic!("attempt {attempts} should be retried");
            };
            let full = Duration::from_secs(full);
            assert!(wait >= full / 2 && wait <= full, "{attempts}: {wait:?}");
        }
        assert_eq!(next_attempt(&policy, 4, &transient, cap), Next::GiveUp);
        let refused = SendError::status("telegram", 403, "");
        assert_eq!(next_attempt(&policy, 1, &refused, cap), Next::GiveUp);
    }

    fn settings(endpoints: Vec<ChannelEndpoint>, default_route: Option<Route>) -> ChannelSettings {
        ChannelSettings {
            endpoints,
            default_route,
            retry: RetryPolicy {
                attempts: 1,
                base_delay: Duration::ZERO,
            },
        }
    }

    fn route(channel: Channel, to: &str) -> Route {
        Route {
            channel,
            to: Some(to.into()),
        }
    }

    #[test]
    fn explicit_channel_is_kept() {
        let r = resolve_route(
            Channel::Slack,
            Some("C1".into()),
            None,
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Slack, "C1"));
    }

    #[test]
    fn explicit_channel_takes_the_recipient_of_the_owners_route_on_that_channel() {
        let r = resolve_route(
            Channel::Slack,
            None,
            Some(route(Channel::Slack, "C9")),
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Slack, "C9"));
        let r = resolve_route(
            Channel::Slack,
            None,
            Some(route(Channel::Telegram, "42")),
            &settings(vec![], None),
        );
        assert_eq!(r.to, None);
    }

    #[test]
    fn last_prefers_the_owners_route_then_the_default_then_the_first_channel_then_whatsapp() {
        let tg = ChannelEndpoint::Telegram {
            api_base: "x".into(),
            bot_token: "t".into(),
        };
        let default = Some(route(Channel::Discord, "d"));
        let last = Some(route(Channel::Signal, "+1"));
        assert_eq!(
            resolve_route(
                Channel::Last,
                None,
                last,
                &settings(vec![tg.clone()], default.clone())
            ),
            route(Channel::Signal, "+1")
        );
        assert_eq!(
            resolve_route(
                Channel::Last,
                None,
                None,
                &settings(vec![tg.clone()], default)
            ),
            route(Channel::Discord, "d")
        );
        assert_eq!(
            resolve_route(Channel::Last, None, None, &settings(vec![tg], None)).channel,
            Channel::Telegram
        );
        assert_eq!(
            resolve_route(Channel::Last, None, None, &settings(vec![], None)).channel,
            Channel::Whatsapp
        );
    }

    #[test]
    fn explicit_recipient_wins_over_the_route() {
        let r = resolve_route(
            Channel::Last,
            Some("me".into()),
            Some(route(Channel::Signal, "+1")),
            &settings(vec![], None),
        );
        assert_eq!(r, route(Channel::Signal, "me"));
    }
}
