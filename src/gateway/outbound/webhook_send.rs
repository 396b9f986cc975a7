//! Sending a [`WebhookMessage`]: its destination looked up in the configuration in force, its
//! host checked against `outbound.allowHosts`, signed as Standard Webhooks specifies and POSTed
//! by a client that connects only to addresses the allow list permits. The client resolves
//! names itself ([`GuardedResolver`]) and drops every private, loopback or link-local address
//! not listed, so that the address checked is the address connected to: a name that resolves
//! to a public address when checked and to `127.0.0.1` when connected (DNS rebinding) gets
//! nowhere. It follows no redirect and uses no proxy (docs/outbound.md, SECURITY.md).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::chat::SendError;
use super::webhooks::{Destination, WebhookMessage};
use crate::config::LiveConfig;
use crate::config::Settings;
use crate::config::outbound::AllowHosts;
use crate::hook::signature::standard_webhooks_signature;

/// The longest one attempt may take, connection to answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// How much of a refusing answer's body is kept in the outbox row.
const ERROR_BODY_CHARS: usize = 200;
const SERVICE: &str = super::chat::WEBHOOK_SERVICE;

/// The client of outbound webhooks: its names resolved by [`GuardedResolver`], no redirects,
/// no proxy.
pub fn client(config: LiveConfig) -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(concat!("hookgate/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver { config }))
        .build()
        .unwrap_or_default()
}

/// Resolves a name and keeps only the addresses `outbound.allowHosts` permits, as configured
/// when the connection is made.
struct GuardedResolver {
    config: LiveConfig,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let config = self.config.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let allow = config.current().outbound.allow.clone();
            let allowed = allowed_addresses(&allow, &host).await?;
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// The addresses of `host` a message may go to; an error naming why when there is none.
async fn allowed_addresses(
    allow: &AllowHosts,
    host: &str,
) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
    let resolved = tokio::net::lookup_host((host, 0)).await?;
    let (allowed, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
        resolved.partition(|addr| allow.address_allowed(addr.ip()));
    if allowed.is_empty() {
        let first = refused
            .first()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        return Err(format!(
            "{host} resolves to {first}, a private address not in outbound.allowHosts"
        )
        .into());
    }
    Ok(allowed)
}

/// Where a message goes now, with its secrets; a refusal when it may not go there at all.
fn target<'a>(
    settings: &'a Settings,
    message: &'a WebhookMessage,
) -> Result<(&'a str, &'a [Vec<u8>]), SendError> {
    let refused = |reason: String| SendError::Refused {
        service: SERVICE,
        reason,
    };
    let outbound = &settings.outbound;
    match &message.to {
        Destination::Callback { mapping, url } => match outbound.callbacks.get(mapping) {
            Some(callback) => Ok((url.as_str(), callback.secrets.as_slice())),
            None => Err(refused(format!(
                "mapping {mapping} has no callback any more"
            ))),
        },
        Destination::Endpoint { id } => match outbound.endpoints.iter().find(|e| &e.id == id) {
            Some(endpoint) => Ok((endpoint.url.as_str(), endpoint.secrets.as_slice())),
            None => Err(refused(format!("endpoint {id} is not configured any more"))),
        },
    }
}

/// Checks `url` against the allow list before anything is sent: its scheme, its host listed,
/// and an address it is written as (or resolves to) permitted. The client's resolver checks
/// the address again when it connects.
pub async fn check_url(allow: &AllowHosts, url: &str) -> Result<reqwest::Url, SendError> {
    let refused = |reason: String| SendError::Refused {
        service: SERVICE,
        reason,
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| refused("not a URL".into()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(refused(format!(
            "scheme {} is not http or https",
            parsed.scheme()
        )));
    }
    let Some(host) = parsed.host_str() else {
        return Err(refused("no host".into()));
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if let Ok(ip) = host.parse::<IpAddr>()
        && !allow.address_allowed(ip)
    {
        return Err(refused(format!(
            "{ip} is a private address not in outbound.allowHosts"
        )));
    }
    if !allow.host_allowed(&host) {
        return Err(refused(format!(
            "host {host} is not in outbound.allowHosts"
        )));
    }
    if host.parse::<IpAddr>().is_ok() {
        return Ok(parsed);
    }
    match allowed_addresses(allow, &host).await {
        Ok(_) => Ok(parsed),
        Err(err) if err.to_string().contains("private address") => Err(refused(err.to_string())),
        Err(err) => Err(SendError::Unreachable {
            service: SERVICE,
            detail: err.to_string(),
        }),
    }
}

/// Sends `message` once, signed with a timestamp of now.
pub async fn send(
    http: &reqwest::Client,
    settings: &Settings,
    message: &WebhookMessage,
) -> Result<(), SendError> {
    let (url, secrets) = target(settings, message)?;
    let url = check_url(&settings.outbound.allow, url).await?;
    let timestamp = chrono_now();
    let signature =
        standard_webhooks_signature(secrets, &message.id, timestamp, message.body.as_bytes());
    let sent = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("webhook-id", &message.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(message.body.clone())
        .send()
        .await
        .map_err(|err| SendError::Unreachable {
            service: SERVICE,
            detail: error_chain(&err),
        })?;
    let status = sent.status();
    if status.is_success() {
        return Ok(());
    }
    let retry_after = sent
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body = sent.text().await.unwrap_or_default();
    Err(SendError::Status {
        service: SERVICE,
        status: status.as_u16(),
        body: body.chars().take(ERROR_BODY_CHARS).collect(),
        retry_after,
    })
}

/// The Unix time in seconds, the `webhook-timestamp`.
fn chrono_now() -> i64 {
    crate::gateway::clock::now_ms() / 1000
}

/// An error with its causes: reqwest's own message says little ("error sending request").
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
