//! The request log's rows (docs/operations.md#the-request-log): one per request under the hook
//! prefix, accepted or not, written in batches by the log's writer (`src/request_log.rs`) and
//! read by the operator API. Ids are UUIDv7, so their text order is their time order: the
//! newest-first listing and its cursor need no index of their own.

mod minutes;
mod search;

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use minutes::{MAX_MINUTES, OutcomeCounts, RequestMinute};
pub use search::{BodyMatch, ErrorText, HeaderMatch};

use super::store::records::EventOutcome;
use super::store::schema::migrate_request_log;
use super::store::{Database, DatabaseFile, StoreError, Synchronous};
use crate::hook::LimitKind;
use crate::hook::capture::Captured;

mod indexed;

/// What a mapping's transform made of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransformVerdict {
    /// An action of its own.
    Run,
    /// Changes to the mapping's action.
    Merge,
    /// The mapping's action as it was.
    Keep,
    /// Nothing to do.
    Skip,
    /// Its own answer to the client.
    Respond,
    /// A trap, a limit, a malformed answer, or no call slot.
    Failed,
}

crate::hook::wire::wire_names!(TransformVerdict {
    Run => "run",
    Merge => "merge",
    Keep => "keep",
    Skip => "skip",
    Respond => "respond",
    Failed => "failed",
});

/// A transform call, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransformTrace {
    pub outcome: TransformVerdict,
    pub duration_ms: f64,
    /// Why it failed (`trap`, `timeout`, `memory`, ...), when it did.
    pub failure: Option<String>,
}

/// How a request repeated an earlier one and was answered with the earlier one's work, not
/// with work of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Its idempotency key named a run made within the key's window: answered with that run.
    Idempotency,
    /// A signed delivery already claimed: answered again with the first answer, or 409
    /// `delivery in progress` while the first is still being processed.
    Redelivery,
}

crate::hook::wire::wire_names!(Repeat {
    Idempotency => "idempotency",
    Redelivery => "redelivery",
});

/// How a request ended when its status alone does not say: set once, by the step of the hook
/// path that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Mappings matched its path, and none's conditions held (docs/hooks.md#conditions):
    /// answered 204, it made nothing.
    Filtered,
    /// Its run went into a batch, one it joined or opened: the answer carries `batched`.
    Batched,
    /// Refused with 429: its mapping's lane was full (`runs.maxQueued`).
    Limited,
    /// Refused with 429: a budget whose `onExceeded` is `refuse` was spent.
    Refused,
    /// Accepted, and its run held by a spent budget whose `onExceeded` is `hold`.
    Held,
}

crate::hook::wire::wire_names!(RequestOutcome, expected = "outcome must be one of " {
    Filtered => "filtered",
    Batched => "batched",
    Limited => "limited",
    Refused => "refused",
    Held => "held",
});

impl From<LimitKind> for RequestOutcome {
    fn from(kind: LimitKind) -> Self {
        match kind {
            LimitKind::Lane => RequestOutcome::Limited,
            LimitKind::Budget => RequestOutcome::Refused,
        }
    }
}

/// A provider signature, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignatureTrace {
    pub scheme: String,
    pub verified: bool,
    /// Which secret verified it, `current` or `previous` (within a rotation's window); absent
    /// when it was not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<VerifiedBy>,
}

/// Which secret verified a signature ([`crate::hook::signature::SecretUsed`]), as a record
/// keeps it; the request log's `signature_verified` column holds 1 or 2 for it
/// (3 for an admission by no secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifiedBy {
    Current,
    Previous,
}

impl VerifiedBy {
    /// The `signature_verified` column's value: 0 not verified, 1 current, 2 previous, 3
    /// admitted by no secret (a website form's origin).
    pub fn column(trace: &SignatureTrace) -> i64 {
        match (trace.verified, trace.secret) {
            (false, _) => 0,
            (true, Some(VerifiedBy::Current)) => 1,
            (true, Some(VerifiedBy::Previous)) => 2,
            (true, None) => 3,
        }
    }

    /// The trace's `verified` and `secret` of a `signature_verified` column.
    pub fn of_column(value: i64) -> (bool, Option<VerifiedBy>) {
        match value {
            0 => (false, None),
            2 => (true, Some(VerifiedBy::Previous)),
            3 => (true, None),
            _ => (true, Some(VerifiedBy::Current)),
        }
    }
}

/// One request, as recorded. The request log fills it in as the request goes; the store writes
/// it as it is. Read back from its serde form, it lacks `at_ms` and `capture`, which that form
/// skips (a cluster's nodes send them beside it, `src/gateway/nats/request_log.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// A UUIDv7: the request's `X-Request-Id`, unless the client chose that.
    pub id: String,
    /// The `X-Request-Id` the client was answered with.
    pub request_id: String,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    #[serde(skip)]
    pub at_ms: i64,
    /// The client as the lockout counts it; null when a trusted proxy named none.
    pub client: Option<String>,
    pub method: String,
    /// Path and query as received.
    pub target: String,
    /// The hook name (what follows the prefix); null when the path had none.
    pub hook: Option<String>,
    pub mapping_id: Option<String>,
    pub status: u16,
    /// The error text the client got.
    pub error: Option<String>,
    /// Why, in more words than the client got (which it never gets): the transform's own error,
    /// the reason a signature or the token was refused, the cause of our own failure.
    pub reason: Option<String>,
    pub duration_ms: f64,
    pub transform: Option<TransformTrace>,
    pub signature: Option<SignatureTrace>,
    pub run_ids: Vec<String>,
    #[serde(serialize_with = "outcome_text")]
    pub event_outcome: Option<EventOutcome>,
    /// Refused requests of this client that were counted, not recorded, since its last record.
    pub suppressed: u64,
    /// The request this one replayed.
    pub replay_of: Option<String>,
    /// Set when the request repeated an earlier one: its `runIds` are the earlier request's.
    pub repeat: Option<Repeat>,
    /// Set when the status alone does not say how the request ended (`filtered`, `batched`,
    /// `limited`, `refused`, `held`).
    pub outcome: Option<RequestOutcome>,
    /// Whether headers and body were kept (`GET /api/requests/{id}` shows them).
    pub captured: bool,
    #[serde(skip)]
    pub capture: Option<Captured>,
}

fn outcome_text<S: serde::Serializer>(
    outcome: &Option<EventOutcome>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match outcome {
        Some(outcome) => serializer.serialize_str(outcome.as_str()),
        None => serializer.serialize_none(),
    }
}

/// The longest path, and hook name, a record keeps: a refused request's path is the sender's
/// to choose, up to the whole request head, and a flood of them must not fill the disk
/// (docs/operations.md#the-request-log has the worst case per day). Small enough that a refused
/// record stays within one b-tree cell: a row of this WITHOUT ROWID table over about 1,000
/// bytes spills into an overflow page of its own, and took 4.7 KB of the file with 512 here.
pub const MAX_RECORDED_PATH: usize = 256;

/// The longest method a record keeps: hyper takes an extension method as long as the request
/// head, and a refused request's is the sender's to choose too.
pub const MAX_RECORDED_METHOD: usize = 32;

/// What a record keeps of a path or a hook name: at most [`MAX_RECORDED_PATH`] bytes; a longer
/// one cut there (on a character boundary) and marked with a trailing `…`, which makes it
/// longer than any uncut one ([`is_cut`]).
pub fn recorded_path(text: &str) -> String {
    cut(text, MAX_RECORDED_PATH)
}

/// What a record keeps of a method: at most [`MAX_RECORDED_METHOD`] bytes, a longer one cut and
/// marked like a path.
pub fn recorded_method(text: &str) -> String {
    cut(text, MAX_RECORDED_METHOD)
}

/// `text`, or its first `max` bytes (on a character's boundary) marked `…` when longer.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Whether a path or hook name as recorded was cut by [`recorded_path`].
pub fn is_cut(recorded: &str) -> bool {
    recorded.len() > MAX_RECORDED_PATH
}

/// The order of a listing of the request log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListOrder {
    /// The newest first: what the operator looks at.
    #[default]
    NewestFirst,
    /// The oldest first: the order requests arrived in, which a bulk operation keeps.
    OldestFirst,
}

/// Which requests a listing returns, and in which order.
#[derive(Debug, Clone, Default)]
pub struct RequestFilter {
    pub hook: Option<String>,
    pub mapping_id: Option<String>,
    /// The `X-Request-Id` it was answered with.
    pub request_id: Option<String>,
    /// 2 for 2xx, 4 for 4xx, 5 for 5xx.
    pub status_class: Option<u16>,
    pub outcome: Option<RequestOutcome>,
    /// A captured header's value.
    pub header: Option<HeaderMatch>,
    /// A captured JSON body's value at a pointer.
    pub body: Option<BodyMatch>,
    /// Text in the error or the reason.
    pub error: Option<ErrorText>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Only requests past this id in the listing's order (the previous page's last id).
    pub cursor: Option<String>,
    pub order: ListOrder,
    pub limit: u32,
}

const COLUMNS: &str = "id, at, at_ms, client, method, target, hook, mapping_id, status, error,
    duration_us, transform_outcome, transform_us, transform_failure, signature_scheme,
    signature_verified, run_ids, event_outcome, suppressed, replay_of, captured, request_id,
    reason, repeat, outcome";
/// Where the capture's columns start after [`COLUMNS`] (which `from_row` reads by position).
const CAPTURE_AT: usize = 25;

impl RequestRecord {
    /// Writes records in one statement each; called by the writer with a batch.
    fn insert_all(conn: &Connection, records: &[RequestRecord]) -> rusqlite::Result<()> {
        let mut stmt = conn.prepare_cached(
            "INSERT OR IGNORE INTO requests (id, at, at_ms, client, method, target, hook,
                mapping_id, status, error, duration_us, transform_outcome, transform_us,
                transform_failure, signature_scheme, signature_verified, run_ids, event_outcome,
                suppressed, replay_of, captured, headers, body, capture_note, request_id, query,
                reason, repeat, outcome)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29)",
        )?;
        for r in records {
            let transform = r.transform.as_ref();
            let signature = r.signature.as_ref();
            let capture = r.capture.as_ref();
            let run_ids = (!r.run_ids.is_empty())
                .then(|| serde_json::to_string(&r.run_ids).unwrap_or_default());
            let headers = capture.map(|c| {
                let pairs: Vec<[&str; 2]> = c.headers.iter().map(|(n, v)| [&**n, &**v]).collect();
                serde_json::to_string(&pairs).unwrap_or_default()
            });
            stmt.execute(params![
                r.id,
                r.at,
                r.at_ms,
                r.client,
                r.method,
                r.target,
                r.hook,
                r.mapping_id,
                r.status,
                r.error,
                micros(r.duration_ms),
                transform.map(|t| t.outcome.as_str()),
                transform.map(|t| micros(t.duration_ms)),
                transform.and_then(|t| t.failure.as_deref()),
                signature.map(|s| &s.scheme),
                signature.map(VerifiedBy::column),
                run_ids,
                r.event_outcome.map(EventOutcome::as_str),
                i64::try_from(r.suppressed).unwrap_or(i64::MAX),
                r.replay_of,
                capture.is_some(),
                headers,
                capture.and_then(|c| c.body.as_deref()),
                capture.and_then(|c| c.note.as_deref()),
                r.request_id,
                capture.and_then(|c| c.query.as_deref()),
                r.reason,
                r.repeat.map(Repeat::as_str),
                r.outcome.map(RequestOutcome::as_str),
            ])?;
        }
        Ok(())
    }

    /// One request with what was captured of it, and the ids of the requests that replayed it.
    fn select_one(
        conn: &Connection,
        id: &str,
    ) -> rusqlite::Result<Option<(RequestRecord, Vec<String>)>> {
        let found = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS}, headers, body, capture_note, query FROM requests WHERE id = ?1"
            ))?
            .query_row(params![id], |row| {
                let mut record = Self::from_row(row)?;
                if record.captured {
                    let headers: Option<String> = row.get(CAPTURE_AT)?;
                    let headers: Vec<(String, String)> = headers
                        .and_then(|h| serde_json::from_str(&h).ok())
                        .unwrap_or_default();
                    record.capture = Some(Captured {
                        headers,
                        body: row.get(CAPTURE_AT + 1)?,
                        note: row.get(CAPTURE_AT + 2)?,
                        query: row.get(CAPTURE_AT + 3)?,
                    });
                }
                Ok(record)
            })
            .optional()?;
        let Some(record) = found else {
            return Ok(None);
        };
        let mut stmt =
            conn.prepare_cached("SELECT id FROM requests WHERE replay_of = ?1 ORDER BY id")?;
        let replays = stmt
            .query_map(params![id], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(Some((record, replays)))
    }

    fn from_row(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
        let corrupt = |column: usize, text: &str| {
            rusqlite::Error::FromSqlConversionFailure(
                column,
                rusqlite::types::Type::Text,
                format!("unexpected value {text:?}").into(),
            )
        };
        let transform = match row.get::<_, Option<String>>(11)? {
            None => None,
            Some(text) => Some(TransformTrace {
                outcome: TransformVerdict::from_wire(&text).ok_or_else(|| corrupt(11, &text))?,
                duration_ms: millis(row.get(12)?),
                failure: row.get(13)?,
            }),
        };
        let signature = row
            .get::<_, Option<String>>(14)?
            .map(|scheme| -> rusqlite::Result<SignatureTrace> {
                let (verified, secret) = VerifiedBy::of_column(row.get(15)?);
                Ok(SignatureTrace {
                    scheme,
                    verified,
                    secret,
                })
            })
            .transpose()?;
        let run_ids = row
            .get::<_, Option<String>>(16)?
            .and_then(|ids| serde_json::from_str(&ids).ok())
            .unwrap_or_default();
        let event_outcome = match row.get::<_, Option<String>>(17)? {
            None => None,
            Some(text) => Some(EventOutcome::from_wire(&text).ok_or_else(|| corrupt(17, &text))?),
        };
        let repeat = match row.get::<_, Option<String>>(23)? {
            None => None,
            Some(text) => Some(Repeat::from_wire(&text).ok_or_else(|| corrupt(23, &text))?),
        };
        let outcome = match row.get::<_, Option<String>>(24)? {
            None => None,
            Some(text) => Some(RequestOutcome::from_wire(&text).ok_or_else(|| corrupt(24, &text))?),
        };
        Ok(RequestRecord {
            id: row.get(0)?,
            at: row.get(1)?,
            at_ms: row.get(2)?,
            client: row.get(3)?,
            method: row.get(4)?,
            target: row.get(5)?,
            hook: row.get(6)?,
            mapping_id: row.get(7)?,
            status: row.get(8)?,
            error: row.get(9)?,
            reason: row.get(22)?,
            repeat,
            outcome,
            duration_ms: millis(row.get(10)?),
            transform,
            signature,
            run_ids,
            event_outcome,
            suppressed: row.get::<_, i64>(18)?.max(0) as u64,
            replay_of: row.get(19)?,
            captured: row.get(20)?,
            request_id: row.get(21)?,
            capture: None,
        })
    }
}

/// The file name of the request log's database inside the state directory.
pub const REQUEST_LOG_FILE: &str = "requests.db";

/// Handle to the request log's database ([`REQUEST_LOG_FILE`]); cheap to clone. Its queries
/// are its methods, and only they run on it: it is not the main store's
/// [`Store`](super::Store), so neither database's queries compile against the other.
#[derive(Clone)]
pub struct RequestLogStore {
    db: Database,
}

impl RequestLogStore {
    /// Opens (creating when needed) the request log's own file in `state_dir`, with a writer
    /// thread of its own: its inserts never queue behind intake's commits nor make them larger,
    /// and a commit is not synced to disk (the log is written behind the answers and may lose
    /// its last moment in a crash anyway, docs/operations.md#the-request-log).
    pub fn open(state_dir: &Path) -> Result<RequestLogStore, StoreError> {
        let file = DatabaseFile {
            name: REQUEST_LOG_FILE,
            thread: "hookgate-log",
            migrate: migrate_request_log,
            synchronous: Synchronous::Normal,
        };
        let db = Database::open(state_dir, file, true, None)?;
        Ok(RequestLogStore { db })
    }

    /// Writes a batch of records as one operation of the writer, however many they are; a
    /// record whose id is there already is left as it is.
    pub async fn insert(&self, records: Arc<[RequestRecord]>) -> Result<(), StoreError> {
        self.db
            .write(move |conn| RequestRecord::insert_all(conn, &records))
            .await
    }

    /// A page of the log, in the filter's order.
    pub async fn page(&self, filter: RequestFilter) -> Result<Vec<RequestRecord>, StoreError> {
        self.db
            .read(move |conn| search::select(conn, &filter))
            .await
    }

    /// One request of the log with its capture, and the requests that replayed it.
    pub async fn find(&self, id: &str) -> Result<Option<(RequestRecord, Vec<String>)>, StoreError> {
        let id = id.to_string();
        self.db
            .read(move |conn| RequestRecord::select_one(conn, &id))
            .await
    }

    /// Deletes up to `batch` of the oldest requests recorded before `before_ms`; returns how
    /// many went.
    pub async fn prune(&self, before_ms: i64, batch: u32) -> Result<usize, StoreError> {
        self.db
            .write(move |conn| prune(conn, before_ms, batch))
            .await
    }

    /// Deletes the oldest requests while the log's pages in use take more than `max_bytes`,
    /// down to nine tenths of it; returns how many went. Costs two page counts when under.
    pub async fn prune_to_size(&self, max_bytes: u64) -> Result<usize, StoreError> {
        self.db
            .write(move |conn| prune_to_size(conn, max_bytes))
            .await
    }

    /// Commits every write sent before it and stops the log's writer, waiting for it.
    pub fn close(&self) {
        self.db.close();
    }
}

/// What `GET /api/requests/{id}` shows of a capture: headers as pairs, the body as text when it
/// is UTF-8 (else base64, said so).
pub fn capture_json(capture: &Captured) -> Value {
    use base64::Engine;
    let mut json = serde_json::json!({
        "headers": capture.headers,
        "query": capture.query,
        "note": capture.note,
    });
    if let Some(body) = &capture.body {
        match std::str::from_utf8(body) {
            Ok(text) => json["body"] = Value::from(text),
            Err(_) => {
                json["bodyBase64"] =
                    Value::from(base64::engine::general_purpose::STANDARD.encode(body))
            }
        }
    }
    json
}

/// Deletes up to `batch` of the oldest requests recorded before `before_ms`; returns how many
/// went. Ids are in time order, so the oldest are the first of the key.
fn prune(conn: &Connection, before_ms: i64, batch: u32) -> rusqlite::Result<usize> {
    conn.execute(
        "DELETE FROM requests WHERE id IN
           (SELECT id FROM requests WHERE id < ?2 ORDER BY id LIMIT ?1)",
        params![batch, first_id_at(before_ms)],
    )
}

/// Deletes the oldest requests while the log's pages in use take more than `max_bytes`, down to
/// nine tenths of it (so that a log at its bound is not pruned again at every batch); returns
/// how many went. Freed pages are reused by later records: the file stops growing at about the
/// bound, it does not shrink. Costs two page counts when under the bound.
fn prune_to_size(conn: &Connection, max_bytes: u64) -> rusqlite::Result<usize> {
    const BATCH: u32 = 500;
    let used = |conn: &Connection| -> rusqlite::Result<u64> {
        let pragma = |sql: &str| {
            conn.prepare_cached(sql)?
                .query_row([], |r| r.get::<_, i64>(0))
        };
        let pages = pragma("PRAGMA page_count")?;
        let free = pragma("PRAGMA freelist_count")?;
        let used = pages.saturating_sub(free) * pragma("PRAGMA page_size")?;
        Ok(u64::try_from(used).unwrap_or(0))
    };
    if used(conn)? <= max_bytes {
        return Ok(0);
    }
    let target = max_bytes / 10 * 9;
    let mut pruned = 0;
    while used(conn)? > target {
        let deleted = conn.execute(
            "DELETE FROM requests WHERE id IN (SELECT id FROM requests ORDER BY id LIMIT ?1)",
            [BATCH],
        )?;
        if deleted == 0 {
            break;
        }
        pruned += deleted;
    }
    Ok(pruned)
}

/// The smallest UUIDv7 of millisecond `ms` (the Unix epoch's): every id made at or after `ms`
/// sorts at or after it.
fn first_id_at(ms: i64) -> String {
    let ms = ms.clamp(0, (1 << 48) - 1) as u64;
    format!(
        "{:08x}-{:04x}-0000-0000-000000000000",
        ms >> 16,
        ms & 0xffff
    )
}

fn micros(ms: f64) -> i64 {
    (ms * 1000.0).round() as i64
}

fn millis(us: i64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_bound_orders_with_the_ids_of_that_time() {
        let ms = 1_800_000_000_123;
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (ms / 1000) as u64,
            ((ms % 1000) * 1_000_000) as u32,
        ))
        .to_string();
        assert!(first_id_at(ms) <= id, "{} vs {id}", first_id_at(ms));
        assert!(first_id_at(ms + 1) > id);
        assert!(first_id_at(ms - 1) < id);
    }

    #[test]
    fn the_capture_columns_follow_every_record_column() {
        assert_eq!(COLUMNS.split(',').count(), CAPTURE_AT);
    }
}
