//! The safety envelope around untrusted content. The input is six NUL-separated fields: the source
//! (`email`, else webhook), a seed for the marker id, the hook name, the job id, the received time
//! and the content; every field but the source is caller data. The hook name goes both on the task
//! line and, as a sender's name, inside the envelope.
//!
//! Whatever the input, the prompt holds exactly one real start marker and one real end marker,
//! `<<<EXTERNAL_UNTRUSTED_CONTENT id="<id>">>>` before `<<<END_EXTERNAL_UNTRUSTED_CONTENT
//! id="<id>">>>`, with one id of 16 lower-case hex characters, the end marker closing the prompt;
//! and nothing else in it reads as a marker: the envelope's own recogniser (`sanitize_markers`,
//! which also sees through case, spacing, full-width forms, look-alike brackets and zero-width
//! characters) finds those two and nothing more. That holds for a caller-chosen id
//! (`wrap_prompt_with_marker`) and for a random one (`wrap_prompt`). Sanitising is also idempotent:
//! sanitised text has nothing left to sanitise.
#![no_main]

use std::borrow::Cow;

use hookgate::hook::envelope::{
    ContentSource, sanitize_markers, wrap_prompt, wrap_prompt_with_marker,
};
use hookgate_fuzz::fields;
use libfuzzer_sys::fuzz_target;

const START: &str = "<<<EXTERNAL_UNTRUSTED_CONTENT id=\"";
const END: &str = "<<<END_EXTERNAL_UNTRUSTED_CONTENT id=\"";
const CLOSE: &str = "\">>>";

fuzz_target!(|data: &[u8]| {
    let [source, seed, name, job_id, received, content] = fields(data);
    let source = if source == "email" {
        ContentSource::Email
    } else {
        ContentSource::Webhook
    };
    let id = marker_id(&seed);
    let sender = Some(name.as_str());
    let prompt = wrap_prompt_with_marker(&name, &job_id, &received, source, sender, &content, &id);
    assert_eq!(check_markers(&prompt), id);
    check_markers(&wrap_prompt(
        &name, &job_id, &received, source, sender, &content,
    ));
    let once = sanitize_markers(&content);
    assert!(
        matches!(sanitize_markers(&once), Cow::Borrowed(_)),
        "{once:?}"
    );
});

/// 16 lower-case hex characters drawn from `seed`.
fn marker_id(seed: &str) -> String {
    let mut bytes = [0u8; 8];
    for (i, b) in seed.bytes().enumerate() {
        bytes[i % 8] ^= b;
    }
    format!("{:016x}", u64::from_le_bytes(bytes))
}

/// Checks the property on `prompt` and returns the marker id.
fn check_markers(prompt: &str) -> String {
    assert_eq!(
        prompt.matches(START).count(),
        1,
        "start markers in {prompt:?}"
    );
    assert_eq!(prompt.matches(END).count(), 1, "end markers in {prompt:?}");
    let start_at = prompt.find(START).expect("counted");
    let id = prompt[start_at + START.len()..]
        .get(..16)
        .expect("an id after the start marker");
    assert!(
        id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{id:?}"
    );
    let start = format!("{START}{id}{CLOSE}");
    let end = format!("{END}{id}{CLOSE}");
    assert!(
        prompt[start_at..].starts_with(&start),
        "start marker malformed"
    );
    assert!(
        prompt.ends_with(&end),
        "prompt does not close with the end marker of the same id"
    );
    assert!(
        start_at < prompt.len() - end.len(),
        "start marker after the end marker"
    );
    let expected = prompt.replacen(&start, "[[MARKER_SANITIZED]]", 1).replacen(
        &end,
        "[[END_MARKER_SANITIZED]]",
        1,
    );
    assert_eq!(
        sanitize_markers(prompt),
        expected,
        "a marker other than the two real ones"
    );
    id.to_string()
}
