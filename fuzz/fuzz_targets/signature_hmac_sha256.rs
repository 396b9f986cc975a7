//! The generic `hmac-sha256` scheme (header `x-signature`, prefix `sha256=`) over any request:
//! an answer, never a panic, and never an acceptance under two keys. The encoding is base64 when
//! the request carries `x-fuzz-encoding: base64`, hex otherwise.
#![no_main]

use hookgate::hook::signature::{Encoding, Scheme};
use hookgate_fuzz::Request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let base64 = Request::parse(data).header("x-fuzz-encoding").as_deref() == Some("base64");
    let scheme = Scheme::HmacSha256 {
        header: "x-signature".into(),
        encoding: if base64 {
            Encoding::Base64
        } else {
            Encoding::Hex
        },
        prefix: "sha256=".into(),
    };
    hookgate_fuzz::check_signature(scheme, data);
});
