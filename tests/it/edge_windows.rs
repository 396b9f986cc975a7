//! The crash windows of a private node (docs/edge.md#exactly-once) that tests/it/edge.rs's
//! drain does not cross: a `forEach` request cut between its actions' commits.

use serde_json::{Value, json};

use crate::edge::{PULL_TOKEN, dies_after_commit, drained, edge_config};
use crate::harness::*;

/// A private node pulling from `edge`, with a `forEach` mapping `list`: a wake per element of
/// `items`.
fn private_config(edge: &str) -> Value {
    let mut config = base_config();
    set(
        &mut config,
        "hooks.mappings",
        json!([{"id": "list", "match": {"path": "list"}, "action": "wake", "forEach": "items",
                "textTemplate": "item {{items[0]}}"}]),
    );
    set(
        &mut config,
        "edge.link",
        json!({"url": edge, "pullToken": PULL_TOKEN}),
    );
    config
}

#[tokio::test]
async fn a_foreach_request_cut_after_its_first_action_makes_the_others_once() {
    let (edge, _edge_dir) = Hookgate::start(&edge_config());
    let items = json!({"items": ["a", "b", "c"]});
    let (status, stored) = edge.hook_json("/hooks/list", &items).await;
    assert_eq!((status, &stored["stored"]), (202, &json!(1)), "{stored}");

    // The private node dies right after the commit of the first element's wake (test-only:
    // docs/edge.md#testing-the-crash-windows), before the others are made.
    let private_dir = ConfigDir::new(&private_config(&edge.base));
    dies_after_commit(&private_dir, "1:0");

    let private = Hookgate::start_in(&private_dir);
    drained(&edge).await;
    assert_eq!(
        private.event_texts().await,
        ["item a", "item b", "item c"],
        "each element's wake once"
    );
    // The second pass is recorded, answered as it ran then.
    eventually("the request's record at the private node", async || {
        let (_, records) = private.api_json("/api/requests?hook=list").await;
        records["requests"][0]["status"] == 200
    })
    .await;
}
