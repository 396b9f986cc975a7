//! The MCP tools: one table, [`TOOLS`], each entry a name, a description an agent reads, the
//! [`Scope`] a credential needs to see and call it, the JSON Schema of its arguments (derived
//! from the argument struct) and how its arguments become a request to the operator API. A tool
//! is a request to the API's own handlers ([`super::dispatch`]), so it answers what the API
//! answers, redactions included: there is no second implementation; a subscription tool's
//! request carries the agent's credential, so the API caps and audits it as the agent's.

use std::sync::Arc;

use axum::http::Method;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::super::api_spend::SpendQuery;
use super::super::dry_run::DryRunBody;
use super::super::request_query::RequestsQuery;
use super::super::run_query::RunsQuery;
use crate::config::mcp::Scope;
use crate::subscription::record::Spec;

/// One tool of the MCP server.
pub(super) struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// What a credential needs to see the tool listed and to call it.
    pub scope: Scope,
    /// Whether the tool changes nothing (MCP's `readOnlyHint`).
    pub read_only: bool,
    /// Whether what it changes is gone for good (MCP's `destructiveHint`).
    pub destructive: bool,
    /// The JSON Schema of its arguments.
    pub schema: fn() -> Arc<JsonObject>,
    /// The operator API request its arguments make, or why they are invalid.
    pub request: fn(JsonObject) -> Result<ApiRequest, String>,
}

/// A request to the operator API, relative to `/api`.
pub(super) struct ApiRequest {
    pub method: Method,
    /// Path and query.
    pub target: String,
    pub body: Option<Value>,
}

/// Every tool, in the order they are listed.
pub(super) const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "search_requests",
        description: "Search the request log: every webhook request hookgate received, accepted \
            or refused, newest first. Each filter narrows the result; give none to list the latest. \
            A failed delivery is a request with status 4xx or 5xx, or one whose runs failed (see \
            show_run). The answer has `requests` and, when there are more, `next` (pass it back \
            as `before`).",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<RequestsQuery>,
        request: |args| Ok(get("/requests", args)),
    },
    ToolSpec {
        name: "show_request",
        description: "One recorded request: what it was, what it became (its status, error, \
            reason, mapping and runIds), the replays of it, and the headers and body captured \
            (credential headers and secrets redacted), as the operator API shows it.",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<RequestId>,
        request: |args| {
            let RequestId { id } = parse(args)?;
            Ok(call(
                Method::GET,
                format!("/requests/{}", segment(&id)),
                None,
            ))
        },
    },
    ToolSpec {
        name: "list_runs",
        description: "Agent runs, newest first: the work accepted requests became (a model turn, \
            a wake, a forward). A failed delivery shows here as status `error`, `timeout` or \
            `forward_failed`. The answer has `runs` and, when there are more, `next` (pass it \
            back as `before`).",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<RunsQuery>,
        request: |args| Ok(get("/runs", args)),
    },
    ToolSpec {
        name: "show_run",
        description: "One agent run: its status, attempts, error, the request that made it, and \
            its reply and delivery.",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<RunId>,
        request: |args| {
            let RunId { run_id } = parse(args)?;
            Ok(call(
                Method::GET,
                format!("/runs/{}", segment(&run_id)),
                None,
            ))
        },
    },
    ToolSpec {
        name: "spend",
        description: "Model tokens and runs spent per mapping and per agent since a time \
            (default the last 24 hours), against their budgets.",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<SpendQuery>,
        request: |args| Ok(get("/spend", args)),
    },
    ToolSpec {
        name: "replay_request",
        description: "Send a captured request through its hook again, as the mappings are now \
            (a new request, recorded with `replayOf`). Use it to redo a failed delivery once its \
            cause is fixed. Answers the new request's id, its status and what the hook answered.",
        scope: Scope::Replay,
        read_only: false,
        destructive: false,
        schema: schema_for_type::<RequestId>,
        request: |args| {
            let RequestId { id } = parse(args)?;
            let target = format!("/requests/{}/replay", segment(&id));
            Ok(call(Method::POST, target, None))
        },
    },
    ToolSpec {
        name: "dry_run",
        description: "Try a candidate configuration (the whole hookgate config file, JSON5) on \
            recorded requests, oldest first, without running anything: which requests would \
            become other than they became (another mapping, status or message). Reads none of \
            the server's environment or secrets.",
        scope: Scope::Read,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<DryRunBody>,
        request: |args| {
            let body = Some(Value::Object(args));
            Ok(call(Method::POST, "/requests/dry-run".into(), body))
        },
    },
    ToolSpec {
        name: "list_subscriptions",
        description: "Subscriptions: hooks made at runtime, each with its own URL and signing \
            secret, checked like the configuration's mappings. Each shows its name, provider, \
            url, events, whether it is paused, its mapping and `createdBy` (`mcp:<credential>` \
            when an agent made it). Never a secret.",
        scope: Scope::Subscriptions,
        read_only: true,
        destructive: false,
        schema: schema_for_type::<NoArguments>,
        request: |args| {
            let NoArguments {} = parse(args)?;
            Ok(call(Method::GET, "/hooks".into(), None))
        },
    },
    ToolSpec {
        name: "create_subscription",
        description: "Create a subscription, live at once: a hook whose deliveries from a \
            provider (GitHub, Stripe, ...) become agent runs (or wakes or chat notifications). \
            Answers its `url` and its signing `secret`: give both to the sender now (e.g. as the \
            GitHub webhook's payload URL and secret). The secret is shown this once; no tool \
            shows it again. The operator caps what an agent may create (mcp.subscriptions: how \
            many, which actions, the highest budget and lane); a subscription that leaves its \
            budget or lane unset gets the cap, and one asking for more is refused, naming the cap.",
        scope: Scope::Subscriptions,
        read_only: false,
        destructive: false,
        schema: schema_for_type::<Spec>,
        request: |args| {
            let body = Some(Value::Object(args));
            Ok(call(Method::POST, "/hooks".into(), body))
        },
    },
    ToolSpec {
        name: "test_subscription",
        description: "Send a signed sample delivery of the subscription's provider (GitHub's \
            ping, or the first event it admits) through hookgate as a sender would, and answer \
            what it became: the status, the answer and the request's record (filtered, refused \
            and why, or the run it started). Only subscriptions agents made.",
        scope: Scope::Subscriptions,
        read_only: false,
        destructive: false,
        schema: schema_for_type::<SubscriptionName>,
        request: |args| subscription_action(args, "test"),
    },
    ToolSpec {
        name: "pause_subscription",
        description: "Pause a subscription: its URL answers as an unknown hook until it is \
            resumed; it is kept with its secret. Only subscriptions agents made.",
        scope: Scope::Subscriptions,
        read_only: false,
        destructive: false,
        schema: schema_for_type::<SubscriptionName>,
        request: |args| subscription_action(args, "pause"),
    },
    ToolSpec {
        name: "resume_subscription",
        description: "Resume a paused subscription: its URL takes deliveries again, with the \
            same secret. Only subscriptions agents made.",
        scope: Scope::Subscriptions,
        read_only: false,
        destructive: false,
        schema: schema_for_type::<SubscriptionName>,
        request: |args| subscription_action(args, "resume"),
    },
    ToolSpec {
        name: "delete_subscription",
        description: "Delete a subscription: its URL stops taking deliveries and its secret is \
            gone for good (the request log keeps what it received). Only subscriptions agents \
            made.",
        scope: Scope::Subscriptions,
        read_only: false,
        destructive: true,
        schema: schema_for_type::<SubscriptionName>,
        request: |args| {
            let SubscriptionName { name } = parse(args)?;
            let target = format!("/hooks/{}", segment(&name));
            Ok(call(Method::DELETE, target, None))
        },
    },
];

/// `POST /api/hooks/{name}/{action}` for the subscription `args` names.
fn subscription_action(args: JsonObject, action: &str) -> Result<ApiRequest, String> {
    let SubscriptionName { name } = parse(args)?;
    let target = format!("/hooks/{}/{action}", segment(&name));
    Ok(call(Method::POST, target, None))
}

/// The tool named `name`.
pub(super) fn tool(name: &str) -> Option<&'static ToolSpec> {
    TOOLS.iter().find(|tool| tool.name == name)
}

/// A recorded request.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RequestId {
    /// The request's id, as search_requests lists it (`id`).
    id: String,
}

/// A subscription.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubscriptionName {
    /// The subscription's name, as list_subscriptions gives it (`name`).
    name: String,
}

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NoArguments {}

/// An agent run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RunId {
    /// The run's id (`runId`, as list_runs and show_request give it).
    run_id: String,
}

fn parse<T: DeserializeOwned>(args: JsonObject) -> Result<T, String> {
    serde_json::from_value(Value::Object(args)).map_err(|e| format!("invalid arguments: {e}"))
}

fn call(method: Method, target: String, body: Option<Value>) -> ApiRequest {
    ApiRequest {
        method,
        target,
        body,
    }
}

/// A GET of `path` with `args` as its query, as the API names them: the API's own parsing
/// checks them (an unknown name or a bad value is its 400, naming the parameter).
fn get(path: &str, args: JsonObject) -> ApiRequest {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in args {
        match value {
            Value::Null => {}
            Value::String(text) => {
                query.append_pair(&name, &text);
            }
            other => {
                query.append_pair(&name, &other.to_string());
            }
        }
    }
    let query = query.finish();
    let target = match query.is_empty() {
        true => path.to_string(),
        false => format!("{path}?{query}"),
    };
    call(Method::GET, target, None)
}

/// `id` as one path segment: percent-encoded, so that it cannot reach another endpoint.
fn segment(id: &str) -> String {
    form_urlencoded::byte_serialize(id.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_stays_one_path_segment() {
        assert_eq!(segment("../config"), "..%2Fconfig");
    }

    #[test]
    fn filters_become_the_apis_query() {
        let args = serde_json::json!({"hook": "a b", "status": "5xx", "limit": 3});
        let Value::Object(args) = args else {
            unreachable!()
        };
        let request = (tool("search_requests").unwrap().request)(args).unwrap();
        assert_eq!(request.target, "/requests?hook=a+b&status=5xx&limit=3");
    }

    #[test]
    fn every_tool_has_an_object_schema() {
        for tool in TOOLS {
            assert_eq!((tool.schema)()["type"], "object", "{}", tool.name);
        }
    }
}
