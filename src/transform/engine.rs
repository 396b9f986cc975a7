//! The one wasmtime engine of the process: its configuration, the linker every transform is
//! instantiated against, the epoch ticker that bounds running time, and the slots that bound
//! concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::{v0_1, v0_2};
use super::call_slots::CallSlots;
use super::host::HostState;
use super::limits::{
    CORE_INSTANCES_PER_COMPONENT, MEMORIES_PER_COMPONENT, TABLES_PER_COMPONENT, TransformLimits,
};

/// How often the epoch advances: how long a guest runs before it yields its thread.
pub(super) const TICK: Duration = Duration::from_millis(10);

/// Bytes of each linear memory, table and fiber stack reset in place (not unmapped) when an
/// instance is freed.
const KEEP_RESIDENT: usize = 1024 * 1024;

/// Slots whose memory is unmapped together where the pool cannot find the pages a call touched
/// (no `PAGEMAP_SCAN`), so that it unmaps all it does not reset: one shootdown for several slots.
const DECOMMIT_BATCH: usize = 8;

/// Set (to anything), the engine writes `/tmp/perf-<pid>.map`, where `perf` finds the names of
/// the guests' compiled functions. Each compile appends to it, so it stays off by default.
const PERF_MAP_VAR: &str = "HOOKGATE_PERF_MAP";

/// Guest stack; deep recursion traps here instead of exhausting the host thread.
const MAX_WASM_STACK: usize = 512 * 1024;

/// The engine, linker, ticker and call slots. Cheap to clone; the ticker stops with the last clone.
#[derive(Clone)]
pub struct TransformEngine {
    pub(super) engine: Engine,
    pub(super) linker: Arc<Linker<HostState>>,
    pub(super) slots: CallSlots,
    /// Instances come from the pooling allocator (else on demand).
    pub pooled: bool,
    /// The memory cap the pool was sized for; a larger cap needs a restart.
    pub memory_bytes: usize,
    /// Instances kept between calls (`transform.reuse`), over all mappings, and how many may
    /// be: each holds a pool slot, so idle ones may take at most the half of the pool that calls
    /// in progress never need.
    pub(super) idle: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) max_idle: usize,
    _ticker: Arc<Ticker>,
}

impl TransformEngine {
    /// Builds the engine with a pooling allocator sized for `limits`, or, where the pool cannot be
    /// reserved (a `ulimit -v`, a small address space), with on-demand allocation.
    pub fn new(limits: &TransformLimits) -> wasmtime::Result<Self> {
        let (engine, pooled) = match Engine::new(&config(limits, true)) {
            Ok(engine) => (engine, true),
            Err(err) => {
                tracing::warn!(%err, "pooling allocator unavailable; instantiating on demand");
                (Engine::new(&config(limits, false))?, false)
            }
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        // Both contracts: their imports have distinct names (0.1's root `log`, 0.2's versioned
        // `host` interface), so one linker serves either.
        v0_1::Transform::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| {
            state
        })?;
        v0_2::Transform::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| {
            state
        })?;
        Ok(TransformEngine {
            linker: Arc::new(linker),
            slots: CallSlots::new(limits.max_concurrent as usize),
            pooled,
            memory_bytes: limits.memory_bytes,
            idle: Arc::default(),
            max_idle: limits.max_concurrent as usize,
            _ticker: Arc::new(Ticker::start(engine.clone())?),
            engine,
        })
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

fn config(limits: &TransformLimits, pooled: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    // hookgate uses no WASIp3 concurrency; turning it off makes every call cheaper.
    config.concurrency_support(false);
    config.max_wasm_stack(MAX_WASM_STACK);
    if std::env::var_os(PERF_MAP_VAR).is_some() {
        // Names the guests' compiled functions for `perf report` (docs/performance.md#profiling).
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if pooled {
        // Calls in progress (at most `max_concurrent`) and as many idle reused instances
        // (`max_idle`, the same number).
        let slots = limits.max_concurrent.max(1).saturating_mul(2);
        let mut pool = PoolingAllocationConfig::default();
        // Per-component caps keep one component from taking the slots of the others.
        pool.total_component_instances(slots)
            .total_core_instances(slots * CORE_INSTANCES_PER_COMPONENT)
            .total_memories(slots * MEMORIES_PER_COMPONENT)
            .total_tables(slots * TABLES_PER_COMPONENT)
            // A store keeps the fiber stack of its last call for its next one, and wasmtime
            // offers no way to hand it back short of dropping the store: an idle reused
            // instance holds a stack. Sized for both, a fresh call never finds the stacks
            // taken by instances that are only waiting. Stacks are reserved address space,
            // committed as a call touches them.
            .total_stacks(slots)
            .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(TABLES_PER_COMPONENT)
            .max_memory_size(limits.memory_bytes)
            // A freed instance's memory, tables and stack are reset with memset up to these
            // sizes, where only the pages it touched are found (PAGEMAP_SCAN, Linux 6.7 on),
            // instead of madvise: a small transform's next instance then takes no page faults,
            // and the TLB shootdowns of unmapping pages on every call (which perf showed under
            // load) are gone. The cost is that much memory resident per slot that was used.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .async_stack_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto)
            .decommit_batch_size(decommit_batch());
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// How many freed slots' leftover regions the pool queues before it unmaps them. With
/// `PAGEMAP_SCAN` a freed slot's scan usually reaches the end of its memory and leaves nothing to
/// unmap, but wasmtime queues that empty region all the same, and a batch of them costs a
/// `process_madvise` that unmaps nothing (0.375 per fresh JavaScript instance: three regions an
/// instance, eight a batch) while keeping the slots out of the pool until it runs. Batches of one
/// return such a slot at once, with no call (an empty region alone is skipped). A scan stops
/// early when the slot holds more than [`KEEP_RESIDENT`] of private pages (the union of what
/// its calls wrote) or finds more dirty regions than wasmtime's scan takes (32); what lies past
/// it is unmapped, with one `madvise` per freed slot where a batch shared one.
fn decommit_batch() -> usize {
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        1
    } else {
        DECOMMIT_BATCH
    }
}

/// Advances the engine's epoch every [`TICK`] on its own thread until dropped.
///
/// The engine cannot run without it: a guest checks its limit only when the epoch advances, so
/// without a ticker a spinning guest would never yield its thread nor be stopped. A ticker that
/// cannot start is therefore an error of [`TransformEngine::new`], not a warning.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start(engine: Engine) -> wasmtime::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("hookgate-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|err| {
                wasmtime::Error::msg(format!("cannot start the epoch ticker thread: {err}"))
            })?;
        Ok(Ticker { stop })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
