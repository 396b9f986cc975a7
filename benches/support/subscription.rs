//! A subscription (docs/subscriptions.md) made as an operator makes one, through the operator
//! API, and requests signed with its secret as GitHub signs them.

use hmac::{Hmac, Mac};
use serde_json::Value;

/// Creates the subscription `spec` (the body of `POST /api/hooks`) on the hookgate at `base`
/// with `gateway_token`; returns its secret, which the answer shows this once. Panics unless
/// the answer is `201`.
pub fn create(base: &str, gateway_token: &str, spec: &Value) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, answer) = runtime.block_on(async {
        let response = reqwest::Client::new()
            .post(format!("{base}/api/hooks"))
            .bearer_auth(gateway_token)
            .json(spec)
            .send()
            .await
            .expect("POST /api/hooks");
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or_default())
    });
    assert_eq!(status, 201, "creating the subscription: {answer}");
    answer["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("no secret in {answer}"))
        .to_string()
}

/// The `x-hub-signature-256` header of `body` under a GitHub subscription's `secret`:
/// `sha256=` and the hex HMAC-SHA256 of the body, the secret's text as the key.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}
