//! One recorded request tried on a candidate configuration: rebuilt from its capture, admitted
//! as its original was (the operator's authority, like a replay; a signature's admission held
//! to its mapping), and evaluated as the live path evaluates it, up to admission's policies.
//! Nothing is stored, no transform call is counted in the metrics, no lockout is counted.

use std::sync::Mutex;
use std::time::Instant;

use axum::http::request::Parts;
use axum::http::{Method, Request, StatusCode, Uri};
use bytes::Bytes;

use super::report::{ActionView, Ending, Now, Untried};
use crate::config::HookSettings;
use crate::gateway::requests::{RequestRecord, TransformVerdict};
use crate::hook::payload;
use crate::hook::signature::AdmittingSignature;
use crate::intake::{self, Actions, Intake};
use crate::mapping::Mapping;
use crate::transform::{SlotShare, TransformEngine, TransformFailure};

use crate::http::body::{parse_json, parse_mapped};
use crate::http::evaluate::{Evaluation, Observer, evaluate};
use crate::http::hooks::{hook_name, replay_signature, under_prefix};
use crate::http::reply::HookError;
use crate::http::request::HookRequest;
use crate::http::submit::intake_of;

/// A captured request, as the hook endpoints would see it again.
pub(super) struct Captured<'a> {
    pub record: &'a RequestRecord,
    pub parts: Parts,
    pub body: Bytes,
}

impl<'a> Captured<'a> {
    /// The request `record` captured: `headers`, `query` and `body` as kept.
    pub fn new(
        record: &'a RequestRecord,
        headers: axum::http::HeaderMap,
        query: Option<&str>,
        body: Vec<u8>,
    ) -> Option<Captured<'a>> {
        let target = match query {
            Some(query) => format!("{}?{query}", record.target),
            None => record.target.clone(),
        };
        let uri: Uri = target.parse().ok()?;
        let (mut parts, ()) = Request::new(()).into_parts();
        parts.method = Method::POST;
        parts.uri = uri;
        parts.headers = headers;
        Some(Captured {
            record,
            parts,
            body: Bytes::from(body),
        })
    }
}

/// What `captured` would become under `hooks`, transforms called through `engine`;
/// [`Untried::Busy`] when a transform call found no slot in time, which says nothing of the
/// candidate: live requests hold the slots.
pub(super) async fn try_on(
    engine: &TransformEngine,
    hooks: &HookSettings,
    captured: &Captured<'_>,
) -> Result<Now, Untried> {
    let noted = Noted::default();
    // As a replay: one a signature admitted takes that mapping only, and none when it is gone.
    let signed = match replay_signature(hooks, captured.record) {
        Ok(signed) => signed,
        Err(gone) => {
            let mut now = Now::unacted(StatusCode::CONFLICT, Ending::Refused, None, None);
            now.error = Some(gone.to_string());
            return Ok(now);
        }
    };
    // The live path names a signature's mapping before its conditions are tried: a signed
    // request filtered then was recorded under it, and is reported so now.
    if let Some(signature) = &signed {
        *noted.mapping.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(signature.mapping_id.clone());
    }
    match outcome(engine, hooks, captured, signed.as_ref(), &noted).await {
        Ok(now) => Ok(now),
        Err(err) => refused(err, noted.take()),
    }
}

/// How a trial refused with `err` is reported, `mapping` the one that matched.
fn refused(err: HookError, mapping: Option<String>) -> Result<Now, Untried> {
    if matches!(err, HookError::TransformsBusy) {
        return Err(Untried::Busy);
    }
    let mut now = Now::unacted(err.status(), Ending::Refused, mapping, err.reason());
    now.error = Some(err.client_message().into_owned());
    Ok(now)
}

async fn outcome(
    engine: &TransformEngine,
    hooks: &HookSettings,
    captured: &Captured<'_>,
    signed: Option<&AdmittingSignature>,
    noted: &Noted,
) -> Result<Now, HookError> {
    let rest = under_prefix(captured.parts.uri.path(), &hooks.path).ok_or(HookError::NotFound)?;
    let name = hook_name(rest);
    let payload = match name {
        "wake" | "agent" => parse_json(&captured.body)?,
        _ => parse_mapped(&captured.parts.headers, &captured.body)?,
    };
    let request = HookRequest {
        name,
        parts: &captured.parts,
        body: &captured.body,
        payload: &payload,
        signed,
    };
    let (mapping, actions) = match name {
        "" => return Err(HookError::NotFound),
        "wake" => {
            let wake = payload::wake_request(&payload)?;
            let intake = Intake {
                keys: [None; 5],
                path: "",
                event_source: "hook:wake".into(),
                request_id: None,
            };
            (None, intake::preview(hooks, &intake, Actions::Wake(wake))?)
        }
        "agent" => {
            let agent = payload::agent_request(&payload)?;
            let actions = Actions::Agent(agent.action);
            (None, intake::preview(hooks, &intake_of(&request), actions)?)
        }
        _ => {
            let unacted =
                |status, ending, reason| Ok(Now::unacted(status, ending, noted.take(), reason));
            match evaluate(engine, hooks, &request, noted).await? {
                Evaluation::Actions { mapping, actions } => {
                    let actions = Actions::Mapped { mapping, actions };
                    (
                        Some(mapping),
                        intake::preview(hooks, &intake_of(&request), actions)?,
                    )
                }
                Evaluation::Filtered { reason } => {
                    return unacted(StatusCode::NO_CONTENT, Ending::Filtered, Some(reason));
                }
                Evaluation::Skipped => {
                    return unacted(StatusCode::NO_CONTENT, Ending::Skipped, None);
                }
                Evaluation::OwnReply(reply) => {
                    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
                    return unacted(status, Ending::Reply, None);
                }
            }
        }
    };
    Ok(Now {
        status: StatusCode::OK.as_u16(),
        ending: Ending::Actions,
        mapping_id: mapping.map(|m| m.id.clone()),
        actions: actions.into_iter().map(ActionView::of_preview).collect(),
        error: None,
        reason: None,
    })
}

/// What the evaluation's steps tell a dry run: the mapping that matched. Transform calls are
/// neither traced nor counted in the metrics: they are trials.
#[derive(Default)]
struct Noted {
    mapping: Mutex<Option<String>>,
}

impl Noted {
    fn take(&self) -> Option<String> {
        self.mapping
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Observer for Noted {
    /// Trials take the dry runs' share: live requests keep their mappings' whole share.
    fn slot_share(&self) -> SlotShare {
        SlotShare::Trials
    }

    fn mapping(&self, mapping: &Mapping) {
        *self.mapping.lock().unwrap_or_else(|p| p.into_inner()) = Some(mapping.id.clone());
    }

    fn transform(&self, _: &Mapping, _: Instant, _: Result<TransformVerdict, &TransformFailure>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_found_no_slot_is_untried_and_any_other_refusal_is_reported() {
        let busy = refused(HookError::TransformsBusy, Some("github".into()));
        assert_eq!(busy.err(), Some(Untried::Busy));
        let now = refused(HookError::NotFound, None).unwrap();
        assert!(now.fails());
        assert_eq!(now.ending, Ending::Refused);
    }
}
