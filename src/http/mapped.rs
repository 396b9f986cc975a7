//! Mapped hooks, `POST {prefix}/<name>` (docs/hooks.md): what the request becomes
//! ([`evaluate`]), then done: its actions admitted and committed, its transform's own answer
//! sent, or `204` for a request filtered or with nothing to do.

use std::time::Instant;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::evaluate::{Evaluation, Observer, evaluate};
use super::filtered::Filtered;
use super::reply::HookError;
use super::request::HookRequest;
use super::submit;
use super::trace::Trace;
use crate::config::HookSettings;
use crate::gateway::requests::TransformVerdict;
use crate::mapping::Mapping;
use crate::metrics::{FailureLabels, MappingLabels, Metrics};
use crate::transform::{Reply, SlotShare, TransformFailure};

/// Serves a request whose name is neither `wake` nor `agent`.
pub(super) async fn mapped(
    app: &AppState,
    hooks: &HookSettings,
    request: &HookRequest<'_>,
    trace: &Trace,
) -> Result<Response, HookError> {
    let observer = Live {
        trace,
        metrics: &app.metrics,
    };
    match evaluate(app.transforms.engine(), hooks, request, &observer).await? {
        Evaluation::Filtered { reason } => {
            tracing::info!(hook = request.name, %reason, "request filtered");
            trace.filtered(reason);
            Ok(Filtered.into_response())
        }
        Evaluation::Actions { mapping, actions } => {
            submit::mapped(app, hooks, request, mapping, actions, trace).await
        }
        Evaluation::OwnReply(reply) => Ok(own_reply(reply)),
        Evaluation::Skipped => {
            tracing::info!(hook = request.name, "mapping matched with nothing to do");
            Ok(StatusCode::NO_CONTENT.into_response())
        }
    }
}

/// The live path's observer: the request log's trace and the transform metrics.
struct Live<'a> {
    trace: &'a Trace,
    metrics: &'a Metrics,
}

impl Observer for Live<'_> {
    fn slot_share(&self) -> SlotShare {
        SlotShare::Mapping
    }

    fn mapping(&self, mapping: &Mapping) {
        self.trace.mapping(&mapping.id);
    }

    fn transform(
        &self,
        mapping: &Mapping,
        started: Instant,
        outcome: Result<TransformVerdict, &TransformFailure>,
    ) {
        let labels = MappingLabels {
            mapping: mapping.id.clone(),
        };
        self.metrics
            .transform_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        match outcome {
            Ok(verdict) => self.trace.transform(verdict, started, None),
            Err(failure) => {
                let module = mapping.transform.as_ref().map(|t| t.module.as_str());
                tracing::error!(mapping = %mapping.id, module, cause = failure.cause(), %failure, "transform failed");
                self.trace
                    .transform(TransformVerdict::Failed, started, Some(failure.cause()));
                self.metrics
                    .transform_failures
                    .get_or_create(&FailureLabels {
                        mapping: mapping.id.clone(),
                        cause: failure.cause(),
                    })
                    .inc();
            }
        }
    }
}

fn own_reply(reply: Reply) -> Response {
    let content_type = HeaderValue::from_str(&reply.content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    (status, [(header::CONTENT_TYPE, content_type)], reply.body).into_response()
}
