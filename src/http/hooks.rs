//! The hook endpoints: the request pipeline of docs/http-contract.md as a router. [`dispatch`]
//! takes the configured prefix off (step 1; the prefix is reloadable, so it is checked per
//! request, as `nest` would at a fixed one) and [`serve`] runs the rest: the trace, the
//! token-in-query refusal (step 2), then [`routes`]: the method (step 3, the router's), each
//! handler's extractors (step 4, authentication; step 6, the body) and the hook (step 7).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use tower::ServiceExt;

use super::AppState;
use super::credential::{Authenticated, Credential};
use super::reply::{HookError, Refused};
use super::request::{ContextParts, HookContext, Origin, Replay, mapping_by_id};
use super::request_id::RequestId;
use super::trace::{self, Trace};
use super::{mapped, signed, submit};
use crate::config::{HookSettings, Settings};
use crate::gateway::requests::{self, Repeat, RequestRecord, VerifiedBy};
use crate::hook::payload;
use crate::hook::signature::{AdmittingSignature, SecretUsed};

/// The hook endpoints of [`routes`]: cloning them costs a reference count's increment.
pub(super) type HookRoutes = Router;

/// The hook endpoints below the prefix, which [`dispatch`] has taken off: `/wake`, `/agent`, a
/// mapping's `/{*name}`, and `/` for a path that names no hook (404 once authenticated). Every
/// refusal, 404 and 405 included, is a [`HookError`]. Requests reach them through [`serve`],
/// which records each. Building it costs a few allocations: done once for the server, and once
/// per replay.
pub(super) fn routes(app: AppState) -> HookRoutes {
    Router::new()
        .route("/", post(unnamed))
        .route("/wake", post(wake))
        .route("/agent", post(agent))
        .route("/{*name}", post(mapped))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(app)
}

/// Serves every path the server's router does not know: under the prefix of the configuration
/// in force, [`routes`] with the prefix taken off, a trailing `/` ignored and leading ones
/// stripped (docs/http-contract.md, step 5), so that `/hooks//wake/` is routed as `/wake`; 404
/// elsewhere. The request keeps its URI as sent in its [`HookContext`]. Every request under the
/// prefix is answered with its record's id as `X-Request-Id` and labelled for the metrics.
pub(super) async fn dispatch(app: AppState, routes: HookRoutes, mut request: Request) -> Response {
    let settings = app.config.current();
    let Some(hooks) = settings.hooks.as_ref() else {
        return HookError::NotFound.into_response();
    };
    let Some(name) = under_prefix(request.uri().path(), &hooks.path).map(hook_name) else {
        return HookError::NotFound.into_response();
    };
    let label = HookLabel::of(hooks, name);
    let name = name.to_string();
    // Our own callers (an edge's link, an operator's test) say who the request is from.
    let origin = request.extensions_mut().remove::<Origin>();
    let origin = origin.unwrap_or(Origin::Sender);
    let Some(context) = aim(&mut request, settings, name, origin) else {
        return HookError::NotFound.into_response();
    };
    let mut response = serve(&app, routes, &context, request).await;
    response.extensions_mut().insert(label);
    response
}

/// Points `request` at hook `name`'s route, keeping its URI as sent, and what else the steps
/// need, in its [`HookContext`], which it returns. `None` when the name makes no URI (it comes
/// from one, so never).
fn aim(
    request: &mut Request,
    settings: Arc<Settings>,
    name: String,
    origin: Origin,
) -> Option<HookContext> {
    let routed = routed_uri(&name)?;
    let uri = std::mem::replace(request.uri_mut(), routed);
    let context = ContextParts {
        settings,
        uri,
        name,
        origin,
    };
    let context = HookContext::new(context);
    request.extensions_mut().insert(context.clone());
    Some(context)
}

/// The URI [`routes`] matches for hook `name`: `/` and the name, not percent-decoded.
fn routed_uri(name: &str) -> Option<Uri> {
    // The endpoints' own names from static text: formatting and parsing an owned copy cost
    // every wake and agent request an allocation and about 1k instructions.
    match name {
        "wake" => Some(Uri::from_static("/wake")),
        "agent" => Some(Uri::from_static("/agent")),
        _ => format!("/{name}").parse().ok(),
    }
}

/// Runs the steps of a request [`aim`]ed with `context`: its record ([`trace::record`]), step 2
/// (a query parameter named `token` is refused whatever else is wrong with the request), the
/// delivery slot of replay protection ([`signed::settle_deliveries`]), then [`routes`]. The
/// steps before the method's stay outside the router: an answer from inside a route that does
/// not take the method would carry its `Allow`.
async fn serve(
    app: &AppState,
    routes: HookRoutes,
    context: &HookContext,
    request: Request,
) -> Response {
    // Plain calls, not `from_fn` layers: each of those cost every request a boxed clone of the
    // service below it, a boxed future, moves of the futures and an extraction of its own.
    trace::record(app, context, request, async |request| {
        if query_names_token(context.uri.query()) {
            return HookError::QueryToken.into_response();
        }
        if let Some(serve) = context.settings.edge.serve() {
            return super::edge::accept(app, serve, context, request).await;
        }
        signed::settle_deliveries(app, request, async |request| {
            match routes.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        })
        .await
    })
    .await
}

async fn method_not_allowed() -> HookError {
    HookError::MethodNotAllowed
}

async fn not_found() -> HookError {
    HookError::NotFound
}

/// A path that names no hook (`/hooks`, `/hooks/`): 404, once authenticated (step 5 comes
/// after step 4).
async fn unnamed(_: Credential) -> HookError {
    HookError::NotFound
}

/// `POST {prefix}/wake`.
async fn wake(
    State(app): State<AppState>,
    trace: Trace,
    hook: Authenticated,
) -> Result<Response, HookError> {
    let wake = payload::wake_request(&hook.payload)?;
    submit::wake(&app, hook.hooks()?, wake, "hook:wake".into(), &trace).await
}

/// `POST {prefix}/agent`.
async fn agent(
    State(app): State<AppState>,
    trace: Trace,
    hook: Authenticated,
) -> Result<Response, HookError> {
    let agent = payload::agent_request(&hook.payload)?;
    let run_timeout = hook.run_timeout();
    submit::agent(
        &app,
        hook.hooks()?,
        &hook.request(),
        agent,
        run_timeout,
        &trace,
    )
    .await
}

/// `POST {prefix}/<name>`: the first mapping that matches, else 404. The name is the
/// dispatcher's, not the route's parameter, which axum would percent-decode.
async fn mapped(
    State(app): State<AppState>,
    trace: Trace,
    hook: Authenticated,
) -> Result<Response, HookError> {
    mapped::mapped(&app, hook.hooks()?, &hook.request(), &trace).await
}

/// Sends a recorded request through the hook endpoints again, with the operator's authority in
/// place of its credential, through the mappings in force now. A replay admits no more than the
/// original was admitted for: a request refused for its authentication is not replayed, and one
/// that a signature admitted may run only the mapping whose signature it was. Its record links
/// to `original` and is committed before this returns. Returns the answer and the new record's
/// id.
pub(super) async fn replay(
    app: &AppState,
    original: &RequestRecord,
    headers: HeaderMap,
    query: Option<&str>,
    body: Bytes,
) -> Result<(Response, String), ReplayError> {
    replayable(original)?;
    let settings = app.config.current();
    let hooks = settings.hooks.as_ref().ok_or(ReplayError::HooksOff)?;
    let signed = replay_signature(hooks, original)?;
    let target = match query {
        Some(query) => format!("{}?{query}", original.target),
        None => original.target.clone(),
    };
    let uri: Uri = target.parse().map_err(|_| ReplayError::Gone)?;
    let rest = under_prefix(uri.path(), &hooks.path).ok_or(ReplayError::Gone)?;
    let name = hook_name(rest).to_string();
    let id = RequestId::new();
    let mut request = Request::new(Body::from(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    request.extensions_mut().insert(id.clone());
    let replay = Replay {
        of: original.id.clone(),
        signed,
    };
    let context =
        aim(&mut request, settings, name, Origin::Replay(replay)).ok_or(ReplayError::Gone)?;
    let response = serve(app, routes(app.clone()), &context, request).await;
    let refused = response.extensions().get::<Refused>();
    if refused.is_some_and(|Refused(err)| matches!(**err, HookError::StoreFull)) {
        return Err(ReplayError::StoreFull);
    }
    // The record takes the id, which is ours: see `Trace::begin`.
    Ok((response, id.as_str().to_string()))
}

/// The signature that admitted `original`, as its record keeps it, whose mapping must still be
/// configured: a replay runs no other. It carries no replay key: a replay is no delivery.
pub(super) fn replay_signature(
    hooks: &HookSettings,
    original: &RequestRecord,
) -> Result<Option<AdmittingSignature>, ReplayError> {
    let Some(signature) = original.signature.as_ref().filter(|s| s.verified) else {
        return Ok(None);
    };
    let mapping = original
        .mapping_id
        .as_deref()
        .and_then(|id| mapping_by_id(hooks, id))
        .ok_or(ReplayError::SignedMappingGone)?;
    Ok(Some(AdmittingSignature {
        mapping_id: mapping.id.clone(),
        scheme: signature.scheme.clone(),
        replay_key: None,
        secret: signature.secret.map(|verified| match verified {
            VerifiedBy::Previous => SecretUsed::Previous,
            VerifiedBy::Current => SecretUsed::Current,
        }),
    }))
}

/// Whether `original` may be replayed at all, before anything of it is read: not when it was
/// refused for its authentication (a replay would admit what the sender was refused), nor when
/// it was a repeat answered with an earlier request's work (a replay would run that request's
/// delivery a second time: its original is the one to replay).
pub(super) fn replayable(original: &RequestRecord) -> Result<(), ReplayError> {
    if original.status == StatusCode::UNAUTHORIZED.as_u16() {
        return Err(ReplayError::Unauthenticated);
    }
    if let Some(repeat) = repeat_of_record(original) {
        return Err(ReplayError::Repeat(repeat));
    }
    if requests::is_cut(&original.target) {
        return Err(ReplayError::Cut);
    }
    Ok(())
}

/// How `record` repeated an earlier request, if it did: as its record says, or for a copy
/// answered `409 delivery in progress` before such copies were marked, as its answer says (a
/// verified signature, no transform: the claim comes before it; a transform's own 409 names
/// its transform).
pub(super) fn repeat_of_record(record: &RequestRecord) -> Option<Repeat> {
    let unmarked_copy = record.status == StatusCode::CONFLICT.as_u16()
        && record.signature.as_ref().is_some_and(|s| s.verified)
        && record.transform.is_none();
    record
        .repeat
        .or(unmarked_copy.then_some(Repeat::Redelivery))
}

/// Why a recorded request cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("the request was refused for its authentication, so it cannot be replayed")]
    Unauthenticated,
    #[error("hooks are disabled")]
    HooksOff,
    #[error("the request's path was too long to be recorded whole")]
    Cut,
    #[error(
        "the request repeated an earlier one ({}), and a replay would run that one's work again: replay the original request",
        repeated(.0)
    )]
    Repeat(Repeat),
    #[error("the request's path is no longer under hooks.path")]
    Gone,
    #[error(
        "the mapping whose signature admitted the request is no longer configured, and a replay runs no other"
    )]
    SignedMappingGone,
    /// The replay was recorded, but what it became could not be: the store is full.
    #[error("store full; retry")]
    StoreFull,
}

/// How a repeat repeated its original, in the words of a replay's refusal.
fn repeated(repeat: &Repeat) -> &'static str {
    match repeat {
        Repeat::Idempotency => "the same idempotency key",
        Repeat::Redelivery => "the same signed delivery",
    }
}

/// The metrics labels of a request under the hook prefix, as the dispatcher decided them: the
/// route template and the hook name. Names no route or mapping knows are `<unknown>`, so a
/// client cannot create new time series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookLabel {
    pub route: String,
    pub hook: String,
}

impl HookLabel {
    fn of(hooks: &HookSettings, name: &str) -> HookLabel {
        let known = matches!(name, "wake" | "agent")
            || hooks.mappings.iter().any(|m| m.path() == Some(name));
        let hook = if known { name } else { "<unknown>" };
        HookLabel {
            route: format!("{}/{hook}", hooks.path),
            hook: hook.to_string(),
        }
    }
}

/// The hook a path names (what follows the prefix): leading `/`s stripped and one trailing `/`
/// ignored, so `/hooks/wake/` is `/hooks/wake` (docs/http-contract.md, step 5).
pub(super) fn hook_name(rest: &str) -> &str {
    let name = rest.trim_start_matches('/');
    name.strip_suffix('/').unwrap_or(name)
}

/// The part of `path` after `prefix` when `path` is the prefix or below it; case-sensitive and not
/// percent-decoded, so `/hooks%2Fwake` is not `/hooks/wake`.
pub(super) fn under_prefix<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Whether a query parameter is named `token` (after percent-decoding): a token in a URL ends up
/// in proxy and server logs, so it is refused whatever its value.
fn query_names_token(query: Option<&str>) -> bool {
    query.is_some_and(|q| form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "token"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::requests::{SignatureTrace, TransformTrace, TransformVerdict};

    #[test]
    fn a_409_copy_recorded_before_copies_were_marked_is_a_repeat_and_a_transform_409_not() {
        let copy = RequestRecord {
            status: 409,
            signature: Some(SignatureTrace {
                scheme: "github".into(),
                verified: true,
                secret: None,
            }),
            ..RequestRecord::default()
        };
        assert!(matches!(
            replayable(&copy),
            Err(ReplayError::Repeat(Repeat::Redelivery))
        ));
        let answered_by_transform = RequestRecord {
            transform: Some(TransformTrace {
                outcome: TransformVerdict::Respond,
                duration_ms: 1.0,
                failure: None,
            }),
            ..copy
        };
        assert!(replayable(&answered_by_transform).is_ok());
    }

    /// The record of a request a signature admitted, exactly as the version before the admitting
    /// signature had one type wrote it (to the store, a cluster's stream and the API).
    const SIGNED_RECORD_BEFORE: &str = concat!(
        r#"{"id":"q1","requestId":"","at":"","client":null,"method":"","target":"","#,
        r#""hook":"github","mappingId":"github","status":202,"error":null,"reason":null,"#,
        r#""durationMs":0.0,"transform":null,"signature":{"scheme":"github","verified":true},"#,
        r#""runIds":[],"eventOutcome":null,"suppressed":0,"replayOf":null,"repeat":null,"#,
        r#""outcome":null,"captured":false}"#,
    );

    #[test]
    fn a_signed_request_is_recorded_as_before() {
        let record = RequestRecord {
            id: "q1".into(),
            hook: Some("github".into()),
            mapping_id: Some("github".into()),
            status: 202,
            signature: Some(SignatureTrace {
                scheme: "github".into(),
                verified: true,
                secret: None,
            }),
            ..RequestRecord::default()
        };
        assert_eq!(
            serde_json::to_string(&record).unwrap(),
            SIGNED_RECORD_BEFORE
        );
        let read: RequestRecord = serde_json::from_str(SIGNED_RECORD_BEFORE).unwrap();
        assert_eq!(read, record);
    }

    #[test]
    fn prefix_matching_is_exact_and_segment_wise() {
        assert_eq!(under_prefix("/hooks", "/hooks"), Some(""));
        assert_eq!(under_prefix("/hooks/wake", "/hooks"), Some("/wake"));
        assert_eq!(under_prefix("/hooksx/wake", "/hooks"), None);
        assert_eq!(under_prefix("/Hooks/wake", "/hooks"), None);
    }

    #[test]
    fn a_name_is_routed_as_sent_but_for_its_slashes() {
        let routed = |path: &str| {
            let name = hook_name(under_prefix(path, "/hooks").unwrap());
            routed_uri(name).unwrap().to_string()
        };
        assert_eq!(routed("/hooks//wake/"), "/wake");
        assert_eq!(routed("/hooks/wake//"), "/wake/");
        assert_eq!(routed("/hooks"), "/");
        assert_eq!(routed("/hooks///"), "/");
        assert_eq!(routed("/hooks/%77ake"), "/%77ake");
        assert_eq!(routed("/hooks/a/b"), "/a/b");
    }

    #[test]
    fn token_query_parameter_is_recognised_after_decoding() {
        assert!(query_names_token(Some("token=x")));
        assert!(query_names_token(Some("a=1&token")));
        assert!(query_names_token(Some("%74oken=1")));
        assert!(!query_names_token(Some("tokens=1")));
        assert!(!query_names_token(Some("Token=1")));
        assert!(!query_names_token(None));
    }
}
