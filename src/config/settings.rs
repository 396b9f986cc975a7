//! From the file as written to the [`Settings`] the server runs on: secrets read, values
//! normalised, every startup refusal of docs/configuration.md checked. All problems are
//! collected, not just the first, so that `hookgate check` can list them together.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::confine;
use super::connections::ConnectionSettings;
use super::hooks::{HookSettings, hook_settings};
use super::model::{
    DEFAULT_BIND, DEFAULT_PORT, DEFAULT_STATE_DIR, FileConfig, GatewayAuthConfig, GatewayConfig,
};
use super::runtime::{RuntimeSettings, runtime_settings};
use super::secret::{ConfigFiles, secret};
use super::{ConfigError, ConfigNotice};
use crate::client::TrustedProxies;
use crate::hook::policy::{AllowedAgents, normalize_agent_id};
use crate::hook::token::TokenDigest;
use crate::hook::{AgentDirectory, Channel};
use crate::transform::TransformLimits;

/// The validated, normalised configuration. Immutable: a reload builds a new one.
#[derive(Debug)]
pub struct Settings {
    /// The directory of the configuration file; relative paths are resolved against it.
    pub config_dir: PathBuf,
    pub bind: String,
    pub port: u16,
    /// Guards the operator API; `None` leaves the API closed to everyone.
    pub gateway_token: Option<TokenDigest>,
    /// Proxies whose forwarding header names the client, and which header that is.
    pub trusted_proxies: TrustedProxies,
    pub state_dir: PathBuf,
    pub group_commit: bool,
    /// The embedded SQLite store or a NATS JetStream cluster.
    pub store: super::store::StoreSettings,
    pub connections: ConnectionSettings,
    /// `/metrics` without the gateway token.
    pub metrics_public: bool,
    /// `None` when `hooks.enabled` is false: the prefix is then not served at all.
    pub hooks: Option<HookSettings>,
    /// The MCP endpoint's credentials (docs/mcp.md).
    pub mcp: super::mcp::McpSettings,
    pub agents: AgentDirectory,
    pub runtime: RuntimeSettings,
    /// OpenClaw keys of the file that hookgate took in its own form or left out, and what of
    /// it loses replies.
    pub notices: Vec<ConfigNotice>,
    /// The channels this configuration has logged as not configured, once each.
    pub missing_channels: MissingChannels,
    /// An edge, a private node that pulls from one, or neither (docs/edge.md).
    pub edge: super::edge::EdgeRole,
    /// `gateway.publicUrl` without a trailing `/`: how senders reach this node.
    pub public_url: Option<String>,
    /// `gateway.secretsKey`: seals the signing secrets of subscriptions at rest.
    pub secrets_key: Option<super::sealing::SecretsKey>,
    /// Callbacks and lifecycle webhooks (docs/outbound.md).
    pub outbound: super::outbound::OutboundSettings,
}

impl Settings {
    /// Logs the notices and the transform notices, one warning each: at start and after a
    /// reload.
    pub fn log_notices(&self) {
        for notice in self.notices.iter().chain(&self.transform_notices()) {
            tracing::warn!(key = %notice.key, "{}", notice.message);
        }
    }

    /// What the transforms loaded with these settings call for (none before they are loaded):
    /// each JavaScript component built by an older SDK, with the command that rebuilds it
    /// ([`super::transforms::outdated_javascript`]).
    pub fn transform_notices(&self) -> Vec<ConfigNotice> {
        self.hooks
            .as_ref()
            .map_or_else(Vec::new, super::transforms::outdated_javascript)
    }

    /// What the transform engine is sized for at start: its call slots and the memory of its
    /// instance pool (`hooks.transformLimits` with the largest memory cap of any mapping).
    pub fn engine_limits(&self) -> TransformLimits {
        self.hooks
            .as_ref()
            .map_or_else(TransformLimits::default, HookSettings::engine_limits)
    }
}

impl Settings {
    /// Validates `file` (read from a file in `config_dir`) into settings, or every problem found.
    pub fn build(file: FileConfig, config_dir: &Path) -> Result<Settings, Vec<ConfigError>> {
        Settings::build_from(file, ConfigFiles::operator(config_dir))
    }

    /// [`Settings::build`], its secret files read as `files` lets it.
    pub(super) fn build_from(
        file: FileConfig,
        files: ConfigFiles<'_>,
    ) -> Result<Settings, Vec<ConfigError>> {
        let config_dir = files.dir;
        let mut problems = Vec::new();
        let gateway_token = secret(
            file.gateway.auth.as_ref().and_then(|a| a.token.clone()),
            &key!(GatewayAuthConfig.token),
            files,
            &mut problems,
        );
        let trusted_proxies = super::connections::trusted_proxies(&file.gateway, &mut problems);
        let connections = ConnectionSettings::build(&file.gateway, &mut problems);
        let agents = agent_directory(&file);
        let runtime = runtime_settings(&file, files, &mut problems);
        let store = super::store::store_settings(&file, &mut problems);
        let mappings = &file.hooks.mappings;
        super::notify::check_routes(mappings, &runtime.channels, &mut problems);
        let outbound = super::outbound::outbound_settings(&file, files, &mut problems);
        let hooks = hook_settings(
            file.hooks,
            &file.agents.defaults.models,
            &agents,
            &file.agents.list,
            gateway_token.as_deref(),
            files,
            &mut problems,
        );
        let others = super::mcp::OtherTokens {
            gateway: gateway_token.as_deref(),
            hooks: hooks.as_ref().map(|hooks| &hooks.token),
        };
        let mcp = super::mcp::mcp_settings(file.mcp, &others, files, &mut problems);
        let edge = super::edge::edge_role(&file.edge, &store, &others, files, &mut problems);
        let public_url = super::subscribing::public_url(&file.gateway, &mut problems);
        let secrets_key = super::subscribing::secrets_key(&file.gateway, files, &mut problems);
        let bind = file.gateway.bind.unwrap_or_else(|| DEFAULT_BIND.into());
        if bind.parse::<std::net::IpAddr>().is_err() {
            // What `serve` would fail on, said by `check` too.
            problems.push(ConfigError::invalid(
                key!(GatewayConfig.bind),
                "must be an IP address, or one of loopback, lan, auto, custom",
            ));
        }
        let state_dir = config_dir.join(
            file.gateway
                .state_dir
                .as_deref()
                .unwrap_or(DEFAULT_STATE_DIR),
        );
        if confine::is_within(&state_dir, &confine::transforms_root(config_dir)) {
            // The compile cache in the state directory holds native code that hookgate loads
            // unchecked; whoever may drop transforms must not be able to write there.
            problems.push(ConfigError::invalid(
                key!(GatewayConfig.state_dir),
                "must not be inside the transforms root",
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Settings {
            config_dir: config_dir.to_path_buf(),
            bind,
            port: file.gateway.port.unwrap_or(DEFAULT_PORT),
            gateway_token: gateway_token.as_deref().map(TokenDigest::of),
            trusted_proxies,
            state_dir,
            group_commit: file.gateway.group_commit.unwrap_or(true),
            store,
            connections,
            metrics_public: file.gateway.metrics.as_ref().is_some_and(|m| m.public),
            hooks,
            mcp,
            agents,
            runtime,
            notices: Vec::new(),
            missing_channels: MissingChannels::default(),
            edge,
            public_url,
            secrets_key,
            outbound,
        })
    }
}

fn agent_directory(file: &FileConfig) -> AgentDirectory {
    let list = &file.agents.list;
    let ids: Vec<String> = list.iter().map(|a| normalize_agent_id(&a.id)).collect();
    let default_id = list
        .iter()
        .position(|a| a.default)
        .or((!list.is_empty()).then_some(0))
        .map_or_else(|| "main".to_string(), |i| ids[i].clone());
    let mut known: BTreeSet<String> = ids.into_iter().collect();
    known.insert(default_id.clone());
    let allowed = match &file.hooks.allowed_agent_ids {
        None => AllowedAgents::Any,
        Some(ids) if ids.iter().any(|id| id.trim() == "*") => AllowedAgents::Any,
        Some(ids) => AllowedAgents::Only(
            ids.iter()
                .filter(|id| !id.trim().is_empty())
                .map(|id| normalize_agent_id(id))
                .collect(),
        ),
    };
    AgentDirectory::new(known, default_id, allowed)
}

/// The channels a configuration has already said, in the log, are not configured: each is said
/// once per configuration (a reload starts again), not once per reply given up, since without a
/// channel every heartbeat's reply would say it.
#[derive(Debug, Default)]
pub struct MissingChannels(Mutex<Vec<Channel>>);

impl MissingChannels {
    /// Logs that `channel` is not configured, unless this configuration already did.
    pub fn warn_once(&self, channel: Channel) {
        let mut said = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !said.contains(&channel) {
            said.push(channel);
            tracing::warn!(
                channel = channel.as_str(),
                "channel {} is not configured: replies routed to it are given up (said once per configuration)",
                channel.as_str()
            );
        }
    }
}
