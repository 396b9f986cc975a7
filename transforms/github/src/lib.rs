//! GitHub webhooks as short agent messages.
//!
//! The event type comes from the `x-github-event` header. `push`, `pull_request`, `issues`,
//! `release` and completed `workflow_run` events become one agent run each; `ping` and
//! everything else are skipped (204), so GitHub's delivery log stays green. A request without the
//! header is not a GitHub delivery and gets a 400.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit", world: "transform" });

use exports::hookgate::transform::handler::Guest;
use hookgate::transform::host::log;
use hookgate::transform::types::{Action, Agent, Level, Outcome, Reply, Request};

/// What to do with one event.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Skip,
    Message(String),
}

struct GitHub;

impl Guest for GitHub {
    fn transform(req: Request) -> Result<Outcome, String> {
        // Not a GitHub delivery: the sender's mistake, so a 400 it can read, not a failure of
        // the transform (which hookgate would answer with a 500).
        let Some(event) = header(&req.headers, "x-github-event") else {
            return Ok(bad_request("missing X-GitHub-Event header"));
        };
        let payload: Payload = serde_json::from_slice(&req.body).map_err(parse_error)?;
        Ok(match describe(event, &payload) {
            Decision::Skip => {
                log(Level::Debug, &format!("skipping GitHub event {event}"));
                Outcome::Skip
            }
            Decision::Message(message) => Outcome::Run(Action::Agent(Agent {
                message,
                name: Some("GitHub".into()),
                agent_id: None,
                session_key: None,
                wake_mode: None,
                deliver: None,
                channel: None,
                to: None,
                model: None,
                thinking: None,
                timeout_seconds: None,
            })),
        })
    }
}

// Native builds (the crate's unit tests) leave the component's exports out: their symbol names
// (`hookgate:transform/handler@0.2.0#transform`) are not valid in a native linker's version script.
#[cfg(target_family = "wasm")]
export!(GitHub);

/// Why a body did not parse, as the failed call's reason: not JSON at all, or JSON that breaks
/// GitHub's published schema ([`Payload`]).
fn parse_error(error: serde_json::Error) -> String {
    match error.classify() {
        serde_json::error::Category::Data => {
            format!("payload does not follow GitHub's schema: {error}")
        }
        _ => format!("body is not JSON: {error}"),
    }
}

/// A 400 in hookgate's error shape.
fn bad_request(error: &str) -> Outcome {
    let body = serde_json::json!({"ok": false, "error": error});
    Outcome::Respond(Reply {
        status: 400,
        content_type: None,
        body: body.to_string().into_bytes(),
    })
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The parts of a GitHub delivery that [`describe`] reads, of every event it handles. Parsing skips
/// the rest of the payload rather than building it, and borrows each string from the body unless it
/// holds an escape: on a fresh instance per request, a `serde_json::Value` tree of the whole
/// payload was most of this transform's allocations. What is missing or `null` reads as its
/// default: `?` for text, and so for every text of an object; a text field of another type reads
/// `?` too. A payload that breaks GitHub's published schema otherwise (a string where GitHub sends
/// an object, `commits` that is not an array, a key given twice, a body that is JSON `null`, a
/// string or a number, whatever the event) fails the call, as a body that is not JSON does:
/// hookgate answers 500 `hook mapping failed` and logs why (docs/transforms.md). serde reads an
/// array given for an object by position (`["o/r"]` for `repository` reads `o/r`); GitHub sends
/// none.
#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
pub struct Payload<'a> {
    action: Text<'a>,
    #[serde(rename = "ref")]
    git_ref: Text<'a>,
    compare: Text<'a>,
    /// Shown as JSON shows it (`null` when missing).
    number: Value,
    /// Only counted: its elements are skipped, not kept.
    commits: Option<Vec<IgnoredAny>>,
    #[serde(deserialize_with = "object")]
    repository: Repository<'a>,
    #[serde(deserialize_with = "object")]
    pusher: Pusher<'a>,
    #[serde(deserialize_with = "object")]
    sender: User<'a>,
    /// `null` when a push deletes its branch.
    #[serde(deserialize_with = "object")]
    head_commit: Commit<'a>,
    #[serde(deserialize_with = "object")]
    pull_request: PullRequest<'a>,
    #[serde(deserialize_with = "object")]
    issue: Issue<'a>,
    #[serde(deserialize_with = "object")]
    release: Release<'a>,
    #[serde(deserialize_with = "object")]
    workflow_run: WorkflowRun<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Repository<'a> {
    full_name: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Pusher<'a> {
    name: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct User<'a> {
    login: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Commit<'a> {
    message: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct PullRequest<'a> {
    /// `true` once merged; read as it is, not as a string.
    merged: Value,
    #[serde(deserialize_with = "object")]
    user: User<'a>,
    title: Text<'a>,
    html_url: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Issue<'a> {
    number: Value,
    title: Text<'a>,
    html_url: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Release<'a> {
    tag_name: Text<'a>,
    name: Text<'a>,
    html_url: Text<'a>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct WorkflowRun<'a> {
    name: Text<'a>,
    conclusion: Text<'a>,
    head_branch: Text<'a>,
    #[serde(deserialize_with = "object")]
    head_commit: Commit<'a>,
    html_url: Text<'a>,
}

/// A text field of the payload: its string, or `?` when it is missing, `null` or not a string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Text<'a> {
    Given(#[serde(borrow)] Cow<'a, str>),
    Other(IgnoredAny),
}

impl Default for Text<'_> {
    fn default() -> Self {
        Text::Other(IgnoredAny)
    }
}

impl Text<'_> {
    fn as_str(&self) -> &str {
        match self {
            Text::Given(text) => text,
            Text::Other(_) => "?",
        }
    }
}

/// An object of the payload, or its default (every text `?`) where the payload has `null`.
fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(deserializer).map(Option::unwrap_or_default)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Decides what a GitHub event means. Pure, so it is tested natively.
pub fn describe(event: &str, p: &Payload) -> Decision {
    let repo = p.repository.full_name.as_str();
    let action = p.action.as_str();
    // One allocation for the message: `write!` into a `String` sized for a typical one, where
    // `format!` guesses from its literal parts and grows.
    let mut message = String::with_capacity(256);
    let written = match event {
        "push" => {
            let commits = p.commits.as_ref().map_or(0, Vec::len);
            write!(
                message,
                "[{repo}] {} pushed {commits} commit{} to {}: {}\n{}",
                p.pusher.name.as_str(),
                if commits == 1 { "" } else { "s" },
                p.git_ref.as_str().trim_start_matches("refs/heads/"),
                first_line(p.head_commit.message.as_str()),
                p.compare.as_str(),
            )
        }
        "pull_request" => {
            let pr = &p.pull_request;
            // A closed pull request that was merged reads `merged`.
            let merged = action == "closed" && pr.merged.as_bool() == Some(true);
            write!(
                message,
                "[{repo}] Pull request #{} {} by {}: {}\n{}",
                p.number,
                if merged { "merged" } else { action },
                pr.user.login.as_str(),
                pr.title.as_str(),
                pr.html_url.as_str(),
            )
        }
        "issues" => write!(
            message,
            "[{repo}] Issue #{} {action} by {}: {}\n{}",
            p.issue.number,
            p.sender.login.as_str(),
            p.issue.title.as_str(),
            p.issue.html_url.as_str(),
        ),
        "release" => write!(
            message,
            "[{repo}] Release {} {action}: {}\n{}",
            p.release.tag_name.as_str(),
            p.release.name.as_str(),
            p.release.html_url.as_str(),
        ),
        "workflow_run" if action == "completed" => {
            let run = &p.workflow_run;
            write!(
                message,
                "[{repo}] Workflow \"{}\" {} on {} ({})\n{}",
                run.name.as_str(),
                run.conclusion.as_str(),
                run.head_branch.as_str(),
                first_line(run.head_commit.message.as_str()),
                run.html_url.as_str(),
            )
        }
        _ => return Decision::Skip,
    };
    // Writing to a `String` cannot fail.
    written.expect("a String takes any text");
    Decision::Message(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `describe` decides for `p` as GitHub would send it: as the text of a body.
    fn decide(event: &str, p: Value) -> Decision {
        let body = p.to_string();
        describe(event, &serde_json::from_str(&body).unwrap())
    }

    fn message(event: &str, p: Value) -> String {
        match decide(event, p) {
            Decision::Message(m) => m,
            Decision::Skip => panic!("skipped"),
        }
    }

    #[test]
    fn ping_is_skipped() {
        assert_eq!(decide("ping", json!({"zen": "x"})), Decision::Skip);
    }

    #[test]
    fn unknown_events_are_skipped() {
        assert_eq!(decide("star", json!({})), Decision::Skip);
    }

    #[test]
    fn push() {
        let p = json!({"ref": "refs/heads/main", "repository": {"full_name": "o/r"},
            "pusher": {"name": "ana"}, "commits": [{}, {}],
            "head_commit": {"message": "Fix parser\n\nlong body"}, "compare": "https://c"});
        assert_eq!(
            message("push", p),
            "[o/r] ana pushed 2 commits to main: Fix parser\nhttps://c"
        );
    }

    #[test]
    fn merged_pull_request() {
        let p = json!({"action": "closed", "number": 7, "repository": {"full_name": "o/r"},
            "pull_request": {"merged": true, "title": "Add X", "user": {"login": "bo"}, "html_url": "https://pr"}});
        assert_eq!(
            message("pull_request", p),
            "[o/r] Pull request #7 merged by bo: Add X\nhttps://pr"
        );
    }

    #[test]
    fn issue_opened() {
        let p = json!({"action": "opened", "repository": {"full_name": "o/r"}, "sender": {"login": "cy"},
            "issue": {"number": 3, "title": "Crash", "html_url": "https://i"}});
        assert_eq!(
            message("issues", p),
            "[o/r] Issue #3 opened by cy: Crash\nhttps://i"
        );
    }

    #[test]
    fn release_published() {
        let p = json!({"action": "published", "repository": {"full_name": "o/r"},
            "release": {"tag_name": "v1.2.0", "name": "Spring", "html_url": "https://rel"}});
        assert_eq!(
            message("release", p),
            "[o/r] Release v1.2.0 published: Spring\nhttps://rel"
        );
    }

    #[test]
    fn completed_workflow_run() {
        let p = json!({"action": "completed", "repository": {"full_name": "o/r"},
            "workflow_run": {"name": "CI", "conclusion": "failure", "head_branch": "main",
                "head_commit": {"message": "Bump deps"}, "html_url": "https://run"}});
        assert_eq!(
            message("workflow_run", p),
            "[o/r] Workflow \"CI\" failure on main (Bump deps)\nhttps://run"
        );
    }

    #[test]
    fn workflow_run_in_progress_is_skipped() {
        assert_eq!(
            decide("workflow_run", json!({"action": "in_progress"})),
            Decision::Skip
        );
    }

    #[test]
    fn push_deleting_a_branch_has_no_head_commit() {
        let p = json!({"ref": "refs/heads/old", "repository": {"full_name": "o/r"},
            "pusher": {"name": "ana"}, "commits": [], "head_commit": null, "compare": "https://c"});
        assert_eq!(
            message("push", p),
            "[o/r] ana pushed 0 commits to old: ?\nhttps://c"
        );
    }

    #[test]
    fn missing_and_non_string_fields_read_as_question_marks() {
        let p = json!({"action": "opened", "repository": {"full_name": 5},
            "issue": {"title": null, "html_url": {"a": [1]}}});
        assert_eq!(message("issues", p), "[?] Issue #null opened by ?: ?\n?");
    }

    #[test]
    fn a_payload_outside_githubs_schema_does_not_parse() {
        for body in [
            r#"{"repository": "o/r"}"#,
            r#"{"commits": 2}"#,
            r#"{"action": "opened", "action": "closed"}"#,
        ] {
            let error = serde_json::from_str::<Payload>(body).unwrap_err();
            assert!(
                parse_error(error).starts_with("payload does not follow GitHub's schema: "),
                "{body}"
            );
        }
    }

    #[test]
    fn a_body_that_is_not_json_says_so() {
        let error = serde_json::from_str::<Payload>("{\"action\": ").unwrap_err();
        assert!(parse_error(error).starts_with("body is not JSON: "));
    }

    #[test]
    fn text_without_escapes_is_borrowed_from_the_body() {
        let body = r#"{"action": "opened", "issue": {"title": "a \"quoted\" title"}}"#;
        let p: Payload = serde_json::from_str(body).unwrap();
        assert!(matches!(p.action, Text::Given(Cow::Borrowed("opened"))));
        assert!(matches!(&p.issue.title, Text::Given(Cow::Owned(t)) if t == "a \"quoted\" title"));
    }
}
