//! The MCP server's handler: lists the tools and resources the caller's scopes allow, calls a
//! tool (refusing one outside those scopes, listed or not), reads a resource, and records every
//! call and read in the request log ([`super::audit`]).

use rmcp::ErrorData;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};

use super::tools::{ApiRequest, TOOLS, ToolSpec, tool};
use super::{AppState, Caller, audit, dispatch};
use crate::config::mcp::Scope;

/// What an agent is told when it connects.
const INSTRUCTIONS: &str = "hookgate receives webhooks and turns them into agent runs. Search \
    its request log (search_requests, show_request), its runs (list_runs, show_run) and spend; \
    replay a request whose delivery failed (replay_request); try a configuration change on \
    recorded traffic (dry_run); list, create, test, pause, resume and delete subscriptions, hooks \
    made at runtime (create_subscription answers the URL and secret to give the sender, once). \
    The tools listed are those this credential's scopes allow.";

/// The resources: a URI, its name, what it holds, and the operator API request that reads it.
const RESOURCES: &[(&str, &str, &str, &str)] = &[
    (
        "hookgate://requests/recent",
        "recent-requests",
        "The 20 latest requests of the request log, newest first.",
        "/requests?limit=20",
    ),
    (
        "hookgate://runs/recent",
        "recent-runs",
        "The 20 latest agent runs, newest first.",
        "/runs?limit=20",
    ),
];

/// One MCP server per request (the transport is stateless); the caller comes with the request.
pub(super) struct McpServer {
    app: AppState,
}

impl McpServer {
    pub fn new(app: AppState) -> Self {
        McpServer { app }
    }
}

/// The caller [`super::require_credential`] admitted.
fn caller(context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("no MCP credential", None))
}

fn listed(spec: &ToolSpec) -> Tool {
    let annotations = ToolAnnotations::new()
        .read_only(spec.read_only)
        .destructive(spec.destructive);
    Tool::new(spec.name, spec.description, (spec.schema)()).with_annotations(annotations)
}

/// Records a call by `caller` of `what`, answered `status`.
fn record(app: &AppState, caller: &Caller, what: &str, status: u16, error: Option<String>) {
    let reason = format!("mcp {what} by credential {}", caller.name);
    audit(app, "/mcp", error, caller.client, status, Some(reason));
}

impl McpServer {
    async fn call(&self, caller: &Caller, request: CallToolRequestParams) -> CallToolResult {
        let name = request.name.as_ref();
        let what = format!("tools/call {name}");
        let Some(spec) = tool(name) else {
            let error = format!("no tool named {name}");
            record(&self.app, caller, &what, 404, Some(error.clone()));
            return CallToolResult::error(vec![ContentBlock::text(error)]);
        };
        if !caller.scopes.allows(spec.scope) {
            let error = refusal(spec.scope, &caller.name, name);
            record(&self.app, caller, &what, 403, Some(error.clone()));
            return CallToolResult::error(vec![ContentBlock::text(error)]);
        }
        let api_request = match (spec.request)(request.arguments.unwrap_or_default()) {
            Ok(api_request) => api_request,
            Err(error) => {
                record(&self.app, caller, &what, 400, Some(error.clone()));
                return CallToolResult::error(vec![ContentBlock::text(error)]);
            }
        };
        let answer = dispatch(&self.app, caller, api_request).await;
        let status = answer.status.as_u16();
        if answer.status.is_success() {
            record(&self.app, caller, &what, status, None);
            return CallToolResult::structured(answer.json);
        }
        let error = answer.json["error"].as_str().map(String::from);
        record(&self.app, caller, &what, status, error);
        let text = format!("{} (status {status})", answer.json);
        let mut result = CallToolResult::structured_error(answer.json);
        result.content = vec![ContentBlock::text(text)];
        result
    }
}

/// What a caller is told when a tool needs a scope its credential lacks.
fn refusal(scope: Scope, credential: &str, tool: &str) -> String {
    format!(
        "refused: the tool {tool} needs the {} scope, which the credential {credential} does \
         not have (mcp.tokens[].scopes)",
        scope.as_str()
    )
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("hookgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = caller(&context)?;
        let tools = TOOLS
            .iter()
            .filter(|spec| caller.scopes.allows(spec.scope))
            .map(listed)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context)?;
        Ok(self.call(&caller, request).await.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = caller(&context)?;
        let resources = match caller.scopes.allows(Scope::Read) {
            true => RESOURCES
                .iter()
                .map(|(uri, name, description, _)| {
                    Resource::new(*uri, *name)
                        .with_description(*description)
                        .with_mime_type("application/json")
                })
                .collect(),
            false => Vec::new(),
        };
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = caller(&context)?;
        let uri = request.uri;
        let what = format!("resources/read {uri}");
        let Some((_, _, _, target)) = RESOURCES.iter().find(|r| r.0 == uri) else {
            record(
                &self.app,
                &caller,
                &what,
                404,
                Some("no such resource".into()),
            );
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                None,
            ));
        };
        if !caller.scopes.allows(Scope::Read) {
            let error = refusal(Scope::Read, &caller.name, "resources/read");
            record(&self.app, &caller, &what, 403, Some(error.clone()));
            return Err(ErrorData::invalid_request(error, None));
        }
        let api_request = ApiRequest {
            method: axum::http::Method::GET,
            target: (*target).into(),
            body: None,
        };
        let answer = dispatch(&self.app, &caller, api_request).await;
        record(&self.app, &caller, &what, answer.status.as_u16(), None);
        if !answer.status.is_success() {
            return Err(ErrorData::internal_error(answer.json.to_string(), None));
        }
        let text = serde_json::to_string_pretty(&answer.json).unwrap_or_default();
        let contents = ResourceContents::text(text, uri).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
