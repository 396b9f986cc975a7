//! The records' statements against a real store.

use super::*;

/// A wake's system event for `agent`.
fn wake_event(agent: &str, text: &str) -> NewEvent {
    NewEvent {
        agent: agent.into(),
        kind: EventKind::System,
        text: text.into(),
        trusted: false,
        source: "hook:wake".into(),
        at: "2026-01-01T00:00:00.000Z".into(),
    }
}

/// A statement stays prepared however its parameters are bound: the wake's check, bound to
/// another agent each time, is never planned again (it was, on every request, until the
/// connection asked for stable plans).
#[tokio::test]
async fn a_wake_reuses_its_prepared_statement() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    for (agent, text) in [("main", "a"), ("ops", "b"), ("main", "c"), ("main", "c")] {
        let event = wake_event(agent, text);
        store
            .write(move |conn| event.append_wake(conn))
            .await
            .unwrap();
    }
    let reprepared = store
        .write(|conn| {
            let stmt = conn.prepare_cached(NEWEST_PENDING)?;
            Ok(stmt.get_status(rusqlite::StatementStatus::RePrepare))
        })
        .await
        .unwrap();
    assert_eq!(reprepared, 0);
}

/// The listing merges the agent's pending events and those a heartbeat took, in commit order,
/// from `events_pending` alone: after a cursor, and the newest.
#[tokio::test]
async fn events_are_listed_in_commit_order_whether_taken_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let texts = ["a", "b", "c", "d", "e"];
    for (agent, text) in texts.iter().map(|t| ("main", *t)).chain([("ops", "x")]) {
        let event = wake_event(agent, text);
        store.write(move |conn| event.insert(conn)).await.unwrap();
    }
    store
        .write(|conn| {
            conn.execute(
                "UPDATE events SET consumed = 1 WHERE text IN ('b', 'd')",
                [],
            )
        })
        .await
        .unwrap();
    let listed = |after: Option<i64>, limit: u32| {
        let store = store.clone();
        async move {
            let events = store.events("main", after, limit).await.unwrap();
            events.into_iter().map(|e| e.text).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(Some(0), 10).await, texts);
    assert_eq!(listed(Some(2), 2).await, ["c", "d"]);
    assert_eq!(listed(None, 3).await, ["c", "d", "e"]);
    assert_eq!(listed(None, 10).await, texts);
    let plans = store
        .read(|conn| {
            let mut plans = Vec::new();
            for sql in [EVENTS_AFTER, NEWEST_EVENTS] {
                let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                let steps = explain.query_map(params!["main", 0, 1, false], |row| row.get(3))?;
                plans.push(steps.collect::<rusqlite::Result<Vec<String>>>()?.join("; "));
            }
            Ok(plans)
        })
        .await
        .unwrap();
    for plan in plans {
        assert!(plan.contains("USING INDEX events_pending"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}

/// A run's row, every column the run writes, exactly as the version before the run's forms were
/// derived from its types stored it.
const STORED_BEFORE: &str = concat!(
    r#"["r1","queued","GitHub","ops","ops","hook:x","m","p",0,"telegram","+1","a/b","high","#,
    r#"30,"next-heartbeat","email","2026-01-01T00:00:00.000Z","persistent","github",2,null]"#,
);

#[tokio::test]
async fn a_run_is_stored_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), true).unwrap();
    let run = crate::gateway::store::runs::tests::full_run("r1");
    let stored = store
        .write(move |conn| {
            run.insert(conn)?;
            conn.query_row(
                "SELECT json_array(run_id, status, hook_name, agent_id, target_agent, session_key,
                     message, prompt, deliver, channel, to_addr, model, thinking, timeout_seconds,
                     wake_mode, source, created_at, session_mode, mapping_id, priority, started_at)
                 FROM runs",
                [],
                |row| row.get::<_, String>(0),
            )
        })
        .await
        .unwrap();
    assert_eq!(stored, STORED_BEFORE);
}
