//! `gateway.secretsKey`: the key that seals the signing secrets of subscriptions at rest, so a
//! copy of the state directory (or of the NATS buckets) alone does not hold them.
//!
//! A secret is sealed with ChaCha20-Poly1305 under a key derived from the operator's text, a
//! fresh random nonce each time, and the subscription's name as associated data: a sealed
//! secret moved to another subscription does not open.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use sha2::{Digest, Sha256};

/// The fewest characters `gateway.secretsKey` may have.
pub const MIN_KEY_CHARS: usize = 32;

/// The sealing key. Not `Debug`-printable beyond its presence, never serialised.
#[derive(Clone)]
pub struct SecretsKey([u8; 32]);

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl PartialEq for SecretsKey {
    fn eq(&self, other: &Self) -> bool {
        subtle::ConstantTimeEq::ct_eq(&self.0[..], &other.0[..]).into()
    }
}

/// A sealed secret that did not open: the key is not the one it was sealed with, or the sealed
/// text was altered or moved to another subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sealed secret does not open with gateway.secretsKey (another key sealed it, or it was altered)"
)]
pub struct Unsealable;

impl SecretsKey {
    /// The key of `text` (`gateway.secretsKey` as read): its SHA-256 under a fixed label, so
    /// any text of [`MIN_KEY_CHARS`] or more serves; `None` when it is shorter.
    pub fn from_text(text: &str) -> Option<SecretsKey> {
        let text = text.trim();
        if text.chars().count() < MIN_KEY_CHARS {
            return None;
        }
        let mut digest = Sha256::new();
        digest.update(b"hookgate gateway.secretsKey v1\0");
        digest.update(text.as_bytes());
        Some(SecretsKey(digest.finalize().into()))
    }

    /// `secret` sealed for subscription `name`: base64 of a random nonce and the ciphertext.
    pub fn seal(&self, name: &str, secret: &str) -> String {
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&self.0));
        let nonce: [u8; 12] = rand::random();
        let payload = Payload {
            msg: secret.as_bytes(),
            aad: name.as_bytes(),
        };
        // Encryption fails only for a message past the cipher's 256 GiB bound.
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), payload)
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend(sealed);
        BASE64.encode(out)
    }

    /// The secret `sealed` holds for subscription `name`.
    pub fn open(&self, name: &str, sealed: &str) -> Result<String, Unsealable> {
        let bytes = BASE64.decode(sealed).map_err(|_| Unsealable)?;
        if bytes.len() < 12 {
            return Err(Unsealable);
        }
        let (nonce, ciphertext) = bytes.split_at(12);
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&self.0));
        let payload = Payload {
            msg: ciphertext,
            aad: name.as_bytes(),
        };
        let plain = cipher
            .decrypt(Nonce::from_slice(nonce), payload)
            .map_err(|_| Unsealable)?;
        String::from_utf8(plain).map_err(|_| Unsealable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_name() {
        let key = SecretsKey::from_text("0123456789abcdef0123456789abcdef").unwrap();
        let other = SecretsKey::from_text("fedcba9876543210fedcba9876543210").unwrap();
        let sealed = key.seal("github", "s3cret-value");
        assert!(!sealed.contains("s3cret"));
        assert_eq!(key.open("github", &sealed).unwrap(), "s3cret-value");
        assert_eq!(key.open("stripe", &sealed), Err(Unsealable));
        assert_eq!(other.open("github", &sealed), Err(Unsealable));
        assert_ne!(
            sealed,
            key.seal("github", "s3cret-value"),
            "a fresh nonce each time"
        );
        assert!(SecretsKey::from_text("short").is_none());
    }
}
