//! A run as the operator API shows and lists it: [`RunRecord`], read from the store's row, and
//! [`RunFilter`], which runs a listing returns.

use rusqlite::Error::FromSqlConversionFailure;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::held_by::HeldBy;
use super::records::{DeliveryRecord, NewRun, RunStatus, new_run_columns};
use super::turn_record::ModelCall;
use super::turn_record::Usage;
use super::{Store, StoreError};

/// A run as the operator API shows it (`GET /api/runs/<runId>`): the run as it was accepted,
/// and its state since.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// As the store reads it back: its channel resolved (`last` when none was named).
    pub run: NewRun,
    pub status: RunStatus,
    /// The agent's reply, once the run finished.
    pub reply: Option<String>,
    /// The first non-empty line of the reply, at most 300 characters.
    pub summary: Option<String>,
    pub error: Option<String>,
    /// The model id that answered (a fallback, when the primary failed for a while).
    pub answered_by: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What became of delivering the reply.
    pub delivery: Option<DeliveryRecord>,
    /// The upstream gateway's run id, in forward mode.
    pub upstream_run_id: Option<String>,
    /// 1, and one more for each retry of its turn.
    pub attempts: u32,
    /// The tokens the answering model used, when its provider reported them.
    pub usage: Option<Usage>,
    /// The budget that held the run (kept once it is released or cancelled).
    pub held_by: Option<HeldBy>,
    /// The last attempt's calls to its model providers, each with why it failed.
    pub model_calls: Vec<ModelCall>,
}

/// The columns of a [`RunRecord`], in the order `from_row` reads them: the run's, then its state.
macro_rules! run_columns {
    () => {
        concat!(
            new_run_columns!(),
            ", status, reply, summary, error, started_at, finished_at, delivery,
            upstream_run_id, answered_by, attempts, input_tokens, output_tokens,
            held_by, model_calls"
        )
    };
}
/// Where the state's columns start, after the run's.
const STATE_AT: usize = 19;
/// Where a listing's cursor (the row's `rowid`) comes after the columns of `run_columns!`.
const CURSOR_AT: usize = STATE_AT + 14;

impl RunRecord {
    fn select(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<RunRecord>> {
        conn.prepare_cached(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE run_id = ?1"
        ))?
        .query_row(params![run_id], Self::from_row)
        .optional()
    }

    fn from_row(row: &Row<'_>) -> rusqlite::Result<RunRecord> {
        let state = |i: usize| STATE_AT + i;
        Ok(RunRecord {
            run: NewRun::from_row(row)?,
            status: row.get(state(0))?,
            reply: row.get(state(1))?,
            summary: row.get(state(2))?,
            error: row.get(state(3))?,
            started_at: row.get(state(4))?,
            finished_at: row.get(state(5))?,
            delivery: json_column(row, state(6))?,
            upstream_run_id: row.get(state(7))?,
            answered_by: row.get(state(8))?,
            attempts: row.get(state(9))?,
            usage: usage(row, state(10))?,
            held_by: row
                .get::<_, Option<String>>(state(12))?
                .and_then(|text| HeldBy::from_column(&text)),
            model_calls: json_column(row, state(13))?.unwrap_or_default(),
        })
    }

    /// A page of runs, newest first, each with its cursor (for `before` of the next page).
    fn select_page(
        conn: &Connection,
        filter: &RunFilter,
    ) -> rusqlite::Result<Vec<(RunRecord, i64)>> {
        let mut stmt = conn.prepare_cached(concat!(
            "SELECT ",
            run_columns!(),
            ", rowid FROM runs
             WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR hook_name = ?2)
               AND (?3 IS NULL OR session_key = ?3) AND (?4 IS NULL OR created_at >= ?4)
               AND (?5 IS NULL OR rowid < ?5) AND (?7 IS NULL OR mapping_id = ?7)
               AND (?8 IS NULL OR target_agent = ?8)
             ORDER BY rowid DESC LIMIT ?6"
        ))?;
        let rows = stmt.query_map(
            params![
                filter.status,
                filter.hook,
                filter.session_key,
                filter.since,
                filter.before,
                filter.limit,
                filter.mapping,
                filter.agent
            ],
            |row| Ok((Self::from_row(row)?, row.get(CURSOR_AT)?)),
        )?;
        rows.collect()
    }
}

impl Store {
    /// A page of runs, newest first, each with its cursor.
    pub async fn runs(&self, filter: RunFilter) -> Result<Vec<(RunRecord, i64)>, StoreError> {
        self.read(move |conn| RunRecord::select_page(conn, &filter))
            .await
    }

    /// The run with this id, if any.
    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let run_id = run_id.to_string();
        self.read(move |conn| RunRecord::select(conn, &run_id))
            .await
    }
}

/// The two token columns from `index` on; `None` unless both are set (they are written
/// together). A negative count is a corrupt row.
fn usage(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Usage>> {
    let count = |i: usize| -> rusqlite::Result<Option<u64>> {
        row.get::<_, Option<i64>>(i)?
            .map(|n| {
                u64::try_from(n).map_err(|e| FromSqlConversionFailure(i, Type::Integer, e.into()))
            })
            .transpose()
    };
    Ok(match (count(index)?, count(index + 1)?) {
        (Some(input_tokens), Some(output_tokens)) => Some(Usage {
            input_tokens,
            output_tokens,
        }),
        _ => None,
    })
}

/// A JSON text column read as `T`. Text that does not read as `T` is a corrupt row, as a text
/// that names no enum variant is: reading it as null would show a delivery that never happened.
fn json_column<T: serde::de::DeserializeOwned>(
    row: &Row<'_>,
    index: usize,
) -> rusqlite::Result<Option<T>> {
    row.get::<_, Option<String>>(index)?
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|err| FromSqlConversionFailure(index, Type::Text, Box::new(err)))
}

impl Serialize for RunRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ApiRun::of(self).serialize(serializer)
    }
}

/// A run in the operator API's words, borrowed from its record: the run in its own serde form
/// (every field of the run, the admitted run and the action, with the option a run does not set
/// as null), then its hook name and its state since, in camel case.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ApiRun<'a> {
    #[serde(flatten, serialize_with = "NewRun::serialize_derived")]
    run: &'a NewRun,
    hook_name: &'a str,
    status: RunStatus,
    reply: Option<&'a str>,
    summary: Option<&'a str>,
    error: Option<&'a str>,
    answered_by: Option<&'a str>,
    started_at: Option<&'a str>,
    finished_at: Option<&'a str>,
    delivery: Option<&'a DeliveryRecord>,
    upstream_run_id: Option<&'a str>,
    attempts: u32,
    /// The tokens the answering model used; null when no model answered, its provider reported
    /// none, or the run was forwarded (the upstream ran the model).
    usage: Option<Usage>,
    /// The budget that held the run, or null.
    held_by: Option<&'a HeldBy>,
    /// The last attempt's calls to its model providers, oldest first, each with why it failed
    /// and the wait after it; empty before a model was called, or when none was.
    model_calls: &'a [ModelCall],
}

impl<'a> ApiRun<'a> {
    fn of(record: &'a RunRecord) -> ApiRun<'a> {
        ApiRun {
            run: &record.run,
            hook_name: &record.run.action().name,
            status: record.status,
            reply: record.reply.as_deref(),
            summary: record.summary.as_deref(),
            error: record.error.as_deref(),
            answered_by: record.answered_by.as_deref(),
            started_at: record.started_at.as_deref(),
            finished_at: record.finished_at.as_deref(),
            delivery: record.delivery.as_ref(),
            upstream_run_id: record.upstream_run_id.as_deref(),
            attempts: record.attempts,
            usage: record.usage,
            held_by: record.held_by.as_ref(),
            model_calls: &record.model_calls,
        }
    }
}

/// Which runs a listing returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    pub status: Option<RunStatus>,
    pub hook: Option<String>,
    /// The mapping that admitted the run.
    pub mapping: Option<String>,
    /// The agent the run is for (its resolved target).
    pub agent: Option<String>,
    pub session_key: Option<String>,
    /// RFC 3339, milliseconds, UTC: runs created at or after it.
    pub since: Option<String>,
    /// The previous page's cursor.
    pub before: Option<i64>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::Channel;

    /// A finished run of a mapping, every field set, exactly as `GET /api/runs/{id}` showed it
    /// before the run's forms were derived from its types: camel case, in this order.
    const SHOWN_BEFORE: &str = concat!(
        r#"{"runId":"r1","status":"ok","hookName":"GitHub","agentId":"ops","#,
        r#""sessionKey":"hook:x","message":"m","prompt":"p","deliver":false,"#,
        r#""channel":"telegram","to":"+1","model":"a/b","thinking":"high","#,
        r#""timeoutSeconds":30,"wakeMode":"next-heartbeat","source":"email","#,
        r#""mappingId":"github","priority":"low","createdAt":"2026-01-01T00:00:00.000Z","#,
        r#""reply":"done","summary":"done","error":null,"answeredBy":"a/c","#,
        r#""startedAt":"2026-01-01T00:00:01.000Z","finishedAt":"2026-01-01T00:00:02.000Z","#,
        r#""delivery":{"status":"sent","channel":"telegram","to":"+1","attempts":1},"#,
        r#""upstreamRunId":null,"attempts":2,"usage":{"inputTokens":3,"outputTokens":4},"#,
        r#""heldBy":{"scope":"mapping","id":"github","limit":"runsPerHour"},"#,
        r#""modelCalls":[{"model":"a/c","provider":"p","at":"2026-01-01T00:00:01.000Z"}]}"#,
    );

    /// The same run as the API shows it now: the run's own serde form first, then its hook name
    /// and its state; `targetAgent` is new.
    const SHOWN: &str = concat!(
        r#"{"runId":"r1","message":"m","agentId":"ops","wakeMode":"next-heartbeat","#,
        r#""deliver":false,"channel":"telegram","to":"+1","model":"a/b","thinking":"high","#,
        r#""timeoutSeconds":30,"targetAgent":"ops","sessionKey":"hook:x","source":"email","#,
        r#""mappingId":"github","prompt":"p","createdAt":"2026-01-01T00:00:00.000Z","#,
        r#""priority":"low","hookName":"GitHub","status":"ok","#,
        r#""reply":"done","summary":"done","error":null,"answeredBy":"a/c","#,
        r#""startedAt":"2026-01-01T00:00:01.000Z","finishedAt":"2026-01-01T00:00:02.000Z","#,
        r#""delivery":{"status":"sent","channel":"telegram","to":"+1","attempts":1},"#,
        r#""upstreamRunId":null,"attempts":2,"usage":{"inputTokens":3,"outputTokens":4},"#,
        r#""heldBy":{"scope":"mapping","id":"github","limit":"runsPerHour"},"#,
        r#""modelCalls":[{"model":"a/c","provider":"p","at":"2026-01-01T00:00:01.000Z"}]}"#,
    );

    #[test]
    fn a_run_is_shown_as_before() {
        let run = crate::gateway::store::runs::tests::full_run("r1");
        let record = RunRecord {
            run,
            status: RunStatus::Ok,
            reply: Some("done".into()),
            summary: Some("done".into()),
            error: None,
            answered_by: Some("a/c".into()),
            started_at: Some("2026-01-01T00:00:01.000Z".into()),
            finished_at: Some("2026-01-01T00:00:02.000Z".into()),
            delivery: Some(DeliveryRecord::Sent {
                channel: Channel::Telegram,
                to: Some("+1".into()),
                attempts: 1,
            }),
            upstream_run_id: None,
            attempts: 2,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
            }),
            held_by: HeldBy::from_column("mapping:runsPerHour:github"),
            model_calls: vec![ModelCall {
                model: "a/c".into(),
                provider: "p".into(),
                at: "2026-01-01T00:00:01.000Z".into(),
                error: None,
                retry_in_ms: None,
            }],
        };
        assert_eq!(serde_json::to_string(&record).unwrap(), SHOWN);
        // Every key and value shown before, and one more: only the keys' order changed.
        let mut shown = serde_json::to_value(&record).unwrap();
        shown.as_object_mut().unwrap().remove("targetAgent");
        let before: serde_json::Value = serde_json::from_str(SHOWN_BEFORE).unwrap();
        assert_eq!(shown, before);
    }

    #[test]
    fn an_option_a_run_does_not_set_is_shown_as_null() {
        let record = RunRecord {
            run: crate::gateway::store::runs::tests::run("r1").into_stored(),
            status: RunStatus::Queued,
            reply: None,
            summary: None,
            error: None,
            answered_by: None,
            started_at: None,
            finished_at: None,
            delivery: None,
            upstream_run_id: None,
            attempts: 1,
            usage: None,
            held_by: None,
            model_calls: Vec::new(),
        };
        let shown = serde_json::to_value(&record).unwrap();
        for key in ["agentId", "to", "model", "thinking", "mappingId"] {
            assert_eq!(
                shown.get(key),
                Some(&serde_json::Value::Null),
                "{key}: {shown}"
            );
        }
        assert_eq!(shown["channel"], "last");
    }

    #[test]
    fn the_cursor_follows_every_run_column() {
        assert_eq!(new_run_columns!().split(',').count(), STATE_AT);
        assert_eq!(run_columns!().split(',').count(), CURSOR_AT);
    }
}
