//! The state a transform's store holds, for one call or for the calls of a reused instance: an
//! empty WASI context (made at the guest's first WASI call), the memory cap, and the bounded
//! sinks for stdout, stderr and the `log` import, each with a budget of its own per call.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtxView, WasiView};

use super::bindings::{types, v0_1, v0_2};
use super::guest_clock::GuestClock;
use super::guest_text::guest_text;
use super::limits::{CORE_INSTANCES_PER_COMPONENT, MEMORIES_PER_COMPONENT, TABLES_PER_COMPONENT};
use super::wasi::GuestWasi;

/// Tables may not grow past this many elements (function tables of ordinary guests are far
/// smaller); keeps a hostile `table.grow` from taking host memory outside the memory cap.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// How many calls' worth of output the pipes of a reused store hold; the store is retired once
/// less than one call's worth is left.
const REUSED_PIPE_CALLS: usize = 4;

/// Everything one call's store owns (or, with `transform.reuse`, the calls of one mapping that
/// share it). Dropped with the store, so nothing outlives it; what the current call wrote to
/// stdout and stderr reaches the log at the latest then.
pub struct HostState {
    wasi: GuestWasi,
    table: ResourceTable,
    pub(super) memory: MemoryCap,
    pub(super) log: LogSink,
    /// How much of stdout and stderr was there when the current call began.
    output_at_call: [usize; 2],
    /// The current call's running time, and the limit it is held to (`timeoutMs`).
    pub(super) clock: Arc<GuestClock>,
    pub(super) time_limit: Duration,
    /// Whether the current call's output went to the log ([`HostState::flush_output`]). A store
    /// dropped before that (its call stopped at its time limit inside a host call, where the
    /// call's future goes with the store) sends it as it goes.
    flushed: bool,
}

impl HostState {
    /// A WASI context ([`GuestWasi::ctx`]) with stdout and stderr captured up to `log_bytes`
    /// each; its call charged to `clock`, within `limit`.
    pub fn new(
        mapping_id: &str,
        memory_bytes: usize,
        log_bytes: usize,
        (clock, limit): (Arc<GuestClock>, Duration),
    ) -> Self {
        Self::with_pipes(
            mapping_id,
            memory_bytes,
            log_bytes,
            log_bytes,
            (clock, limit),
        )
    }

    /// Like [`HostState::new`], for a store that serves several calls: its pipes hold
    /// [`REUSED_PIPE_CALLS`] calls' worth of output; a call that writes `log_bytes` or more to
    /// either fails when it returns ([`CallOutput::reached`]). Its first call is charged to
    /// `clock`, within `limit`.
    pub fn for_reuse(
        mapping_id: &str,
        memory_bytes: usize,
        log_bytes: usize,
        (clock, limit): (Arc<GuestClock>, Duration),
    ) -> Self {
        let pipe_bytes = log_bytes.saturating_mul(REUSED_PIPE_CALLS);
        Self::with_pipes(
            mapping_id,
            memory_bytes,
            log_bytes,
            pipe_bytes,
            (clock, limit),
        )
    }

    fn with_pipes(
        mapping_id: &str,
        memory_bytes: usize,
        log_bytes: usize,
        pipe_bytes: usize,
        (clock, time_limit): (Arc<GuestClock>, Duration),
    ) -> Self {
        HostState {
            wasi: GuestWasi::new(pipe_bytes),
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: memory_bytes,
                used: 0,
                exceeded: false,
            },
            log: LogSink {
                mapping_id: mapping_id.to_string(),
                budget: log_bytes,
                dropped: 0,
            },
            output_at_call: [0, 0],
            clock,
            time_limit,
            flushed: false,
        }
    }

    /// The id of the mapping whose calls this store serves.
    pub fn mapping_id(&self) -> &str {
        &self.log.mapping_id
    }

    /// Charges the calls to come to `clock`, within `limit`.
    pub fn charge_to(&mut self, clock: Arc<GuestClock>, limit: Duration) {
        self.clock = clock;
        self.time_limit = limit;
    }

    /// Whether the current call has run for its whole limit.
    pub fn out_of_time(&self) -> bool {
        self.clock.spent() >= self.time_limit
    }

    /// Starts another call on a reused store: a fresh log budget and no memory breach
    /// remembered (a call that breached was not reused). Its output is counted from where the
    /// previous call's ended ([`HostState::end_call`]).
    pub fn begin_call(&mut self, log_bytes: usize) {
        self.log.budget = log_bytes;
        self.log.dropped = 0;
        self.memory.exceeded = false;
        self.flushed = false;
    }

    /// Ends a call on a reused store whose instance serves another: the next call's output is
    /// counted from what the pipes hold now (nothing writes to them between calls).
    pub fn end_call(&mut self, output: &CallOutput) {
        self.output_at_call = output.held;
    }

    /// Sends what the guest wrote to stdout and stderr in this call to the server log, and
    /// says how much that was: the pipes are read once per call, here (each read copies them),
    /// and what classifying a failure needs of them is in the [`CallOutput`] this returns.
    pub fn flush_output(&mut self) -> CallOutput {
        self.flushed = true;
        let held = self.wasi.output();
        let mut written = [0; 2];
        for (i, stream) in ["stdout", "stderr"].into_iter().enumerate() {
            let bytes = held[i].slice(self.output_at_call[i]..);
            written[i] = bytes.len();
            if !bytes.is_empty() {
                let text = String::from_utf8_lossy(&bytes);
                let text = guest_text(text.trim_end(), bytes.len());
                tracing::info!(mapping = %self.log.mapping_id, stream, "transform output: {text}");
            }
        }
        if self.log.dropped > 0 {
            tracing::warn!(mapping = %self.log.mapping_id, dropped = self.log.dropped, "transform log lines dropped over the per-call budget");
        }
        CallOutput {
            written,
            held: held.map(|bytes| bytes.len()),
        }
    }
}

/// What a call wrote to stdout and stderr, and what the store's pipes hold after it, in bytes.
pub struct CallOutput {
    written: [usize; 2],
    held: [usize; 2],
}

impl Drop for HostState {
    /// A call whose store goes before its output went to the log (its future dropped at the
    /// time limit, mid host call) still leaves there what it wrote up to then.
    fn drop(&mut self) {
        if !self.flushed {
            self.flush_output();
        }
    }
}

impl CallOutput {
    /// Whether the call wrote `capacity` bytes or more to stdout or stderr: on a fresh store the
    /// guest's next write failed, which usually ends it; a reused store's larger pipes let the
    /// call go on, and this is how it is caught.
    pub fn reached(&self, capacity: usize) -> bool {
        self.written.iter().any(|&bytes| bytes >= capacity)
    }

    /// Whether a reused store's pipes can take another call's `log_bytes`.
    pub fn room_for_another_call(&self, log_bytes: usize) -> bool {
        self.held.iter().all(|&bytes| {
            bytes.saturating_add(log_bytes) <= log_bytes.saturating_mul(REUSED_PIPE_CALLS)
        })
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.ctx(),
            table: &mut self.table,
        }
    }
}

/// Caps the linear memory of a store (all memories of all its instances together, over every
/// call a reused instance serves) and the number of instances, memories and tables; remembers a
/// refusal so that the resulting trap is reported as a memory limit breach rather than as
/// whatever the guest did when its allocation failed.
pub struct MemoryCap {
    limit: usize,
    used: usize,
    pub(super) exceeded: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let used = self.used.saturating_add(desired.saturating_sub(current));
        if used > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        self.used = used;
        Ok(true)
    }

    fn instances(&self) -> usize {
        CORE_INSTANCES_PER_COMPONENT as usize
    }

    fn memories(&self) -> usize {
        MEMORIES_PER_COMPONENT as usize
    }

    fn tables(&self) -> usize {
        TABLES_PER_COMPONENT as usize
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// What the host adds to each guest log line (time, level, target, mapping id), counted against
/// the budget with the line.
const LINE_OVERHEAD: usize = 96;

/// The `log` import's destination: the server log, tagged with the mapping id, within a byte
/// budget per call (lines past it are counted, not written).
pub struct LogSink {
    mapping_id: String,
    budget: usize,
    dropped: usize,
}

impl v0_2::types::Host for HostState {}

impl v0_2::host::Host for HostState {
    fn log(&mut self, level: types::Level, message: String) {
        self.log.write(level, message);
    }
}

impl v0_1::types::Host for HostState {}

impl v0_1::TransformImports for HostState {
    fn log(&mut self, level: v0_1::types::Level, message: String) {
        self.log.write(level.into(), message);
    }
}

impl LogSink {
    /// Writes one guest line, unless the call's budget is spent.
    fn write(&mut self, level: types::Level, message: String) {
        // A line costs what the host writes for it, its prefix included: `log("")` in a loop
        // is bounded too.
        let cost = message.len().saturating_add(LINE_OVERHEAD);
        if cost > self.budget {
            self.dropped += 1;
            return;
        }
        self.budget -= cost;
        let message = guest_text(&message, message.len());
        let mapping = self.mapping_id.as_str();
        match level {
            types::Level::Debug => tracing::debug!(%mapping, "transform: {message}"),
            types::Level::Info => tracing::info!(%mapping, "transform: {message}"),
            types::Level::Warn => tracing::warn!(%mapping, "transform: {message}"),
            types::Level::Error => tracing::error!(%mapping, "transform: {message}"),
        }
    }
}
