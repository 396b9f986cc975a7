//! Lanes at run time: how many of a mapping's runs run at once (`runs.maxConcurrent`). The
//! embedded runner holds a [`LaneSlots`] and starts no run past it; a NATS node reads the same
//! bound from the store's running runs ([`running_by_mapping`], [`full_lanes`]). Which queued
//! run starts next (priority, then age) is the queue's order (`store::next_runs`); a run of a
//! lower priority steps aside for a higher one that could start first ([`higher_waiting`]).
//! See docs/hooks.md, "Lanes", and docs/runtime.md, "Which run starts next".

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::{Connection, params};

use crate::config::HookSettings;
use crate::config::lanes::Priority;

/// The runs in progress of each mapping in this process: what `maxConcurrent` is held to by
/// the embedded runner. Cheap to clone (one shared map).
#[derive(Debug, Clone, Default)]
pub struct LaneSlots {
    running: Arc<Mutex<HashMap<String, u32>>>,
}

impl LaneSlots {
    /// The mappings whose lanes are full now under `hooks` (the current settings, so that a
    /// reloaded `maxConcurrent` applies at once): the queue offers none of their runs.
    pub fn full(&self, hooks: Option<&HookSettings>) -> Vec<String> {
        full_lanes(hooks, self.lock().iter().map(|(m, n)| (m.as_str(), *n)))
    }

    /// A place in the lane of `mapping` for one run, held until the [`LaneTicket`] is dropped;
    /// `None` when its lane is full. A run without a mapping, or of a mapping without
    /// `maxConcurrent`, always gets one (it counts, should a reload give the mapping a limit).
    pub fn enter(&self, mapping: Option<&str>, hooks: Option<&HookSettings>) -> Option<LaneTicket> {
        let Some(mapping) = mapping else {
            return Some(LaneTicket {
                slots: self.clone(),
                mapping: None,
            });
        };
        let max = hooks.and_then(|hooks| limit(hooks, mapping));
        let mut running = self.lock();
        let count = running.entry(mapping.to_string()).or_default();
        if max.is_some_and(|max| *count >= max) {
            return None;
        }
        *count += 1;
        Some(LaneTicket {
            slots: self.clone(),
            mapping: Some(mapping.to_string()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The mappings among `running` (mapping, runs in progress) whose lanes are full under `hooks`.
pub(crate) fn full_lanes<'a>(
    hooks: Option<&HookSettings>,
    running: impl Iterator<Item = (&'a str, u32)>,
) -> Vec<String> {
    let Some(hooks) = hooks else {
        return Vec::new();
    };
    running
        .filter(|(mapping, count)| limit(hooks, mapping).is_some_and(|max| *count >= max))
        .map(|(mapping, _)| mapping.to_string())
        .collect()
}

/// Runs in progress by the mapping that admitted them, as the store shows them: on a NATS
/// cluster, this node's view of every node's runs. Costs a read of the running runs (at most
/// the cluster's slots) on `runs_queue`.
pub(crate) fn running_by_mapping(conn: &Connection) -> rusqlite::Result<Vec<(String, u32)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT mapping_id, COUNT(*) FROM runs
          WHERE status = 'running' AND mapping_id IS NOT NULL GROUP BY mapping_id",
    )?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect()
}

/// Whether a queued run of a higher priority than `priority` could start now: it is the next
/// run of its session key (none of its key in progress, none queued before it: of a higher
/// priority, or as high and older) and its mapping is not among `busy.lanes`. Its key may be the
/// asking run's own: a key's queued runs start highest priority first. Costs a walk of the
/// queued runs of higher priorities on `runs_queued_by_priority`, to the first that could, each
/// with one seek for a run of its key before it on `runs_queued_by_session`.
pub(crate) fn higher_waiting(
    conn: &Connection,
    priority: Priority,
    busy: &crate::gateway::store::next_runs::Busy,
) -> rusqlite::Result<bool> {
    conn.prepare_cached(HIGHER_WAITING)?
        .query_row(params![priority, busy.lanes_json()], |row| row.get(0))
}

const HIGHER_WAITING: &str =
    "SELECT EXISTS (SELECT 1 FROM runs AS q INDEXED BY runs_queued_by_priority
          WHERE status = 'queued' AND priority < ?1
            AND session_key NOT IN (SELECT session_key FROM runs WHERE status = 'running')
            AND (mapping_id IS NULL OR mapping_id NOT IN (SELECT value FROM json_each(?2)))
            AND NOT EXISTS (SELECT 1 FROM runs INDEXED BY runs_queued_by_session
                              WHERE status = 'queued' AND session_key = q.session_key
                                AND (priority, rowid) < (q.priority, q.rowid)))";

/// `maxConcurrent` of `mapping` under `hooks`, if it has one.
pub(crate) fn limit(hooks: &HookSettings, mapping: &str) -> Option<u32> {
    hooks
        .lane_for(mapping)
        .and_then(|lane| lane.max_concurrent)
        .map(NonZeroU32::get)
}

/// One run's place in its mapping's lane; dropping it frees the place.
#[derive(Debug)]
pub struct LaneTicket {
    slots: LaneSlots,
    mapping: Option<String>,
}

impl Drop for LaneTicket {
    fn drop(&mut self) {
        let Some(mapping) = &self.mapping else {
            return;
        };
        let mut running = self.slots.lock();
        if let Some(count) = running.get_mut(mapping) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(mapping);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::config::Settings;
    use crate::gateway::Store;

    fn settings(max_concurrent: u32) -> Settings {
        let file = json!({
            "hooks": {"enabled": true, "token": "hook-token-0123456789", "mappings": [
                {"id": "bulk", "match": {"path": "bulk"}, "runs": {"maxConcurrent": max_concurrent}},
            ]},
        });
        Settings::build(
            serde_json::from_value(file).unwrap(),
            std::path::Path::new("."),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_run_steps_aside_only_for_a_higher_run_that_could_start_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), true).unwrap();
        for (id, key, priority) in [
            ("old", "hook:k", Priority::Low),
            ("first", "hook:j", Priority::Normal),
            // Higher, but its key has a run in progress.
            ("busy", "hook:r", Priority::High),
        ] {
            let mut new = crate::gateway::store::runs::tests::run(id);
            new.admitted.session_key = key.into();
            new.priority = priority;
            store.queue_run(new, None).await.unwrap();
        }
        let mut running = crate::gateway::store::runs::tests::run("running");
        running.admitted.session_key = "hook:r".into();
        store.queue_run(running, None).await.unwrap();
        store
            .write(|conn| crate::gateway::store::runs::claim(conn, "running", "t"))
            .await
            .unwrap();
        let waiting = |priority: Priority| {
            store.read(move |conn| {
                higher_waiting(
                    conn,
                    priority,
                    &crate::gateway::store::next_runs::Busy::default(),
                )
            })
        };
        assert!(!waiting(Priority::Normal).await.unwrap());
        assert!(
            waiting(Priority::Low).await.unwrap(),
            "a normal run first of its own idle key could start first"
        );
        // A higher run of the asking run's own key comes first too: a key's queued runs start
        // highest priority first (a shared `defaultSessionKey`).
        let mut same = crate::gateway::store::runs::tests::run("same");
        same.admitted.session_key = "hook:j".into();
        same.priority = Priority::High;
        store.queue_run(same, None).await.unwrap();
        assert!(waiting(Priority::Normal).await.unwrap());
        store.close();
    }

    /// Whether a higher run waits is a walk of the higher queued runs, each with one seek for a
    /// run of its key before it: never a walk of a key's backlog.
    #[test]
    fn a_higher_run_is_looked_for_on_indexes() {
        let plan = crate::gateway::store::runs::tests::plan_of(
            HIGHER_WAITING,
            params![Priority::Low, "[]"],
        );
        assert!(
            plan.iter()
                .any(|step| step.contains("INDEX runs_queued_by_session (session_key=? AND")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_lane_gives_out_max_concurrent_places_and_takes_them_back() {
        let slots = LaneSlots::default();
        let two = settings(2);
        let hooks = two.hooks.as_ref();
        let first = slots.enter(Some("bulk"), hooks).unwrap();
        let second = slots.enter(Some("bulk"), hooks).unwrap();
        assert!(slots.enter(Some("bulk"), hooks).is_none());
        assert_eq!(slots.full(hooks), ["bulk"]);
        // Runs without a mapping, or of a mapping without a limit, always get a place.
        assert!(slots.enter(None, hooks).is_some());
        assert!(slots.enter(Some("other"), hooks).is_some());
        drop(first);
        assert!(slots.full(hooks).is_empty());
        // A reload to a lower limit holds new runs back until enough have ended.
        let one = settings(1);
        assert_eq!(slots.full(one.hooks.as_ref()), ["bulk"]);
        drop(second);
        assert!(slots.enter(Some("bulk"), one.hooks.as_ref()).is_some());
    }
}
