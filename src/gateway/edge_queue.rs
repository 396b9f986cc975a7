//! The edge's queue (docs/edge.md): every hook request an edge accepts, its exact bytes and
//! headers, committed to its own SQLite file (`edge.db`, synced like the store) before it is
//! answered, and kept until the private node acknowledges it. Sequence numbers only grow, never
//! reused once acknowledged (`AUTOINCREMENT`), and the queue has an id of its own, made with
//! the file: a private node's marks name the edge by it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, params};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use super::clock::now_ms;
use super::store::{Database, DatabaseFile, StoreError, Synchronous};

/// The queue's file inside the state directory.
pub const EDGE_DB_FILE: &str = "edge.db";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS pending (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id  TEXT NOT NULL,
    route       TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    client      TEXT,
    by_token    INTEGER NOT NULL,
    method      TEXT NOT NULL,
    target      TEXT NOT NULL,
    headers     BLOB NOT NULL,
    body        BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS edge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
";

fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(SCHEMA)?;
    conn.execute(
        "INSERT OR IGNORE INTO edge_meta (key, value) VALUES ('id', ?1)",
        [uuid::Uuid::new_v4().to_string()],
    )
    .map(drop)
}

/// One stored hook request, as it arrived: the row of the queue, and what `GET /edge/pull`
/// sends (its headers' values and its body in base64 there, so that every byte arrives as it
/// was received).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub seq: i64,
    /// The edge's `X-Request-Id` for it, and its request record's id.
    pub request_id: String,
    /// The hook name it was stored under (what its bounds count).
    pub route: String,
    pub received_ms: i64,
    /// The client's address as the edge's `gateway.trustedProxies` resolve it; `None` when a
    /// trusted proxy named none.
    pub client: Option<IpAddr>,
    /// The edge admitted it by the hook token, which it left out of `headers`: the private
    /// node takes it as token-authenticated.
    pub by_token: bool,
    pub method: String,
    /// Path and query as received.
    pub target: String,
    /// Its headers in order, each `name: value` (values as sent, bytes), without the headers
    /// that carry the hook token or a session ([`crate::hook::credentials::TOKEN_HEADERS`]).
    #[serde(with = "base64_headers")]
    pub headers: Vec<(String, Vec<u8>)>,
    #[serde(with = "base64_bytes")]
    pub body: Vec<u8>,
}

impl Delivery {
    /// What it holds against `edge.serve.maxPendingBytes`.
    pub fn size(&self) -> u64 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.len() + 2)
            .sum();
        (headers + self.body.len() + self.target.len()) as u64
    }
}

/// The bounds of `edge.serve`.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_pending: u64,
    pub max_per_route: u64,
    pub max_bytes: u64,
}

/// Which bound refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    Overall,
    Route,
    Bytes,
}

impl Full {
    /// The metric label and log word.
    pub fn as_str(self) -> &'static str {
        match self {
            Full::Overall => "overall",
            Full::Route => "route",
            Full::Bytes => "bytes",
        }
    }
}

/// Why a request was not stored.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("the edge's {} bound is reached", .0.as_str())]
    Full(Full),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What the queue holds: counted in memory, from the file at start, so that a bound is checked
/// without a query.
#[derive(Debug, Default)]
struct Held {
    count: u64,
    bytes: u64,
    per_route: HashMap<String, u64>,
    /// seq -> (route, size), for what an acknowledgement releases.
    sizes: std::collections::BTreeMap<i64, (String, u64)>,
}

/// The link as the edge sees it, for the metrics and the overview.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeStatus {
    /// A pull is waiting now, or one ended within the last minute.
    pub connected: bool,
    pub backlog: u64,
    pub backlog_bytes: u64,
    /// How long the oldest stored request has waited, in milliseconds; 0 when none waits.
    pub oldest_waiting_ms: i64,
    /// The last sequence number the private node acknowledged (0: none yet).
    pub last_acked: i64,
    pub last_acked_at_ms: i64,
}

/// The edge's queue; cheap to clone.
#[derive(Clone)]
pub struct EdgeQueue(Arc<Inner>);

struct Inner {
    db: Database,
    id: Arc<str>,
    bounds: Bounds,
    held: Mutex<Held>,
    arrived: Notify,
    pulls_waiting: AtomicUsize,
    last_pull_ms: AtomicI64,
    last_acked: AtomicI64,
    last_acked_at_ms: AtomicI64,
}

/// How long after its last pull a private node still counts as connected.
const CONNECTED_GRACE_MS: i64 = 60_000;

impl EdgeQueue {
    /// Opens (creating when needed) the queue in `state_dir`, counting what it holds.
    pub fn open(state_dir: &Path, bounds: Bounds) -> Result<EdgeQueue, StoreError> {
        let file = DatabaseFile {
            name: EDGE_DB_FILE,
            thread: "hookgate-edge",
            migrate,
            synchronous: Synchronous::Full,
        };
        let db = Database::open(state_dir, file, true, None)?;
        let conn = Connection::open(state_dir.join(EDGE_DB_FILE))?;
        let id: String =
            conn.query_row("SELECT value FROM edge_meta WHERE key = 'id'", [], |r| {
                r.get(0)
            })?;
        let last_acked: i64 = conn
            .query_row(
                "SELECT CAST(value AS INTEGER) FROM edge_meta WHERE key = 'acked'",
                [],
                |r| r.get(0),
            )
            .unwrap_or(0);
        let mut held = Held::default();
        let mut rows = conn.prepare(
            "SELECT seq, route, length(headers) + length(body) + length(target) FROM pending",
        )?;
        let mut rows = rows.query([])?;
        while let Some(row) = rows.next()? {
            let (seq, route, size): (i64, String, i64) = (row.get(0)?, row.get(1)?, row.get(2)?);
            held.add(seq, route, size.max(0) as u64);
        }
        Ok(EdgeQueue(Arc::new(Inner {
            db,
            id: id.into(),
            bounds,
            held: Mutex::new(held),
            arrived: Notify::new(),
            pulls_waiting: AtomicUsize::new(0),
            last_pull_ms: AtomicI64::new(0),
            last_acked: AtomicI64::new(last_acked),
            last_acked_at_ms: AtomicI64::new(0),
        })))
    }

    /// The queue's id: new with each new file.
    pub fn id(&self) -> &Arc<str> {
        &self.0.id
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.0.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores `delivery` (its `seq` is ignored) and answers its sequence number once it is
    /// committed and synced; refuses it when a bound is reached, storing nothing.
    pub async fn push(&self, delivery: Delivery) -> Result<i64, PushError> {
        let size = delivery.size();
        let route = delivery.route.clone();
        self.held().reserve(&route, size, &self.0.bounds)?;
        let stored = self
            .0
            .db
            .write(move |conn| {
                let headers = encode_headers(&delivery.headers);
                conn.prepare_cached(
                    "INSERT INTO pending (request_id, route, received_ms, client, by_token,
                         method, target, headers, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?
                .execute(params![
                    delivery.request_id,
                    delivery.route,
                    delivery.received_ms,
                    delivery.client.map(|ip| ip.to_string()),
                    delivery.by_token,
                    delivery.method,
                    delivery.target,
                    headers,
                    delivery.body,
                ])?;
                Ok(conn.last_insert_rowid())
            })
            .await;
        let mut held = self.held();
        held.unreserve(&route, size);
        let seq = stored?;
        held.add(seq, route, size);
        drop(held);
        self.0.arrived.notify_waiters();
        Ok(seq)
    }

    /// The stored requests after `after`, in order, at most `limit` of them; when there are
    /// none, waits up to `wait` for one to arrive.
    pub async fn pull(
        &self,
        after: i64,
        limit: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.0.pulls_waiting.fetch_add(1, Ordering::Relaxed);
        let pulled = self.pull_waiting(after, limit, wait).await;
        self.0.pulls_waiting.fetch_sub(1, Ordering::Relaxed);
        self.0.last_pull_ms.store(now_ms(), Ordering::Relaxed);
        pulled
    }

    async fn pull_waiting(
        &self,
        after: i64,
        limit: usize,
        wait: std::time::Duration,
    ) -> Result<Vec<Delivery>, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let arrived = self.0.arrived.notified();
            let found = self.read_after(after, limit).await?;
            if !found.is_empty() {
                return Ok(found);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    async fn read_after(&self, after: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        // Nothing past the newest committed sequence number can be read: skip the query.
        if self.held().sizes.range(after + 1..).next().is_none() {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.0
            .db
            .read(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT seq, request_id, route, received_ms, client, by_token, method, target,
                         headers, body FROM pending WHERE seq > ?1 ORDER BY seq LIMIT ?2",
                )?;
                let rows = statement.query_map(params![after, limit], |row| {
                    let client: Option<String> = row.get(4)?;
                    let headers: Vec<u8> = row.get(8)?;
                    Ok(Delivery {
                        seq: row.get(0)?,
                        request_id: row.get(1)?,
                        route: row.get(2)?,
                        received_ms: row.get(3)?,
                        client: client.and_then(|ip| ip.parse().ok()),
                        by_token: row.get(5)?,
                        method: row.get(6)?,
                        target: row.get(7)?,
                        headers: decode_headers(&headers),
                        body: row.get(9)?,
                    })
                })?;
                rows.collect()
            })
            .await
    }

    /// Forgets every request up to `up_to`, which the private node has committed; answers once
    /// that is durable. Acknowledging less than before changes nothing.
    pub async fn ack(&self, up_to: i64) -> Result<i64, StoreError> {
        self.0
            .db
            .write(move |conn| {
                conn.prepare_cached("DELETE FROM pending WHERE seq <= ?1")?
                    .execute([up_to])?;
                conn.prepare_cached(
                    "INSERT INTO edge_meta (key, value) VALUES ('acked', ?1)
                     ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS INTEGER), ?1)",
                )?
                .execute([up_to])
                .map(drop)
            })
            .await?;
        self.held().release_up_to(up_to);
        let before = self.0.last_acked.fetch_max(up_to, Ordering::Relaxed);
        if up_to > before {
            self.0.last_acked_at_ms.store(now_ms(), Ordering::Relaxed);
        }
        Ok(before.max(up_to))
    }

    /// Where the link stands now; costs one read of the oldest request when any waits.
    pub async fn status(&self) -> Result<EdgeStatus, StoreError> {
        let (backlog, backlog_bytes, oldest) = {
            let held = self.held();
            (held.count, held.bytes, held.sizes.keys().next().copied())
        };
        let oldest_ms = match oldest {
            Some(seq) => self
                .0
                .db
                .read(move |conn| {
                    conn.prepare_cached(
                        "SELECT received_ms FROM pending WHERE seq >= ?1 ORDER BY seq LIMIT 1",
                    )?
                    .query_row([seq], |r| r.get::<_, i64>(0))
                })
                .await
                .ok(),
            None => None,
        };
        let now = now_ms();
        let last_pull = self.0.last_pull_ms.load(Ordering::Relaxed);
        Ok(EdgeStatus {
            connected: self.0.pulls_waiting.load(Ordering::Relaxed) > 0
                || (last_pull > 0 && now - last_pull < CONNECTED_GRACE_MS),
            backlog,
            backlog_bytes,
            oldest_waiting_ms: oldest_ms.map_or(0, |at| (now - at).max(0)),
            last_acked: self.0.last_acked.load(Ordering::Relaxed),
            last_acked_at_ms: self.0.last_acked_at_ms.load(Ordering::Relaxed),
        })
    }

    /// Commits what was sent before and stops the writer.
    pub fn close(&self) {
        self.0.db.close();
    }
}

impl Held {
    fn reserve(&mut self, route: &str, size: u64, bounds: &Bounds) -> Result<(), PushError> {
        let of_route = self.per_route.get(route).copied().unwrap_or(0);
        if self.count >= bounds.max_pending {
            return Err(PushError::Full(Full::Overall));
        }
        if of_route >= bounds.max_per_route {
            return Err(PushError::Full(Full::Route));
        }
        if self.bytes.saturating_add(size) > bounds.max_bytes {
            return Err(PushError::Full(Full::Bytes));
        }
        self.count += 1;
        self.bytes += size;
        *self.per_route.entry(route.to_string()).or_default() += 1;
        Ok(())
    }

    fn unreserve(&mut self, route: &str, size: u64) {
        self.count = self.count.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(size);
        if let Some(n) = self.per_route.get_mut(route) {
            *n = n.saturating_sub(1);
        }
    }

    fn add(&mut self, seq: i64, route: String, size: u64) {
        self.count += 1;
        self.bytes += size;
        *self.per_route.entry(route.clone()).or_default() += 1;
        self.sizes.insert(seq, (route, size));
    }

    fn release_up_to(&mut self, up_to: i64) {
        let kept = self.sizes.split_off(&(up_to.saturating_add(1)));
        let released = std::mem::replace(&mut self.sizes, kept);
        for (route, size) in released.into_values() {
            self.unreserve(&route, size);
        }
        self.per_route.retain(|_, n| *n > 0);
    }
}

/// Headers as stored: each `name`, a NUL, the value's bytes, a newline (neither may occur in a
/// header that reached us: hyper refuses them).
fn encode_headers(headers: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out
}

fn decode_headers(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| {
            let at = line.iter().position(|b| *b == 0)?;
            let name = String::from_utf8_lossy(&line[..at]).into_owned();
            Some((name, line[at + 1..].to_vec()))
        })
        .collect()
}

/// `Vec<u8>` as one base64 string.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(bytes: &[u8], out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&BASE64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(input)?;
        BASE64.decode(text.as_bytes()).map_err(D::Error::custom)
    }
}

/// Headers as `[[name, base64 of the value], ...]`.
mod base64_headers {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(
        headers: &[(String, Vec<u8>)],
        out: S,
    ) -> Result<S::Ok, S::Error> {
        let mut seq = out.serialize_seq(Some(headers.len()))?;
        for (name, value) in headers {
            seq.serialize_element(&(name, BASE64.encode(value)))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        input: D,
    ) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
        let headers = Vec::<(String, String)>::deserialize(input)?;
        headers
            .into_iter()
            .map(|(name, value)| Ok((name, BASE64.decode(value).map_err(D::Error::custom)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(route: &str, body: &[u8]) -> Delivery {
        Delivery {
            seq: 0,
            request_id: "r".into(),
            route: route.into(),
            received_ms: now_ms(),
            client: Some([192, 0, 2, 1].into()),
            by_token: true,
            method: "POST".into(),
            target: format!("/hooks/{route}"),
            headers: vec![
                ("x-a".into(), b"1".to_vec()),
                ("x-b".into(), vec![0xff, b' ']),
            ],
            body: body.to_vec(),
        }
    }

    #[tokio::test]
    async fn stored_requests_come_back_exact_in_order_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let bounds = Bounds {
            max_pending: 10,
            max_per_route: 2,
            max_bytes: 1 << 20,
        };
        let queue = EdgeQueue::open(dir.path(), bounds).unwrap();
        let id = queue.id().clone();
        assert_eq!(queue.push(delivery("a", b"one")).await.unwrap(), 1);
        assert_eq!(queue.push(delivery("a", b"\x00two")).await.unwrap(), 2);
        assert!(matches!(
            queue.push(delivery("a", b"three")).await,
            Err(PushError::Full(Full::Route))
        ));
        assert_eq!(queue.push(delivery("b", b"four")).await.unwrap(), 3);
        queue.ack(1).await.unwrap();
        queue.close();
        let queue = EdgeQueue::open(dir.path(), bounds).unwrap();
        assert_eq!(queue.id(), &id);
        let pulled = queue.pull(0, 10, std::time::Duration::ZERO).await.unwrap();
        let seqs: Vec<i64> = pulled.iter().map(|d| d.seq).collect();
        assert_eq!(seqs, [2, 3]);
        assert_eq!(pulled[0].body, b"\x00two");
        assert_eq!(pulled[0].headers, delivery("a", b"").headers);
        assert_eq!(pulled[0].client, delivery("a", b"").client);
        // On the wire every byte of the headers and the body comes back as it was.
        let wire = serde_json::to_string(&pulled[0]).unwrap();
        assert!(
            wire.contains(r#""headers":[["x-a","MQ=="],["x-b","/yA="]]"#),
            "{wire}"
        );
        assert_eq!(serde_json::from_str::<Delivery>(&wire).unwrap(), pulled[0]);
        assert_eq!(queue.status().await.unwrap().backlog, 2);
        queue.ack(3).await.unwrap();
        assert_eq!(queue.push(delivery("a", b"five")).await.unwrap(), 4);
    }
}
