//! `edge.*` built into the node's [`EdgeRole`]: an edge with its pull token and bounds, a
//! private node with the edge it dials, or neither (docs/edge.md).

use std::collections::HashSet;

use super::ConfigError;
use super::mcp::OtherTokens;
use super::model::{
    DEFAULT_EDGE_MAX_PENDING, DEFAULT_EDGE_MAX_PENDING_BYTES, DEFAULT_EDGE_MAX_PENDING_PER_ROUTE,
    EdgeConfig, EdgeLinkConfig, EdgeServeConfig,
};
use super::secret::{ConfigFiles, secret};
use super::store::StoreSettings;
use crate::hook::token::TokenDigest;

/// Which of the two roles of docs/edge.md this node plays.
#[derive(Debug, Clone, Default)]
pub enum EdgeRole {
    /// Neither: hooks are run here as they arrive.
    #[default]
    None,
    /// An edge: hook requests are stored for a private node, never run here.
    Serve(EdgeServe),
    /// A private node: it pulls from an edge.
    Link(EdgeLink),
}

/// What an edge accepts and how much it keeps.
#[derive(Debug, Clone)]
pub struct EdgeServe {
    /// The private node's credential for `/edge/pull` and `/edge/ack`.
    pub pull_token: TokenDigest,
    /// Hook names stored without the hook token.
    pub routes: HashSet<String>,
    pub max_pending: u64,
    pub max_pending_per_route: u64,
    pub max_pending_bytes: u64,
}

/// The edge a private node pulls from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeLink {
    /// The edge's base URL, without a trailing `/`.
    pub url: String,
    /// Sent as `Authorization: Bearer`; never logged.
    pub pull_token: String,
}

impl EdgeRole {
    /// The edge's settings, when this node is one.
    pub fn serve(&self) -> Option<&EdgeServe> {
        match self {
            EdgeRole::Serve(serve) => Some(serve),
            _ => None,
        }
    }

    /// Whether `other` is an edge where this is none, or the reverse, or bounds its queue
    /// otherwise: what only a restart applies.
    pub fn serve_differs(&self, other: &EdgeRole) -> bool {
        let bounds = |serve: &EdgeServe| {
            (
                serve.max_pending,
                serve.max_pending_per_route,
                serve.max_pending_bytes,
            )
        };
        self.serve().map(bounds) != other.serve().map(bounds)
    }

    /// The edge this node pulls from, when it is a private node.
    pub fn link(&self) -> Option<&EdgeLink> {
        match self {
            EdgeRole::Link(link) => Some(link),
            _ => None,
        }
    }
}

/// Builds `edge`; each problem names its key, never a value. A pull token equal to the gateway
/// token or the hook token (`others`) is refused: it would be one credential doing both jobs.
pub(super) fn edge_role(
    edge: &EdgeConfig,
    store: &StoreSettings,
    others: &OtherTokens<'_>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> EdgeRole {
    let EdgeConfig { serve, link } = edge;
    match (serve, link) {
        (None, None) => EdgeRole::None,
        (Some(_), Some(_)) => {
            problems.push(ConfigError::invalid(
                key!(EdgeConfig.link),
                "a node is an edge (edge.serve) or dials one (edge.link), not both",
            ));
            EdgeRole::None
        }
        (Some(serve), None) => {
            edge_serve(serve, others, files, problems).map_or(EdgeRole::None, EdgeRole::Serve)
        }
        (None, Some(link)) => {
            if store.nats().is_some() {
                problems.push(ConfigError::invalid(
                    key!(EdgeConfig.link),
                    "needs the embedded store (gateway.store kind embedded): a private node records what it pulled in the same SQLite commit as its work",
                ));
            }
            edge_link(link, others, files, problems).map_or(EdgeRole::None, EdgeRole::Link)
        }
    }
}

fn edge_serve(
    serve: &EdgeServeConfig,
    others: &OtherTokens<'_>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<EdgeServe> {
    let key = key!(EdgeServeConfig.pull_token);
    let token = secret(serve.pull_token.clone(), &key, files, problems);
    let Some(token) = token else {
        problems.push(ConfigError::invalid(
            key,
            "is required: the private node's credential",
        ));
        return None;
    };
    if reused(&token, others) {
        problems.push(ConfigError::invalid(key, REUSED));
        return None;
    }
    let mut routes = HashSet::new();
    for (i, route) in serve.routes.iter().enumerate() {
        let name = route.trim_matches('/');
        if name.is_empty() || name.contains(['?', '#']) {
            problems.push(ConfigError::invalid(
                format!("{}[{i}]", key!(EdgeServeConfig.routes)),
                "must be a hook name (what follows hooks.path)",
            ));
        }
        routes.insert(name.to_string());
    }
    Some(EdgeServe {
        pull_token: TokenDigest::of(&token),
        routes,
        max_pending: serve.max_pending.unwrap_or(DEFAULT_EDGE_MAX_PENDING).max(1),
        max_pending_per_route: serve
            .max_pending_per_route
            .unwrap_or(DEFAULT_EDGE_MAX_PENDING_PER_ROUTE)
            .max(1),
        max_pending_bytes: serve
            .max_pending_bytes
            .unwrap_or(DEFAULT_EDGE_MAX_PENDING_BYTES)
            .max(1),
    })
}

fn edge_link(
    link: &EdgeLinkConfig,
    others: &OtherTokens<'_>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> Option<EdgeLink> {
    let url_key = key!(EdgeLinkConfig.url);
    let url = match link.url.as_deref().map(reqwest::Url::parse) {
        None => {
            problems.push(ConfigError::invalid(
                url_key,
                "is required: the edge's base URL",
            ));
            None
        }
        Some(Ok(url)) if allowed_scheme(&url) => {
            Some(url.as_str().trim_end_matches('/').to_string())
        }
        Some(_) => {
            problems.push(ConfigError::invalid(
                url_key,
                "must be an https:// URL (http:// only to a loopback address)",
            ));
            None
        }
    };
    let token_key = key!(EdgeLinkConfig.pull_token);
    let token = secret(link.pull_token.clone(), &token_key, files, problems);
    match &token {
        None => problems.push(ConfigError::invalid(
            token_key,
            "is required: the edge's edge.serve.pullToken",
        )),
        Some(token) if reused(token, others) => {
            problems.push(ConfigError::invalid(token_key, REUSED));
        }
        Some(_) => {}
    }
    Some(EdgeLink {
        url: url?,
        pull_token: token?,
    })
}

/// What a pull token equal to another credential is told.
const REUSED: &str = "must differ from the gateway token and the hook token: a credential that pulls must not also submit hooks or open the API";

/// Whether `token` is the gateway token or the hook token.
fn reused(token: &str, others: &OtherTokens<'_>) -> bool {
    others.gateway == Some(token) || others.hooks.is_some_and(|hooks| hooks.matches(Some(token)))
}

/// `https`, or `http` to a loopback address: the pull token and every stored request cross it.
fn allowed_scheme(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let ip = host.trim_start_matches('[').trim_end_matches(']');
    match url.scheme() {
        "https" => !host.is_empty(),
        "http" => {
            host == "localhost"
                || ip
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}
