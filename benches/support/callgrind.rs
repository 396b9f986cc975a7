//! Counting a server's instructions under valgrind's callgrind (the instructions bench).

use std::path::Path;
use std::process::{Child, Command};

/// Runs `callgrind_control <flag> <pid>`, which returns once the running callgrind has done it.
pub fn callgrind_control(flag: &str, pid: u32) {
    let output = Command::new("callgrind_control")
        .args([flag, &pid.to_string()])
        .output()
        .expect("callgrind_control");
    assert!(output.status.success(), "callgrind_control {flag} failed");
}

/// The instructions a callgrind dump counted: its `summary:` line, else its `totals:` line.
pub fn dumped_instructions(dump: &Path) -> u64 {
    let text =
        std::fs::read_to_string(dump).unwrap_or_else(|e| panic!("reading {}: {e}", dump.display()));
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    };
    field("summary:")
        .or_else(|| field("totals:"))
        .unwrap_or_else(|| panic!("no summary in {}", dump.display()))
}

/// A server under callgrind, killed when dropped: a case that fails leaves none running.
pub struct Running(pub Option<Child>);

impl Running {
    /// Stops the server as an operator would (`SIGTERM`) and waits for it.
    pub fn stop(mut self) {
        super::stop(self.0.take().unwrap());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
