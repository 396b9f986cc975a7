//! The `github` scheme over any request (header lines, a blank line, the body; the
//! clock from `x-fuzz-now`): an answer, never a panic, and never an acceptance under two keys.
#![no_main]

use hookgate::hook::signature::Scheme;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate_fuzz::check_signature(Scheme::Github, data));
