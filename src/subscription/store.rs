//! Where subscriptions and the audit of their changes are kept: `subscriptions.db` in the state
//! directory, or, on a NATS store, two key-value buckets every node reads and watches.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use rusqlite::{Connection, OptionalExtension, params};

use super::AuditEntry;
use super::record::Subscription;
use crate::gateway::nats::Cluster;

/// How long the audit keeps an entry: 90 days (docs/subscriptions.md#the-audit).
pub const AUDIT_RETENTION: std::time::Duration = std::time::Duration::from_secs(90 * 24 * 3600);

/// A failure of the store itself, its cause kept for the log.
#[derive(Debug, thiserror::Error)]
#[error("subscription store: {0}")]
pub struct StoreFailure(String);

fn failure(e: impl std::fmt::Display) -> StoreFailure {
    StoreFailure(e.to_string())
}

/// The subscriptions' store.
#[derive(Clone)]
pub enum SubscriptionStore {
    /// `<stateDir>/subscriptions.db`, this node's alone.
    Sqlite(Arc<Mutex<Connection>>),
    /// Buckets `<bucket>-subscriptions` and `<bucket>-audit`, shared by the cluster.
    Nats {
        subscriptions: Box<kv::Store>,
        audit: Box<kv::Store>,
    },
}

impl SubscriptionStore {
    /// Opens (creating where missing) the SQLite file in `state_dir`.
    pub fn sqlite(state_dir: &Path) -> Result<SubscriptionStore, StoreFailure> {
        let path = state_dir.join("subscriptions.db");
        // Owner-only before anything is written, as every file of the state directory.
        crate::private_fs::create_private_file(&path).map_err(failure)?;
        let connection = Connection::open(&path).map_err(failure)?;
        connection
            .execute_batch(
                "PRAGMA journal_mode=WAL;
                 CREATE TABLE IF NOT EXISTS subscriptions (name TEXT PRIMARY KEY, record TEXT NOT NULL);
                 CREATE TABLE IF NOT EXISTS audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, entry TEXT NOT NULL);",
            )
            .map_err(failure)?;
        Ok(SubscriptionStore::Sqlite(Arc::new(Mutex::new(connection))))
    }

    /// Opens (creating where missing) the cluster's buckets: a subscription is kept until it
    /// is deleted, an audit entry for [`AUDIT_RETENTION`].
    pub async fn nats(cluster: &Cluster) -> Result<SubscriptionStore, StoreFailure> {
        let (js, names) = (&cluster.js, &cluster.names);
        let forever = std::time::Duration::ZERO;
        let subscriptions = crate::gateway::nats::bucket(js, names, "subscriptions", forever)
            .await
            .map_err(failure)?;
        let audit = crate::gateway::nats::bucket(js, names, "audit", AUDIT_RETENTION)
            .await
            .map_err(failure)?;
        Ok(SubscriptionStore::Nats {
            subscriptions: Box::new(subscriptions),
            audit: Box::new(audit),
        })
    }

    /// Every subscription, by name.
    pub async fn list(&self) -> Result<Vec<Subscription>, StoreFailure> {
        let mut all = match self {
            SubscriptionStore::Sqlite(db) => {
                let db = lock(db);
                let mut stmt = db
                    .prepare("SELECT record FROM subscriptions ORDER BY name")
                    .map_err(failure)?;
                let rows = stmt
                    .query_map([], |row| row.get::<_, String>(0))
                    .map_err(failure)?;
                let mut all = Vec::new();
                for row in rows {
                    all.push(decode(row.map_err(failure)?.as_bytes())?);
                }
                all
            }
            SubscriptionStore::Nats { subscriptions, .. } => {
                let mut keys = subscriptions.keys().await.map_err(failure)?;
                let mut all = Vec::new();
                while let Some(key) = keys.next().await {
                    let key = key.map_err(failure)?;
                    if let Some(bytes) = subscriptions.get(&key).await.map_err(failure)? {
                        all.push(decode(&bytes)?);
                    }
                }
                all
            }
        };
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    /// The subscription called `name`, with the revision a change of it must name.
    pub async fn get(&self, name: &str) -> Result<Option<(Subscription, Revision)>, StoreFailure> {
        match self {
            SubscriptionStore::Sqlite(db) => {
                let record: Option<String> = lock(db)
                    .query_row(
                        "SELECT record FROM subscriptions WHERE name = ?1",
                        [name],
                        |row| row.get(0),
                    )
                    .optional()
                    .map_err(failure)?;
                // One node's alone, its changes one at a time: nothing to compare.
                let read = |r: String| Ok((decode(r.as_bytes())?, Revision(0)));
                record.map(read).transpose()
            }
            SubscriptionStore::Nats { subscriptions, .. } => {
                let entry = subscriptions.entry(name).await.map_err(failure)?;
                entry
                    .filter(|e| e.operation == kv::Operation::Put)
                    .map(|e| Ok((decode(&e.value)?, Revision(e.revision))))
                    .transpose()
            }
        }
    }

    /// Keeps `subscription` as new: `false` when one of its name is already kept.
    pub async fn create(&self, subscription: &Subscription) -> Result<bool, StoreFailure> {
        let record = serde_json::to_string(subscription).map_err(failure)?;
        match self {
            SubscriptionStore::Sqlite(db) => {
                let added = lock(db)
                    .execute(
                        "INSERT OR IGNORE INTO subscriptions (name, record) VALUES (?1, ?2)",
                        params![subscription.name, record],
                    )
                    .map_err(failure)?;
                Ok(added == 1)
            }
            SubscriptionStore::Nats { subscriptions, .. } => {
                match subscriptions
                    .create(&subscription.name, record.into())
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
                    Err(e) => Err(failure(e)),
                }
            }
        }
    }

    /// Replaces the subscription of `subscription`'s name, read at `revision`: on a NATS store,
    /// [`Changed::Conflict`] when another node changed or deleted it since.
    pub async fn update(
        &self,
        subscription: &Subscription,
        revision: Revision,
    ) -> Result<(), Changed> {
        let record = serde_json::to_string(subscription).map_err(failure)?;
        match self {
            SubscriptionStore::Sqlite(db) => lock(db)
                .execute(
                    "INSERT OR REPLACE INTO subscriptions (name, record) VALUES (?1, ?2)",
                    params![subscription.name, record],
                )
                .map(drop)
                .map_err(|e| Changed::Failed(failure(e))),
            SubscriptionStore::Nats { subscriptions, .. } => subscriptions
                .update(&subscription.name, record.into(), revision.0)
                .await
                .map(drop)
                .map_err(compared),
        }
    }

    /// Removes the subscription called `name`, read at `revision` (see [`Self::update`]).
    pub async fn delete(&self, name: &str, revision: Revision) -> Result<(), Changed> {
        match self {
            SubscriptionStore::Sqlite(db) => lock(db)
                .execute("DELETE FROM subscriptions WHERE name = ?1", [name])
                .map(drop)
                .map_err(|e| Changed::Failed(failure(e))),
            // Purged, not marked deleted: the bucket denies deletes of its messages, and a
            // purge leaves one marker per name, not the record with its sealed secret.
            SubscriptionStore::Nats { subscriptions, .. } => subscriptions
                .purge_expect_revision(name, Some(revision.0))
                .await
                .map_err(compared),
        }
    }

    /// Records `entry` in the audit, and forgets the entries older than [`AUDIT_RETENTION`]
    /// (on NATS the bucket's keys expire by themselves).
    pub async fn audit(&self, entry: &AuditEntry) -> Result<(), StoreFailure> {
        let text = serde_json::to_string(entry).map_err(failure)?;
        match self {
            SubscriptionStore::Sqlite(db) => {
                let cutoff = chrono::Utc::now() - AUDIT_RETENTION;
                let cutoff = cutoff.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let db = lock(db);
                db.execute("INSERT INTO audit (entry) VALUES (?1)", [text])
                    .map_err(failure)?;
                // `at` is RFC 3339 in UTC with milliseconds: its text sorts as its time.
                db.execute(
                    "DELETE FROM audit WHERE json_extract(entry, '$.at') < ?1",
                    [cutoff],
                )
                .map(drop)
                .map_err(failure)
            }
            SubscriptionStore::Nats { audit, .. } => {
                // A UUIDv7 key: the keys sort as the entries were made, across nodes.
                let key = uuid::Uuid::now_v7().simple().to_string();
                audit.put(key, text.into()).await.map(drop).map_err(failure)
            }
        }
    }

    /// The newest `limit` audit entries, newest first.
    pub async fn audit_entries(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreFailure> {
        let texts: Vec<String> = match self {
            SubscriptionStore::Sqlite(db) => {
                let db = lock(db);
                let mut stmt = db
                    .prepare("SELECT entry FROM audit ORDER BY seq DESC LIMIT ?1")
                    .map_err(failure)?;
                let rows = stmt
                    .query_map([limit as i64], |row| row.get::<_, String>(0))
                    .map_err(failure)?;
                rows.collect::<Result<_, _>>().map_err(failure)?
            }
            SubscriptionStore::Nats { audit, .. } => {
                let mut keys: Vec<String> = audit
                    .keys()
                    .await
                    .map_err(failure)?
                    .filter_map(|k| async move { k.ok() })
                    .collect()
                    .await;
                keys.sort_unstable_by(|a, b| b.cmp(a));
                keys.truncate(limit);
                let mut texts = Vec::new();
                for key in keys {
                    if let Some(bytes) = audit.get(&key).await.map_err(failure)? {
                        texts.push(String::from_utf8_lossy(&bytes).into_owned());
                    }
                }
                texts
            }
        };
        texts
            .iter()
            .map(|t| serde_json::from_str(t).map_err(failure))
            .collect()
    }

    /// On a NATS store, calls `changed` after every change another node (or this one) makes,
    /// until the process ends; on SQLite, nothing to watch.
    pub async fn watch(&self, changed: impl Fn() -> futures_util::future::BoxFuture<'static, ()>) {
        let SubscriptionStore::Nats { subscriptions, .. } = self else {
            return;
        };
        loop {
            match subscriptions.watch_all().await {
                Ok(mut changes) => {
                    while let Some(change) = changes.next().await {
                        if change.is_err() {
                            break;
                        }
                        changed().await;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch the subscriptions bucket; retrying")
                }
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }
}

/// Where a subscription stood when it was read: on a NATS store its key's revision, which a
/// change must still find (compare-and-set), so that two nodes' changes never silently
/// overwrite each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revision(u64);

/// Why a change of a stored subscription was not kept.
#[derive(Debug, thiserror::Error)]
pub enum Changed {
    /// Another node changed or deleted it after it was read.
    #[error("changed by another node since it was read")]
    Conflict,
    #[error(transparent)]
    Failed(#[from] StoreFailure),
}

/// A NATS compare-and-set's failure: a revision that no longer holds is a conflict.
fn compared(e: kv::UpdateError) -> Changed {
    match e.kind() {
        kv::UpdateErrorKind::WrongLastRevision => Changed::Conflict,
        _ => Changed::Failed(failure(e)),
    }
}

fn lock(db: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    db.lock().unwrap_or_else(|p| p.into_inner())
}

fn decode(bytes: &[u8]) -> Result<Subscription, StoreFailure> {
    serde_json::from_slice(bytes).map_err(failure)
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    use serde_json::Map;

    use super::*;
    use crate::subscription::record::Provider;

    /// A nats-server with JetStream on a free loopback port, killed when dropped.
    struct Server(Child, #[allow(dead_code)] tempfile::TempDir);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    async fn nats_store() -> (Server, SubscriptionStore) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run nats-server (the integration tests need it too)");
        let server = Server(child, dir);
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = loop {
            match async_nats::connect(format!("127.0.0.1:{port}")).await {
                Ok(client) => break client,
                Err(e) if Instant::now() > deadline => panic!("nats-server: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let js = async_nats::jetstream::new(client);
        // As the gateway makes its buckets (gateway::nats::bucket): the stream first.
        for name in ["subs", "audit"] {
            let config = async_nats::jetstream::stream::Config {
                name: format!("KV_{name}"),
                subjects: vec![format!("$KV.{name}.>")],
                max_messages_per_subject: 1,
                allow_rollup: true,
                deny_delete: true,
                ..Default::default()
            };
            js.create_or_update_stream(config).await.unwrap();
        }
        let subscriptions = js.get_key_value("subs").await.unwrap();
        let audit = js.get_key_value("audit").await.unwrap();
        let store = SubscriptionStore::Nats {
            subscriptions: Box::new(subscriptions),
            audit: Box::new(audit),
        };
        (server, store)
    }

    fn subscription(name: &str) -> Subscription {
        Subscription {
            name: name.into(),
            provider: Provider::Github,
            events: Vec::new(),
            mapping: Map::new(),
            secret: "sealed".into(),
            previous: None,
            paused: false,
            created_by: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[tokio::test]
    async fn a_change_read_before_another_nodes_is_a_conflict_not_an_overwrite() {
        let (_server, store) = nats_store().await;
        assert!(store.create(&subscription("gh")).await.unwrap());
        let (mine, read) = store.get("gh").await.unwrap().unwrap();
        // Another node reads the same revision and pauses it first.
        let (mut theirs, same) = store.get("gh").await.unwrap().unwrap();
        assert_eq!(read, same);
        theirs.paused = true;
        store.update(&theirs, same).await.unwrap();
        let stale = store.update(&mine, read).await;
        assert!(matches!(stale, Err(Changed::Conflict)), "{stale:?}");
        let stale = store.delete("gh", read).await;
        assert!(matches!(stale, Err(Changed::Conflict)), "{stale:?}");
        let (kept, now) = store.get("gh").await.unwrap().unwrap();
        assert!(kept.paused, "the other node's change stands");
        store.delete("gh", now).await.unwrap();
        assert!(store.get("gh").await.unwrap().is_none());
        // A change of what another node deleted is a conflict too, not a resurrection.
        let gone = store.update(&mine, now).await;
        assert!(matches!(gone, Err(Changed::Conflict)), "{gone:?}");
        assert!(store.get("gh").await.unwrap().is_none());
    }
}
