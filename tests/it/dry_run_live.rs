//! docs/operations.md "Trying a change on recorded traffic": a dry run beside live traffic.
//! Its transform calls take a share of the call slots of their own, and a call that finds no
//! slot leaves its request untried, not failing.

use serde_json::{Value, json};

use crate::dry_run::{dry_run, logged};
use crate::harness::*;

/// One call slot. `quick` makes a run with no transform; `sleep` holds the slot for its
/// 3 s limit on every call.
fn live_config() -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    set(
        &mut config,
        "hooks.transformLimits",
        json!({"maxConcurrent": 1}),
    );
    let sleep = json!({"id": "sleep", "match": {"path": "sleep"},
        "transform": {"module": "hostile.wasm", "config": {"mode": "sleep"},
                      "limits": {"timeoutMs": 3000}}});
    let quick = json!({"id": "quick", "match": {"path": "quick"}, "messageTemplate": "q"});
    set(&mut config, "hooks.mappings", json!([quick, sleep]));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trial_that_finds_every_call_slot_taken_is_untried_not_failing() {
    let dir = ConfigDir::new(&live_config());
    install_transforms(&dir, &["hostile"]);
    let server = Hookgate::start_in(&dir);
    let (status, _) = server.hook_json("/hooks/quick", &json!({})).await;
    assert_eq!(status, 200);
    logged(&server, 1).await;
    // Live requests that keep the one slot taken, one after another, for longer than the test.
    let live: Vec<_> = (0..8)
        .map(|_| tokio::spawn(server.hook("/hooks/sleep").json(&json!({})).send()))
        .collect();
    // The candidate calls a transform for `quick`, waiting at most 1 s for a slot.
    let mut candidate = live_config();
    let quick = json!({"id": "quick", "match": {"path": "quick"}, "messageTemplate": "q",
        "transform": {"module": "hostile.wasm", "config": {"mode": "log"},
                      "limits": {"timeoutMs": 100}}});
    set(&mut candidate, "hooks.mappings", json!([quick]));
    let body = json!({"config": serde_json::to_string(&candidate).unwrap(),
                      "filter": {"hook": "quick"}});
    // A freed slot may go to the trial as well as to the next live call: try until one waited.
    let limit = std::time::Duration::from_secs(20);
    let every = std::time::Duration::from_millis(10);
    let answer = eventually_within("a trial finds no slot", limit, every, async || {
        let (status, answer) = dry_run(&server, &body).await;
        assert_eq!(status, 200, "{answer}");
        match answer["requests"][0]["untried"] == "busy" {
            true => Ok(answer),
            false => Err(answer.to_string()),
        }
    })
    .await;
    let trial = &answer["requests"][0];
    assert_eq!(trial["now"], Value::Null, "{answer}");
    assert_eq!(trial["differs"], false, "{answer}");
    assert_eq!(trial["captured"], true, "{answer}");
    assert_eq!(
        answer["totals"],
        json!({"requests": 1, "captured": 1, "notCaptured": 0, "differing": 0,
               "nowFailing": 0, "untried": 1})
    );
    for call in live {
        call.abort();
    }
}
