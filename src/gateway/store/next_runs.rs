//! The read of the queue that the embedded runner and forward mode's relays start runs by:
//! which queued runs may start now, highest priority first, then oldest, one per idle session
//! key (its own highest, then oldest), none of a full lane (docs/runtime.md, "Which run starts
//! next").

use std::collections::HashSet;

use rusqlite::{Connection, params};

/// A queued run the runner may start: its id, its session key, and the mapping whose lane it
/// waits in, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Startable {
    pub run_id: String,
    pub session_key: String,
    pub mapping_id: Option<String>,
}

impl Startable {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Startable> {
        Ok(Startable {
            run_id: row.get(0)?,
            session_key: row.get(1)?,
            mapping_id: row.get(2)?,
        })
    }
}

/// What the runner cannot start now: the session keys of the runs this process is running, and
/// the mappings whose lanes are full.
#[derive(Debug, Default)]
pub struct Busy {
    pub sessions: HashSet<String>,
    pub lanes: Vec<String>,
}

impl Busy {
    /// The full lanes as the JSON list the queue's statements read with `json_each`.
    pub(crate) fn lanes_json(&self) -> String {
        // A list of strings: always serialises.
        serde_json::to_string(&self.lanes).unwrap_or_else(|_| "[]".into())
    }
}

/// Queued runs the runner may start, at most `limit`, highest priority first, then oldest: the
/// next queued run of each session key that has none running and is not in `busy`, whose
/// mapping's lane is not full. `want` is how many the caller can start now. A session key's
/// runs never overlap, and its next run is its queued run of the highest priority, then the
/// oldest: mappings that share a key (`defaultSessionKey`) keep their priorities.
///
/// Hooks usually give each run a key of its own, and then the first `limit` queued runs hold
/// `want` of them: one indexed read of `limit` rows ([`oldest_queued`]). Only when those hold
/// fewer (a backlog of busy keys in front) is the queue walked key by key ([`queued_heads`]),
/// so one busy key with a long backlog never hides the runs of others, nor leaves slots idle.
/// The queued runs of a full lane are left out, but read past: a read costs as many more rows
/// as the full lanes have queued ahead of the first it returns (about 11 ms for 17,000 of them
/// among 100,000 queued, against 0.5 ms with no lane full), which their `maxQueued` bounds.
pub fn queued(
    conn: &Connection,
    limit: u32,
    busy: &Busy,
    want: usize,
) -> rusqlite::Result<Vec<Startable>> {
    let lanes = busy.lanes_json();
    let oldest = oldest_queued(conn, limit, &lanes)?;
    let whole_queue = oldest.len() < limit as usize;
    let mut seen = HashSet::new();
    let startable: Vec<Startable> = oldest
        .into_iter()
        .filter(|run| {
            seen.insert(run.session_key.clone()) && !busy.sessions.contains(&run.session_key)
        })
        .collect();
    if startable.len() >= want || whole_queue {
        return Ok(startable);
    }
    // Keys in `busy` are running in the store too, and so not among the heads; the margin
    // covers a key that is busy here before its claim is committed.
    let margin = u32::try_from(busy.sessions.len()).unwrap_or(u32::MAX);
    Ok(queued_heads(conn, limit.saturating_add(margin), &lanes)?
        .into_iter()
        .filter(|run| !busy.sessions.contains(&run.session_key))
        .take(limit as usize)
        .collect())
}

const OLDEST_QUEUED: &str = "SELECT run_id, session_key, mapping_id
     FROM runs AS q INDEXED BY runs_queued_by_priority
     WHERE status = 'queued'
       AND session_key NOT IN (SELECT session_key FROM runs WHERE status = 'running')
       AND (mapping_id IS NULL OR mapping_id NOT IN (SELECT value FROM json_each(?2)))
       AND NOT EXISTS (SELECT 1 FROM runs INDEXED BY runs_queued_by_session
                       WHERE status = 'queued' AND session_key = q.session_key
                         AND (priority, rowid) < (q.priority, q.rowid))
     ORDER BY priority, rowid LIMIT ?1";

/// The first `limit` queued runs, highest priority first, then oldest, of keys with none
/// running and no run of theirs queued before them (of a higher priority, or as high and
/// older), outside the full lanes (`lanes`, a JSON list), on the `runs_queued_by_priority`
/// index, in its order (the running runs are few: at most the runner's slots; a run of the same
/// key before it is looked up with one seek on `runs_queued_by_session`).
fn oldest_queued(conn: &Connection, limit: u32, lanes: &str) -> rusqlite::Result<Vec<Startable>> {
    let mut stmt = conn.prepare_cached(OLDEST_QUEUED)?;
    let rows = stmt.query_map(params![limit, lanes], Startable::from_row)?;
    rows.collect()
}

/// The next queued run (its highest priority, then oldest) of each session key that has none
/// running, outside the full lanes (`lanes`, a JSON list): highest priority first, then oldest.
///
/// Costs O(k log n) for k session keys with queued runs and n runs, not O(n): the keys are
/// walked on the `runs_queue` index one `MIN(session_key) > previous` step at a time (a loose
/// index scan, which SQLite does not plan by itself), and each key's next run is the first
/// entry of that key in `runs_queued_by_session`. A scan of every queued run here made a backlog of one
/// busy session quadratic to drain, since the runner asks after every run.
pub fn queued_heads(
    conn: &Connection,
    limit: u32,
    lanes: &str,
) -> rusqlite::Result<Vec<Startable>> {
    let mut stmt = conn.prepare_cached(QUEUED_HEADS)?;
    let rows = stmt.query_map(params![limit, lanes], Startable::from_row)?;
    rows.collect()
}

const QUEUED_HEADS: &str = "WITH RECURSIVE keys(key) AS (
             SELECT MIN(session_key) FROM runs WHERE status = 'queued'
             UNION ALL
             SELECT (SELECT MIN(session_key) FROM runs WHERE status = 'queued' AND session_key > key)
             FROM keys WHERE key IS NOT NULL
         ),
         heads(key, head) AS (
             SELECT key, (SELECT rowid FROM runs INDEXED BY runs_queued_by_session
                          WHERE status = 'queued' AND session_key = key
                          ORDER BY priority, rowid LIMIT 1)
             FROM keys
             WHERE key IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM runs WHERE status = 'running' AND session_key = key)
         )
         SELECT runs.run_id, heads.key, runs.mapping_id FROM heads JOIN runs ON runs.rowid = heads.head
         WHERE runs.mapping_id IS NULL
            OR runs.mapping_id NOT IN (SELECT value FROM json_each(?2))
         ORDER BY runs.priority, heads.head LIMIT ?1";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::lanes::Priority;
    use crate::gateway::store::Store;
    use crate::gateway::store::runs::claim;
    use crate::gateway::store::runs::tests::{plan_of, run};

    #[tokio::test]
    async fn the_queue_offers_each_idle_session_its_oldest_run_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key) in [
            ("a1", "hook:b"),
            ("b1", "hook:a"),
            ("a2", "hook:b"),
            ("c1", "hook:c"),
        ] {
            let mut new = run(id);
            new.admitted.session_key = key.into();
            store.queue_run(new, None).await.unwrap();
        }
        let queued_for = |limit: u32, busy: &[&str], want: usize| {
            let busy = Busy {
                sessions: busy.iter().map(|k| k.to_string()).collect(),
                lanes: Vec::new(),
            };
            store.read(move |conn| queued(conn, limit, &busy, want))
        };
        let queued = |limit: u32, busy: &[&str]| queued_for(limit, busy, 1);
        assert_eq!(ids(queued(10, &[]).await.unwrap()), ["a1", "b1", "c1"]);

        let claimed = store.write(|conn| claim(conn, "a1", "now")).await.unwrap();
        assert!(claimed.is_some());
        assert_eq!(
            ids(queued(10, &["hook:b"]).await.unwrap()),
            ["b1", "c1"],
            "a session with a run in progress offers nothing, not even its next run"
        );
        assert_eq!(ids(queued(1, &[]).await.unwrap()), ["b1"]);
        // The walk by key skips the keys running in the store.
        let heads = store.read(|conn| queued_heads(conn, 10, "[]"));
        assert_eq!(ids(heads.await.unwrap()), ["b1", "c1"]);
        // A first batch with nothing to start is not the end: the walk finds the others.
        assert_eq!(ids(queued(1, &["hook:a"]).await.unwrap()), ["c1"]);
        // Nor is one with fewer than the free slots could start: the walk looks further (and
        // `limit` still bounds the answer).
        assert_eq!(ids(queued_for(1, &[], 2).await.unwrap()), ["b1"]);
        assert_eq!(ids(queued_for(2, &["hook:c"], 2).await.unwrap()), ["b1"]);
        store.close();
    }

    fn ids(rows: Vec<Startable>) -> Vec<String> {
        rows.into_iter().map(|run| run.run_id).collect()
    }

    #[tokio::test]
    async fn the_queue_offers_high_priority_first_and_nothing_of_a_full_lane() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key, mapping, priority) in [
            ("low1", "hook:1", "gmail", Priority::Low),
            ("low2", "hook:2", "gmail", Priority::Low),
            ("chat", "hook:3", "chat", Priority::High),
            ("plain", "hook:4", "ci", Priority::Normal),
            // Newer than `low1` of its own key, and higher: it is its key's next run.
            ("later", "hook:1", "chat", Priority::High),
        ] {
            let mut new = run(id);
            new.admitted.session_key = key.into();
            new.admitted.mapping_id = Some(mapping.into());
            new.priority = priority;
            store.queue_run(new, None).await.unwrap();
        }
        let offered = |limit: u32, lanes: &[&str]| {
            let busy = Busy {
                sessions: HashSet::new(),
                lanes: lanes.iter().map(|l| l.to_string()).collect(),
            };
            store.read(move |conn| queued(conn, limit, &busy, 1))
        };
        assert_eq!(
            ids(offered(10, &[]).await.unwrap()),
            ["chat", "later", "plain", "low2"]
        );
        // A key's next run in a full lane holds its key: `low1` does not start before it.
        assert_eq!(ids(offered(10, &["chat", "ci"]).await.unwrap()), ["low2"]);
        let heads = store.read(|conn| queued_heads(conn, 10, r#"["gmail"]"#));
        assert_eq!(ids(heads.await.unwrap()), ["chat", "later", "plain"]);
        let heads = store.read(|conn| queued_heads(conn, 10, "[]"));
        assert_eq!(
            ids(heads.await.unwrap()),
            ["chat", "later", "plain", "low2"]
        );
        store.close();
    }

    /// The runner's read of the queue walks the queued runs in its own order on an index: no
    /// sort of every queued run each time it looks.
    #[test]
    fn the_queue_is_read_in_priority_order_from_an_index() {
        let oldest = plan_of(OLDEST_QUEUED, params![10, "[]"]);
        assert!(
            oldest
                .iter()
                .any(|step| step.contains("SCAN q USING INDEX runs_queued_by_priority")),
            "{oldest:?}"
        );
        assert!(
            !oldest.iter().any(|step| step.contains("TEMP B-TREE")),
            "{oldest:?}"
        );
        // Whether a run of the same key comes first is one seek, not a walk of the key's runs.
        assert!(
            oldest.iter().any(|step| step.contains(
                "SEARCH runs USING COVERING INDEX runs_queued_by_session (session_key=? AND"
            )),
            "{oldest:?}"
        );
        let heads = plan_of(QUEUED_HEADS, params![10, "[]"]);
        assert!(
            heads
                .iter()
                .any(|step| step.contains("INDEX runs_queued_by_session (session_key=?)")),
            "{heads:?}"
        );
    }
}
