//! A store's WASI context: empty but for stdout and stderr captured in bounded pipes and clocks
//! that tick in whole milliseconds, made when the guest first calls a WASI function rather than
//! with the store: a call that makes none (the JavaScript runtime's, once loaded) never pays for
//! one.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx};

use super::pipe::BoundedPipe;

/// The most bytes one `wasi:random` call may ask for; a larger request traps. The call is
/// synchronous, out of reach of the epoch deadline and outside the guest's memory cap (the
/// default, 64 MiB, held a runtime worker for 700 ms and 64 MiB per call); 64 KiB takes
/// microseconds, and a guest that wants more asks again, interruptibly.
const MAX_RANDOM_BYTES: u64 = 64 * 1024;

/// The WASI context of one store, made on first use, and what it is made with.
pub struct GuestWasi {
    made: Option<Made>,
    /// The capacity of each of the stdout and stderr pipes.
    pipe_bytes: usize,
    /// The monotonic clock's origin: when the store was made.
    origin: Instant,
}

/// A context and the pipes its stdout and stderr write to.
struct Made {
    ctx: WasiCtx,
    stdout: BoundedPipe,
    stderr: BoundedPipe,
}

impl GuestWasi {
    /// A context to be made on first use, with pipes of `pipe_bytes` each and a monotonic clock
    /// that counts from now.
    pub fn new(pipe_bytes: usize) -> Self {
        GuestWasi {
            made: None,
            pipe_bytes,
            origin: Instant::now(),
        }
    }

    /// The context, made now if the guest has not called WASI before: no preopened directories,
    /// no environment, no arguments, stdin closed, (wasmtime-wasi's default) no network, clocks
    /// that tick in whole milliseconds (the monotonic one from the store's making), stdout and
    /// stderr captured up to `pipe_bytes` each.
    pub fn ctx(&mut self) -> &mut WasiCtx {
        let (pipe_bytes, origin) = (self.pipe_bytes, self.origin);
        let made = self.made.get_or_insert_with(|| {
            let stdout = BoundedPipe::new(pipe_bytes);
            let stderr = BoundedPipe::new(pipe_bytes);
            let ctx = WasiCtx::builder()
                .stdout(stdout.clone())
                .stderr(stderr.clone())
                .wall_clock(MillisecondWallClock)
                .monotonic_clock(MillisecondMonotonicClock { start: origin })
                .max_random_size(MAX_RANDOM_BYTES)
                .build();
            Made {
                ctx,
                stdout,
                stderr,
            }
        });
        &mut made.ctx
    }

    /// Everything written to stdout and to stderr so far (a copy of each pipe); nothing if the
    /// guest never called WASI.
    pub fn output(&self) -> [Bytes; 2] {
        match &self.made {
            Some(made) => [made.stdout.contents(), made.stderr.contents()],
            None => [Bytes::new(), Bytes::new()],
        }
    }
}

/// Wall time in whole milliseconds. A transform may know the time of day, but a nanosecond clock
/// is a timer for measuring the host (cache and speculative-execution side channels); a
/// millisecond is coarse enough to blunt that and fine enough for any timestamp a webhook needs.
struct MillisecondWallClock;

const MILLISECOND: Duration = Duration::from_millis(1);

impl HostWallClock for MillisecondWallClock {
    fn resolution(&self) -> Duration {
        MILLISECOND
    }

    fn now(&self) -> Duration {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Duration::from_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Time since the store was made (the call, or a reused instance's first call), in whole
/// milliseconds: no finer than the wall clock, for the same reason, and it still advances, so a
/// guest that waits for time to pass is not stuck.
struct MillisecondMonotonicClock {
    start: Instant,
}

impl HostMonotonicClock for MillisecondMonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        let millis = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        millis.saturating_mul(1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::component::ResourceTable;
    use wasmtime_wasi::cli::StdoutStream;
    use wasmtime_wasi::clocks::WasiClocksCtxView;
    use wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host as _;

    use super::*;

    #[test]
    fn the_context_is_made_at_first_use_with_the_store_as_the_clocks_origin() {
        let mut wasi = GuestWasi::new(16);
        assert!(wasi.made.is_none(), "made with the store");
        assert_eq!(wasi.output(), [Bytes::new(), Bytes::new()]);
        // As if the store had been made a minute before the guest's first WASI call.
        let Some(earlier) = wasi.origin.checked_sub(Duration::from_secs(60)) else {
            return; // The machine's monotonic clock started less than a minute ago.
        };
        wasi.origin = earlier;
        let mut table = ResourceTable::new();
        let mut clocks = WasiClocksCtxView {
            ctx: wasi.ctx().clocks(),
            table: &mut table,
        };
        let now = clocks.now().unwrap();
        assert!(now >= 60_000_000_000, "not counted from the store: {now}");
        assert_eq!(now % 1_000_000, 0, "finer than a millisecond: {now}");
        let made = wasi.made.as_ref().expect("made at first use");
        made.stdout
            .p2_stream()
            .write(Bytes::from_static(b"hello"))
            .unwrap();
        assert_eq!(wasi.output(), [Bytes::from_static(b"hello"), Bytes::new()]);
    }
}
