//! Every header value and body: an answer, never a panic.
#![no_main]

use hookgate::hook::signature::{DEFAULT_TOLERANCE, Encoding, Scheme, SignatureRule, verify};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (String, Vec<u8>, bool)| {
    let (value, body, base64) = input;
    let scheme = Scheme::HmacSha256 {
        header: "x-signature".into(),
        encoding: if base64 { Encoding::Base64 } else { Encoding::Hex },
        prefix: "sha256=".into(),
        id_header: Some("x-delivery".into()),
    };
    let rule = SignatureRule { scheme, secrets: vec![b"fuzz-key".to_vec()], tolerance: DEFAULT_TOLERANCE };
    let _ = verify(&rule, &|_: &str| Some(value.clone()), &body, 0);
});
