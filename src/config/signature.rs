//! A mapping's `signature`: the scheme checked, its secrets read and decoded, and how far from
//! now a timestamp may be.

use std::time::Duration;

use super::ConfigError;
use super::model::SignatureConfig;
use super::secret::{ConfigFiles, SecretValue, secret};
use crate::hook::signature::{DEFAULT_TOLERANCE, Encoding, Scheme, SignatureRule, decode_secret};

/// A mapping's `signature` (at `key`) with its secrets read and decoded.
///
/// `None`, with the problem added to `problems`, when the rule cannot be checked at all: an
/// unknown `scheme`, an `hmac-sha256` without `header` or with an unknown `encoding`, or neither
/// `secret` nor `secrets`. A secret that cannot be read, is blank or is malformed, and a
/// `toleranceSeconds` out of range, are reported too but still yield a rule (without that
/// secret, with the default tolerance): the configuration is refused all the same, and every
/// problem of the file is listed in one run.
pub(super) fn signature_rule(
    config: &SignatureConfig,
    key: &str,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<SignatureRule> {
    let scheme = scheme(config, key, problems)?;
    let secrets = secrets(config, &scheme, key, files, problems)?;
    Some(SignatureRule {
        scheme,
        secrets,
        tolerance: tolerance(config.tolerance_seconds, key, problems),
        token_accepted: config.accept_token.unwrap_or(true),
        retired: None,
    })
}

/// `scheme`, with `header`, `encoding` and `prefix` for `hmac-sha256`.
fn scheme(config: &SignatureConfig, key: &str, problems: &mut Vec<ConfigError>) -> Option<Scheme> {
    let name = config.scheme.trim();
    if name != "hmac-sha256" {
        let scheme = Scheme::named(name);
        if scheme.is_none() {
            problems.push(ConfigError::invalid(
                format!("{key}.scheme"),
                format!("must be one of {}", Scheme::NAMES),
            ));
        }
        return scheme;
    }
    let Some(header) = config
        .header
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
    else {
        problems.push(ConfigError::invalid(
            format!("{key}.header"),
            "is required for hmac-sha256",
        ));
        return None;
    };
    let encoding = match config.encoding.as_deref().unwrap_or("hex") {
        "hex" => Encoding::Hex,
        "base64" => Encoding::Base64,
        _ => {
            problems.push(ConfigError::invalid(
                format!("{key}.encoding"),
                "must be hex or base64",
            ));
            return None;
        }
    };
    Some(Scheme::HmacSha256 {
        header: header.to_ascii_lowercase(),
        encoding,
        prefix: config.prefix.clone().unwrap_or_default(),
    })
}

/// `secret` and `secrets`, read and decoded for `scheme`; `None` when neither is given. A
/// secret that cannot be read or decoded is reported and left out.
fn secrets(
    config: &SignatureConfig,
    scheme: &Scheme,
    key: &str,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<Vec<Vec<u8>>> {
    let read = SecretList {
        one: &config.secret,
        many: &config.secrets,
        scheme,
        malformed: "is malformed (standard-webhooks secrets are whsec_<base64>)",
    };
    read.decode(key, files, problems)
}

/// A `secret` and `secrets` pair of keys: every signing secret's one reader (a mapping's
/// signature, a callback's, an outbound endpoint's).
pub(super) struct SecretList<'a> {
    pub one: &'a Option<SecretValue>,
    pub many: &'a Option<Vec<SecretValue>>,
    pub scheme: &'a Scheme,
    /// What a secret that does not decode is said to be.
    pub malformed: &'static str,
}

impl SecretList<'_> {
    /// The secrets of `key`, read (`${ENV}`, files) and decoded for the scheme, in order;
    /// `None` when neither key is given (reported). A secret that cannot be read or decoded
    /// is reported, naming its key and never its value, and left out.
    pub(super) fn decode(
        &self,
        key: &str,
        files: ConfigFiles<'_>,
        problems: &mut Vec<ConfigError>,
    ) -> Option<Vec<Vec<u8>>> {
        let listed: Vec<(String, SecretValue)> = self
            .one
            .iter()
            .map(|s| (format!("{key}.secret"), s.clone()))
            .chain(
                self.many
                    .iter()
                    .flatten()
                    .enumerate()
                    .map(|(j, s)| (format!("{key}.secrets[{j}]"), s.clone())),
            )
            .collect();
        if listed.is_empty() {
            problems.push(ConfigError::invalid(key, "needs secret or secrets"));
            return None;
        }
        let mut secrets = Vec::new();
        for (secret_key, value) in listed {
            let Some(text) = secret(Some(value), &secret_key, files, problems) else {
                problems.push(ConfigError::invalid(&secret_key, "must not be blank"));
                continue;
            };
            match decode_secret(self.scheme, text.trim()) {
                Some(bytes) => secrets.push(bytes),
                None => problems.push(ConfigError::invalid(&secret_key, self.malformed)),
            }
        }
        Some(secrets)
    }
}

/// `toleranceSeconds`: from 1 to 3600, else reported and the default.
fn tolerance(seconds: Option<u64>, key: &str, problems: &mut Vec<ConfigError>) -> Duration {
    match seconds {
        None => DEFAULT_TOLERANCE,
        Some(seconds @ 1..=3600) => Duration::from_secs(seconds),
        Some(_) => {
            problems.push(ConfigError::invalid(
                format!("{key}.toleranceSeconds"),
                "must be from 1 to 3600",
            ));
            DEFAULT_TOLERANCE
        }
    }
}
