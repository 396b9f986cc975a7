//! The WASI preview 1 functions the SDK merges into every JavaScript component (`PREVIEW1` in
//! `transforms/js-sdk/build.mjs`), run in Node against stand-ins for the WASI 0.2 imports
//! (`transforms/js-sdk/test/preview1.test.mjs`): writes in chunks of 4096 bytes, EIO with what was
//! written before a failure, randomness's tail bytes, the clocks, exit; and how the build lists
//! the merged module's imports and strips its exports.

use std::process::Command;

use super::build::installed_sdk;

#[test]
fn the_preview1_shim_passes_its_node_tests() {
    let sdk = installed_sdk();
    let output = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(&sdk)
        .output()
        .expect("run node (is Node.js installed?)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
}
