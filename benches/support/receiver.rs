//! A callbacks' receiver on 127.0.0.1 (docs/outbound.md, "Callbacks"): it checks each message's
//! Standard Webhooks signature under the secret it was given, counts the messages that carry a
//! valid one and those that do not, and answers `204` to both, so that hookgate sends each once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};

/// How many messages arrived, by whether their signature held.
#[derive(Default)]
struct Counts {
    verified: AtomicU64,
    refused: AtomicU64,
}

/// The receiver, served from a thread of its own until the process ends.
pub struct Receiver {
    /// Where callbacks are posted: `http://127.0.0.1:<port>/callback`.
    pub url: String,
    counts: Arc<Counts>,
}

impl Receiver {
    /// Starts a receiver checking signatures under `secret` (`whsec_<base64>`).
    pub fn start(secret: &str) -> Receiver {
        let key = BASE64
            .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
            .expect("a base64 secret");
        let counts = Arc::new(Counts::default());
        let state = (Arc::new(key), counts.clone());
        let app = axum::Router::new()
            .route("/callback", axum::routing::post(receive))
            .with_state(state);
        let base = super::serve_in_thread(app);
        Receiver {
            url: format!("{base}/callback"),
            counts,
        }
    }

    /// The messages received with a valid signature.
    pub fn verified(&self) -> u64 {
        self.counts.verified.load(Ordering::SeqCst)
    }

    /// Waits (at most two minutes) until `count` messages with a valid signature have arrived
    /// in all; panics when fewer did, or when any arrived without a valid signature.
    pub fn wait_for(&self, count: u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.verified() < count && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let refused = self.counts.refused.load(Ordering::SeqCst);
        assert_eq!(
            refused, 0,
            "{refused} callbacks arrived without a valid signature"
        );
        assert!(
            self.verified() >= count,
            "{} of {count} callbacks arrived within two minutes",
            self.verified()
        );
    }
}

async fn receive(
    State((key, counts)): State<(Arc<Vec<u8>>, Arc<Counts>)>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let counter = if signed(&key, &headers, &body) {
        &counts.verified
    } else {
        &counts.refused
    };
    counter.fetch_add(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

/// Whether one of the `webhook-signature` header's `v1,<base64>` parts is the HMAC-SHA256 of
/// `<webhook-id>.<webhook-timestamp>.<body>` under `key`, as Standard Webhooks specifies.
fn signed(key: &[u8], headers: &HeaderMap, body: &[u8]) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signatures)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = BASE64.encode(mac.finalize().into_bytes());
    signatures
        .split_whitespace()
        .any(|part| part.strip_prefix("v1,") == Some(expected.as_str()))
}
