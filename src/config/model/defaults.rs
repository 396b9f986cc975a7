//! The defaults the file's keys take, named once: the schema shows them and the building
//! applies them. Each bound here is also the one the building checks a value against.

use std::time::Duration;

/// Default `hooks.path`.
pub const DEFAULT_HOOKS_PATH: &str = "/hooks";

/// Default time a client has to send its whole body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The presets hookgate ships.
pub const KNOWN_PRESETS: &[&str] = &["gmail"];

/// Default `hooks.maxBodyBytes`: 256 KiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 256 * 1024;

/// The largest `maxBytes` of a capture: a captured body is one row of the store.
pub const MAX_CAPTURE_BYTES: u64 = 16 * 1024 * 1024;

/// The default `maxBytes` of a capture.
pub const DEFAULT_CAPTURE_BYTES: usize = crate::hook::capture::DEFAULT_MAX_BYTES;

/// The request log's size bound unless configured otherwise: no traffic, accepted or refused,
/// grows it past this (docs/operations.md#the-request-log).
pub const DEFAULT_REQUESTS_MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// The default JetStream stream of a NATS store.
pub const DEFAULT_STREAM: &str = "HOOKGATE";
/// The default prefix of a NATS store's key-value buckets.
pub const DEFAULT_BUCKET: &str = "hookgate";
/// The default replicas of a NATS store's stream and buckets.
pub const DEFAULT_REPLICAS: u8 = 1;

/// The most requests one batch may hold: each is a numbered envelope of one prompt.
pub const MAX_ITEMS: u32 = 1000;
/// The default `maxItems` of a batch.
pub const DEFAULT_MAX_ITEMS: u32 = 50;

/// The default `channels.retry.attempts`.
pub const DEFAULT_ATTEMPTS: u32 = 5;
/// The default `channels.retry.baseDelayMs`.
pub const DEFAULT_BASE_DELAY_MS: u64 = 1000;
/// The largest `channels.retry.baseDelayMs`: an hour.
pub const MAX_BASE_DELAY_MS: u64 = 3_600_000;
