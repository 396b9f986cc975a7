//! Builds the JavaScript and TypeScript transforms (the examples and the test fixtures) with the
//! SDK in `transforms/js-sdk`, once per test process: `npm ci` when its packages are missing, then
//! one `build.mjs` per module, in parallel. A component is reused only when it was built from
//! the same bytes (its source's and the SDK's, recorded beside it): the build directory may be a
//! cache that another checkout filled, where a newer file is not the same source.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// Each module: its source under `transforms/` and its component's name.
const MODULES: &[(&str, &str)] = &[
    (
        "js-example/github-issues-digest.mjs",
        "github-issues-digest",
    ),
    ("js-example/form-to-wake.ts", "form-to-wake"),
    ("fixtures/js/behaviours.mjs", "js-behaviours"),
    ("fixtures/js/partial.mjs", "partial"),
    ("fixtures/js/fetches.mjs", "js-fetches"),
    ("fixtures/js/globals.mjs", "js-globals"),
    ("fixtures/js/hostile.mjs", "js-hostile"),
    ("fixtures/js/counter.mjs", "js-counter"),
    ("fixtures/js/settling.mjs", "js-settling"),
    ("fixtures/js/every-field.mjs", "js-every-field"),
];

/// `transforms/js-sdk`, with its packages installed (`npm ci` when they are missing), once per
/// test process: tests that need it run in parallel, and two `npm ci` in one directory would
/// undo each other.
pub fn installed_sdk() -> PathBuf {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/js-sdk");
            if !sdk.join("node_modules").is_dir() {
                run(Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund"])
                    .current_dir(&sdk));
            }
            sdk
        })
        .clone()
}

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
        installed_sdk();
        let sdk_digest = digest(&[
            sdk.join("build.mjs"),
            sdk.join("adapter.js"),
            sdk.join("hookgate-js-runtime.wasm"),
            sdk.join("package-lock.json"),
        ]);
        let builds: Vec<(&str, PathBuf, String, Child)> = MODULES
            .iter()
            .filter_map(|(source, name)| {
                let stamp = out.join(format!("{name}.wasm.built-from"));
                let from = format!("{sdk_digest} {}", digest(&[root.join(source)]));
                let built = out.join(format!("{name}.wasm")).is_file()
                    && std::fs::read_to_string(&stamp).is_ok_and(|was| was == from);
                if built {
                    return None;
                }
                let mut build = Command::new("node");
                build
                    .arg(sdk.join("build.mjs"))
                    .arg(root.join(source))
                    .arg("-o")
                    .arg(out.join(format!("{name}.wasm")));
                let child = build.spawn().expect("run node (is Node.js installed?)");
                Some((*name, stamp, from, child))
            })
            .collect();
        for (name, stamp, from, mut build) in builds {
            let status = build.wait().unwrap();
            assert!(status.success(), "building the {name} transform failed");
            std::fs::write(stamp, from).unwrap();
        }
        for (source, name) in MODULES {
            let source = root.join(source);
            let extension = source.extension().unwrap().to_str().unwrap();
            std::fs::copy(&source, out.join(format!("{name}.{extension}"))).unwrap();
        }
        out
    })
}

/// The directory holding `js-counter-unrevised.wasm`: `fixtures/js/counter.mjs` built by the SDK's
/// `build.mjs` as it was before builds recorded their adapter revision (`fixtures/js-sdk-unrevised`,
/// whose README says where it comes from), beside the adapter, the runtime and the packages of
/// `js-sdk`; built once per test process, after [`js_transforms`] (which installs the packages).
pub fn unrevised_js_transform() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = js_transforms().to_path_buf();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
        let sdk = out.join("sdk-unrevised");
        std::fs::create_dir_all(&sdk).unwrap();
        let build = "build.mjs";
        std::fs::copy(
            root.join("fixtures/js-sdk-unrevised").join(build),
            sdk.join(build),
        )
        .unwrap();
        for file in ["adapter.js", "hookgate-js-runtime.wasm"] {
            std::fs::copy(root.join("js-sdk").join(file), sdk.join(file)).unwrap();
        }
        // The link is made anew: the build directory may be a cache that another checkout
        // used, whose packages may be gone.
        let packages = sdk.join("node_modules");
        let _ = std::fs::remove_file(&packages);
        std::os::unix::fs::symlink(root.join("js-sdk/node_modules"), &packages).unwrap();
        run(Command::new("node")
            .arg(sdk.join("build.mjs"))
            .arg(root.join("fixtures/js/counter.mjs"))
            .arg("-o")
            .arg(out.join("js-counter-unrevised.wasm")));
        out
    })
}

fn run(command: &mut Command) {
    let status = command.status().expect("run npm (is Node.js installed?)");
    assert!(status.success(), "{command:?} failed");
}

/// The SHA-256 of `paths`' contents, one after the other, in hex.
fn digest(paths: &[PathBuf]) -> String {
    let mut hasher = Sha256::new();
    for path in paths {
        let bytes = std::fs::read(path).unwrap_or_else(|err| panic!("read {path:?}: {err}"));
        hasher.update(bytes);
    }
    hex::encode(hasher.finalize())
}
