//! The systemd unit in `contrib/`, checked by systemd itself (`systemd-analyze`, from Debian's
//! systemd package, which `scripts/test` installs).

use std::process::Command;

use crate::harness::binary;

/// The unit with its ExecStart pointing at the binary under test (verify checks it exists).
fn unit() -> (tempfile::TempDir, std::path::PathBuf) {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/hookgate.service"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.service");
    std::fs::write(&path, text.replace("/usr/local/bin/hookgate", binary())).unwrap();
    (dir, path)
}

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let (_dir, path) = unit();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze complained: {stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let (_dir, path) = unit();
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let level: f64 = stdout
        .lines()
        .find_map(|line| {
            line.split("Overall exposure level for hookgate.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|level| level.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {stdout}"));
    // 0 is fully locked down, 10 not at all; systemd calls under 2 "OK". What keeps it above 0:
    // network families (a server needs them) and no MemoryDenyWriteExecute (wasmtime's JIT).
    assert!(level <= 2.0, "exposure {level}:\n{stdout}");
    for line in ["PrivateNetwork=", "MemoryDenyWriteExecute="] {
        assert!(stdout.contains(line), "{stdout}");
    }
}
