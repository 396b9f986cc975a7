//! Records of other nodes, indexed into this node's log from the cluster's request stream
//! (docs/cluster.md#the-request-log-in-a-cluster), with the stream's last sequence indexed, so
//! that a restarted node resumes where it stopped and an empty one starts from the beginning.

use rusqlite::{Connection, OptionalExtension, params};

use super::{RequestLogStore, RequestRecord, StoreError};

impl RequestLogStore {
    /// The last sequence of `stream` this log indexed; 0 when it indexed none (a new state
    /// directory, or another stream).
    pub async fn indexed(&self, stream: &str) -> Result<u64, StoreError> {
        let stream = stream.to_string();
        self.db
            .read(move |conn| {
                conn.prepare_cached("SELECT sequence FROM indexed_streams WHERE stream = ?1")?
                    .query_row(params![stream], |row| row.get::<_, i64>(0))
                    .optional()
            })
            .await
            .map(|sequence| u64::try_from(sequence.unwrap_or(0)).unwrap_or(0))
    }

    /// Writes `records` read from `stream` up to `sequence` and notes that sequence as indexed,
    /// in one operation of the writer; returns how many records were new. A record whose id
    /// is there already (this node's own, written by its writer; one indexed before a crash)
    /// is left as it is, so indexing a message twice changes nothing.
    pub async fn index(
        &self,
        records: Vec<RequestRecord>,
        stream: String,
        sequence: u64,
    ) -> Result<u64, StoreError> {
        self.db
            .write(move |conn| index(conn, &records, &stream, sequence))
            .await
    }
}

fn index(
    conn: &Connection,
    records: &[RequestRecord],
    stream: &str,
    sequence: u64,
) -> rusqlite::Result<u64> {
    let before = conn.total_changes();
    RequestRecord::insert_all(conn, records)?;
    let new = conn.total_changes() - before;
    conn.prepare_cached(
        "INSERT INTO indexed_streams (stream, sequence) VALUES (?1, ?2)
         ON CONFLICT (stream) DO UPDATE SET sequence = excluded.sequence",
    )?
    .execute(params![stream, i64::try_from(sequence).unwrap_or(i64::MAX)])?;
    Ok(new)
}
