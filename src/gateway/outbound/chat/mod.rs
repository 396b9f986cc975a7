//! Delivering a reply to a chat channel, shared by every backend: where `last` goes, the send
//! itself (split to the channel's limit) with a typed failure, and when to try again. The job and
//! the record of what became of it are `records`' types.
//!
//! One HTTP request per message, to each chat service's own API: its body (and the answer, where
//! one is read) a type of its own, in the service's file. A failure says whether sending
//! again can help ([`SendError::is_permanent`]); the retry policy never reads error text.

use std::time::Duration;

use crate::config::runtime::{ChannelEndpoint, ChannelSettings, RetryPolicy, Route};
use crate::gateway::store::records::{DeliveryJob, DeliveryRecord};
use crate::hook::Channel;

mod discord;
mod imessage;
mod mattermost;
mod msteams;
mod signal;
mod slack;
mod telegram;
mod whatsapp;

/// A chat API that accepts the connection and never answers must not hold up the outbox.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// An HTTP status other than success, with the wait its `Retry-After` asked for.
    #[error("{service} answered {status}: {body}")]
    Status {
        service: &'static str,
        status: u16,
        body: String,
        retry_after: Option<Duration>,
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

/// The `service` of a callback's or webhook's errors.
pub const WEBHOOK_SERVICE: &str = "webhook";

impl SendError {
    /// Whether sending the same thing again cannot help: a missing channel or recipient, a
    /// refusal, or a 4xx other than 408 (timeout) and 429 (slow down). A callback or webhook
    /// follows Standard Webhooks' guidance instead: any non-2xx is retried with backoff, except
    /// 410 Gone, which says the receiver wants no more (docs/outbound.md#retries-and-failures).
    pub fn is_permanent(&self) -> bool {
        match self {
            SendError::Status {
                service: WEBHOOK_SERVICE,
                status,
                ..
            } => *status == 410,
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
            retry_after: None,
        }
    }

    /// The same, with the answer's `Retry-After` header (seconds; an HTTP date is not used).
    pub fn answered(
        service: &'static str,
        status: u16,
        body: &str,
        headers: &reqwest::header::HeaderMap,
    ) -> SendError {
        let retry_after = headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(MAX_RETRY_AFTER.as_secs())));
        match SendError::status(service, status, body) {
            SendError::Status {
                service,
                status,
                body,
                ..
            } => SendError::Status {
                service,
                status,
                body,
                retry_after,
            },
            other => other,
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

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again after this long.
    RetryAfter(Duration),
    /// Stop: the failure is permanent or the attempts are spent.
    GiveUp,
}

/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// After the `attempts`-th attempt failed with `error`: give up when no retry can help or the
/// policy's attempts are spent, else wait a random time up to the policy's exponential backoff
/// (capped at `max_delay`; full jitter, so that many failures at once do not come back at once),
/// and at least what the service's `Retry-After` asked for.
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
    let jittered = backoff.mul_f64(rand::random::<f64>());
    match error {
        SendError::Status {
            retry_after: Some(asked),
            ..
        } => Next::RetryAfter(jittered.max(*asked)),
        _ => Next::RetryAfter(jittered),
    }
}

/// The longest message each channel takes, in characters; longer replies are split.
pub fn max_chars(channel: Channel) -> usize {
    match channel {
        Channel::Telegram | Channel::Whatsapp => 4096,
        Channel::Discord | Channel::Signal => 2000,
        Channel::Slack => 40_000,
        Channel::Mattermost => 16_383,
        Channel::Msteams => 28_000,
        Channel::Imessage => 20_000,
        Channel::Last => usize::MAX,
    }
}

/// `text` in parts of at most `max` characters, in order: split at the last line break that
/// fits, else at the last space, else within a word. The break itself is dropped, and so are
/// trailing whitespace and parts of only whitespace (a chat API refuses an empty message).
/// Deterministic: a retry computes the same parts, so the ones already sent can be skipped.
pub fn split(text: &str, max: usize) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text.trim_end();
    while rest.chars().count() > max {
        // The first `max` characters, and one more: a break right after them still lets them go
        // whole.
        let hard = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let window_end = rest
            .char_indices()
            .nth(max + 1)
            .map_or(rest.len(), |(i, _)| i);
        let window = &rest[..window_end];
        let (end, next) = match window.rfind('\n').filter(|&i| i > 0) {
            Some(i) => (i, i + 1),
            None => match window.rfind(char::is_whitespace).filter(|&i| i > 0) {
                Some(i) => {
                    let width = window[i..].chars().next().map_or(1, char::len_utf8);
                    (i, i + width)
                }
                None => (hard, hard),
            },
        };
        let part = &rest[..end];
        if !part.trim().is_empty() {
            parts.push(part);
        }
        rest = &rest[next..];
    }
    if !rest.trim().is_empty() || parts.is_empty() {
        parts.push(rest);
    }
    parts
}

/// Sends a job's text to its route, split to the channel's limit, in order. `sent` counts the
/// parts that went out before (they are not sent again) and is raised as each part goes out, so
/// that a retry after a failure halfway resumes where it stopped. The route must name a
/// configured channel.
pub async fn deliver(
    http: &reqwest::Client,
    channels: &ChannelSettings,
    job: &DeliveryJob,
    sent: &mut usize,
) -> Result<(), SendError> {
    let endpoint = channels
        .endpoint(job.channel)
        .ok_or(SendError::NotConfigured(job.channel))?;
    for part in split(&job.text, max_chars(job.channel))
        .into_iter()
        .skip(*sent)
    {
        send(http, endpoint, job.to.as_deref(), part).await?;
        *sent += 1;
    }
    Ok(())
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
        ChannelEndpoint::Telegram(bot) => telegram::request(http, bot, recipient()?, text),
        ChannelEndpoint::Slack(bot) => slack::request(http, bot, recipient()?, text),
        ChannelEndpoint::Discord(bot) => discord::request(http, bot, recipient()?, text),
        ChannelEndpoint::Mattermost(config) => {
            mattermost::request(http, config, recipient()?, text)
        }
        ChannelEndpoint::Msteams(config) => msteams::request(http, config, text),
        ChannelEndpoint::Signal(config) => signal::request(http, config, recipient()?, text),
        ChannelEndpoint::Whatsapp(config) => whatsapp::request(http, config, recipient()?, text),
        ChannelEndpoint::Imessage(config) => imessage::request(http, config, recipient()?, text),
    };
    let response = request
        .timeout(SEND_TIMEOUT)
        .send()
        .await
        .map_err(|e| SendError::unreachable(service, e))?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(SendError::answered(
            service,
            status.as_u16(),
            &body,
            &headers,
        ));
    }
    // Slack answers 200 with {"ok":false,"error":...} for refusals.
    if let ChannelEndpoint::Slack(_) = endpoint
        && let Some(reason) = slack::refusal(&body)
    {
        return Err(SendError::Refused { service, reason });
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
    let route = resolve(channel, to, owner, settings);
    // An msteams incoming webhook posts to its one conversation: no recipient is addressed.
    match route.channel {
        Channel::Msteams => Route {
            channel: Channel::Msteams,
            to: None,
        },
        _ => route,
    }
}

fn resolve(
    channel: Channel,
    to: Option<String>,
    owner: Option<Route>,
    settings: &ChannelSettings,
) -> Route {
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
    use crate::config::runtime::BotConfig;

    /// A chat API's 4xx is final; a webhook receiver's is retried, as Standard Webhooks asks,
    /// except 410 Gone.
    #[test]
    fn a_webhooks_non_2xx_is_retried_except_gone() {
        let status = |service, status| SendError::status(service, status, "");
        assert!(status("telegram", 404).is_permanent());
        assert!(!status("telegram", 429).is_permanent());
        for retried in [400, 401, 403, 404, 409, 422, 429, 500, 503] {
            assert!(
                !status(WEBHOOK_SERVICE, retried).is_permanent(),
                "{retried}"
            );
        }
        assert!(status(WEBHOOK_SERVICE, 410).is_permanent());
    }

    /// A request as it would go out, without sending it.
    pub(crate) struct Built {
        pub url: String,
        pub authorization: Option<String>,
        /// The body's bytes, as text.
        pub body: String,
    }

    impl Built {
        pub fn value(&self) -> serde_json::Value {
            serde_json::from_str(&self.body).unwrap()
        }
    }

    pub(crate) fn built(request: reqwest::RequestBuilder) -> Built {
        let request = request.build().unwrap();
        let body = request.body().and_then(reqwest::Body::as_bytes).unwrap();
        Built {
            url: request.url().to_string(),
            authorization: request
                .headers()
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string()),
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    }

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
    fn backoff_doubles_with_full_jitter_within_the_cap_and_attempts() {
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
            assert!(wait <= Duration::from_secs(full), "{attempts}: {wait:?}");
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
        let tg = ChannelEndpoint::Telegram(BotConfig {
            api_base: "x".into(),
            bot_token: "t".into(),
        });
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

    #[test]
    fn replies_split_at_lines_then_words_then_anywhere() {
        assert_eq!(split("short", 10), ["short"]);
        assert_eq!(split("", 10), [""]);
        assert_eq!(split("one two\nthree four", 12), ["one two", "three four"]);
        assert_eq!(split("one two three", 9), ["one two", "three"]);
        assert_eq!(split("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(
            split("aaaa bbbb", 4),
            ["aaaa", "bbbb"],
            "a break right at the limit"
        );
        assert_eq!(
            split(&format!("{}{}", "A".repeat(10), "\n".repeat(5)), 10),
            ["A".repeat(10)]
        );
        assert_eq!(
            split("aaaa\n\n\n\nbbbb", 4),
            ["aaaa", "bbbb"],
            "no part of only breaks"
        );
        let long = "é".repeat(4100);
        let parts = split(&long, 4096);
        assert_eq!(
            parts.iter().map(|p| p.chars().count()).collect::<Vec<_>>(),
            [4096, 4]
        );
        assert_eq!(parts.concat(), long);
    }

    #[test]
    fn retry_after_is_honoured() {
        let policy = RetryPolicy {
            attempts: 5,
            base_delay: Duration::from_millis(10),
        };
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("retry-after", "7".parse().unwrap());
        let throttled = SendError::answered("slack", 429, "", &headers);
        assert_eq!(
            next_attempt(&policy, 1, &throttled, Duration::MAX),
            Next::RetryAfter(Duration::from_secs(7))
        );
    }

    #[test]
    fn msteams_addresses_no_recipient() {
        let r = resolve_route(
            Channel::Msteams,
            Some("x".into()),
            None,
            &settings(vec![], None),
        );
        assert_eq!(r.to, None);
    }
}
