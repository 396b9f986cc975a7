//! docs/operations.md "Trying a change on recorded traffic": a candidate configuration reads
//! none of the server's environment, whatever in it quotes a `${NAME}` reference.

use serde_json::{Value, json};

use crate::dry_run::{dry_run, internal, logged, policy_config};
use crate::harness::*;

#[tokio::test]
async fn the_servers_environment_never_shows_and_a_refused_request_is_not_retried() {
    let secret = "from-the-environment-5d2e";
    let dir = ConfigDir::new(&policy_config(json!(["*"]), json!([internal("internal")])));
    let server = Hookgate::try_start_in(&dir, &[("DRY_RUN_SECRET", secret)]).unwrap();
    let body = json!({"source": "internal"});
    let (status, _) = server.hook_json("/hooks/events", &body).await;
    assert_eq!(status, 200);
    let refused = client()
        .post(server.url("/hooks/events"))
        .bearer_auth("wrong");
    assert_eq!(refused.json(&body).send().await.unwrap().status(), 401);
    logged(&server, 2).await;
    let mut leaky = internal("internal");
    leaky["messageTemplate"] = json!("leak ${DRY_RUN_SECRET}");
    let candidate = policy_config(json!(["*"]), json!([leaky]));
    let body = json!({"config": serde_json::to_string(&candidate).unwrap()});
    let (status, answer) = dry_run(&server, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!answer.to_string().contains(secret), "{answer}");
    let [admitted, refused] = [0, 1].map(|i| answer["requests"][i].clone());
    assert_eq!(
        admitted["now"]["actions"][0]["message"],
        "leak [env DRY_RUN_SECRET]"
    );
    assert_eq!(admitted["differs"], true, "another message");
    assert_eq!(refused["then"]["status"], 401);
    assert_eq!(refused["untried"], "unauthenticated");
    assert_eq!(refused["now"], Value::Null);
    let totals = json!({"requests": 2, "captured": 1, "notCaptured": 1, "differing": 1, "nowFailing": 0, "untried": 0});
    assert_eq!(answer["totals"], totals);
}

/// Values of the server's environment that a candidate quotes: mixed case (a session key is
/// lower-cased), one the prefix of another, and one shorter than a word.
const SERVER_ENV: &[(&str, &str)] = &[
    ("DRY_MIXED", "Mixed-Case-Secret-91"),
    ("DRY_LONG", "overlap-secret-3f9c-tail"),
    ("DRY_SHORT", "overlap-secret-3f9c"),
    ("DRY_TINY", "QXZW"),
];

/// Whether `answer` shows a value of [`SERVER_ENV`], as it is or lower-cased.
fn leaks(answer: &Value) -> bool {
    let text = answer.to_string();
    SERVER_ENV
        .iter()
        .any(|(_, value)| text.contains(value) || text.contains(&value.to_lowercase()))
}

#[tokio::test]
async fn no_value_of_the_servers_environment_reaches_an_answer_whatever_quotes_it() {
    let dir = ConfigDir::new(&policy_config(json!(["*"]), json!([internal("internal")])));
    let server = Hookgate::try_start_in(&dir, SERVER_ENV).unwrap();
    let (status, _) = server
        .hook_json("/hooks/events", &json!({"source": "internal"}))
        .await;
    assert_eq!(status, 200);
    logged(&server, 1).await;
    let try_mapping = async |mapping: Value, vars: Value| {
        let mut candidate = policy_config(json!(["*"]), json!([mapping]));
        set(&mut candidate, "env.vars", vars);
        let body = json!({"config": serde_json::to_string(&candidate).unwrap()});
        dry_run(&server, &body).await
    };

    // A module named by a reference: its load error names the placeholder.
    let mut module = internal("internal");
    module["transform"] = json!({"module": "${DRY_LONG}"});
    let (status, answer) = try_mapping(module, json!({})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["problems"].to_string().contains("[env DRY_LONG]"),
        "{answer}"
    );
    assert!(!leaks(&answer), "{answer}");

    // The mapping's id, a session key the policy lower-cases, references side by side, and a
    // value too short to be told from ordinary text.
    let mut quoting = internal("internal");
    quoting["id"] = json!("${DRY_MIXED}");
    quoting["sessionKey"] = json!("hook:${DRY_MIXED}");
    quoting["messageTemplate"] = json!("${DRY_SHORT}${DRY_LONG} ${DRY_TINY}");
    let (status, answer) = try_mapping(quoting.clone(), json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!leaks(&answer), "{answer}");
    let now = &answer["requests"][0]["now"];
    assert_eq!(now["mappingId"], "[env DRY_MIXED]", "{answer}");
    assert_eq!(
        now["actions"][0]["message"], "[env DRY_SHORT][env DRY_LONG] [env DRY_TINY]",
        "{answer}"
    );

    // The candidate's own `env.vars` serve its references, and only those.
    let (status, answer) = try_mapping(quoting, json!({"DRY_TINY": "own"})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(!leaks(&answer), "{answer}");
    let message = &answer["requests"][0]["now"]["actions"][0]["message"];
    assert_eq!(message, "[env DRY_SHORT][env DRY_LONG] own", "{answer}");
}
