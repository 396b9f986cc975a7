//! The process's own figures as Prometheus's client libraries name them, read from `/proc` when
//! `/metrics` is scraped (Linux only; elsewhere they stay at zero): CPU time, resident memory,
//! open file descriptors and the start time.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The process metrics; cheap to clone.
#[derive(Clone, Default)]
pub struct ProcessMetrics {
    cpu_seconds: Counter<f64, AtomicU64>,
    resident_bytes: Gauge,
    open_fds: Gauge,
    start_time_seconds: Gauge<f64, AtomicU64>,
    /// Held while sampling: the CPU counter grows by the difference to the last reading, which
    /// two scrapes at once would both add.
    sampling: Arc<Mutex<()>>,
}

impl ProcessMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "process_cpu_seconds",
            "User and system CPU time of the process",
            self.cpu_seconds.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the process",
            self.resident_bytes.clone(),
        );
        registry.register(
            "process_open_fds",
            "Open file descriptors of the process",
            self.open_fds.clone(),
        );
        registry.register(
            "process_start_time_seconds",
            "When the process started, in seconds since the Unix epoch",
            self.start_time_seconds.clone(),
        );
    }

    /// Reads the figures now. A file that cannot be read leaves its metric as it was.
    pub fn sample(&self) {
        let _sampling = self
            .sampling
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return;
        };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().collect());
        // SAFETY: sysconf reads a system constant by name; it takes no pointer and has no
        // precondition.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as i64;
        let field = |n: usize| fields.get(n).and_then(|f| f.parse::<u64>().ok());
        // Numbered as in proc(5) minus 3: utime is field 14, stime 15, starttime 22, rss 24.
        if let (Some(user), Some(system)) = (field(11), field(12)) {
            let total = (user + system) as f64 / ticks;
            let grown = total - self.cpu_seconds.get();
            if grown > 0.0 {
                self.cpu_seconds.inc_by(grown);
            }
        }
        if let Some(rss) = field(21) {
            self.resident_bytes.set(rss as i64 * page);
        }
        if let (Some(started), Some(boot)) = (field(19), boot_time()) {
            self.start_time_seconds.set(boot + started as f64 / ticks);
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(fds.count() as i64);
        }
    }
}

/// When the machine booted, in seconds since the Unix epoch: now less the time since boot
/// (`CLOCK_BOOTTIME`, which counts suspended time as the start time of `/proc/self/stat` does).
/// Read from the clocks, not `/proc/stat`, which a hardened unit hides (`ProcSubset=pid`).
fn boot_time() -> Option<f64> {
    let mut since_boot = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `since_boot` is a valid, writable timespec that outlives the call, which writes
    // nothing else.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut since_boot) };
    if read != 0 {
        return None;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some(now - (since_boot.tv_sec as f64 + since_boot.tv_nsec as f64 / 1e9))
}
