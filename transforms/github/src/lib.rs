//! GitHub webhooks as short agent messages.
//!
//! The event type comes from the `x-github-event` header. `push`, `pull_request`, `issues`,
//! `release` and completed `workflow_run` events become one agent run each; `ping` and
//! everything else are skipped (204), so GitHub's delivery log stays green. A request without the
//! header is not a GitHub delivery and gets a 400.

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
        let payload: Value =
            serde_json::from_slice(&req.body).map_err(|e| format!("body is not JSON: {e}"))?;
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

/// The string at `path` (object keys, outermost first), or `?`. Walks the keys rather than
/// calling `Value::pointer`, which splits its argument and allocates an unescaped copy of every
/// segment: on a fresh instance per request that was most of this transform's allocations.
fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(value, |value, key| value.get(key))
        .and_then(Value::as_str)
        .unwrap_or("?")
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// Decides what a GitHub event means. Pure, so it is tested natively.
pub fn describe(event: &str, p: &Value) -> Decision {
    let repo = text(p, &["repository", "full_name"]);
    let message = match event {
        "push" => {
            let branch = text(p, &["ref"]).trim_start_matches("refs/heads/");
            let commits = p["commits"].as_array().map_or(0, Vec::len);
            let head = first_line(text(p, &["head_commit", "message"]));
            format!(
                "[{repo}] {} pushed {commits} commit{} to {branch}: {head}\n{}",
                text(p, &["pusher", "name"]),
                if commits == 1 { "" } else { "s" },
                text(p, &["compare"]),
            )
        }
        "pull_request" => format!(
            "[{repo}] Pull request #{} {} by {}: {}\n{}",
            p["number"],
            merged_or(p, text(p, &["action"])),
            text(p, &["pull_request", "user", "login"]),
            text(p, &["pull_request", "title"]),
            text(p, &["pull_request", "html_url"]),
        ),
        "issues" => format!(
            "[{repo}] Issue #{} {} by {}: {}\n{}",
            p["issue"]["number"],
            text(p, &["action"]),
            text(p, &["sender", "login"]),
            text(p, &["issue", "title"]),
            text(p, &["issue", "html_url"]),
        ),
        "release" => format!(
            "[{repo}] Release {} {}: {}\n{}",
            text(p, &["release", "tag_name"]),
            text(p, &["action"]),
            text(p, &["release", "name"]),
            text(p, &["release", "html_url"]),
        ),
        "workflow_run" if text(p, &["action"]) == "completed" => format!(
            "[{repo}] Workflow \"{}\" {} on {} ({})\n{}",
            text(p, &["workflow_run", "name"]),
            text(p, &["workflow_run", "conclusion"]),
            text(p, &["workflow_run", "head_branch"]),
            first_line(text(p, &["workflow_run", "head_commit", "message"])),
            text(p, &["workflow_run", "html_url"]),
        ),
        _ => return Decision::Skip,
    };
    Decision::Message(message)
}

/// A closed pull request that was merged reads `merged`.
fn merged_or<'a>(p: &Value, action: &'a str) -> &'a str {
    if action == "closed" && p["pull_request"]["merged"].as_bool() == Some(true) {
        "merged"
    } else {
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(event: &str, p: Value) -> String {
        match describe(event, &p) {
            Decision::Message(m) => m,
            Decision::Skip => panic!("skipped"),
        }
    }

    #[test]
    fn ping_is_skipped() {
        assert_eq!(describe("ping", &json!({"zen": "x"})), Decision::Skip);
    }

    #[test]
    fn unknown_events_are_skipped() {
        assert_eq!(describe("star", &json!({})), Decision::Skip);
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
            describe("workflow_run", &json!({"action": "in_progress"})),
            Decision::Skip
        );
    }
}
