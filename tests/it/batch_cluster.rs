//! docs/hooks.md "Batches": each request of a batch keeps its own
//! `allowUnsafeExternalContent`, so one request's leave to go in unwrapped never unwraps
//! another sender's message in the same batch run.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::Fake;
use crate::harness::*;

/// A configuration whose `inbox` mapping batches two requests per run (the window is an
/// hour, so only `maxItems` closes it), with `allowUnsafeExternalContent` set to `unsafe_ok`.
fn config(provider: &Fake, unsafe_ok: bool) -> Value {
    let defaults = json!({"provider": {"baseUrl": provider.base}, "model": "test-model"});
    let mapping = json!({
        "id": "inbox", "match": {"path": "inbox"}, "name": "Inbox", "sessionKey": "hook:inbox",
        "messageTemplate": "{{subject}}", "wakeMode": "next-heartbeat", "deliver": false,
        "allowUnsafeExternalContent": unsafe_ok, "batch": {"window": "1h", "maxItems": 2},
    });
    let mut config = base_config();
    config["agents"] = json!({ "defaults": defaults });
    config["hooks"]["mappings"] = json!([mapping]);
    config
}

/// Sends `subject` to the batch mapping; its answer, once it was 200.
async fn send(server: &Hookgate, subject: &str) -> Value {
    let sent = server
        .hook_json("/hooks/inbox", &json!({ "subject": subject }))
        .await;
    assert_eq!(sent.0, 200, "{}", sent.1);
    sent.1
}

/// The prompt of the one batch run the provider was asked, once it was.
async fn batch_prompt(provider: &Fake) -> String {
    eventually_within(
        "the batch run",
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let prompts: Vec<String> = provider
                .requests()
                .iter()
                .filter_map(|request| {
                    let messages = request.body["messages"].as_array()?;
                    let prompt = messages.last()?["content"].as_str()?;
                    prompt
                        .contains("Message 2 of 2")
                        .then(|| prompt.to_string())
                })
                .collect();
            match prompts.as_slice() {
                [prompt] => Ok(prompt.clone()),
                [] => Err("none yet".to_string()),
                more => panic!("{} batch runs, not one", more.len()),
            }
        },
    )
    .await
}

/// The opener allowed unsafe content, the second request (after a reload took the leave
/// away) did not: the second message keeps its envelope.
#[tokio::test]
async fn the_openers_leave_to_skip_envelopes_is_its_own() {
    let provider = Fake::provider("done").await;
    let dir = ConfigDir::new(&config(&provider, true));
    let server = Hookgate::start_in(&dir);
    let first = send(&server, "opened unwrapped").await;
    dir.write(&config(&provider, false));
    eventually("the configuration that takes the leave away", async || {
        let response = server.api("/api/config").send().await.unwrap();
        json_of(response).await.1["generation"].as_u64() == Some(2)
    })
    .await;
    let second = send(&server, "sent wrapped").await;
    assert_eq!(second["runId"], first["runId"], "{second}");
    assert_eq!(second["batched"], 2, "{second}");
    let prompt = batch_prompt(&provider).await;
    let envelopes = prompt.matches("<<<EXTERNAL_UNTRUSTED_CONTENT id=").count();
    assert_eq!(envelopes, 1, "{prompt}");
    assert!(prompt.contains("\nopened unwrapped\n"), "{prompt}");
    assert!(
        prompt.contains("---\nsent wrapped\n<<<END_EXTERNAL_UNTRUSTED_CONTENT id="),
        "{prompt}"
    );
}
