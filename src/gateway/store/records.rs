//! The records of the runtime as Rust types: main-session events, runs and their status, a run's
//! outcome and summary. Every backend stores and reads these; they become strings only here, at
//! the store's edge (the `ToSql`/`FromSql` impls and the row readers), and in the operator API's
//! JSON.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSqlOutput, ValueRef};
use rusqlite::{Connection, OptionalExtension, ToSql, params};
use serde::{Deserialize, Serialize};

use super::turn_record::ModelCall;
use super::turn_record::Usage;
use super::{Store, StoreError};
use crate::config::lanes::Priority;
use crate::config::runtime::Route;

use crate::hook::envelope::ContentSource;
use crate::hook::{AdmittedRun, AgentAction, Channel, SessionMode, Thinking, WakeMode};

/// Where a run is in its life. Spelled in snake case in the store and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Accepted, waiting for the runner (or for its session key to be free).
    Queued,
    /// A batch still gathering its requests; queued when it closes (docs/runtime.md
    /// "Batches").
    Batching,
    /// A runner has it.
    Running,
    /// The turn produced a reply.
    Ok,
    /// The turn failed: no provider, the provider refused, a malformed answer.
    Error,
    /// The turn took longer than its timeout.
    Timeout,
    /// Forward mode: waiting to be relayed upstream.
    Forwarding,
    /// Forward mode: the upstream accepted it.
    Forwarded,
    /// Forward mode: the upstream refused it; `POST /api/runs/{id}/retry` sends it again.
    ForwardFailed,
    /// Over a budget: stored, not started until the budget's window has room or the operator
    /// releases it (`POST /api/runs/{id}/release`).
    Held,
    /// A held run the operator cancelled (`POST /api/runs/{id}/cancel`): it never runs.
    Cancelled,
}

crate::hook::wire::wire_names!(RunStatus {
    Queued => "queued",
    Batching => "batching",
    Running => "running",
    Ok => "ok",
    Error => "error",
    Timeout => "timeout",
    Forwarding => "forwarding",
    Forwarded => "forwarded",
    ForwardFailed => "forward_failed",
    Held => "held",
    Cancelled => "cancelled",
});

impl RunStatus {
    /// Whether the runner still has to take or finish it: queued, running, or a batch still
    /// gathering (which the runner takes once it closes). Neither a held run (the runner never
    /// takes one; a release makes it queued first) nor a cancelled one (it never runs) is.
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            RunStatus::Queued | RunStatus::Running | RunStatus::Batching
        )
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A text column read as one of the domain's enums; any other text is a corrupt row.
fn parsed<T>(value: ValueRef<'_>, parse: impl FnOnce(&str) -> Option<T>) -> FromSqlResult<T> {
    let text = value.as_str()?;
    parse(text).ok_or_else(|| FromSqlError::Other(format!("unexpected value {text:?}").into()))
}

/// Stores each enum as its canonical spelling (`as_str`) and reads it back with its parser.
macro_rules! text_column {
    ($($type:ty => $parse:expr),+ $(,)?) => {
        $(
            impl ToSql for $type {
                fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                    Ok(self.as_str().into())
                }
            }

            impl FromSql for $type {
                fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                    parsed(value, $parse)
                }
            }
        )+
    };
}

text_column!(
    RunStatus => RunStatus::from_wire,
    Channel => Channel::parse,
    Thinking => Thinking::parse,
    WakeMode => WakeMode::from_wire,
    SessionMode => SessionMode::from_wire,
    ContentSource => ContentSource::from_wire,
);

/// A reply to send: a run's (with the summary to record if it cannot be delivered) or a
/// heartbeat's. Stored as JSON in the outbox and on the NATS stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryJob {
    /// The run whose reply this is; `None` for a heartbeat's.
    pub run_id: Option<String>,
    /// The agent whose main session is told when the reply cannot be delivered.
    pub agent: String,
    pub channel: Channel,
    pub to: Option<String>,
    pub text: String,
    /// The run's summary event, recorded instead of the reply when it is not delivered.
    pub summary: Option<SummaryEvent>,
    /// The run asked for a heartbeat (`wakeMode: now`): when the reply is given up and its
    /// summary recorded, another is requested, so that the summary does not wait. (Nodes of
    /// earlier versions also require the field.)
    #[serde(default)]
    pub wake_now: bool,
}

impl DeliveryJob {
    /// The route the job goes to.
    pub fn route(&self) -> Route {
        Route {
            channel: self.channel,
            to: self.to.clone(),
        }
    }
}

/// What became of delivering a run's reply, as `GET /api/runs/{id}` shows it under `delivery`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum DeliveryRecord {
    /// Nothing is sent, for the reason given.
    Skipped { reason: SkipReason },
    /// In the outbox.
    Pending {
        channel: Channel,
        to: Option<String>,
    },
    /// The channel accepted it.
    Sent {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
    },
    /// Given up: a refusal no retry mends, or every attempt failed.
    Failed {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
        error: String,
    },
    /// A send cut off by a stop: it may have arrived, so it is not made again.
    Uncertain {
        channel: Channel,
        to: Option<String>,
        attempts: u32,
        error: String,
    },
}

impl DeliveryRecord {
    /// The record of a job the channel accepted.
    pub fn sent(job: &DeliveryJob, attempts: u32) -> DeliveryRecord {
        DeliveryRecord::Sent {
            channel: job.channel,
            to: job.to.clone(),
            attempts,
        }
    }
}

/// Why a run's reply is not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipReason {
    #[serde(rename = "deliver is false")]
    NotAsked,
    #[serde(rename = "the run did not succeed")]
    RunFailed,
    #[serde(rename = "the reply is an acknowledgement")]
    Acknowledgement,
    /// On a NATS cluster: the reply did not fit in one message even when cut.
    #[serde(rename = "the reply was too large to record")]
    TooLarge,
}

/// How a run's turn ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunOutcome {
    /// `Ok`, `Error` or `Timeout`.
    pub status: RunStatus,
    pub reply: Option<String>,
    pub summary: Option<String>,
    pub error: Option<String>,
    /// The model id that answered; `None` when none did.
    #[serde(default)]
    pub model: Option<String>,
    /// The tokens the answering model's provider reported; `None` when no model answered or
    /// its provider reported none. (Outcomes that nodes of earlier versions published have
    /// none.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The turn's calls to its model providers, each with why it failed (the last
    /// [`MAX_RECORDED`](super::turn_record::MAX_RECORDED)). (Outcomes of earlier versions have
    /// none.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ModelCall>,
    pub finished_at: String,
}

/// The untrusted main-session event that tells the agent what a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryEvent {
    pub agent: String,
    pub run_id: String,
    pub text: String,
    pub at: String,
}

impl SummaryEvent {
    /// Inserts the event unless this run already has one: a resumed run or a retried delivery
    /// never adds a second summary.
    pub fn insert(&self, conn: &Connection) -> rusqlite::Result<bool> {
        let inserted = conn
            .prepare_cached(
                "INSERT OR IGNORE INTO events (agent, kind, text, trusted, source, at, run_id)
                 VALUES (?1, 'summary', ?2, 0, 'hook:run', ?3, ?4)",
            )?
            .execute(params![self.agent, self.text, self.at, self.run_id])?;
        Ok(inserted == 1)
    }
}

/// A main-session event about to be appended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewEvent {
    /// The agent whose main session receives it.
    pub agent: String,
    pub kind: EventKind,
    pub text: String,
    pub trusted: bool,
    /// Where it came from, e.g. `hook:wake`.
    pub source: String,
    /// RFC 3339, UTC.
    pub at: String,
}

/// What kind of main-session event this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A system event from a wake.
    System,
    /// The summary of a finished agent run.
    Summary,
}

impl EventKind {
    fn as_str(self) -> &'static str {
        match self {
            EventKind::System => "system",
            EventKind::Summary => "summary",
        }
    }
}

/// What became of a wake's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// Stored as a new pending event.
    Queued,
    /// Not stored: it repeats the newest pending event of its session, which the next heartbeat
    /// sees anyway.
    Coalesced,
}

crate::hook::wire::wire_names!(EventOutcome {
    Queued => "queued",
    Coalesced => "coalesced",
});

/// The newest event of agent `?1` that no heartbeat has taken.
pub(crate) const NEWEST_PENDING: &str =
    "SELECT kind, text FROM events WHERE agent = ?1 AND consumed = 0
     ORDER BY seq DESC LIMIT 1";

impl NewEvent {
    /// Whether this wake event would repeat the newest pending event of its agent's main session:
    /// a system event of the same text that no heartbeat has consumed yet. Older pending events
    /// of that text do not count, as in the OpenClaw gateway.
    pub(crate) fn repeats_newest_pending(&self, conn: &Connection) -> rusqlite::Result<bool> {
        let newest: Option<(String, String)> = conn
            .prepare_cached(NEWEST_PENDING)?
            .query_row(params![self.agent], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        Ok(newest.is_some_and(|(kind, text)| {
            kind == self.kind.as_str() && self.kind == EventKind::System && text == self.text
        }))
    }

    /// Appends a wake's event, unless it repeats the newest pending one
    /// ([`NewEvent::repeats_newest_pending`]).
    pub(crate) fn append_wake(&self, conn: &Connection) -> rusqlite::Result<EventOutcome> {
        if self.repeats_newest_pending(conn)? {
            return Ok(EventOutcome::Coalesced);
        }
        self.insert(conn)?;
        Ok(EventOutcome::Queued)
    }

    pub(crate) fn insert(&self, conn: &Connection) -> rusqlite::Result<i64> {
        conn.prepare_cached(
            "INSERT INTO events (agent, kind, text, trusted, source, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            self.agent,
            self.kind.as_str(),
            self.text,
            self.trusted,
            self.source,
            self.at
        ])?;
        Ok(conn.last_insert_rowid())
    }
}

impl NewRun {
    /// The run record of an admitted agent request, with the prompt the agent will be given.
    pub fn admitted(run_id: String, run: AdmittedRun, prompt: String, created_at: String) -> Self {
        NewRun {
            run_id,
            admitted: run,
            prompt,
            created_at,
            priority: Priority::Normal,
        }
    }

    /// Writes the run in its derived serde form, for `serialize_with` on a borrowed run: what
    /// the operator API shows of it and what the NATS form carries.
    pub(super) fn serialize_derived<S: serde::Serializer>(
        run: &&NewRun,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        NewRun::serialize(run, serializer)
    }

    /// The action as admitted.
    pub fn action(&self) -> &AgentAction {
        &self.admitted.action
    }

    /// The channel the reply goes to: as requested, else `last`.
    pub fn channel(&self) -> Channel {
        self.admitted.channel_or_last()
    }
}

/// A committed event, as the operator API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct EventRecord {
    pub seq: i64,
    pub kind: String,
    pub text: String,
    pub trusted: bool,
    pub source: String,
    pub at: String,
}

/// Events of agent `?1` past `?2`, of one consumed state (`?4`), at most `?3`.
const EVENTS_AFTER: &str = "SELECT seq, kind, text, trusted, source, at FROM events
     WHERE agent = ?1 AND consumed = ?4 AND seq > ?2 ORDER BY seq LIMIT ?3";
/// The newest `?3` events of agent `?1` of one consumed state (`?4`); `?2` is `NULL`.
const NEWEST_EVENTS: &str = "SELECT seq, kind, text, trusted, source, at FROM events
     WHERE agent = ?1 AND consumed = ?4 AND ?2 IS NULL ORDER BY seq DESC LIMIT ?3";

impl EventRecord {
    /// Events of `agent` in commit order: those after `after`, or with `after` `None` the
    /// newest `limit`. Read on `events_pending` (agent, consumed, seq) as two runs of at most
    /// `limit`, the agent's pending events and those a heartbeat took, merged: that index serves
    /// this listing as well as one by agent and seq did, which every wake then wrote too.
    fn select_after(
        conn: &Connection,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> rusqlite::Result<Vec<EventRecord>> {
        let sql = match after {
            Some(_) => EVENTS_AFTER,
            None => NEWEST_EVENTS,
        };
        let mut stmt = conn.prepare_cached(sql)?;
        let mut events = Vec::new();
        for consumed in [false, true] {
            let rows = stmt.query_map(params![agent, after, limit, consumed], |row| {
                Ok(EventRecord {
                    seq: row.get(0)?,
                    kind: row.get(1)?,
                    text: row.get(2)?,
                    trusted: row.get(3)?,
                    source: row.get(4)?,
                    at: row.get(5)?,
                })
            })?;
            for row in rows {
                events.push(row?);
            }
        }
        // The newest `limit` are kept from the end, the first `limit` after `after` from the start.
        events.sort_unstable_by_key(|event| event.seq);
        let extra = events.len().saturating_sub(limit as usize);
        match after {
            Some(_) => events.truncate(limit as usize),
            None => drop(events.drain(..extra)),
        }
        Ok(events)
    }
}

impl Store {
    /// Events of `agent`'s main session with `seq > after` (with `after` `None`: the newest
    /// `limit`), oldest first.
    pub async fn events(
        &self,
        agent: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let agent = agent.to_string();
        self.read(move |conn| EventRecord::select_after(conn, &agent, after, limit))
            .await
    }
}

/// A run about to be queued: the admitted action ([`AdmittedRun`]), its id, the prompt the agent
/// will be given (the action's message, in its safety envelope unless the action allows unsafe
/// external content) and when it was accepted (RFC 3339).
///
/// Its derived serde form (`remote = "Self"`: `NewRun::serialize`, `NewRun::deserialize`) is the
/// run's one shape: flat, camel case, an option the run does not set as null. The operator API's
/// view (`run_view`) and the run on NATS (`run_wire`, which holds its `Serialize` and
/// `Deserialize` impls) are made of it, so that a field added to the run, the admitted run or
/// the action shows in both.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase")]
pub struct NewRun {
    pub run_id: String,
    #[serde(flatten)]
    pub admitted: AdmittedRun,
    pub prompt: String,
    pub created_at: String,
    /// Its mapping's `runs.priority` when admitted (`normal` without one): which queued run the
    /// runner starts first.
    #[serde(default)]
    pub priority: Priority,
}

/// The columns of a [`NewRun`], in the order [`NewRun::from_row`] reads them: a macro, so that
/// every statement reading them is one `concat!`ed literal, built at compile time.
macro_rules! new_run_columns {
    () => {
        "run_id, hook_name, agent_id, target_agent, session_key, message, prompt, deliver, channel,
        to_addr, model, thinking, timeout_seconds, wake_mode, source, created_at, session_mode,
        mapping_id, priority"
    };
}
pub(crate) use new_run_columns;

impl NewRun {
    /// Stores the run `queued`.
    pub(crate) fn insert(&self, conn: &Connection) -> rusqlite::Result<()> {
        self.insert_as(conn, None)
    }

    /// Stores the run `queued`, or with `started_at` already `running` from then: what a claim
    /// ([`super::runs::claim`]) of the queued run would have left.
    pub(crate) fn insert_as(
        &self,
        conn: &Connection,
        started_at: Option<&str>,
    ) -> rusqlite::Result<()> {
        let (run, action) = (&self.admitted, &self.admitted.action);
        conn.prepare_cached(
            "INSERT INTO runs (run_id, status, hook_name, agent_id, target_agent, session_key,
                 message, prompt, deliver, channel, to_addr, model, thinking, timeout_seconds,
                 wake_mode, source, created_at, session_mode, mapping_id, priority, started_at)
             VALUES (?1, CASE WHEN ?20 IS NULL THEN 'queued' ELSE 'running' END, ?2, ?3, ?4, ?5,
                     ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
        )?
        .execute(params![
            self.run_id,
            action.name,
            action.agent_id,
            run.target_agent,
            run.session_key,
            action.message,
            self.prompt,
            action.deliver,
            self.channel(),
            action.to,
            action.model,
            action.thinking,
            action
                .timeout_seconds
                .map(|s| i64::try_from(s).unwrap_or(i64::MAX)),
            action.wake_mode,
            run.source,
            self.created_at,
            action.session_mode,
            run.mapping_id,
            self.priority,
            started_at,
        ])?;
        Ok(())
    }

    /// The run as [`NewRun::select`] reads it back once stored: the channel resolved, the
    /// timeout saturated, and what only admission uses dropped. A run started in its
    /// admission's transaction runs from this, with no read of what was just written.
    pub(crate) fn into_stored(mut self) -> NewRun {
        let channel = self.channel();
        let action = &mut self.admitted.action;
        action.channel = Some(channel);
        action.timeout_seconds = action
            .timeout_seconds
            .map(|t| t.min(i64::MAX.unsigned_abs()));
        action.session_key = None;
        self.admitted.session_key_chosen = false;
        self.admitted.allow_unsafe_external_content = false;
        self
    }

    /// The run with this id as it was accepted.
    pub(crate) fn select(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<NewRun>> {
        conn.prepare_cached(concat!(
            "SELECT ",
            new_run_columns!(),
            " FROM runs WHERE run_id = ?1"
        ))?
        .query_row(params![run_id], NewRun::from_row)
        .optional()
    }

    /// The run from the first columns of `row`, in the order of [`new_run_columns`].
    pub(crate) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<NewRun> {
        let action = AgentAction {
            name: row.get(1)?,
            agent_id: row.get(2)?,
            message: row.get(5)?,
            deliver: row.get(7)?,
            channel: Some(row.get(8)?),
            to: row.get(9)?,
            model: row.get(10)?,
            thinking: row.get(11)?,
            timeout_seconds: row
                .get::<_, Option<i64>>(12)?
                .map(|t| u64::try_from(t).unwrap_or(0)),
            wake_mode: row.get(13)?,
            session_mode: row.get(16)?,
            // The run keeps the resolved key only.
            session_key: None,
        };
        Ok(NewRun {
            run_id: row.get(0)?,
            admitted: AdmittedRun {
                action,
                target_agent: row.get(3)?,
                session_key: row.get(4)?,
                session_key_chosen: false,
                source: row.get(14)?,
                allow_unsafe_external_content: false,
                mapping_id: row.get(17)?,
                callback: None,
                request_id: None,
            },
            prompt: row.get(6)?,
            created_at: row.get(15)?,
            priority: row.get(18)?,
        })
    }
}

#[cfg(test)]
mod tests;
