//! Subscriptions: mappings made at runtime, each with its own hook name and signing secret
//! (docs/subscriptions.md). This is their one API, which the operator API's handlers (and any
//! other caller, such as an MCP tool) use: every change is validated by building the whole
//! set of mappings with the file's ([`LiveConfig::set_subscribed`]), kept in the store, put in
//! force at once and audited.
//!
//! A signing secret is shown once, in what [`Subscriptions::create`] and
//! [`Subscriptions::rotate`] return; it is kept sealed with `gateway.secretsKey` and opened
//! only to build the mapping in memory.

pub mod caps;
pub mod record;
pub mod sample;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::sealing::SecretsKey;
use crate::config::{LiveConfig, Settings, SubscribedMapping};
use crate::gateway::nats::Cluster;
use record::{Provider, Retired, Spec, Subscription, View, rfc3339, valid_name};
use store::{Changed, Revision, StoreFailure, SubscriptionStore};

/// How long a rotated-out secret still verifies unless the operator says otherwise.
pub const DEFAULT_ROTATION_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Why a subscription operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error("{0}")]
    Invalid(String),
    #[error("no subscription {0}")]
    NotFound(String),
    #[error("subscription {0} already exists")]
    Exists(String),
    /// The merged mappings were refused: every problem, a subscription's named as such, a
    /// clash with a file mapping naming both.
    #[error("the subscription was refused")]
    Refused(Vec<String>),
    #[error(
        "gateway.secretsKey is not set: a subscription's secret cannot be sealed; set it and reload"
    )]
    NoSecretsKey,
    #[error("hooks are not enabled (hooks.enabled)")]
    HooksDisabled,
    /// What the caller may not do: an agent past `mcp.subscriptions`, or changing a
    /// subscription the operator made.
    #[error("{0}")]
    Forbidden(String),
    /// Another node changed or deleted the subscription while this change was made.
    #[error(
        "subscription {0} was changed by another node meanwhile; nothing was changed here: read it again and retry"
    )]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreFailure),
}

/// Who made a change: the credential and the client it came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Actor {
    /// The credential: `gateway-token` (the operator API's bearer token), `cli-local`, or
    /// `mcp:<name>` (an agent, through the MCP credential `mcp.tokens[].name`).
    pub credential: String,
    /// The client's address, as the lockout counts it.
    pub client: Option<String>,
}

/// How an agent's credential is named: `mcp:` and the MCP credential's name.
const AGENT: &str = "mcp:";

impl Actor {
    /// An agent calling through the MCP credential `name`.
    pub fn agent(name: &str, client: Option<String>) -> Actor {
        Actor {
            credential: format!("{AGENT}{name}"),
            client,
        }
    }

    /// Whether an agent made the call: `mcp.subscriptions` caps what it creates, and it may
    /// change only subscriptions agents made.
    pub fn is_agent(&self) -> bool {
        is_agent(&self.credential)
    }
}

fn is_agent(credential: &str) -> bool {
    credential.starts_with(AGENT)
}

/// One change, as `GET /api/audit` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    pub by: Actor,
    /// `create`, `pause`, `resume`, `rotate`, `delete` or `test`.
    pub action: String,
    pub subscription: String,
    /// What else was said: the rotation's window, the test's outcome.
    pub detail: Option<String>,
}

/// A subscription just made or rotated, with its secret: the one answer that shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Issued {
    #[serde(flatten)]
    pub subscription: View,
    /// The signing secret to give the sender. Never shown again.
    pub secret: String,
}

/// The subscriptions of this node's configuration and their store.
pub struct Subscriptions {
    store: SubscriptionStore,
    config: LiveConfig,
    /// One change at a time on this node; the store settles changes between nodes.
    changes: tokio::sync::Mutex<()>,
}

impl Subscriptions {
    /// Opens the store (SQLite in the state directory, or the cluster's buckets) and puts the
    /// subscriptions it holds in force. On a cluster, every change any node makes is put in
    /// force here as it is seen.
    pub async fn open(
        config: LiveConfig,
        cluster: Option<&Cluster>,
    ) -> Result<Arc<Subscriptions>, StoreFailure> {
        let store = match cluster {
            Some(cluster) => SubscriptionStore::nats(cluster).await?,
            None => SubscriptionStore::sqlite(&config.current().state_dir)?,
        };
        let subscriptions = Arc::new(Subscriptions {
            store,
            config,
            changes: tokio::sync::Mutex::new(()),
        });
        subscriptions.apply().await;
        if matches!(subscriptions.store, SubscriptionStore::Nats { .. }) {
            let watching = Arc::clone(&subscriptions);
            tokio::spawn(async move {
                let again = Arc::clone(&watching);
                watching
                    .store
                    .watch(move || {
                        let again = Arc::clone(&again);
                        Box::pin(async move { again.apply().await })
                    })
                    .await;
            });
        }
        Ok(subscriptions)
    }

    /// Puts what the store holds in force. A subscription whose secret does not open (another
    /// key sealed it) is left out and logged; a set the configuration refuses is logged and
    /// the one in force kept.
    pub async fn apply(&self) {
        let all = match self.store.list().await {
            Ok(all) => all,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the subscriptions");
                return;
            }
        };
        let settings = self.config.current();
        let subscribed = mapped(&all, settings.secrets_key.as_ref());
        if let Err(problems) = self.put_in_force(subscribed).await {
            for problem in problems {
                tracing::error!(%problem, "subscriptions refused; keeping the ones in force");
            }
        }
    }

    /// Every subscription, posted to under `base` (see [`Subscriptions::url`]).
    pub async fn list(&self, base: &str) -> Result<Vec<View>, SubscriptionError> {
        let settings = self.config.current();
        let now = now_unix();
        Ok(self
            .store
            .list()
            .await?
            .iter()
            .map(|s| s.view(url(&settings, base, &s.name), now))
            .collect())
    }

    /// The subscription called `name`.
    pub async fn show(&self, name: &str, base: &str) -> Result<View, SubscriptionError> {
        let (found, _) = self.find(name).await?;
        Ok(found.view(url(&self.config.current(), base, name), now_unix()))
    }

    async fn find(&self, name: &str) -> Result<(Subscription, Revision), SubscriptionError> {
        self.store
            .get(name)
            .await?
            .ok_or_else(|| SubscriptionError::NotFound(name.to_string()))
    }

    /// [`Self::find`], for a change by `by`: an agent may change only what agents made.
    async fn find_to_change(
        &self,
        name: &str,
        by: &Actor,
    ) -> Result<(Subscription, Revision), SubscriptionError> {
        let found = self.find(name).await?;
        if by.is_agent() && !found.0.created_by.as_deref().is_some_and(is_agent) {
            return Err(SubscriptionError::Forbidden(format!(
                "subscription {name} was not made by an agent: an MCP credential may change \
                 only subscriptions agents made"
            )));
        }
        Ok(found)
    }

    /// Makes the subscription `spec` asks for, live at once, and returns it with its secret.
    pub async fn create(
        &self,
        spec: Spec,
        by: &Actor,
        base: &str,
    ) -> Result<Issued, SubscriptionError> {
        let _one = self.changes.lock().await;
        let settings = self.config.current();
        let key = usable(&settings)?;
        if !valid_name(&spec.name) {
            return Err(SubscriptionError::Invalid(
                "name must be 1 to 64 of a-z, 0-9, - and _, starting with a letter or digit".into(),
            ));
        }
        let provider = Provider::named(&spec.provider).ok_or_else(|| {
            SubscriptionError::Invalid(format!("provider must be one of {}", record::PROVIDERS))
        })?;
        let mut mapping = spec.mapping(provider)?;
        if by.is_agent() {
            let caps = settings.mcp.subscriptions.as_ref().ok_or_else(|| {
                SubscriptionError::Forbidden(
                    "agents may not create subscriptions: the operator has not set \
                     mcp.subscriptions"
                        .into(),
                )
            })?;
            let all = self.store.list().await?;
            let made = all.iter().filter(|s| s.agent_made()).count();
            caps::admit(caps, &mut mapping, made)?;
        }
        if self.store.get(&spec.name).await?.is_some() {
            return Err(SubscriptionError::Exists(spec.name));
        }
        let secret = given_or_new(spec.secret.as_deref(), provider)?;
        let at = rfc3339(now_unix());
        let made = Subscription {
            name: spec.name.clone(),
            provider,
            events: spec.events.clone(),
            mapping,
            secret: key.seal(&spec.name, &secret),
            previous: None,
            paused: false,
            created_by: Some(by.credential.clone()),
            created_at: at.clone(),
            updated_at: at,
        };
        self.take(Some(&made), &spec.name).await?;
        let kept = self.store.create(&made).await.map_err(Changed::Failed);
        if !self.kept(kept, &made.name).await? {
            self.apply().await;
            return Err(SubscriptionError::Exists(spec.name));
        }
        self.settle(by, "create", &made.name, None).await;
        let view = made.view(url(&settings, base, &made.name), now_unix());
        Ok(Issued {
            subscription: view,
            secret,
        })
    }

    /// Issues a new secret for `name` (the one given, else a generated one); the current one
    /// keeps verifying for `window`, then is refused as expired.
    pub async fn rotate(
        &self,
        name: &str,
        window: Duration,
        given: Option<&str>,
        by: &Actor,
        base: &str,
    ) -> Result<Issued, SubscriptionError> {
        let _one = self.changes.lock().await;
        let settings = self.config.current();
        let key = usable(&settings)?;
        let (mut changed, revision) = self.find_to_change(name, by).await?;
        let secret = given_or_new(given, changed.provider)?;
        let until_unix = now_unix().saturating_add(window.as_secs().min(i64::MAX as u64) as i64);
        changed.previous = Some(Retired {
            secret: std::mem::replace(&mut changed.secret, key.seal(name, &secret)),
            until_unix,
        });
        changed.updated_at = rfc3339(now_unix());
        self.take(Some(&changed), name).await?;
        let kept = self.store.update(&changed, revision).await;
        self.kept(kept, name).await?;
        let detail = format!("previous secret valid until {}", rfc3339(until_unix));
        self.settle(by, "rotate", name, Some(detail)).await;
        Ok(Issued {
            subscription: changed.view(url(&settings, base, name), now_unix()),
            secret,
        })
    }

    /// Pauses (`true`) or resumes `name`: a paused subscription's hook name answers as no
    /// mapping's does.
    pub async fn set_paused(
        &self,
        name: &str,
        paused: bool,
        by: &Actor,
        base: &str,
    ) -> Result<View, SubscriptionError> {
        let _one = self.changes.lock().await;
        let (mut changed, revision) = self.find_to_change(name, by).await?;
        changed.paused = paused;
        changed.updated_at = rfc3339(now_unix());
        self.take(Some(&changed), name).await?;
        let kept = self.store.update(&changed, revision).await;
        self.kept(kept, name).await?;
        let action = if paused { "pause" } else { "resume" };
        self.settle(by, action, name, None).await;
        Ok(changed.view(url(&self.config.current(), base, name), now_unix()))
    }

    /// Deletes `name`: its hook name stops being served, its sealed secrets are gone.
    pub async fn delete(&self, name: &str, by: &Actor) -> Result<(), SubscriptionError> {
        let _one = self.changes.lock().await;
        let (_, revision) = self.find_to_change(name, by).await?;
        self.take(None, name).await?;
        let kept = self.store.delete(name, revision).await;
        self.kept(kept, name).await?;
        self.settle(by, "delete", name, None).await;
        Ok(())
    }

    /// Records that `by` tested `name`, and what became of it.
    pub async fn record_test(&self, name: &str, by: &Actor, outcome: String) {
        self.settle(by, "test", name, Some(outcome)).await;
    }

    /// The secret of `name` and its provider, opened, for a test delivery signed as its
    /// sender would sign it. Never shown to anyone.
    pub async fn signing_secret(
        &self,
        name: &str,
        by: &Actor,
    ) -> Result<(Subscription, String), SubscriptionError> {
        let settings = self.config.current();
        let key = usable(&settings)?;
        let (found, _) = self.find_to_change(name, by).await?;
        let secret = key
            .open(name, &found.secret)
            .map_err(|e| SubscriptionError::Invalid(e.to_string()))?;
        Ok((found, secret))
    }

    /// The newest `limit` audit entries, newest first.
    pub async fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, SubscriptionError> {
        Ok(self.store.audit_entries(limit).await?)
    }

    /// Puts in force the stored set with `changed` in place of `name` (or without it): refused
    /// whole, nothing changed, when the configuration does not take it.
    async fn take(
        &self,
        changed: Option<&Subscription>,
        name: &str,
    ) -> Result<(), SubscriptionError> {
        let mut all: Vec<Subscription> = self
            .store
            .list()
            .await?
            .into_iter()
            .filter(|s| s.name != name)
            .collect();
        all.extend(changed.cloned());
        let settings = self.config.current();
        self.put_in_force(mapped(&all, settings.secrets_key.as_ref()))
            .await
            .map_err(SubscriptionError::Refused)
    }

    /// What a store write of a change already in force came to: when it was not kept, the
    /// stored set is put back in force (the change undone here, and another node's kept), so
    /// that nothing serves what the store does not hold.
    async fn kept<T>(&self, write: Result<T, Changed>, name: &str) -> Result<T, SubscriptionError> {
        match write {
            Ok(done) => Ok(done),
            Err(failed) => {
                self.apply().await;
                Err(match failed {
                    Changed::Conflict => SubscriptionError::Conflict(name.to_string()),
                    Changed::Failed(e) => SubscriptionError::Store(e),
                })
            }
        }
    }

    /// [`LiveConfig::set_subscribed`] off the async threads: it reads the file and may compile
    /// transforms.
    async fn put_in_force(&self, subscribed: Vec<SubscribedMapping>) -> Result<(), Vec<String>> {
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || config.set_subscribed(subscribed))
            .await
            .map_err(|e| vec![format!("the configuration's rebuild failed: {e}")])?
            .map_err(|problems| problems.iter().map(ToString::to_string).collect())
    }

    /// Audits a change made and kept; an audit that cannot be written is logged (the change
    /// stands).
    async fn settle(&self, by: &Actor, action: &str, name: &str, detail: Option<String>) {
        let entry = AuditEntry {
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            by: by.clone(),
            action: action.to_string(),
            subscription: name.to_string(),
            detail,
        };
        tracing::info!(
            action,
            subscription = name,
            credential = %by.credential,
            "subscription changed"
        );
        if let Err(e) = self.store.audit(&entry).await {
            tracing::error!(error = %e, action, subscription = name, "cannot audit a subscription change");
        }
    }
}

/// The key, when subscriptions can be changed at all.
fn usable(settings: &Settings) -> Result<&SecretsKey, SubscriptionError> {
    if settings.hooks.is_none() {
        return Err(SubscriptionError::HooksDisabled);
    }
    settings
        .secrets_key
        .as_ref()
        .ok_or(SubscriptionError::NoSecretsKey)
}

/// The secret given (trimmed, not blank), else a new one.
fn given_or_new(given: Option<&str>, provider: Provider) -> Result<String, SubscriptionError> {
    match given.map(str::trim) {
        Some("") => Err(SubscriptionError::Invalid(
            "secret must not be blank".into(),
        )),
        Some(secret) => Ok(secret.to_string()),
        None => Ok(provider.generate_secret()),
    }
}

/// The mappings of the subscriptions not paused, their secrets opened with `key`; one that
/// does not open is left out and logged.
fn mapped(all: &[Subscription], key: Option<&SecretsKey>) -> Vec<SubscribedMapping> {
    let Some(key) = key else {
        if all.iter().any(|s| !s.paused) {
            tracing::error!("gateway.secretsKey is not set: no subscription is served");
        }
        return Vec::new();
    };
    all.iter()
        .filter(|s| !s.paused)
        .filter_map(|s| {
            let secret = match key.open(&s.name, &s.secret) {
                Ok(secret) => secret,
                Err(e) => {
                    tracing::error!(subscription = %s.name, "{e}; the subscription is not served");
                    return None;
                }
            };
            let mut mapping = s.mapping.clone();
            if let Some(Value::Object(signature)) = mapping.get_mut("signature") {
                signature.insert("secret".into(), secret.into());
            }
            let retired = s.previous.as_ref().and_then(|p| {
                let secret = key.open(&s.name, &p.secret).ok()?;
                Some((secret, p.until_unix))
            });
            Some(SubscribedMapping {
                name: s.name.clone(),
                mapping: Value::Object(mapping),
                retired,
            })
        })
        .collect()
}

/// Where senders post to `name`: `gateway.publicUrl`, else `base` (the address the caller
/// reached the API at), then `hooks.path` and the name.
pub fn url(settings: &Settings, base: &str, name: &str) -> String {
    let root = settings.public_url.as_deref().unwrap_or(base);
    let path = settings
        .hooks
        .as_ref()
        .map_or("/hooks", |h| h.path.as_str());
    format!("{}{path}/{name}", root.trim_end_matches('/'))
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}
