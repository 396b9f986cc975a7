//! Every header value and body: an answer, never a panic, and never an acceptance without the key.
#![no_main]

use hookgate::hook::signature::{DEFAULT_TOLERANCE, Scheme, SignatureRule, verify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, String, Vec<u8>, i64)| {
    let (value, timestamp, body, now) = input;
    let rule = SignatureRule { scheme: Scheme::Github, secrets: vec![b"fuzz-key".to_vec()], tolerance: DEFAULT_TOLERANCE };
    let header = |name: &str| Some(if name.ends_with("timestamp") { timestamp.clone() } else { value.clone() });
    let _ = verify(&rule, &header, &body, now);
});
