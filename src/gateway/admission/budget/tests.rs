//! Budgets against a real store: what each window counts, what is held and released, and the
//! plans of the release step's reads.

use std::num::NonZeroU32;

use super::held::{
    NEXT_DIRECT_GROUP, NEXT_MAPPED_GROUP, OLDEST_HELD, RELEASE_BATCH, hold, mark_cancelled,
    mark_released, release_due_in,
};
use super::*;
use crate::gateway::Store;
use crate::gateway::clock::rfc3339;
use crate::gateway::store::runs;

const HOUR_MS: i64 = 3_600_000;
const NOW_MS: i64 = 1_800_000_000_000;

/// A run of agent `main` that mapping `mapping` admitted at `created_ms`, read from its wire form.
fn run(run_id: &str, mapping: &str, created_ms: i64) -> NewRun {
    serde_json::from_value(serde_json::json!({
        "run_id": run_id, "hook_name": "Hook", "agent_id": null, "target_agent": "main",
        "session_key": format!("hook:{run_id}"), "message": "m", "prompt": "p", "deliver": false,
        "channel": "last", "to": null, "model": null, "timeout_seconds": null, "wake_mode": "now",
        "source": "webhook", "created_at": rfc3339(created_ms), "mapping_id": mapping,
    }))
    .unwrap()
}

fn runs_per_hour(limit: u32, on_exceeded: OnExceeded) -> Budget {
    Budget {
        tokens_per_day: None,
        runs_per_hour: NonZeroU32::new(limit),
        on_exceeded,
    }
}

fn mapping_budget(limit: u32, on_exceeded: OnExceeded) -> Budgets {
    let mut budgets = Budgets::default();
    budgets
        .mappings
        .insert("github".into(), runs_per_hour(limit, on_exceeded));
    budgets
}

fn over(conn: &Connection, budgets: &Budgets, now_ms: i64) -> Option<Exceeded> {
    let applying = applying(budgets, Some("github"), "main");
    judge(conn, &applying, now_ms).unwrap()
}

#[test]
fn the_held_by_column_reads_back_and_names_the_budget() {
    let by = HeldBy {
        scope: Scope::Mapping,
        id: "git:hub".into(),
        limit: Limit::RunsPerHour,
    };
    assert_eq!(by.to_column(), "mapping:runsPerHour:git:hub");
    assert_eq!(HeldBy::from_column(&by.to_column()), Some(by.clone()));
    assert_eq!(by.to_string(), "mapping git:hub runsPerHour");
    assert_eq!(HeldBy::from_column("budget:x"), None);
}

#[tokio::test]
async fn runs_count_while_they_are_in_the_window_and_held_runs_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let budgets = mapping_budget(2, OnExceeded::Hold);
    let verdicts = store
        .write(move |conn| {
            run("old", "github", NOW_MS - HOUR_MS - 1).insert(conn)?;
            run("other", "gitlab", NOW_MS - 10).insert(conn)?;
            run("a", "github", NOW_MS - HOUR_MS + 5_000).insert(conn)?;
            let room = over(conn, &budgets, NOW_MS);
            run("held", "github", NOW_MS - 1_000).insert(conn)?;
            hold(conn, "held", &over_by())?;
            let held_counts_nothing = over(conn, &budgets, NOW_MS);
            run("b", "github", NOW_MS - 500).insert(conn)?;
            let full = over(conn, &budgets, NOW_MS);
            let later = over(conn, &budgets, NOW_MS + 5_000);
            Ok((room, held_counts_nothing, full, later))
        })
        .await
        .unwrap();
    let (room, held_counts_nothing, full, later) = verdicts;
    assert_eq!(room, None, "one run in the window, of two");
    assert_eq!(held_counts_nothing, None);
    let full = full.expect("two runs in the window: no room");
    assert_eq!(full.by, over_by());
    // The oldest counted run ("a") leaves the window in 5 s.
    assert_eq!(full.retry_after, Duration::from_secs(5));
    assert_eq!(
        full.refusal().reason,
        "budget exceeded: mapping github runsPerHour (2 runs per hour)"
    );
    assert_eq!(later, None, "once the oldest left the window");
    store.close();
}

fn over_by() -> HeldBy {
    HeldBy {
        scope: Scope::Mapping,
        id: "github".into(),
        limit: Limit::RunsPerHour,
    }
}

#[tokio::test]
async fn the_release_step_starts_the_oldest_held_runs_the_window_has_room_for() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let budgets = mapping_budget(2, OnExceeded::Hold);
    let (first, second, counted) = store
        .write(move |conn| {
            run("a", "github", NOW_MS - HOUR_MS + 1_000).insert(conn)?;
            run("b", "github", NOW_MS - 100).insert(conn)?;
            for id in ["h1", "h2", "h3"] {
                run(id, "github", NOW_MS - 50).insert(conn)?;
                hold(conn, id, &over_by())?;
            }
            let first = release_due_in(conn, &budgets, NOW_MS)?;
            // "a" has left the window: room for one, the oldest held.
            let second = release_due_in(conn, &budgets, NOW_MS + 2_000)?;
            // Released runs count from their release, not from their acceptance.
            let counted = count::window(
                conn,
                Limit::RunsPerHour,
                Scope::Mapping,
                "github",
                &rfc3339(NOW_MS),
                10,
            )?;
            Ok((first, second, counted))
        })
        .await
        .unwrap();
    assert!(first.is_empty(), "{first:?}");
    assert_eq!(second, ["h1"]);
    assert_eq!(counted.count, 1);
    assert_eq!(counted.oldest_ms, Some(NOW_MS + 2_000));
    let status = store.read(|conn| runs::status(conn, "h1")).await.unwrap();
    assert_eq!(status, Some(crate::gateway::RunStatus::Queued));
    store.close();
}

#[tokio::test]
async fn the_release_step_looks_past_the_held_runs_of_a_spent_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let budgets = mapping_budget(1, OnExceeded::Hold);
    let released = store
        .write(move |conn| {
            run("ran", "github", NOW_MS - 100).insert(conn)?;
            // More held runs of the spent budget than one page of the release step reads.
            for i in 0..(2 * RELEASE_BATCH + 1) {
                let id = format!("held-{i}");
                run(&id, "github", NOW_MS - 50).insert(conn)?;
                hold(conn, &id, &over_by())?;
            }
            run("other", "gmail", NOW_MS - 10).insert(conn)?;
            hold(conn, "other", &over_by())?;
            release_due_in(conn, &budgets, NOW_MS)
        })
        .await
        .unwrap();
    assert_eq!(released, ["other"]);
    store.close();
}

/// Across mappings and agents (and `/hooks/agent`'s runs, of no mapping) the release step
/// starts the oldest held runs first, skips every group of a spent budget, and releases at most
/// a batch per transaction.
#[tokio::test]
async fn the_release_step_goes_oldest_first_across_groups_a_batch_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let budgets = mapping_budget(1, OnExceeded::Hold);
    let (first, second, third) = store
        .write(move |conn| {
            run("ran", "github", NOW_MS - 100).insert(conn)?;
            let held = [
                ("g1", Some("gmail"), "ops"),
                ("spent", Some("github"), "main"),
                ("direct", None, "main"),
                ("g2", Some("gmail"), "main"),
                ("g3", Some("gmail"), "ops"),
            ];
            for (id, mapping, agent) in held {
                let mut new = run(id, "x", NOW_MS - 50);
                new.admitted.mapping_id = mapping.map(String::from);
                new.admitted.target_agent = agent.into();
                new.insert(conn)?;
                hold(conn, id, &over_by())?;
            }
            for i in 0..RELEASE_BATCH {
                run(&format!("bulk-{i}"), "bulk", NOW_MS - 10).insert(conn)?;
                hold(conn, &format!("bulk-{i}"), &over_by())?;
            }
            let first = release_due_in(conn, &budgets, NOW_MS)?;
            let second = release_due_in(conn, &budgets, NOW_MS)?;
            let third = release_due_in(conn, &budgets, NOW_MS)?;
            Ok((first, second, third))
        })
        .await
        .unwrap();
    assert_eq!(first.len(), RELEASE_BATCH);
    assert_eq!(
        first[..4],
        ["g1", "direct", "g2", "g3"],
        "in the order held"
    );
    assert_eq!(second.len(), 4, "the rest of the bulk: {second:?}");
    assert!(third.is_empty(), "github's budget is spent: {third:?}");
    let status = store
        .read(|conn| runs::status(conn, "spent"))
        .await
        .unwrap();
    assert_eq!(status, Some(crate::gateway::RunStatus::Held));
    store.close();
}

/// The release step's reads are seeks on the held runs' index, one row each, never a walk of
/// the held runs nor a sort: its cost does not grow with the runs held.
#[test]
fn the_release_steps_reads_are_seeks_on_the_held_runs_index() {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("plan.db")).unwrap();
    crate::gateway::store::schema::migrate(&conn).unwrap();
    let plans: [(&str, &[&dyn rusqlite::ToSql]); 3] = [
        (NEXT_DIRECT_GROUP, &[&"main"]),
        (NEXT_MAPPED_GROUP, &[&"github", &"main"]),
        (OLDEST_HELD, &[&"github", &"main", &0]),
    ];
    for (sql, params) in plans {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = stmt
            .query_map(params, |row| row.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(plan.len(), 1, "{sql}: {plan:?}");
        assert!(
            plan[0].starts_with("SEARCH runs USING") && plan[0].contains("INDEX runs_held ("),
            "{sql}: {plan:?}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_run_is_neither_released_nor_counted_and_only_held_runs_change() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let outcome = store
        .write(move |conn| {
            run("h", "github", NOW_MS).insert(conn)?;
            hold(conn, "h", &over_by())?;
            let cancelled = mark_cancelled(conn, "h", &rfc3339(NOW_MS))?;
            let released_after = mark_released(conn, "h", &rfc3339(NOW_MS))?;
            run("q", "github", NOW_MS).insert(conn)?;
            let queued_released = mark_released(conn, "q", &rfc3339(NOW_MS))?;
            let released = release_due_in(conn, &Budgets::default(), NOW_MS)?;
            let counted = count::window(
                conn,
                Limit::RunsPerHour,
                Scope::Mapping,
                "github",
                &rfc3339(0),
                10,
            )?;
            Ok((
                cancelled,
                released_after,
                queued_released,
                released,
                counted.count,
            ))
        })
        .await
        .unwrap();
    assert_eq!(outcome, (true, false, false, Vec::<String>::new(), 1));
    store.close();
}

#[tokio::test]
async fn a_refusing_budget_wins_over_a_holding_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let mut budgets = mapping_budget(1, OnExceeded::Hold);
    budgets
        .agents
        .insert("main".into(), runs_per_hour(1, OnExceeded::Refuse));
    let exceeded = store
        .write(move |conn| {
            run("a", "github", NOW_MS - 10).insert(conn)?;
            Ok(over(conn, &budgets, NOW_MS))
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exceeded.on_exceeded, OnExceeded::Refuse);
    assert_eq!(exceeded.by.scope, Scope::Agent);
    assert_eq!(exceeded.by.id, "main");
    store.close();
}

/// A window's count is searched for on indexes (schema 12's by scope and time, schema 14's of
/// released runs), never a scan of every run kept: admission runs it for every budgeted run.
#[test]
fn a_windows_counts_are_read_from_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join("plan.db")).unwrap();
    crate::gateway::store::schema::migrate(&conn).unwrap();
    let since = "2026-01-01T00:00:00.000Z";
    for (sql, limited) in [
        (count::MAPPING_RUNS, true),
        (count::AGENT_RUNS, true),
        (count::MAPPING_TOKENS_OLDEST, false),
        (count::AGENT_TOKENS_OLDEST, false),
    ] {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let detail = |row: &rusqlite::Row<'_>| row.get::<_, String>(3);
        let plan: Vec<String> = if limited {
            stmt.query_map(rusqlite::params!["github", since, 5], detail)
        } else {
            stmt.query_map(rusqlite::params!["github", since], detail)
        }
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
        let reads: Vec<&String> = plan.iter().filter(|s| s.contains(" runs ")).collect();
        assert!(!reads.is_empty(), "{plan:?}");
        assert!(
            reads
                .iter()
                .all(|s| s.starts_with("SEARCH runs USING") && s.contains("INDEX")),
            "{sql}: {plan:?}"
        );
        assert!(
            !plan.iter().any(|s| s.contains("TEMP B-TREE")),
            "read in index order, never sorted: {sql}: {plan:?}"
        );
    }
}
