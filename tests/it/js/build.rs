//! Builds the JavaScript and TypeScript transforms (the examples and the test fixtures) with the
//! SDK in `transforms/js-sdk`, once per test process: `npm ci` when its packages are missing, then
//! one `build.mjs` per module, in parallel. A component newer than its source and the SDK is
//! reused, since each build takes ComponentizeJS ten seconds or more.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::SystemTime;

/// Each module: its source under `transforms/`, its component's name, and whether it is built
/// with `--allow-fetch` (a component that imports `wasi:http`, for the refusal test).
const MODULES: &[(&str, &str, bool)] = &[
    (
        "js-example/github-issues-digest.mjs",
        "github-issues-digest",
        false,
    ),
    ("js-example/form-to-wake.ts", "form-to-wake", false),
    ("fixtures/js/behaviours.mjs", "js-behaviours", false),
    ("fixtures/js/partial.mjs", "partial", false),
    ("fixtures/js/fetches.mjs", "js-fetches", true),
];

/// The directory holding `<name>.wasm` for every module of [`MODULES`], and a copy of its source
/// (`<name>.mjs`, `.ts`), for gateways that run the source itself.
pub fn js_transforms() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
        let sdk = root.join("js-sdk");
        let out = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir).join("js-transforms"),
            None => root.join("target/js-transforms"),
        };
        std::fs::create_dir_all(&out).unwrap();
        if !sdk.join("node_modules").is_dir() {
            run(Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&sdk));
        }
        let sdk_changed = newest(&[sdk.join("build.mjs"), sdk.join("adapter.js")]);
        let builds: Vec<(&str, Child)> = MODULES
            .iter()
            .filter(|(source, name, _)| {
                let built = modified(&out.join(format!("{name}.wasm")));
                built.is_none() || built < newest(&[root.join(source)]).max(sdk_changed)
            })
            .map(|(source, name, allow_fetch)| {
                let mut build = Command::new("node");
                build
                    .arg(sdk.join("build.mjs"))
                    .arg(root.join(source))
                    .arg("-o")
                    .arg(out.join(format!("{name}.wasm")));
                if *allow_fetch {
                    build.arg("--allow-fetch");
                }
                (
                    *name,
                    build.spawn().expect("run node (is Node.js installed?)"),
                )
            })
            .collect();
        for (name, mut build) in builds {
            let status = build.wait().unwrap();
            assert!(status.success(), "building the {name} transform failed");
        }
        for (source, name, _) in MODULES {
            let source = root.join(source);
            let extension = source.extension().unwrap().to_str().unwrap();
            std::fs::copy(&source, out.join(format!("{name}.{extension}"))).unwrap();
        }
        out
    })
}

fn run(command: &mut Command) {
    let status = command.status().expect("run npm (is Node.js installed?)");
    assert!(status.success(), "{command:?} failed");
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn newest(paths: &[PathBuf]) -> Option<SystemTime> {
    paths.iter().filter_map(|p| modified(p)).max()
}
