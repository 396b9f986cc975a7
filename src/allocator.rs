//! Hands memory that the allocator holds but no longer uses back to the system.
//!
//! glibc's malloc gives each thread that allocates an arena of its own and returns freed memory
//! to the system only from the top of the main heap. A gateway's threads take turns with very
//! different sizes (a transform's megabyte output one moment, small request buffers the next), so
//! the arenas' free space grows for minutes after the live heap has stopped growing: a soak of
//! mixed traffic showed RSS creeping up by ~1 MiB a minute while heaptrack showed a flat heap and
//! nothing leaked. `malloc_trim` releases the free pages inside every arena.
//!
//! Rust's own allocations have since moved to mimalloc (the binary's global allocator,
//! docs/performance.md#allocation), which returns freed pages by itself; glibc's malloc still
//! serves the C libraries (SQLite's page cache and statements), so the trimming stays.

use std::time::Duration;

/// How often the free pages are released: often enough that RSS follows the live heap, rarely
/// enough that the arena locks `malloc_trim` takes in turn cost nothing measurable.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Starts a thread that calls `malloc_trim` every [`TRIM_EVERY`] for the life of the process.
/// Does nothing where the C library is not glibc (musl and others return memory by themselves).
pub fn start_trimming() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("hookgate-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_EVERY);
                    // SAFETY: malloc_trim has no preconditions: it takes each arena's lock in
                    // turn, so it is safe to call while other threads allocate and free.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(%err, "cannot start the allocator trimming thread");
        }
    }
}
