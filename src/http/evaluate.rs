//! What a mapped hook request becomes, decided and not yet done (docs/hooks.md): the first
//! mapping whose path, source and conditions match (when only the conditions fail, the request
//! is `filtered`); its action, from its templates and, when it has one, its transform; for a
//! `forEach` mapping, one action per element of a payload list (the gmail preset's `messages`).
//! Nothing here stores: the live path ([`super::mapped`]) submits what [`evaluate`] decided,
//! and a dry run (`super::dry_run`) reports it.

use std::borrow::Cow;
use std::time::Instant;

use axum::http::{HeaderMap, Uri};
use serde_json::Value;

use super::filtered;
use super::reply::{HookError, MappingFailure, Refusal};
use super::request::{HookRequest, mapping_by_id};
use crate::config::HookSettings;
use crate::gateway::requests::TransformVerdict;
use crate::gateway::runtime_clock::now_rfc3339;
use crate::hook::credentials::CredentialHeaders;
use crate::mapping::{
    self, FanOut, FinishedAction, Mapping, RenderBudget, Selection, TemplateContext,
};
use crate::transform::{
    CallOutcome, Reply, SlotShare, TransformEngine, TransformFailure, TransformInput,
};

/// What a mapped request becomes. A refusal (no mapping, a mapping its admission does not
/// open, a failed transform, an action that does not finish) is the evaluation's error.
pub(super) enum Evaluation<'m> {
    /// Mappings matched its path and none's conditions held; `reason` names each with the
    /// condition it found unmet.
    Filtered { reason: String },
    /// The mapping's actions, in order: at least one.
    Actions {
        mapping: &'m Mapping,
        actions: Vec<FinishedAction>,
    },
    /// Its transform answered the client itself.
    OwnReply(Reply),
    /// The mapping matched with nothing to do: its transform skipped, or a `forEach` list was
    /// empty.
    Skipped,
}

/// Who learns of an evaluation's steps as they happen: the request log's trace and the
/// metrics on the live path, the dry run's report on a trial.
pub(super) trait Observer {
    /// Whose share of the transform call slots the evaluation's calls take.
    fn slot_share(&self) -> SlotShare;
    /// The mapping that matched.
    fn mapping(&self, mapping: &Mapping);
    /// A transform call of `mapping` ended, started at `started`. A failure is the observer's
    /// to log: the live path's is an error, a trial's is what it reports.
    fn transform(
        &self,
        mapping: &Mapping,
        started: Instant,
        outcome: Result<TransformVerdict, &TransformFailure>,
    );
}

/// Evaluates `request` against `hooks` (its mappings, templates and the transforms loaded
/// with them), calling transforms through `engine`. Costs a template render per action, all of
/// them within one budget of `hooks.render_limit` bytes, and a transform call per payload of a
/// mapping that has one; stores nothing.
pub(super) async fn evaluate<'m>(
    engine: &TransformEngine,
    hooks: &'m HookSettings,
    request: &HookRequest<'_>,
    observer: &impl Observer,
) -> Result<Evaluation<'m>, HookError> {
    let headers = &request.parts.headers;
    let mapping = match mapping::find(&hooks.mappings, request.name, headers, request.payload) {
        Selection::Matched(mapping) => mapping,
        Selection::Filtered(considered) => {
            let refusal = |mapping: &Mapping| admits(hooks, request, mapping);
            let reason = filtered::reason_if_admitted(&considered, refusal)?;
            return Ok(Evaluation::Filtered { reason });
        }
        Selection::Unmatched => return Err(HookError::NotFound),
    };
    observer.mapping(mapping);
    admits(hooks, request, mapping)?;
    let payloads: Vec<Cow<'_, Value>> = match mapping.for_each.as_deref() {
        None => vec![Cow::Borrowed(request.payload)],
        Some(key) => {
            let fan_out = FanOut::of(request.payload, key);
            if fan_out.dropped > 0 {
                tracing::warn!(mapping = %mapping.id, dropped = fan_out.dropped, limit = mapping::MAX_FAN_OUT, "forEach elements beyond the limit dropped");
            }
            fan_out.payloads.into_iter().map(Cow::Owned).collect()
        }
    };
    let mut headers = transform_headers(&request.parts.headers, &hooks.credentials);
    let mut query = query_pairs(request.parts.uri.query());
    let now = now_rfc3339();
    let mut actions = Vec::with_capacity(payloads.len());
    // One budget for the whole request: a `forEach` list must not multiply it.
    let mut budget = RenderBudget::for_request(hooks.render_limit);
    for (index, payload) in payloads.iter().enumerate() {
        let ctx = TemplateContext {
            name: request.name,
            now: &now,
            headers: &headers,
            query: &query,
            payload,
        };
        let mut action = mapping.render(&ctx, &mut budget).inspect_err(|too_large| {
            tracing::info!(mapping = %mapping.id, limit = too_large.limit, payloads = payloads.len(), "hook mapping templates render past the limit");
        })?;
        if let Some(spec) = &mapping.transform {
            let body = match payload {
                // An element of a `forEach` list reaches the transform as its own payload.
                Cow::Owned(one) => one.to_string().into_bytes(),
                Cow::Borrowed(_) => request.body.to_vec(),
            };
            // The last payload's call takes the headers and query: no template renders after it.
            let (headers, query) = if index + 1 == payloads.len() {
                (std::mem::take(&mut headers), std::mem::take(&mut query))
            } else {
                (headers.clone(), query.clone())
            };
            let input = TransformInput {
                name: request.name.to_string(),
                url: request_target(&request.parts.uri),
                headers,
                query,
                body,
                mapping_id: mapping.id.clone(),
                config: spec.config.clone(),
                export_name: spec.export.clone(),
            };
            let call = Call {
                engine,
                hooks,
                mapping,
                module: &spec.module,
            };
            match call.run(input, observer).await? {
                CallOutcome::Run(decided) => action = action.overlay(decided),
                CallOutcome::Merge(overrides) => action = action.merge(*overrides)?,
                CallOutcome::Keep => {}
                CallOutcome::Skip => continue,
                CallOutcome::Respond(reply) => return Ok(Evaluation::OwnReply(reply)),
            }
        }
        actions.push(action.finish()?);
    }
    if actions.is_empty() {
        return Ok(Evaluation::Skipped);
    }
    Ok(Evaluation::Actions { mapping, actions })
}

/// Whether the way `request` was admitted opens `mapping`. A signature admits its own mapping,
/// and another of the same name only when that one checks signatures exactly as its own does
/// (the conditions of several mappings of one provider sharing its secret): a payload steering
/// the request (by `source` or by conditions) to any other mapping needs the hook token. The
/// hook token opens every mapping but those whose signature refuses it
/// (`signature.acceptToken: false`).
fn admits(
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    mapping: &Mapping,
) -> Result<(), HookError> {
    match request.signed {
        Some(signed)
            if signed.mapping_id != mapping.id
                && !same_check(mapping_by_id(hooks, &signed.mapping_id), mapping) =>
        {
            tracing::info!(signed = %signed.mapping_id, matched = %mapping.id, "signed request matched another mapping");
            Err(HookError::Unauthorized(Refusal::SignedForAnother {
                signed: signed.mapping_id.clone(),
                matched: mapping.id.clone(),
            }))
        }
        None if mapping
            .signature
            .as_ref()
            .is_some_and(|s| !s.token_accepted) =>
        {
            tracing::info!(mapping = %mapping.id, "hook token refused: the mapping accepts its signature only");
            Err(HookError::Unauthorized(Refusal::TokenRefused(
                mapping.id.clone(),
            )))
        }
        _ => Ok(()),
    }
}

/// Whether `mapping` checks signatures as `signed`, whose signature admitted the request, does
/// (`None`: that mapping is not configured, so no mapping checks as it did).
fn same_check(signed: Option<&Mapping>, mapping: &Mapping) -> bool {
    match (
        signed.and_then(|s| s.signature.as_ref()),
        &mapping.signature,
    ) {
        (Some(verified), Some(own)) => verified.checks_as(own),
        _ => false,
    }
}

/// One call of a mapping's transform, as its configuration loaded it.
struct Call<'a> {
    engine: &'a TransformEngine,
    hooks: &'a HookSettings,
    mapping: &'a Mapping,
    module: &'a str,
}

impl Call<'_> {
    async fn run(
        self,
        input: TransformInput,
        observer: &impl Observer,
    ) -> Result<CallOutcome, HookError> {
        let Call {
            engine,
            hooks,
            mapping,
            module,
        } = self;
        let loaded = hooks.transforms.get().and_then(|set| set.get(module));
        let Some(loaded) = loaded else {
            tracing::error!(mapping = %mapping.id, %module, "transform not loaded");
            return Err(HookError::MappingFailed(MappingFailure::NotLoaded {
                module: module.to_string(),
            }));
        };
        let started = Instant::now();
        let outcome = engine
            .call(
                &loaded,
                input,
                hooks.limits_for(mapping),
                observer.slot_share(),
            )
            .await;
        match outcome {
            Ok(outcome) => {
                tracing::debug!(mapping = %mapping.id, elapsed = ?started.elapsed(), "transform answered");
                let verdict = match &outcome {
                    CallOutcome::Run(_) => TransformVerdict::Run,
                    CallOutcome::Merge(_) => TransformVerdict::Merge,
                    CallOutcome::Keep => TransformVerdict::Keep,
                    CallOutcome::Skip => TransformVerdict::Skip,
                    CallOutcome::Respond(_) => TransformVerdict::Respond,
                };
                observer.transform(mapping, started, Ok(verdict));
                Ok(outcome)
            }
            Err(failure) => {
                observer.transform(mapping, started, Err(&failure));
                Err(match failure {
                    TransformFailure::Busy(_) => HookError::TransformsBusy,
                    failure => HookError::MappingFailed(failure.into()),
                })
            }
        }
    }
}

/// Headers as transforms and templates see them: names lower-case (as `http` keeps them),
/// secrets removed: the hook token's carriers, cookies, and every scheme's shared secret, such
/// as GitLab's token, whichever mapping's scheme it belongs to (a replayed request carries what
/// its capture kept, which an older version may have let through).
fn transform_headers(
    headers: &HeaderMap,
    credentials: &CredentialHeaders,
) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !credentials.is_secret(name.as_str()))
        .map(|(name, value)| {
            (
                name.as_str().to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The request target as received, path and query: for the origin form a server is sent
/// (`/hooks/x?y`), the text `http` already holds, copied as it is rather than formatted again.
fn request_target(uri: &Uri) -> String {
    match (uri.scheme(), uri.path_and_query()) {
        (None, Some(target)) => target.as_str().to_owned(),
        _ => uri.to_string(),
    }
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The target a transform sees as `url` is the one `Uri` formats, whichever form it came in.
    #[test]
    fn the_request_target_is_the_uri_as_received() {
        for target in [
            "/hooks/github",
            "/hooks/github?x=1&y=%20z",
            "/hooks/github?",
            "http://example.test/hooks/github?x=1",
            "example.test:443",
        ] {
            let uri: Uri = target.parse().unwrap();
            assert_eq!(request_target(&uri), uri.to_string(), "{target}");
        }
    }
}
