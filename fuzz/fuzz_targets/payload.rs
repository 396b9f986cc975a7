//! A hook body as the HTTP layer reads it (any bytes → JSON) and then normalises it for `/wake`
//! and `/agent`. Whatever the bytes: an answer, never a panic; a parsed body is an object or an
//! array; an accepted wake has a trimmed, non-blank text; an accepted agent request has a trimmed,
//! non-blank message and a non-blank name, and a model only when it is non-blank.
#![no_main]

use hookgate::hook::payload::{agent_request, wake_request};
use hookgate::http::parse_json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(payload) = parse_json(data) else {
        return;
    };
    assert!(payload.is_object() || payload.is_array(), "{payload}");
    if let Ok(wake) = wake_request(&payload) {
        assert!(is_trimmed_non_blank(&wake.text), "{:?}", wake.text);
    }
    if let Ok(agent) = agent_request(&payload) {
        assert!(is_trimmed_non_blank(&agent.message), "{:?}", agent.message);
        assert!(is_trimmed_non_blank(&agent.name), "{:?}", agent.name);
        assert!(agent.model.as_deref().is_none_or(is_trimmed_non_blank));
    }
});

fn is_trimmed_non_blank(text: &str) -> bool {
    !text.is_empty() && text.trim() == text
}
