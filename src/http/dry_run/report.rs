//! What a dry run reports of each recorded request: what it became then (its record, and the
//! runs it made as the store still has them) and what it would become now, under the
//! candidate configuration, and whether the two differ.

use axum::http::StatusCode;
use serde::Serialize;

use crate::gateway::requests::{RequestOutcome, RequestRecord};
use crate::gateway::{EventOutcome, RunRecord};
use crate::intake::Preview;
use crate::mapping::ActionKind;

/// One action: as a request made it then, or as it would make it now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ActionView {
    kind: ActionKind,
    /// A wake's event text; only now (the log keeps no event's text).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// An agent run's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// The agent that runs it, or whose main session gets the event (null for a wake then).
    agent_id: Option<String>,
    /// An agent run's session key; null now when admission would make a fresh one.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_key: Option<String>,
    /// Set when the text or message shown was cut to [`SHOWN`] bytes (compared whole).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

/// The most bytes of an action's text or message an answer shows: 10,000 trials of forEach
/// actions of 64 KiB messages would otherwise make an answer of gigabytes. Compared whole
/// before they are cut.
pub(super) const SHOWN: usize = 2048;

impl ActionView {
    /// Cuts the text and message to [`SHOWN`] bytes (on a character boundary) for the answer.
    fn cut_for_answer(&mut self) {
        for shown in [&mut self.text, &mut self.message].into_iter().flatten() {
            if shown.len() > SHOWN {
                let mut end = SHOWN;
                while !shown.is_char_boundary(end) {
                    end -= 1;
                }
                shown.truncate(end);
                self.truncated = true;
            }
        }
    }
}

impl ActionView {
    /// An action as admission would make it now.
    pub fn of_preview(preview: Preview) -> ActionView {
        match preview {
            Preview::Wake(event) => ActionView {
                kind: ActionKind::Wake,
                text: Some(event.text),
                message: None,
                agent_id: Some(event.agent),
                session_key: None,
                truncated: false,
            },
            Preview::Notify(message) => ActionView {
                kind: ActionKind::Notify,
                text: None,
                message: Some(message),
                agent_id: None,
                session_key: None,
                truncated: false,
            },
            Preview::Agent(run) => ActionView {
                kind: ActionKind::Agent,
                text: None,
                message: Some(run.action.message),
                agent_id: Some(run.target_agent),
                session_key: run.session_key_chosen.then_some(run.session_key),
                truncated: false,
            },
        }
    }

    /// A run as the store keeps it; a notification's (its session `notify:<run id>`, see
    /// docs/hooks.md#notify-only-hooks) as the notify action it was.
    fn of_run(record: &RunRecord) -> ActionView {
        let run = &record.run.admitted;
        if run.session_key.starts_with("notify:") {
            return ActionView {
                kind: ActionKind::Notify,
                text: None,
                message: Some(run.action.message.clone()),
                agent_id: None,
                session_key: None,
                truncated: false,
            };
        }
        ActionView {
            kind: ActionKind::Agent,
            text: None,
            message: Some(run.action.message.clone()),
            agent_id: Some(run.target_agent.clone()),
            session_key: Some(run.session_key.clone()),
            truncated: false,
        }
    }

    /// Whether `now` would make what this action made: the same kind, and for a run the same
    /// message and agent, and the same session key unless `now`'s would be fresh.
    fn same_as(&self, now: &ActionView) -> bool {
        self.kind == now.kind
            && (self.kind == ActionKind::Wake
                || (self.message == now.message
                    && self.agent_id == now.agent_id
                    && (now.session_key.is_none() || self.session_key == now.session_key)))
    }
}

/// What a request became then, from its record.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Then {
    status: u16,
    mapping_id: Option<String>,
    run_ids: Vec<String>,
    event_outcome: Option<EventOutcome>,
    error: Option<String>,
    outcome: Option<RequestOutcome>,
    /// Its runs that the store still has, in order, then its wake when it made one.
    actions: Vec<ActionView>,
}

impl Then {
    /// `record`'s outcome, with `runs`, the ones of its runs the store still has.
    pub fn of(record: &RequestRecord, runs: &[RunRecord]) -> Then {
        let mut actions: Vec<ActionView> = runs.iter().map(ActionView::of_run).collect();
        if record.event_outcome.is_some() {
            actions.push(ActionView {
                kind: ActionKind::Wake,
                text: None,
                message: None,
                agent_id: None,
                session_key: None,
                truncated: false,
            });
        }
        Then {
            status: record.status,
            mapping_id: record.mapping_id.clone(),
            run_ids: record.run_ids.clone(),
            event_outcome: record.event_outcome,
            error: record.error.clone(),
            outcome: record.outcome,
            actions,
        }
    }

    /// Whether the request succeeded: answered below 400.
    pub fn succeeded(&self) -> bool {
        self.status < 400
    }
}

/// How a request would end now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Its actions would be admitted.
    Actions,
    /// Mappings matched its path, none's conditions held.
    Filtered,
    /// Its mapping matched with nothing to do.
    Skipped,
    /// Its transform would answer it itself.
    Reply,
    /// It would be refused: `error` says how.
    Refused,
}

crate::hook::wire::wire_names!(Ending {
    Actions => "actions",
    Filtered => "filtered",
    Skipped => "skipped",
    Reply => "reply",
    Refused => "refused",
});

/// What a request would become now, under the candidate configuration.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Now {
    pub status: u16,
    pub ending: Ending,
    pub mapping_id: Option<String>,
    pub actions: Vec<ActionView>,
    /// The text the client would get when refused.
    pub error: Option<String>,
    /// Why, in the operator's words: a refusal's cause, the conditions a filtered request
    /// failed.
    pub reason: Option<String>,
}

impl Now {
    /// A request that would admit no action, ended as `ending`.
    pub fn unacted(
        status: StatusCode,
        ending: Ending,
        mapping_id: Option<String>,
        reason: Option<String>,
    ) -> Now {
        Now {
            status: status.as_u16(),
            ending,
            mapping_id,
            actions: Vec::new(),
            error: None,
            reason,
        }
    }

    /// Whether the request would fail: answered 400 or above.
    pub fn fails(&self) -> bool {
        self.status >= 400
    }

    /// Whether the request would become other than it became: another status, mapping or
    /// ending, other kinds or numbers of actions, or, where the store still has every run it
    /// made and the request was not batched, other messages, agents or session keys. One a
    /// full lane or a spent budget refused differs when it would not reach admission under
    /// its mapping now.
    pub fn differs_from(&self, then: &Then) -> bool {
        // A full lane or a spent budget refused it then: the runtime's state, which a dry run
        // does not reproduce. Like with like, it differs when now it would not reach
        // admission under the same mapping.
        if matches!(
            then.outcome,
            Some(RequestOutcome::Limited | RequestOutcome::Refused)
        ) {
            return self.ending != Ending::Actions || then.mapping_id != self.mapping_id;
        }
        let filtered_then = then.outcome == Some(RequestOutcome::Filtered);
        let count = |kind| self.actions.iter().filter(|a| a.kind == kind).count();
        let runs = count(ActionKind::Agent) + count(ActionKind::Notify);
        let actions_differ = then.run_ids.len() != runs
            || then.event_outcome.is_some() != (count(ActionKind::Wake) > 0);
        // A batched request's run is its batch's, whose message holds every item of it: not
        // this request's own message, which is left out of the comparison.
        let batched = then.outcome == Some(RequestOutcome::Batched);
        let known_then = !batched && then.actions.len() == self.actions.len();
        let content_differs = known_then
            && then
                .actions
                .iter()
                .zip(&self.actions)
                .any(|(then, now)| !then.same_as(now));
        then.status != self.status
            || then.mapping_id != self.mapping_id
            || filtered_then != (self.ending == Ending::Filtered)
            || actions_differ
            || content_differs
    }
}

/// Why a request was not tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Untried {
    /// Its body was not kept: what it would become is not guessed at.
    NotCaptured,
    /// It was refused for its authentication, which a dry run does not try again.
    Unauthenticated,
    /// Its path was too long to be recorded whole.
    PathCut,
    /// A transform call found no slot in time: live requests held them. It says nothing of
    /// the candidate, and a later dry run may try it.
    Busy,
    /// It left the log (retention pruned it) while the dry run was under way.
    Gone,
    /// It repeated an earlier request (a redelivery, an idempotency key used again) and was
    /// answered with that one's work: a dry run keeps no claims, so what it would make now is
    /// its original's, which is tried as itself.
    Repeat,
}

crate::hook::wire::wire_names!(Untried {
    NotCaptured => "notCaptured",
    Unauthenticated => "unauthenticated",
    PathCut => "pathCut",
    Busy => "busy",
    Gone => "gone",
    Repeat => "repeat",
});

/// One request of the dry run.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Trial {
    pub id: String,
    pub at: String,
    pub hook: Option<String>,
    /// Whether its body was kept (a request refused for its authentication never has it).
    pub captured: bool,
    pub then: Then,
    /// Null when it was not tried (`untried` says why).
    pub now: Option<Now>,
    pub untried: Option<Untried>,
    pub differs: bool,
}

impl Trial {
    /// Cuts what the answer shows of each action's text and message (see [`SHOWN`]), once
    /// `differs` was decided on them whole.
    pub fn cut_for_answer(&mut self) {
        let now = self.now.iter_mut().flat_map(|now| now.actions.iter_mut());
        for action in self.then.actions.iter_mut().chain(now) {
            action.cut_for_answer();
        }
    }
}

/// How many requests the dry run took, and what it found.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Totals {
    pub requests: usize,
    pub captured: usize,
    pub not_captured: usize,
    pub differing: usize,
    /// Requests that succeeded then and would fail now.
    pub now_failing: usize,
    /// Captured requests that were not tried all the same (each one's `untried` says why).
    pub untried: usize,
}

impl Totals {
    pub fn count(&mut self, trial: &Trial) {
        self.requests += 1;
        if trial.captured {
            self.captured += 1;
        } else {
            self.not_captured += 1;
        }
        if trial.differs {
            self.differing += 1;
        }
        if trial.captured && trial.untried.is_some() {
            self.untried += 1;
        }
        if trial
            .now
            .as_ref()
            .is_some_and(|now| now.fails() && trial.then.succeeded())
        {
            self.now_failing += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(message: &str) -> ActionView {
        ActionView {
            kind: ActionKind::Agent,
            text: None,
            message: Some(message.into()),
            agent_id: Some("main".into()),
            session_key: None,
            truncated: false,
        }
    }

    #[test]
    fn a_long_message_is_compared_whole_and_shown_cut() {
        let mut long = agent(&"é".repeat(SHOWN));
        long.cut_for_answer();
        assert!(long.truncated);
        assert!(long.message.as_ref().unwrap().len() <= SHOWN);
        let mut short = agent("short");
        short.cut_for_answer();
        assert!(!short.truncated);
        assert_eq!(short.message.as_deref(), Some("short"));
    }

    #[test]
    fn a_batched_requests_message_is_its_batchs_and_is_not_compared() {
        let then = |outcome| Then {
            status: 200,
            mapping_id: Some("m".into()),
            run_ids: vec!["run".into()],
            event_outcome: None,
            error: None,
            outcome,
            actions: vec![agent("item 1\nitem 2")],
        };
        let mut now = Now::unacted(StatusCode::OK, Ending::Actions, Some("m".into()), None);
        now.actions.push(agent("item 1"));
        assert!(!now.differs_from(&then(Some(RequestOutcome::Batched))));
        assert!(now.differs_from(&then(None)));
    }
}
