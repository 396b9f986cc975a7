//! Mapped hooks, `POST {prefix}/<name>` (docs/hooks.md): the first mapping whose path, source and
//! conditions match (when only the conditions fail, the request is `filtered`); its action, from
//! its templates and, when it has one, its transform; for a `forEach` mapping, one action per
//! element of a payload list (the gmail preset's `messages`).

use std::borrow::Cow;
use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::AppState;
use super::filtered;
use super::reply::{HookError, MappingFailure, Refusal};
use super::request::HookRequest;
use super::submit;
use super::trace::Trace;
use crate::config::HookSettings;
use crate::gateway::requests::TransformVerdict;
use crate::gateway::runtime_clock::now_rfc3339;
use crate::hook::credentials::CredentialHeaders;
use crate::mapping::{self, FanOut, Mapping, Selection, TemplateContext};
use crate::metrics::{FailureLabels, MappingLabels};
use crate::transform::{CallOutcome, Reply, TransformFailure, TransformInput};

/// Serves a request whose name is neither `wake` nor `agent`.
pub(super) async fn mapped(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    trace: &Trace,
) -> Result<Response, HookError> {
    let headers = &request.parts.headers;
    let mapping = match mapping::find(&hooks.mappings, request.name, headers, request.payload) {
        Selection::Matched(mapping) => mapping,
        Selection::Filtered(considered) => {
            let refusal = |mapping: &Mapping| admits(request, mapping);
            return filtered::answer(request, &considered, refusal, trace);
        }
        Selection::Unmatched => return Err(HookError::NotFound),
    };
    trace.mapping(&mapping.id);
    admits(request, mapping)?;
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
    let headers = transform_headers(&request.parts.headers, &hooks.credentials);
    let query = query_pairs(request.parts.uri.query());
    let now = now_rfc3339();
    let mut actions = Vec::with_capacity(payloads.len());
    for payload in &payloads {
        let ctx = TemplateContext {
            name: request.name,
            now: &now,
            headers: &headers,
            query: &query,
            payload,
        };
        let mut action = mapping.render(&ctx);
        if let Some(spec) = &mapping.transform {
            let body = match payload {
                // An element of a `forEach` list reaches the transform as its own payload.
                Cow::Owned(one) => one.to_string().into_bytes(),
                Cow::Borrowed(_) => request.body.to_vec(),
            };
            let input = TransformInput {
                name: request.name.to_string(),
                url: request.parts.uri.to_string(),
                headers: headers.clone(),
                query: query.clone(),
                body,
                mapping_id: mapping.id.clone(),
                config: spec.config.clone(),
                export_name: spec.export.clone(),
            };
            match run_transform(app, hooks, mapping, &spec.module, input, trace).await? {
                CallOutcome::Run(decided) => action = action.overlay(decided),
                CallOutcome::Merge(overrides) => action = action.merge(*overrides)?,
                CallOutcome::Keep => {}
                CallOutcome::Skip => continue,
                CallOutcome::Respond(reply) => return Ok(own_reply(reply)),
            }
        }
        actions.push(action.finish()?);
    }
    if actions.is_empty() {
        // Skipped by the transform, or a `forEach` list with nothing in it.
        tracing::info!(mapping = %mapping.id, "mapping matched with nothing to do");
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    submit::mapped(app, hooks, request, mapping, actions, trace).await
}

/// Whether the way `request` was admitted opens `mapping`. A signature admits its own mapping,
/// and another of the same name only when that one checks signatures exactly as its own does
/// (the conditions of several mappings of one provider sharing its secret): a payload steering
/// the request (by `source` or by conditions) to any other mapping needs the hook token. The
/// hook token opens every mapping but those whose signature refuses it
/// (`signature.acceptToken: false`).
fn admits(request: &HookRequest<'_>, mapping: &Mapping) -> Result<(), HookError> {
    match request.signed {
        Some(signed)
            if !std::ptr::eq(signed.mapping, mapping) && !same_check(signed.mapping, mapping) =>
        {
            tracing::info!(signed = %signed.mapping.id, matched = %mapping.id, "signed request matched another mapping");
            Err(HookError::Unauthorized(Refusal::SignedForAnother {
                signed: signed.mapping.id.clone(),
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

/// Whether `mapping` checks signatures as `signed`, whose signature admitted the request, does.
fn same_check(signed: &Mapping, mapping: &Mapping) -> bool {
    match (&signed.signature, &mapping.signature) {
        (Some(verified), Some(own)) => verified.checks_as(own),
        _ => false,
    }
}

async fn run_transform(
    app: &AppState,
    hooks: &HookSettings,
    mapping: &Mapping,
    module: &str,
    input: TransformInput,
    trace: &Trace,
) -> Result<CallOutcome, HookError> {
    let loaded = hooks.transforms.get().and_then(|set| set.get(module));
    let Some(loaded) = loaded else {
        tracing::error!(mapping = %mapping.id, %module, "transform not loaded");
        return Err(HookError::MappingFailed(MappingFailure::NotLoaded {
            module: module.to_string(),
        }));
    };
    let started = Instant::now();
    let outcome = app
        .transforms
        .engine()
        .call(&loaded, input, hooks.limits_for(mapping))
        .await;
    app.metrics
        .transform_duration
        .get_or_create(&MappingLabels {
            mapping: mapping.id.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
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
            trace.transform(verdict, started, None);
            Ok(outcome)
        }
        Err(failure) => {
            trace.transform(TransformVerdict::Failed, started, Some(failure.cause()));
            app.metrics
                .transform_failures
                .get_or_create(&FailureLabels {
                    mapping: mapping.id.clone(),
                    cause: failure.cause(),
                })
                .inc();
            tracing::error!(mapping = %mapping.id, %module, cause = failure.cause(), %failure, "transform failed");
            Err(match failure {
                TransformFailure::Busy(_) => HookError::TransformsBusy,
                failure => HookError::MappingFailed(failure.into()),
            })
        }
    }
}

fn own_reply(reply: Reply) -> Response {
    let content_type = HeaderValue::from_str(&reply.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    (status, [(header::CONTENT_TYPE, content_type)], reply.body).into_response()
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

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}
