//! The console's Outbound tab (docs/outbound.md), in headless Chromium: failed callbacks are
//! listed with why, and one sent again from there keeps its webhook-id.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake::{Answer, Fake, chat_reply};
use crate::harness::*;
use crate::outbound::{SECRET, callback_config, start_run};

const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(100);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_lists_failed_messages_and_sends_one_again() {
    let provider = Fake::start(|_, _| Answer::Json(200, chat_reply("done"))).await;
    let config = callback_config(&provider, json!([SECRET]));
    let (server, _dir) = Hookgate::start(&config);
    // A private address not listed: refused at its first attempt, kept as failed.
    start_run(&server, "http://10.0.0.1:9/callback", 1).await;
    let failed = eventually_within("the callback to fail", WAIT, POLL, async || {
        let (_, list) = server.api_json("/api/outbound?status=failed").await;
        let first = list["messages"].as_array().and_then(|m| m.first().cloned());
        first.ok_or_else(|| format!("{list}"))
    })
    .await;
    let id = failed["id"].as_i64().unwrap();

    let browser = crate::browser::Browser::start().await;
    browser.go(&server.url("/console")).await;
    browser.type_into("#token", GATEWAY_TOKEN).await;
    browser.click("#login button[type=submit]").await;
    browser.click("nav button[data-view=outbound]").await;
    let row = format!("#outbound-table tr[data-id=\"{id}\"]");
    let shown = browser
        .wait_for_text(&row, "10.0.0.1 is a private address")
        .await;
    assert!(
        shown.contains("failed") && shown.contains("callback:cb"),
        "{shown}"
    );
    browser
        .click(&format!("{row} button[data-action=retry]"))
        .await;
    browser
        .wait_for_text(
            "#outbound-result",
            "pending again, with the same webhook-id",
        )
        .await;
    // Sent again (and refused again): the same message, its webhook-id unchanged.
    let again = eventually_within(
        "the retried message to fail again",
        WAIT,
        POLL,
        async || {
            let (_, list) = server.api_json("/api/outbound?status=failed").await;
            let messages = list["messages"].as_array().cloned().unwrap_or_default();
            let found = messages.into_iter().find(|m: &Value| m["id"] == id);
            found.ok_or_else(|| format!("{list}"))
        },
    )
    .await;
    assert_eq!(again["webhookId"], failed["webhookId"]);
    assert_eq!(again["createdAt"], failed["createdAt"]);
}
