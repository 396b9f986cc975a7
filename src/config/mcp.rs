//! `mcp.tokens` into the [`McpSettings`] of the MCP endpoint (docs/mcp.md): each token read as
//! a secret and kept as a digest, its scopes parsed once into [`Scopes`]. A token that is also
//! the gateway token, the hook token or another entry's is refused: a credential is one
//! principal, and the request log must be able to say which.

use super::ConfigError;
use super::mcp_caps::{AgentCaps, agent_caps};
use super::model::{McpConfig, McpTokenConfig};
use super::secret::{ConfigFiles, secret};
use crate::hook::token::TokenDigest;

/// What an MCP credential may do. A tool names the one scope it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Read the request log, runs and spend; dry-run a candidate configuration.
    Read,
    /// Replay a recorded request.
    Replay,
    /// List, create, test, pause, resume and delete runtime subscriptions, within
    /// `mcp.subscriptions`.
    Subscriptions,
}

impl Scope {
    /// The scope's name in `mcp.tokens[].scopes`, and in the tools' refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Replay => "replay",
            Scope::Subscriptions => "subscriptions",
        }
    }

    fn parse(name: &str) -> Option<Scope> {
        [Scope::Read, Scope::Replay, Scope::Subscriptions]
            .into_iter()
            .find(|scope| scope.as_str() == name)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Scope`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    /// Whether the set holds `scope`.
    pub fn allows(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    fn with(self, scope: Scope) -> Scopes {
        Scopes(self.0 | scope.bit())
    }
}

/// One credential of the MCP endpoint.
#[derive(Debug)]
pub struct McpCredential {
    /// What the request log records for its calls.
    pub name: String,
    pub token: TokenDigest,
    pub scopes: Scopes,
}

/// The credentials of the MCP endpoint (none leaves it closed), and the caps on what agents
/// subscribe to (none: agents create no subscription).
#[derive(Debug, Default)]
pub struct McpSettings {
    pub credentials: Vec<McpCredential>,
    pub subscriptions: Option<AgentCaps>,
}

impl McpSettings {
    /// The credential whose token `presented` is, if any.
    pub fn credential(&self, presented: Option<&str>) -> Option<&McpCredential> {
        self.credentials.iter().find(|c| c.token.matches(presented))
    }
}

/// The tokens other credentials of the configuration hold, which no MCP token may be.
pub(super) struct OtherTokens<'a> {
    pub gateway: Option<&'a str>,
    pub hooks: Option<&'a TokenDigest>,
}

/// `mcp.*` into [`McpSettings`], every problem pushed to `problems`.
pub(super) fn mcp_settings(
    mcp: McpConfig,
    others: &OtherTokens<'_>,
    files: ConfigFiles<'_>,
    problems: &mut Vec<ConfigError>,
) -> McpSettings {
    let mut credentials: Vec<McpCredential> = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    for (index, entry) in mcp.tokens.into_iter().enumerate() {
        let name = entry
            .name
            .clone()
            .unwrap_or_else(|| format!("token-{index}"));
        let scopes = scopes(&entry, index, problems);
        let key = key!(McpTokenConfig[index].token);
        let before = problems.len();
        let Some(token) = secret(Some(entry.token), &key, files, problems) else {
            // `secret` said why when it could not read a file; an empty value it leaves to us.
            if problems.len() == before {
                problems.push(ConfigError::invalid(key, "must not be empty"));
            }
            continue;
        };
        let reused = others.gateway == Some(token.as_str())
            || others
                .hooks
                .is_some_and(|hooks| hooks.matches(Some(&token)))
            || tokens.contains(&token);
        if reused {
            problems.push(ConfigError::invalid(
                key,
                "must differ from the gateway token, the hook token and every other MCP token",
            ));
            continue;
        }
        if credentials.iter().any(|c| c.name == name) {
            problems.push(ConfigError::invalid(
                key!(McpTokenConfig[index].name),
                "must differ from every other MCP token's name",
            ));
        }
        credentials.push(McpCredential {
            name,
            token: TokenDigest::of(&token),
            scopes,
        });
        tokens.push(token);
    }
    let subscriptions = agent_caps(mcp.subscriptions, problems);
    McpSettings {
        credentials,
        subscriptions,
    }
}

/// `mcp.tokens[index].scopes`: at least one, each a [`Scope`]'s name.
fn scopes(entry: &McpTokenConfig, index: usize, problems: &mut Vec<ConfigError>) -> Scopes {
    let key = key!(McpTokenConfig[index].scopes);
    if entry.scopes.is_empty() {
        problems.push(ConfigError::invalid(
            key.clone(),
            "must name at least one of read, replay, subscriptions",
        ));
    }
    let mut scopes = Scopes::default();
    for name in &entry.scopes {
        match Scope::parse(name) {
            Some(scope) => scopes = scopes.with(scope),
            None => problems.push(ConfigError::invalid(
                key.clone(),
                "each scope must be one of read, replay, subscriptions",
            )),
        }
    }
    scopes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_allows_only_its_scopes() {
        let scopes = Scopes::default().with(Scope::Read);
        assert!(scopes.allows(Scope::Read));
        assert!(!scopes.allows(Scope::Replay));
        assert!(!scopes.allows(Scope::Subscriptions));
    }
}
