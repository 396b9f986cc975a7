//! Provider signatures (GitHub, Stripe, Slack, Standard Webhooks, Shopify, GitLab, generic
//! HMAC-SHA256): verified over the raw body, in constant time, with every listed secret, and with
//! the delivery id that replay protection remembers. Pure: headers, body and the clock come in as
//! arguments.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Timestamped schemes accept a signature this far from the present, either way.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// How the generic scheme's signature is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Hex,
    Base64,
}

/// A signature scheme and its scheme-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    Github,
    Stripe,
    Slack,
    StandardWebhooks,
    Shopify,
    Gitlab,
    HmacSha256 {
        /// Lower-case header name.
        header: String,
        encoding: Encoding,
        prefix: String,
    },
}

impl Scheme {
    /// Parses a scheme name; the generic scheme's settings come from the caller.
    pub fn named(name: &str) -> Option<Scheme> {
        Some(match name {
            "github" => Scheme::Github,
            "stripe" => Scheme::Stripe,
            "slack" => Scheme::Slack,
            "standard-webhooks" => Scheme::StandardWebhooks,
            "shopify" => Scheme::Shopify,
            "gitlab" => Scheme::Gitlab,
            _ => return None,
        })
    }

    /// The scheme's name in the configuration.
    pub fn name(&self) -> &'static str {
        match self {
            Scheme::Github => "github",
            Scheme::Stripe => "stripe",
            Scheme::Slack => "slack",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Shopify => "shopify",
            Scheme::Gitlab => "gitlab",
            Scheme::HmacSha256 { .. } => "hmac-sha256",
        }
    }

    /// The names `named` and the generic scheme accept, for error messages.
    pub const NAMES: &'static str =
        "github, stripe, slack, standard-webhooks, shopify, gitlab, hmac-sha256";

    /// The header that carries the credential itself rather than a per-message signature: it
    /// is kept from transforms and templates like the hook token. GitLab's `X-Gitlab-Token` is
    /// the shared secret; a generic scheme's header is whatever the sender put there.
    pub fn credential_header(&self) -> Option<&str> {
        match self {
            Scheme::Gitlab => Some("x-gitlab-token"),
            Scheme::HmacSha256 { header, .. } => Some(header),
            _ => None,
        }
    }
}

/// A mapping's signature check: the scheme and every secret accepted (rotation).
#[derive(Clone, PartialEq, Eq)]
pub struct SignatureRule {
    pub scheme: Scheme,
    /// Raw key bytes (a `whsec_` secret already decoded).
    pub secrets: Vec<Vec<u8>>,
    pub tolerance: Duration,
    /// Whether the hook token opens the mapping too (`signature.acceptToken`, default true).
    /// When false the signature is the only way in, so a leaked hook token does not open it.
    pub token_accepted: bool,
    /// A secret rotated out (a subscription's `rotate`), still verifying until its time.
    pub retired: Option<RetiredSecret>,
}

/// A secret rotated out of a rule: it verifies until `until_unix` (Unix seconds), then a
/// signature made with it is refused as [`SignatureError::Expired`].
#[derive(Clone, PartialEq, Eq)]
pub struct RetiredSecret {
    pub secret: Vec<u8>,
    pub until_unix: i64,
}

impl RetiredSecret {
    /// `Previous` while its window is open at `now_unix`, else why a signature made with it is
    /// refused.
    fn still_valid(&self, now_unix: i64) -> Result<SecretUsed, SignatureError> {
        if now_unix < self.until_unix {
            return Ok(SecretUsed::Previous);
        }
        let until = chrono::DateTime::from_timestamp(self.until_unix, 0)
            .map_or_else(|| self.until_unix.to_string(), |t| t.to_rfc3339());
        Err(SignatureError::Expired(until))
    }
}

impl std::fmt::Debug for RetiredSecret {
    /// Never prints the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetiredSecret")
            .field("until_unix", &self.until_unix)
            .finish_non_exhaustive()
    }
}

/// Which of a rule's secrets verified a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretUsed {
    /// One of the rule's secrets in force.
    Current,
    /// The secret a rotation retired, within its window.
    Previous,
}

impl SecretUsed {
    /// As a request record says it.
    pub fn as_str(self) -> &'static str {
        match self {
            SecretUsed::Current => "current",
            SecretUsed::Previous => "previous",
        }
    }
}

impl std::fmt::Debug for SignatureRule {
    /// Never prints the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignatureRule")
            .field("scheme", &self.scheme)
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .field("token_accepted", &self.token_accepted)
            .field("retired", &self.retired)
            .finish()
    }
}

impl SignatureRule {
    /// Whether `other` checks a signature exactly as this rule does (scheme and its settings,
    /// secrets, tolerance): a request this rule verified is then one `other` would have
    /// verified too. Whether the hook token opens either is no part of it.
    pub fn checks_as(&self, other: &SignatureRule) -> bool {
        self.scheme == other.scheme
            && self.secrets == other.secrets
            && self.tolerance == other.tolerance
            && self.retired == other.retired
    }
}

/// Why a signature was refused. Deliberately vague towards the client (they all become 401);
/// precise in the log, and never containing an expected value or a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing header {0}")]
    Missing(&'static str),
    #[error("malformed header {0}")]
    Malformed(&'static str),
    #[error("timestamp outside the tolerance")]
    Stale,
    #[error("signature does not match")]
    Mismatch,
    /// Made with the secret a rotation retired, after its window closed.
    #[error("signature made with the previous secret, which expired at {0} (rotated out)")]
    Expired(String),
}

/// The signature that admitted a request: the one type that carries it from its verification
/// ([`Presented::verify`]) through the pipeline (which mapping the request may run, its replay
/// key) to its request record, and from that record to an operator's replay or dry run of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittingSignature {
    /// The mapping whose signature rule checked it (`hooks.mappings[].id`): the one mapping the
    /// request may run (or another that checks signatures exactly as it does).
    pub mapping_id: String,
    /// Its scheme, as the configuration names it ([`Scheme::name`]).
    pub scheme: String,
    /// `<mapping id>:<delivery id>`: what replay protection remembers the delivery by, and the
    /// idempotency key of the run it makes. The delivery id is always taken from signed material
    /// (an id inside the signed content, or a digest of the signed body), so that a captured
    /// request cannot be replayed under a new id. `None` when an operator's replay or a dry run
    /// carries a recorded request's admission: that is no delivery of its own.
    pub replay_key: Option<String>,
    /// Which secret verified it: the previous one only within a rotation's window. `None` when
    /// no secret did (a website form admitted by its origin).
    pub secret: Option<SecretUsed>,
}

/// Decodes a secret as the scheme expects it: `whsec_<base64>` for Standard Webhooks, the
/// UTF-8 bytes otherwise. `None` for a malformed secret.
pub fn decode_secret(scheme: &Scheme, secret: &str) -> Option<Vec<u8>> {
    match scheme {
        Scheme::StandardWebhooks => BASE64
            .decode(secret.strip_prefix("whsec_")?)
            .ok()
            .filter(|k| !k.is_empty()),
        _ => (!secret.is_empty()).then(|| secret.as_bytes().to_vec()),
    }
}

/// The `webhook-signature` header of a message signed as Standard Webhooks specifies: under
/// each secret, `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`, space-separated (one
/// per secret during a rotation, any of which the receiver may check).
pub fn standard_webhooks_signature(
    secrets: &[Vec<u8>],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    let timestamp = timestamp.to_string();
    let parts: [&[u8]; 5] = [id.as_bytes(), b".", timestamp.as_bytes(), b".", body];
    secrets
        .iter()
        .map(|secret| format!("v1,{}", BASE64.encode(mac(secret, &parts))))
        .collect::<Vec<_>>()
        .join(" ")
}

fn mac(secret: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Whether any candidate equals the MAC of `parts` under any secret, in constant time per
/// comparison (the number of comparisons depends only on how many were sent and configured).
/// Whether the rule's retired secret made the signature: `Previous` within its window, else
/// why it is refused.
fn retired_matches(
    rule: &SignatureRule,
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
    now_unix: i64,
) -> Result<SecretUsed, SignatureError> {
    let Some(retired) = &rule.retired else {
        return Err(SignatureError::Mismatch);
    };
    if !any_matches(std::slice::from_ref(&retired.secret), parts, candidates) {
        return Err(SignatureError::Mismatch);
    }
    retired.still_valid(now_unix)
}

fn any_matches(secrets: &[Vec<u8>], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    let mut found = subtle::Choice::from(0);
    for secret in secrets {
        let expected = mac(secret, parts);
        for candidate in candidates {
            found |= expected.as_slice().ct_eq(candidate.as_slice());
        }
    }
    found.into()
}

fn fresh(timestamp: &str, now_unix: i64, tolerance: Duration) -> Result<(), SignatureError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::Malformed("timestamp"))?;
    let tolerance = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if now_unix.abs_diff(ts) > tolerance.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

/// The value of header `name`, which the scheme needs.
fn require(
    header: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<String, SignatureError> {
    header(name).ok_or(SignatureError::Missing(name))
}

fn hex_bytes(text: &str, header: &'static str) -> Result<Vec<u8>, SignatureError> {
    hex::decode(text.trim()).map_err(|_| SignatureError::Malformed(header))
}

fn base64_bytes(text: &str, header: &'static str) -> Result<Vec<u8>, SignatureError> {
    BASE64
        .decode(text.trim())
        .map_err(|_| SignatureError::Malformed(header))
}

/// Verifies a request to mapping `mapping_id`, whose rule `rule` is. `header(name)` gives a
/// header's value by lower-case name; `now_unix` is the current time in seconds.
pub fn verify(
    rule: &SignatureRule,
    mapping_id: &str,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
    now_unix: i64,
) -> Result<AdmittingSignature, SignatureError> {
    Presented::read(rule, header, now_unix)?.verify(rule, mapping_id, body)
}

/// A request's credential as its headers present it: every header the scheme needs, parsed,
/// with timestamps checked for freshness and a static token (GitLab's) already compared.
///
/// Reading it before the body lets a request without a well-formed, fresh credential be refused
/// before it can hold its connection for the body's time; only the MAC over the body is left for
/// [`Presented::verify`].
///
/// Not `Debug`: it holds the presented signatures, which are never logged.
pub struct Presented {
    proof: Proof,
    delivery: DeliveryId,
    /// When it was read, in Unix seconds: whether a retired secret still verifies.
    now_unix: i64,
}

enum Proof {
    /// An HMAC over `prefix` followed by the body, to equal one of `candidates`.
    Mac {
        prefix: Vec<u8>,
        candidates: Vec<Vec<u8>>,
    },
    /// A static token, compared when the headers were read, and which secret it was.
    Token(SecretUsed),
}

/// Where the delivery id comes from.
enum DeliveryId {
    /// A signed header value (Standard Webhooks' id, Slack's timestamp and signature).
    Signed(String),
    /// The Stripe event's `id` in the signed body, else the body's digest.
    StripeEvent,
    /// The body's digest.
    BodyDigest,
}

impl Presented {
    /// Reads what `rule`'s scheme needs from the headers. `header(name)` gives a header's value
    /// by lower-case name; `now_unix` is the current time in seconds.
    pub fn read(
        rule: &SignatureRule,
        header: &dyn Fn(&str) -> Option<String>,
        now_unix: i64,
    ) -> Result<Presented, SignatureError> {
        let tolerance = rule.tolerance;
        let presented = match &rule.scheme {
            Scheme::Github => Self::read_github(header),
            Scheme::Stripe => Self::read_stripe(header, now_unix, tolerance),
            Scheme::Slack => Self::read_slack(header, now_unix, tolerance),
            Scheme::StandardWebhooks => Self::read_standard_webhooks(header, now_unix, tolerance),
            Scheme::Shopify => Self::read_shopify(header),
            Scheme::Gitlab => Self::read_gitlab(header, rule, now_unix),
            Scheme::HmacSha256 {
                header: name,
                encoding,
                prefix,
            } => Self::read_hmac_sha256(header, name, *encoding, prefix),
        };
        presented.map(|p| Presented { now_unix, ..p })
    }

    /// A MAC over `prefix` and the body, to equal one of `candidates`.
    fn mac(prefix: Vec<u8>, candidates: Vec<Vec<u8>>, delivery: DeliveryId) -> Presented {
        Presented {
            proof: Proof::Mac { prefix, candidates },
            delivery,
            now_unix: 0,
        }
    }

    /// GitHub: `x-hub-signature-256: sha256=<hex>` over the body.
    fn read_github(header: &dyn Fn(&str) -> Option<String>) -> Result<Presented, SignatureError> {
        let value = require(header, "x-hub-signature-256")?;
        let hex = value
            .trim()
            .strip_prefix("sha256=")
            .ok_or(SignatureError::Malformed("x-hub-signature-256"))?;
        let signature = hex_bytes(hex, "x-hub-signature-256")?;
        Ok(Self::mac(
            Vec::new(),
            vec![signature],
            DeliveryId::BodyDigest,
        ))
    }

    /// Stripe: `stripe-signature: t=<time>,v1=<hex>...` over `<time>.` and the body.
    fn read_stripe(
        header: &dyn Fn(&str) -> Option<String>,
        now_unix: i64,
        tolerance: Duration,
    ) -> Result<Presented, SignatureError> {
        let value = require(header, "stripe-signature")?;
        let (timestamp, signatures) = parse_stripe(&value)?;
        fresh(&timestamp, now_unix, tolerance)?;
        let prefix = format!("{timestamp}.").into_bytes();
        Ok(Self::mac(prefix, signatures, DeliveryId::StripeEvent))
    }

    /// Slack: `x-slack-signature: v0=<hex>` over `v0:<x-slack-request-timestamp>:` and the body.
    fn read_slack(
        header: &dyn Fn(&str) -> Option<String>,
        now_unix: i64,
        tolerance: Duration,
    ) -> Result<Presented, SignatureError> {
        let timestamp = require(header, "x-slack-request-timestamp")?;
        let value = require(header, "x-slack-signature")?;
        let hex = value
            .trim()
            .strip_prefix("v0=")
            .ok_or(SignatureError::Malformed("x-slack-signature"))?;
        fresh(&timestamp, now_unix, tolerance)?;
        let signature = hex_bytes(hex, "x-slack-signature")?;
        // Decoded and re-encoded: `ABCD` and `abcd` are one signature, one delivery.
        let delivery = format!("{}:{}", timestamp.trim(), hex::encode(&signature));
        let prefix = format!("v0:{}:", timestamp.trim()).into_bytes();
        Ok(Self::mac(
            prefix,
            vec![signature],
            DeliveryId::Signed(delivery),
        ))
    }

    /// Standard Webhooks: `webhook-signature: v1,<base64> ...` over `<id>.<timestamp>.` and the
    /// body.
    fn read_standard_webhooks(
        header: &dyn Fn(&str) -> Option<String>,
        now_unix: i64,
        tolerance: Duration,
    ) -> Result<Presented, SignatureError> {
        // Svix (and Clerk, Resend on it) send the same headers under a `svix-` prefix.
        let either = |standard: &'static str, svix: &str| {
            header(standard)
                .or_else(|| header(svix))
                .ok_or(SignatureError::Missing(standard))
        };
        let id = either("webhook-id", "svix-id")?;
        let timestamp = either("webhook-timestamp", "svix-timestamp")?;
        let value = either("webhook-signature", "svix-signature")?;
        fresh(&timestamp, now_unix, tolerance)?;
        let signatures: Vec<Vec<u8>> = value
            .split_whitespace()
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .map(|b64| base64_bytes(b64, "webhook-signature"))
            .collect::<Result<_, _>>()?;
        if signatures.is_empty() {
            return Err(SignatureError::Malformed("webhook-signature"));
        }
        let prefix = format!("{id}.{}.", timestamp.trim()).into_bytes();
        Ok(Self::mac(prefix, signatures, DeliveryId::Signed(id)))
    }

    /// Shopify: `x-shopify-hmac-sha256: <base64>` over the body.
    fn read_shopify(header: &dyn Fn(&str) -> Option<String>) -> Result<Presented, SignatureError> {
        let value = require(header, "x-shopify-hmac-sha256")?;
        let signature = base64_bytes(&value, "x-shopify-hmac-sha256")?;
        Ok(Self::mac(
            Vec::new(),
            vec![signature],
            DeliveryId::BodyDigest,
        ))
    }

    /// GitLab: a static `x-gitlab-token`, compared here with each of the rule's secrets, then
    /// with its retired one.
    fn read_gitlab(
        header: &dyn Fn(&str) -> Option<String>,
        rule: &SignatureRule,
        now_unix: i64,
    ) -> Result<Presented, SignatureError> {
        let value = require(header, "x-gitlab-token")?;
        // Compared as SHA-256 digests, so neither content nor length leaks.
        let presented = mac(b"gitlab", &[value.as_bytes()]);
        let matches = |secrets: &[Vec<u8>]| {
            let mut found = subtle::Choice::from(0);
            for secret in secrets {
                found |= presented.ct_eq(&mac(b"gitlab", &[secret]));
            }
            bool::from(found)
        };
        let secret = match &rule.retired {
            _ if matches(&rule.secrets) => SecretUsed::Current,
            Some(retired) if matches(std::slice::from_ref(&retired.secret)) => {
                retired.still_valid(now_unix)?
            }
            _ => return Err(SignatureError::Mismatch),
        };
        Ok(Presented {
            proof: Proof::Token(secret),
            delivery: DeliveryId::BodyDigest,
            now_unix,
        })
    }

    /// A configured HMAC-SHA256 over the body: header `name`, after `prefix`, in `encoding`.
    fn read_hmac_sha256(
        header: &dyn Fn(&str) -> Option<String>,
        name: &str,
        encoding: Encoding,
        prefix: &str,
    ) -> Result<Presented, SignatureError> {
        let value = header(name).ok_or(SignatureError::Missing("signature header"))?;
        let text = value
            .trim()
            .strip_prefix(prefix)
            .ok_or(SignatureError::Malformed("signature header"))?;
        let signature = match encoding {
            Encoding::Hex => hex_bytes(text, "signature header")?,
            Encoding::Base64 => base64_bytes(text, "signature header")?,
        };
        Ok(Self::mac(
            Vec::new(),
            vec![signature],
            DeliveryId::BodyDigest,
        ))
    }

    /// Checks the signature over the raw body (nothing left to check for a token) of a request
    /// to mapping `mapping_id`, whose rule `rule` is, and names the delivery.
    pub fn verify(
        self,
        rule: &SignatureRule,
        mapping_id: &str,
        body: &[u8],
    ) -> Result<AdmittingSignature, SignatureError> {
        let secret = match &self.proof {
            Proof::Mac { prefix, candidates }
                if !any_matches(&rule.secrets, &[prefix, body], candidates) =>
            {
                retired_matches(rule, &[prefix, body], candidates, self.now_unix)?
            }
            Proof::Mac { .. } => SecretUsed::Current,
            Proof::Token(secret) => *secret,
        };
        let delivery_id = match self.delivery {
            DeliveryId::Signed(id) => id,
            DeliveryId::StripeEvent => serde_json::from_slice::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v.get("id").and_then(|id| id.as_str()).map(String::from))
                .unwrap_or_else(|| body_digest(body)),
            DeliveryId::BodyDigest => body_digest(body),
        };
        Ok(AdmittingSignature {
            mapping_id: mapping_id.to_string(),
            scheme: rule.scheme.name().to_string(),
            replay_key: Some(format!("{mapping_id}:{delivery_id}")),
            secret: Some(secret),
        })
    }
}

/// The SHA-256 of a body, for schemes whose delivery id travels in an unsigned header.
fn body_digest(body: &[u8]) -> String {
    hex::encode(<Sha256 as sha2::Digest>::digest(body))
}

/// `t=<ts>,v1=<hex>[,v1=<hex>...]`; other schemes' entries (`v0=`) are ignored.
pub fn parse_stripe(value: &str) -> Result<(String, Vec<Vec<u8>>), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for item in value.split(',') {
        match item.trim().split_once('=') {
            Some(("t", ts)) => timestamp = Some(ts.to_string()),
            Some(("v1", hex)) => signatures.push(hex_bytes(hex, "stripe-signature")?),
            _ => {}
        }
    }
    match (timestamp, signatures.is_empty()) {
        (Some(ts), false) => Ok((ts, signatures)),
        _ => Err(SignatureError::Malformed("stripe-signature")),
    }
}

#[cfg(test)]
mod tests;
