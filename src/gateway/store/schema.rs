//! The store's tables, and the migrations that bring an older file up to date.

use rusqlite::Connection;

const SCHEMA_V1: &str = "
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    agent   TEXT NOT NULL,
    kind    TEXT NOT NULL,
    text    TEXT NOT NULL,
    trusted INTEGER NOT NULL,
    source  TEXT NOT NULL,
    at      TEXT NOT NULL
);
CREATE INDEX events_by_agent ON events (agent, seq);
CREATE TABLE runs (
    run_id          TEXT PRIMARY KEY,
    status          TEXT NOT NULL,
    hook_name       TEXT NOT NULL,
    agent_id        TEXT,
    target_agent    TEXT NOT NULL,
    session_key     TEXT NOT NULL,
    message         TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    deliver         INTEGER NOT NULL,
    channel         TEXT NOT NULL,
    to_addr         TEXT,
    model           TEXT,
    thinking        TEXT,
    timeout_seconds INTEGER,
    wake_mode       TEXT NOT NULL,
    source          TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE idempotency (
    fingerprint TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    first_at_ms INTEGER NOT NULL
);
CREATE INDEX idempotency_by_age ON idempotency (first_at_ms);
";

/// What the gateway runtime adds: run outcomes, consumed events, summaries at most once per run,
/// the delivery and forwarding outbox, and the main session's last route.
const SCHEMA_V2: &str = "
ALTER TABLE runs ADD COLUMN reply TEXT;
ALTER TABLE runs ADD COLUMN summary TEXT;
ALTER TABLE runs ADD COLUMN error TEXT;
ALTER TABLE runs ADD COLUMN started_at TEXT;
ALTER TABLE runs ADD COLUMN finished_at TEXT;
ALTER TABLE runs ADD COLUMN delivery TEXT;
ALTER TABLE runs ADD COLUMN upstream_run_id TEXT;
ALTER TABLE events ADD COLUMN consumed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN run_id TEXT;
CREATE UNIQUE INDEX events_one_summary_per_run ON events (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX events_pending ON events (agent, consumed, seq);
CREATE INDEX runs_by_session ON runs (session_key, status);
CREATE TABLE outbox (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    kind        TEXT NOT NULL,
    run_id      TEXT,
    payload     TEXT NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    next_at_ms  INTEGER NOT NULL,
    status      TEXT NOT NULL DEFAULT 'pending',
    last_error  TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX outbox_due ON outbox (status, next_at_ms);
CREATE TABLE routes (
    agent   TEXT PRIMARY KEY,
    channel TEXT NOT NULL,
    to_addr TEXT,
    at      TEXT NOT NULL
);
";

/// Replay protection of signed deliveries.
const SCHEMA_V3: &str = "
CREATE TABLE deliveries (
    key          TEXT PRIMARY KEY,
    status       INTEGER NOT NULL,
    content_type TEXT,
    body         BLOB NOT NULL,
    first_at_ms  INTEGER NOT NULL
);
CREATE INDEX deliveries_by_age ON deliveries (first_at_ms);
";

/// The runner's queue: queued runs by session key, in arrival order (see `queue::queued`).
const SCHEMA_V4: &str = "
CREATE INDEX runs_queue ON runs (status, session_key);
";

/// The main session's route belongs to its owner: routes that earlier versions took from hook
/// runs' deliveries are dropped (`channels.defaultRoute` applies until the operator sets one).
const SCHEMA_V5: &str = "
DELETE FROM routes;
";

/// Which model answered a run (its fallbacks may have); how many parts of a split reply went out
/// (a retry resumes there); thinking levels are typed now, so a value earlier versions accepted
/// that names no level is dropped.
const SCHEMA_V6: &str = "
ALTER TABLE runs ADD COLUMN answered_by TEXT;
ALTER TABLE outbox ADD COLUMN parts_sent INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET thinking = lower(trim(thinking)) WHERE thinking IS NOT NULL;
UPDATE runs SET thinking = 'xhigh'
 WHERE thinking IN ('x-high', 'x_high', 'extra-high', 'extra high', 'extra_high');
UPDATE runs SET thinking = 'high' WHERE thinking = 'highest';
UPDATE runs SET thinking = NULL
 WHERE thinking NOT IN ('off', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max', 'adaptive');
";

/// Whether a run continues its session key's conversation (`sessionMode: "persistent"`).
const SCHEMA_V7: &str = "
ALTER TABLE runs ADD COLUMN session_mode TEXT NOT NULL DEFAULT 'isolated';
";

/// `runs_by_session` duplicated `runs_queue`: the one query it served (a session's history)
/// looks up a status and a session key, both by equality, which `runs_queue` finds as well, in
/// the same rowid order. Every run wrote it three times (queued, running, its outcome).
const SCHEMA_V8: &str = "
DROP INDEX IF EXISTS runs_by_session;
";

/// The row readiness rewrites (`Store::probe`): a probe that writes nothing commits even on a
/// full disk, where no request could.
const SCHEMA_V9: &str = "
CREATE TABLE probe (
    id    INTEGER PRIMARY KEY,
    at_ms INTEGER NOT NULL
);
";

/// How many times a run's turn was started by its retries (`POST /api/runs/<runId>/retry`): 1,
/// and one more for each retry after its model call failed.
const SCHEMA_V10: &str = "
ALTER TABLE runs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 1;
";

/// The mapping that admitted each run (`hooks.mappings[].id`), whose batch, lane and budget
/// apply to it; NULL for `POST /hooks/agent` and for runs written before.
const SCHEMA_V11: &str = "
ALTER TABLE runs ADD COLUMN mapping_id TEXT;
";

/// The tokens each run used, as its provider reported them (NULL when it did not), and what
/// `spend::spend_since` reads them by: a mapping's or an agent's runs by when they were created
/// (the runs a window admitted) and by when they finished (the tokens a window used). Runs
/// without a mapping (`/hooks/agent`) are left out of the mapping's indexes, and runs not yet
/// finished out of the finished ones: queueing a run writes two entries, finishing it two more.
const SCHEMA_V12: &str = "
ALTER TABLE runs ADD COLUMN input_tokens INTEGER;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER;
CREATE INDEX runs_admitted_by_mapping ON runs (mapping_id, created_at)
 WHERE mapping_id IS NOT NULL;
CREATE INDEX runs_finished_by_mapping ON runs (mapping_id, finished_at)
 WHERE mapping_id IS NOT NULL AND finished_at IS NOT NULL;
CREATE INDEX runs_admitted_by_agent ON runs (target_agent, created_at);
CREATE INDEX runs_finished_by_agent ON runs (target_agent, finished_at)
 WHERE finished_at IS NOT NULL;
";

/// Each run's priority as its mapping's lane gave it at admission (0 `high`, 1 `normal`, 2
/// `low`), and the indexes of the lanes: the runner reads the queue in priority order, then
/// arrival order (`queue::queued`), on `runs_by_priority`, whose leading status serves what
/// `runs_by_status` did (so it replaces it, costing no more writes); admission counts a
/// mapping's queued runs on a partial index that holds the queued runs alone. (Schema 17
/// replaces `runs_by_priority` with a partial index of the queued runs.)
const SCHEMA_V13: &str = "
ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 1;
DROP INDEX IF EXISTS runs_by_status;
CREATE INDEX runs_by_priority ON runs (status, priority);
CREATE INDEX runs_queued_by_mapping ON runs (mapping_id) WHERE status = 'queued';
";

/// Budgets (`gateway::budget`): which budget held a run, and when a held run was released (it
/// counts against its budgets from then, not from when it was accepted). The few released runs
/// are found by their scope and that time (small indexes: only released runs are in them); the
/// others by schema 12's indexes of a scope's runs by age.
const SCHEMA_V14: &str = "
ALTER TABLE runs ADD COLUMN held_by TEXT;
ALTER TABLE runs ADD COLUMN released_at TEXT;
CREATE INDEX runs_released_by_mapping ON runs (mapping_id, released_at)
 WHERE released_at IS NOT NULL;
CREATE INDEX runs_released_by_agent ON runs (target_agent, released_at)
 WHERE released_at IS NOT NULL;
";

/// Batches (`gateway::batches`): the open batch of each mapping and session key, the requests
/// each gathered, in order, with the idempotency fingerprint a retry finds its position by. A
/// batch and its items go with its run when retention deletes it. Each item keeps its own
/// `allowUnsafeExternalContent` (a per-request override must not unwrap other senders'
/// messages). The embedded store has one
/// open batch per key at most; a NATS view may briefly show two, the next one opened on
/// another node before the last one's closing reached this view, so the index is not unique.
const SCHEMA_V15: &str = "
CREATE TABLE batches (
    run_id       TEXT PRIMARY KEY,
    mapping_id   TEXT NOT NULL,
    batch_key    TEXT NOT NULL,
    closes_at_ms INTEGER NOT NULL,
    max_items    INTEGER NOT NULL,
    items        INTEGER NOT NULL,
    open         INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX batches_open ON batches (mapping_id, batch_key) WHERE open = 1;
CREATE INDEX batches_closing ON batches (closes_at_ms) WHERE open = 1;
CREATE TABLE batch_items (
    run_id      TEXT NOT NULL,
    position    INTEGER NOT NULL,
    message     TEXT NOT NULL,
    source      TEXT NOT NULL,
    received    TEXT NOT NULL,
    fingerprint TEXT,
    allow_unsafe INTEGER NOT NULL,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
CREATE TRIGGER batches_pruned AFTER DELETE ON runs BEGIN
    DELETE FROM batch_items WHERE run_id = OLD.run_id;
    DELETE FROM batches WHERE run_id = OLD.run_id;
END;
";

/// `events_by_agent` (agent, seq) is dropped: `events_pending` (agent, consumed, seq) serves the
/// one listing it served, as two runs merged (`EventRecord::select_after`), and every wake wrote
/// both. One index entry and one WAL page fewer per event: about 11,000 instructions per
/// `/hooks/wake` (docs/performance.md, "Instructions per request").
const SCHEMA_V16: &str = "
DROP INDEX IF EXISTS events_by_agent;
";

/// `runs_by_priority` (status, priority) held every run, so starting a run at admission wrote
/// an entry of it and finishing one moved that entry from `running` to its outcome, on a page
/// of its own. Only the queue's reads need the priority (`next_runs::oldest_queued`,
/// `lane_slots::higher_waiting`): a partial index of the queued runs alone serves them, and the reads
/// by status alone find `runs_queue` (status, session_key). A run started at its admission
/// writes no entry of it, and its end none either.
const SCHEMA_V17: &str = "
DROP INDEX IF EXISTS runs_by_priority;
CREATE INDEX runs_queued_by_priority ON runs (priority) WHERE status = 'queued';
";

/// The name a batch item's sender chose, when it is not its mapping's own
/// (`BatchMessage::name`): it goes inside the item's envelope, never on the batch's task line.
const SCHEMA_V18: &str = "
ALTER TABLE batch_items ADD COLUMN name TEXT;
";

/// Held runs (`gateway::budget::held`) in a partial index of their own, by mapping and agent
/// (and so, within one, in the order they were held): a lane counts its held runs against
/// `runs.maxQueued`, and the release step finds each mapping and agent with held runs and the
/// oldest of them, with a seek each, never a walk of every held run (which stalled the writer
/// once tens of thousands were held). Only held runs are in it: queueing a run writes no entry.
const SCHEMA_V19: &str = "
CREATE INDEX runs_held ON runs (mapping_id, target_agent) WHERE status = 'held';
";

/// Each run's calls to its model providers, with why each failed (`ModelCall`, as JSON): a
/// provider that failed for a moment is called again within the run's timeout, and the record
/// says so.
const SCHEMA_V20: &str = "
ALTER TABLE runs ADD COLUMN model_calls TEXT;
";

/// The queued runs of each session key, by priority and then age: the run of a key that starts
/// next is the first of its key here (docs/runtime.md, "Which run starts next"), found with one
/// seek (`next_runs::queued`, `lane_slots::higher_waiting`). Only queued runs are in it: a run
/// started at its admission writes no entry, and one that starts leaves it.
const SCHEMA_V21: &str = "
CREATE INDEX runs_queued_by_session ON runs (session_key, priority) WHERE status = 'queued';
";

/// Each heartbeat turn's tokens, by agent and the time it ended (`spend::record_heartbeat`): a
/// heartbeat's model call costs tokens as a run's does, and an agent's spend and its budget's
/// `tokensPerDay` sum them with its runs'. Pruned with the runs (`gateway.retention.runs`).
const SCHEMA_V22: &str = "
CREATE TABLE heartbeat_turns (
    agent         TEXT NOT NULL,
    finished_at   TEXT NOT NULL,
    input_tokens  INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL
);
CREATE INDEX heartbeat_turns_by_agent ON heartbeat_turns (agent, finished_at);
";

/// Webhooks by their run: a run's callback waits in the outbox for the run's end, a run's
/// messages are sent in order, and its record lists them (`outbound::webhooks`); only webhook
/// rows are in it, so replies and relays pay nothing for it. The operator lists messages by
/// status (`GET /api/outbound?status=failed`); [`SCHEMA_V24`] replaces the second index.
const SCHEMA_V23: &str = "
CREATE INDEX outbox_webhooks_by_run ON outbox (run_id) WHERE kind = 'webhook';
CREATE INDEX outbox_by_kind ON outbox (kind, status, id);
";

/// Each kind's rows by status and due time, in place of by status and id: a lane's worker
/// reads only its own kinds' pending rows when it looks for what is due and for when it
/// next is (`outbound::outbox_rows::due` and `next_due_ms`). Through `outbox_due` alone it
/// stepped through every pending row of every lane, so a backlog of callbacks cost the
/// replies' worker a look at each of them at every poll. The operator's listing of messages by
/// status never ordered by this index's `id` (it sorts), and finds them by kind as before.
const SCHEMA_V24: &str = "
DROP INDEX outbox_by_kind;
CREATE INDEX outbox_due_by_kind ON outbox (kind, status, next_at_ms);
";

/// The request log, in a database of its own (`requests.db`): every request under the hook
/// prefix (see `requests`). Keyed by its time-ordered id alone (no rowid, one index only for
/// replays): each record is one append to one b-tree, since one is written for every request
/// intake answers.
const REQUEST_LOG_V1: &str = "
CREATE TABLE requests (
    id                 TEXT PRIMARY KEY,
    at                 TEXT NOT NULL,
    at_ms              INTEGER NOT NULL,
    client             TEXT,
    method             TEXT NOT NULL,
    target             TEXT NOT NULL,
    hook               TEXT,
    mapping_id         TEXT,
    status             INTEGER NOT NULL,
    error              TEXT,
    duration_us        INTEGER NOT NULL,
    transform_outcome  TEXT,
    transform_us       INTEGER,
    transform_failure  TEXT,
    signature_scheme   TEXT,
    signature_verified INTEGER,
    run_ids            TEXT,
    event_outcome      TEXT,
    suppressed         INTEGER NOT NULL DEFAULT 0,
    replay_of          TEXT,
    captured           INTEGER NOT NULL DEFAULT 0,
    headers            TEXT,
    body               BLOB,
    capture_note       TEXT,
    request_id         TEXT NOT NULL DEFAULT '',
    query              TEXT
) WITHOUT ROWID;
CREATE INDEX requests_replays ON requests (replay_of) WHERE replay_of IS NOT NULL;
";

/// Why a request was refused or failed, in the operator's words (`RequestRecord::reason`).
const REQUEST_LOG_V2: &str = "
ALTER TABLE requests ADD COLUMN reason TEXT;
";

/// Whether the request repeated an earlier one (`idempotency`, `redelivery`), whose work its
/// `run_ids` name.
const REQUEST_LOG_V3: &str = "
ALTER TABLE requests ADD COLUMN repeat TEXT;
";

/// How a request ended when its status alone does not say (`filtered`).
const REQUEST_LOG_V4: &str = "
ALTER TABLE requests ADD COLUMN outcome TEXT;
";

/// The requests whose `outcome` is set (`filtered`, `batched`, `limited`, `refused`, `held`), by
/// outcome and then id: a search by outcome reads a page of its own requests, not the log up to
/// them. Measured on a log of a million records (docs/operations.md#searching-the-request-log):
/// a rare outcome's first page in 2 ms instead of a scan of the whole log (0.3 to 0.5 s). Partial,
/// so most records (those without an outcome) write no entry. `IF NOT EXISTS`: an operator may
/// have made it by hand, as the measurement did.
const REQUEST_LOG_V5: &str = "
CREATE INDEX IF NOT EXISTS requests_by_outcome ON requests (outcome, id) WHERE outcome IS NOT NULL;
";

/// On a NATS store, the last message of the cluster's request stream that this node's log
/// indexed (docs/cluster.md#the-request-log-in-a-cluster): where it resumes at its next start.
const REQUEST_LOG_V6: &str = "
CREATE TABLE indexed_streams (
    stream   TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Brings the request log's schema up to date.
pub(in crate::gateway) fn migrate_request_log(conn: &Connection) -> rusqlite::Result<()> {
    apply(
        conn,
        &[
            (1, REQUEST_LOG_V1),
            (2, REQUEST_LOG_V2),
            (3, REQUEST_LOG_V3),
            (4, REQUEST_LOG_V4),
            (5, REQUEST_LOG_V5),
            (6, REQUEST_LOG_V6),
        ],
    )
}

/// Applies each migration newer than the file's `user_version`, one per transaction.
fn apply(conn: &Connection, migrations: &[(i64, &str)]) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    for (target, schema) in migrations {
        if version < *target {
            conn.execute_batch(&format!(
                "BEGIN; {schema} PRAGMA user_version = {target}; COMMIT;"
            ))?;
        }
    }
    Ok(())
}

/// Brings the schema up to date, one version per transaction.
pub(in crate::gateway) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    apply(
        conn,
        &[
            (1, SCHEMA_V1),
            (2, SCHEMA_V2),
            (3, SCHEMA_V3),
            (4, SCHEMA_V4),
            (5, SCHEMA_V5),
            (6, SCHEMA_V6),
            (7, SCHEMA_V7),
            (8, SCHEMA_V8),
            (9, SCHEMA_V9),
            (10, SCHEMA_V10),
            (11, SCHEMA_V11),
            (12, SCHEMA_V12),
            (13, SCHEMA_V13),
            (14, SCHEMA_V14),
            (15, SCHEMA_V15),
            (16, SCHEMA_V16),
            (17, SCHEMA_V17),
            (18, SCHEMA_V18),
            (19, SCHEMA_V19),
            (20, SCHEMA_V20),
            (21, SCHEMA_V21),
            (22, SCHEMA_V22),
            (23, SCHEMA_V23),
            (24, SCHEMA_V24),
        ],
    )
}
