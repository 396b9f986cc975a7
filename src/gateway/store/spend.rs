//! What runs cost over a rolling window, per mapping or per agent, for the operator's spend
//! view (`GET /api/spend`) and for budgets' `tokensPerDay`: the one place that sums tokens.
//! Its run count is every run created in the window, whatever its status (held ones too): what
//! the scope was asked for. `runsPerHour` counts differently (`budget::count`): the runs that
//! entered the queue in the window, a held run from its release, since a budget limits the
//! runs let through, not the requests. Read from the store (on NATS, the node's view, which
//! holds the whole cluster's runs), each sum on an index of its own (schema 12), so its cost
//! grows with the runs of the scope in the window, not with every run kept. An agent's spend
//! counts its heartbeat turns too (`heartbeat_turns`): their tokens are the agent's, though no
//! run or mapping has them.

use rusqlite::{Connection, params};
use serde::Serialize;

use super::turn_record::Usage;
use super::{Store, StoreError};

/// Each scope's id with what it cost, in the order asked.
pub type ScopeSpends = Vec<(String, Spend)>;

/// Whose runs a sum counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendScope<'a> {
    /// The runs a mapping admitted (`hooks.mappings[].id`).
    Mapping(&'a str),
    /// The runs of an agent (the run's target agent, normalised), whatever admitted them.
    Agent(&'a str),
}

/// What a scope's runs cost since a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spend {
    /// Runs created (admitted) since then, whatever their status now.
    pub runs: u64,
    /// Input tokens of the runs that finished since then, as their providers reported them.
    pub input_tokens: u64,
    /// Output tokens of the runs that finished since then.
    pub output_tokens: u64,
    /// An agent's heartbeat turns that ended since then, whose tokens the sums above hold;
    /// always 0 for a mapping (a heartbeat is no mapping's).
    pub heartbeats: u64,
}

/// A mapping's runs and tokens since `?2`. Tokens are summed by `TOTAL()`, in floating point,
/// which never fails: `SUM()` of integers fails past `i64::MAX` ("integer overflow"), and a
/// window of runs a provider reported absurd counts for made every read of it fail, admission
/// of the scope's budgets included. A turn's counts are bounded where they are read
/// (`provider::MAX_TURN_TOKENS`), and rows written before that bound still sum.
const BY_MAPPING: &str = "SELECT
     (SELECT COUNT(*) FROM runs WHERE mapping_id = ?1 AND created_at >= ?2),
     TOTAL(input_tokens), TOTAL(output_tokens), 0
     FROM runs WHERE mapping_id = ?1 AND finished_at >= ?2";

/// An agent's runs and tokens since `?2`, its heartbeat turns' tokens included.
const BY_AGENT: &str = "SELECT
     (SELECT COUNT(*) FROM runs WHERE target_agent = ?1 AND created_at >= ?2),
     TOTAL(input_tokens) + (SELECT TOTAL(input_tokens) FROM heartbeat_turns
                              WHERE agent = ?1 AND finished_at >= ?2),
     TOTAL(output_tokens) + (SELECT TOTAL(output_tokens) FROM heartbeat_turns
                               WHERE agent = ?1 AND finished_at >= ?2),
     (SELECT COUNT(*) FROM heartbeat_turns WHERE agent = ?1 AND finished_at >= ?2)
     FROM runs WHERE target_agent = ?1 AND finished_at >= ?2";

/// Records a heartbeat turn of `agent` that ended at `finished_at` (RFC 3339, the store's
/// form) having used `usage` (none reported: no tokens, the turn still counted): from then on
/// the agent's spend and its `tokensPerDay` count it ([`spend_since`]).
pub fn record_heartbeat(
    conn: &Connection,
    agent: &str,
    finished_at: &str,
    usage: Option<Usage>,
) -> rusqlite::Result<()> {
    let usage = usage.unwrap_or_default();
    // A turn's counts are bounded where they are read (`provider::MAX_TURN_TOKENS`).
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.prepare_cached(
        "INSERT INTO heartbeat_turns (agent, finished_at, input_tokens, output_tokens)
         VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        agent,
        finished_at,
        count(usage.input_tokens),
        count(usage.output_tokens)
    ])?;
    Ok(())
}

/// What `scope`'s runs cost since `since`: the runs created at or after it, and the tokens of
/// the runs that finished at or after it (a run that reported no usage adds none). `since` is
/// an RFC 3339 time as the store writes them (UTC, milliseconds, `Z`:
/// `runtime_clock::rfc3339`), compared as text. A sum saturates at `u64::MAX`, exact to 2^53
/// tokens (it is summed in floating point), and never fails. Costs two index lookups and a step
/// per run of the scope in the window.
pub fn spend_since(
    conn: &Connection,
    scope: SpendScope<'_>,
    since: &str,
) -> rusqlite::Result<Spend> {
    let (sql, id) = match scope {
        SpendScope::Mapping(id) => (BY_MAPPING, id),
        SpendScope::Agent(id) => (BY_AGENT, id),
    };
    conn.prepare_cached(sql)?
        .query_row(params![id, since], |row| {
            // A float to u64 saturates (and a NaN, which TOTAL() never gives, is 0).
            let tokens = |i: usize| row.get::<_, f64>(i).map(|n| n as u64);
            Ok(Spend {
                runs: row.get::<_, i64>(0)?.unsigned_abs(),
                input_tokens: tokens(1)?,
                output_tokens: tokens(2)?,
                heartbeats: row.get::<_, i64>(3)?.unsigned_abs(),
            })
        })
}

impl Store {
    /// What each of `mappings` and each of `agents` cost since `since` ([`spend_since`]), in
    /// their order: one call to the read connection for them all.
    pub async fn spend_by_scope(
        &self,
        mappings: Vec<String>,
        agents: Vec<String>,
        since: String,
    ) -> Result<(ScopeSpends, ScopeSpends), StoreError> {
        self.read(move |conn| {
            let of = |ids: Vec<String>, agents: bool| {
                ids.into_iter()
                    .map(|id| {
                        let scope = match agents {
                            true => SpendScope::Agent(&id),
                            false => SpendScope::Mapping(&id),
                        };
                        let spend = spend_since(conn, scope, &since)?;
                        Ok((id, spend))
                    })
                    .collect::<rusqlite::Result<ScopeSpends>>()
            };
            Ok((of(mappings, false)?, of(agents, true)?))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::store::records::{
        DeliveryRecord, NewRun, RunOutcome, RunStatus, SkipReason,
    };
    use crate::gateway::store::runs;

    /// A run of `mapping` (none: `/hooks/agent`) for `agent`, created at `created`.
    fn run(id: &str, mapping: Option<&str>, agent: &str, created: &str) -> NewRun {
        NewRun {
            run_id: id.into(),
            admitted: crate::hook::AdmittedRun {
                action: crate::hook::AgentAction {
                    message: "m".into(),
                    ..Default::default()
                },
                target_agent: agent.into(),
                session_key: format!("hook:{id}"),
                session_key_chosen: false,
                source: crate::hook::envelope::ContentSource::Webhook,
                allow_unsafe_external_content: false,
                mapping_id: mapping.map(String::from),
                callback: None,
                request_id: None,
            },
            prompt: "p".into(),
            created_at: created.into(),
            priority: Default::default(),
        }
    }

    fn finish(conn: &Connection, id: &str, at: &str, usage: Option<(u64, u64)>) {
        let outcome = RunOutcome {
            status: RunStatus::Ok,
            reply: Some("r".into()),
            summary: None,
            error: None,
            model: Some("m".into()),
            usage: usage.map(|(input_tokens, output_tokens)| Usage {
                input_tokens,
                output_tokens,
            }),
            calls: Vec::new(),
            finished_at: at.into(),
        };
        let delivery = DeliveryRecord::Skipped {
            reason: SkipReason::NotAsked,
        };
        runs::finish(conn, id, &outcome, &delivery, None).unwrap();
    }

    fn store() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("spend.db")).unwrap();
        crate::gateway::store::schema::migrate(&conn).unwrap();
        (dir, conn)
    }

    const DAY_AGO: &str = "2026-01-01T12:00:00.000Z";

    #[test]
    fn a_window_counts_the_runs_it_admitted_and_the_tokens_of_those_it_finished() {
        let (_dir, conn) = store();
        let runs = [
            // Created before the window, finished in it: its tokens count, the run does not.
            ("old", Some("github"), "main", "2026-01-01T11:00:00.000Z"),
            ("a", Some("github"), "main", "2026-01-01T12:00:00.000Z"),
            ("b", Some("github"), "ops", "2026-01-01T13:00:00.000Z"),
            ("c", Some("gmail"), "main", "2026-01-01T13:00:00.000Z"),
            ("direct", None, "main", "2026-01-01T14:00:00.000Z"),
            ("queued", Some("github"), "main", "2026-01-01T15:00:00.000Z"),
        ];
        for (id, mapping, agent, created) in runs {
            runs::queue_run(&conn, &run(id, mapping, agent, created), None).unwrap();
        }
        finish(&conn, "old", "2026-01-01T12:30:00.000Z", Some((100, 10)));
        finish(&conn, "a", "2026-01-01T12:01:00.000Z", Some((20, 2)));
        finish(&conn, "b", "2026-01-01T13:01:00.000Z", None);
        finish(&conn, "c", "2026-01-01T13:01:00.000Z", Some((3, 1)));
        finish(&conn, "direct", "2026-01-01T14:01:00.000Z", Some((5, 5)));
        let spend = |scope| spend_since(&conn, scope, DAY_AGO).unwrap();
        let expect = |runs, input_tokens, output_tokens| Spend {
            runs,
            input_tokens,
            output_tokens,
            heartbeats: 0,
        };
        assert_eq!(spend(SpendScope::Mapping("github")), expect(3, 120, 12));
        assert_eq!(spend(SpendScope::Mapping("gmail")), expect(1, 3, 1));
        assert_eq!(spend(SpendScope::Mapping("none")), expect(0, 0, 0));
        assert_eq!(spend(SpendScope::Agent("main")), expect(4, 128, 18));
        assert_eq!(spend(SpendScope::Agent("ops")), expect(1, 0, 0));
        let later = spend_since(
            &conn,
            SpendScope::Mapping("github"),
            "2026-01-01T12:30:00.000Z",
        );
        assert_eq!(
            later.unwrap(),
            expect(2, 100, 10),
            "the window's start is in it"
        );
    }

    /// An agent's heartbeat turns in the window count in its spend, tokens and turns, beside
    /// its runs; a mapping's spend has none of them.
    #[test]
    fn an_agents_spend_counts_its_heartbeat_turns() {
        let (_dir, conn) = store();
        runs::queue_run(&conn, &run("a", Some("github"), "main", DAY_AGO), None).unwrap();
        finish(&conn, "a", "2026-01-01T12:01:00.000Z", Some((20, 2)));
        let usage = |input_tokens, output_tokens| {
            Some(Usage {
                input_tokens,
                output_tokens,
            })
        };
        record_heartbeat(&conn, "main", "2026-01-01T11:00:00.000Z", usage(1000, 100)).unwrap();
        record_heartbeat(&conn, "main", "2026-01-01T12:02:00.000Z", usage(1000, 200)).unwrap();
        record_heartbeat(&conn, "main", "2026-01-01T12:03:00.000Z", None).unwrap();
        record_heartbeat(&conn, "ops", "2026-01-01T12:04:00.000Z", usage(7, 7)).unwrap();
        let spend = |scope| spend_since(&conn, scope, DAY_AGO).unwrap();
        let main = Spend {
            runs: 1,
            input_tokens: 1020,
            output_tokens: 202,
            heartbeats: 2,
        };
        assert_eq!(spend(SpendScope::Agent("main")), main);
        // An agent with heartbeats and no run in the window.
        let ops = Spend {
            runs: 0,
            input_tokens: 7,
            output_tokens: 7,
            heartbeats: 1,
        };
        assert_eq!(spend(SpendScope::Agent("ops")), ops);
        let github = spend(SpendScope::Mapping("github"));
        assert_eq!((github.input_tokens, github.heartbeats), (20, 0));
    }

    /// Runs whose stored counts sum past `i64::MAX` (written before a turn's counts were
    /// bounded, or by a provider that reported them) sum without failing, saturated.
    #[test]
    fn sums_past_the_largest_integer_saturate() {
        let (_dir, conn) = store();
        for id in ["a", "b", "c"] {
            runs::queue_run(&conn, &run(id, Some("github"), "main", DAY_AGO), None).unwrap();
            let absurd = Some((9_000_000_000_000_000_000, u64::MAX));
            finish(&conn, id, "2026-01-01T12:01:00.000Z", absurd);
        }
        let spend = spend_since(&conn, SpendScope::Agent("main"), DAY_AGO).unwrap();
        assert_eq!(spend.runs, 3);
        assert_eq!(
            (spend.input_tokens, spend.output_tokens),
            (u64::MAX, u64::MAX)
        );
    }

    /// Each sum is found on an index by its scope and time, neither a scan of every run nor a
    /// sort of them.
    #[test]
    fn a_scopes_spend_is_read_from_its_indexes() {
        let (_dir, conn) = store();
        for sql in [BY_MAPPING, BY_AGENT] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .unwrap()
                .query_map(["x", DAY_AGO], |row| row.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let searches = plan
                .iter()
                .filter(|step| step.starts_with("SEARCH runs USING") && step.contains("INDEX"))
                .count();
            assert_eq!(searches, 2, "{plan:?}");
            assert!(
                plan.iter()
                    .filter(|step| step.contains(" heartbeat_turns "))
                    .all(|step| step.contains("INDEX heartbeat_turns_by_agent (agent=? AND")),
                "{plan:?}"
            );
            assert!(
                plan.iter()
                    .filter(|step| step.contains(" runs "))
                    .all(|step| step.contains("_at>?")),
                "{plan:?}"
            );
        }
    }
}
