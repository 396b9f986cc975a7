//! Which request headers carry a credential, known once per configuration: what no transform or
//! template is shown and what the request log never keeps (docs/operations.md#the-request-log).
//!
//! Two kinds, because they are dangerous in different ways:
//! - a *secret* is the credential itself (the hook token's carriers, cookies, GitLab's shared
//!   token, the header a generic `hmac-sha256` scheme reads): whoever reads it can forge any
//!   request, so neither a transform nor the log ever sees one;
//! - a *proof* is a per-message signature (GitHub's `X-Hub-Signature-256`, Stripe's
//!   `Stripe-Signature`, ...): harmless to the transform that may check it again, but kept next
//!   to the exact body it would let whoever reads the log resend the delivery once the replay
//!   memory has forgotten it (GitHub signs no timestamp), so the log never keeps one either.
//!
//! Both lists hold every scheme's headers, whatever mapping a request ends on: a request that
//! one mapping's signature admitted may be answered by another, and what it carried is a
//! credential all the same.

use super::signature::{Scheme, SignatureRule};

/// Headers that carry the hook token or a session: secrets under any configuration.
pub const TOKEN_HEADERS: &[&str] = &[
    "authorization",
    "x-service-token",
    "x-openclaw-token",
    "cookie",
    "proxy-authorization",
];

/// The headers of every provider scheme that carry a per-message signature (GitLab's carries
/// the shared secret itself, [`Scheme::credential_header`]; a generic scheme's header is
/// configured, and added by [`CredentialHeaders::of`]).
pub const SIGNATURE_HEADERS: &[&str] = &[
    "x-hub-signature-256",
    // GitHub's SHA-1 signature, sent beside the SHA-256 one: a proof all the same.
    "x-hub-signature",
    "stripe-signature",
    "x-slack-signature",
    "webhook-signature",
    "svix-signature",
    "x-shopify-hmac-sha256",
];

/// The credential headers of one configuration. Built once when the configuration is
/// admitted; a lookup is a scan of a dozen short names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialHeaders {
    /// Lower-case names of secrets: never shown, never kept.
    secrets: Vec<String>,
    /// Lower-case names of proofs: shown to transforms, never kept.
    proofs: Vec<String>,
}

impl CredentialHeaders {
    /// The credential headers when the mappings check `rules`: the fixed ones of every scheme,
    /// and each generic scheme's configured header (a secret: the sender chose what it holds).
    pub fn of<'a>(rules: impl IntoIterator<Item = &'a SignatureRule>) -> CredentialHeaders {
        let mut secrets: Vec<String> = TOKEN_HEADERS
            .iter()
            .copied()
            .chain(Scheme::Gitlab.credential_header())
            .map(String::from)
            .collect();
        let proofs = SIGNATURE_HEADERS.iter().map(|h| h.to_string()).collect();
        for rule in rules {
            if let Scheme::HmacSha256 { header, .. } = &rule.scheme
                && !secrets.contains(header)
            {
                secrets.push(header.clone());
            }
        }
        CredentialHeaders { secrets, proofs }
    }

    /// Whether the header `name` (lower-case) is a secret: kept from transforms, templates and
    /// the request log.
    pub fn is_secret(&self, name: &str) -> bool {
        self.secrets.iter().any(|s| s == name)
    }

    /// Whether the request log must leave the header `name` (lower-case) out: a secret or a
    /// signature.
    pub fn is_kept_out(&self, name: &str) -> bool {
        self.is_secret(name) || self.proofs.iter().any(|p| p == name)
    }
}

impl Default for CredentialHeaders {
    /// The credential headers of a configuration with no generic scheme.
    fn default() -> Self {
        CredentialHeaders::of([])
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::hook::signature::Encoding;

    #[test]
    fn secrets_are_kept_from_everyone_and_proofs_from_the_log() {
        let generic = SignatureRule {
            scheme: Scheme::HmacSha256 {
                header: "x-acme-signature".into(),
                encoding: Encoding::Hex,
                prefix: String::new(),
            },
            secrets: vec![b"k".to_vec()],
            tolerance: Duration::from_secs(300),
            token_accepted: true,
            retired: None,
        };
        let headers = CredentialHeaders::of([&generic]);
        for secret in [
            "authorization",
            "cookie",
            "x-gitlab-token",
            "x-acme-signature",
        ] {
            assert!(headers.is_secret(secret), "{secret}");
            assert!(headers.is_kept_out(secret), "{secret}");
        }
        for proof in [
            "x-hub-signature-256",
            "stripe-signature",
            "webhook-signature",
        ] {
            assert!(!headers.is_secret(proof), "{proof}");
            assert!(headers.is_kept_out(proof), "{proof}");
        }
        for plain in ["x-github-event", "webhook-id", "content-type"] {
            assert!(!headers.is_kept_out(plain), "{plain}");
        }
        assert!(!CredentialHeaders::default().is_secret("x-acme-signature"));
    }
}
