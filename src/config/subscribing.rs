//! What subscriptions (mappings made at runtime, docs/subscriptions.md) take from the file:
//! `gateway.publicUrl` and `gateway.secretsKey`; and how their mappings join the file's: each
//! is a mapping of the file form, appended to `hooks.mappings` before the settings are built,
//! so it is validated and built by the very code that builds the file's.

use std::net::IpAddr;

use super::model::{GatewayConfig, MappingConfig};
use super::sealing::{MIN_KEY_CHARS, SecretsKey};
use super::secret::{ConfigFiles, secret};
use super::{ConfigError, ConfigNotice, Settings};
use crate::hook::signature::{RetiredSecret, decode_secret};

/// `gateway.publicUrl`: an `http://` or `https://` URL with no query or fragment, kept without
/// a trailing `/`.
pub(super) fn public_url(
    gateway: &GatewayConfig,
    problems: &mut Vec<ConfigError>,
) -> Option<String> {
    let url = gateway.public_url.as_deref()?.trim();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.contains(['?', '#', ' ']) => {
            Some(url.trim_end_matches('/').to_string())
        }
        _ => {
            problems.push(ConfigError::invalid(
                key!(GatewayConfig.public_url),
                "must be an http:// or https:// URL with a host and no query or fragment",
            ));
            None
        }
    }
}

/// `gateway.secretsKey`, read like every secret.
pub(super) fn secrets_key(
    gateway: &GatewayConfig,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<SecretsKey> {
    let key = key!(GatewayConfig.secrets_key);
    let text = secret(gateway.secrets_key.clone(), &key, files, problems)?;
    let sealing = SecretsKey::from_text(&text);
    if sealing.is_none() {
        problems.push(ConfigError::invalid(
            key,
            format!("must be at least {MIN_KEY_CHARS} characters"),
        ));
    }
    sealing
}

/// The warning `check` and a start give when `gateway.publicUrl` is unset and the listener is
/// not on a public address while subscriptions can be made (`gateway.secretsKey` is set): the
/// URLs hookgate prints for them would then be ones senders cannot reach. A configuration
/// without subscriptions prints no URL, and gets no warning.
pub(super) fn public_url_notice(settings: &Settings) -> Option<ConfigNotice> {
    if settings.public_url.is_some() || settings.secrets_key.is_none() {
        return None;
    }
    let public = match settings.bind.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            !(ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified())
        }
        Ok(IpAddr::V6(ip)) => !(ip.is_loopback() || ip.is_unspecified()),
        Err(_) => false,
    };
    (!public).then(|| ConfigNotice {
        key: key!(GatewayConfig.public_url),
        message: format!(
            "is not set and the listener ({}) is not a public address: printed hook URLs use the address the operator API was reached at, which senders may not reach; set it to how senders reach this node",
            settings.bind
        ),
    })
}

/// A subscription's mapping as the settings take it: the file form (its signature's secret
/// already opened), and the secret rotated out of it with the time it stops verifying.
#[derive(Clone)]
pub struct SubscribedMapping {
    /// The subscription's name: its mapping's id and hook name.
    pub name: String,
    /// The mapping, as a `hooks.mappings[]` entry of the file would be.
    pub mapping: serde_json::Value,
    /// The previous secret (as given, not decoded), and when it stops verifying, in Unix
    /// seconds.
    pub retired: Option<(String, i64)>,
}

impl std::fmt::Debug for SubscribedMapping {
    /// Never prints the mapping, which holds the signing secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubscribedMapping")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Appends `subscribed` to the file's `mappings`, or says which clash with one of the file's
/// (same id or same hook name) or cannot be read as a mapping, naming both. Returns how many
/// mappings the file had.
pub(super) fn append(
    mappings: &mut Vec<MappingConfig>,
    subscribed: &[SubscribedMapping],
) -> Result<usize, Vec<ConfigError>> {
    let from_file = mappings.len();
    let mut problems = Vec::new();
    for sub in subscribed {
        let name = &sub.name;
        let clash = mappings.iter().take(from_file).position(|m| {
            m.id.as_deref() == Some(name)
                || m.match_rule.as_ref().and_then(|r| r.path.as_deref()) == Some(name)
        });
        if let Some(i) = clash {
            problems.push(ConfigError::Refused(format!(
                "subscription {name} clashes with hooks.mappings[{i}] of the file, which has the same id or match.path {name}; rename one of them"
            )));
            continue;
        }
        match serde_json::from_value::<MappingConfig>(sub.mapping.clone()) {
            Ok(mapping) => mappings.push(mapping),
            Err(e) => problems.push(ConfigError::invalid(
                format!("subscription {name}"),
                format!(
                    "is not a mapping: {}",
                    e.to_string().replace(['"', '\''], "")
                ),
            )),
        }
    }
    if problems.is_empty() {
        Ok(from_file)
    } else {
        Err(problems)
    }
}

/// The problems of a build, with a subscription's mapping (`hooks.mappings[i]`, `i` from
/// `from_file` on) named as the subscription.
pub(super) fn name_subscriptions(
    problems: Vec<ConfigError>,
    from_file: usize,
    subscribed: &[SubscribedMapping],
) -> Vec<ConfigError> {
    problems
        .into_iter()
        .map(|problem| match problem {
            ConfigError::Invalid { key, message } => {
                let renamed = subscribed.iter().enumerate().find_map(|(j, sub)| {
                    let prefix = format!("hooks.mappings[{}]", from_file + j);
                    key.strip_prefix(&prefix)
                        .map(|rest| format!("subscription {}{rest}", sub.name))
                });
                ConfigError::Invalid {
                    key: renamed.unwrap_or(key),
                    message,
                }
            }
            other => other,
        })
        .collect()
}

/// Gives each subscription's signature rule its retired secret.
pub(super) fn retire(settings: &mut Settings, subscribed: &[SubscribedMapping]) {
    let Some(hooks) = settings.hooks.as_mut() else {
        return;
    };
    for sub in subscribed {
        let Some((secret, until_unix)) = &sub.retired else {
            continue;
        };
        let rule = hooks
            .mappings
            .iter_mut()
            .find(|m| m.id == sub.name)
            .and_then(|m| m.signature.as_mut());
        if let Some(rule) = rule {
            rule.retired = decode_secret(&rule.scheme, secret).map(|secret| RetiredSecret {
                secret,
                until_unix: *until_unix,
            });
        }
    }
}
