//! `hookgate transform new` and `hookgate transform build` (docs/transforms.md#from-zero): a
//! transform project that builds as it is, in Rust, JavaScript or TypeScript, and the command
//! that builds one, or one loose JavaScript or TypeScript module, into a component and checks
//! that hookgate loads it. Part of the binary: the templates (`src/scaffold/`), the WIT contract
//! and the JavaScript SDK ([`sdk`]) are built into it, so neither a new project nor a loose
//! module needs anything from this repository.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use hookgate::mapping::JAVASCRIPT_EXTENSIONS;
use hookgate::transform::{CompileCache, TransformEngine, TransformLimits};

mod sdk;

pub use sdk::user_cache_dir;

/// The languages a project can be made in.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Js,
    Ts,
}

const WIT: &str = include_str!("../wit/transform.wit");
const README: &str = include_str!("scaffold/README.md.tmpl");
const SAMPLE: &str = include_str!("scaffold/sample.json");
const RUST_MANIFEST: &str = include_str!("scaffold/rust/Cargo.toml.tmpl");
const RUST_LIB: &str = include_str!("scaffold/rust/lib.rs.tmpl");
const JS_MODULE: &str = include_str!("scaffold/js/transform.mjs.tmpl");
const TS_MODULE: &str = include_str!("scaffold/js/transform.ts.tmpl");
const JS_TEST: &str = include_str!("scaffold/js/test.mjs.tmpl");

/// Names a Rust project may not take: the standard crates and the project's own dependencies.
const RESERVED: &[&str] = &[
    "test",
    "std",
    "core",
    "alloc",
    "proc-macro",
    "wit-bindgen",
    "serde-json",
];

/// `hookgate transform new NAME --lang L [--dir DIR]`: writes the project into `DIR` (default
/// `./NAME`), which must not exist yet.
pub fn new(name: &str, lang: Lang, dir: Option<PathBuf>) -> ExitCode {
    if !valid_name(name) {
        eprintln!(
            "error: NAME must be lower-case letters, digits and '-', starting with a letter, and no standard crate's or dependency's name (it names the crate or package, the hook and the .wasm)"
        );
        return ExitCode::FAILURE;
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        eprintln!("error: {} exists already", dir.display());
        return ExitCode::FAILURE;
    }
    match write_project(&dir, name, lang) {
        Ok(()) => {
            println!("made {} ({})", dir.display(), lang_name(lang));
            println!("next: cd {} && hookgate transform build", dir.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: cannot write {}: {err}", dir.display());
            ExitCode::FAILURE
        }
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.len() <= 64
        && !name.ends_with('-')
        && !RESERVED.contains(&name)
}

fn lang_name(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "rust",
        Lang::Js => "js",
        Lang::Ts => "ts",
    }
}

fn write_project(dir: &Path, name: &str, lang: Lang) -> std::io::Result<()> {
    let mapped_module = match lang {
        Lang::Rust => format!("{name}.wasm"),
        // Named by its source, the component gets a JavaScript module's limits.
        Lang::Js => format!("{name}.mjs"),
        Lang::Ts => format!("{name}.ts"),
    };
    let fill = |template: &str, module: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{lang}}", lang_name(lang))
            .replace("{{module}}", module)
            .replace(
                "{{test_command}}",
                if lang == Lang::Rust {
                    "cargo test"
                } else {
                    "npm test"
                },
            )
            .replace("{{mapped_module}}", &mapped_module)
            .replace("{{run_module}}", &mapped_module)
    };
    let mut files: Vec<(PathBuf, Vec<u8>)> = vec![
        ("wit/transform.wit".into(), WIT.into()),
        ("payloads/sample.json".into(), SAMPLE.into()),
        ("README.md".into(), fill(README, "").into()),
    ];
    match lang {
        Lang::Rust => {
            files.push(("Cargo.toml".into(), fill(RUST_MANIFEST, "").into()));
            files.push(("src/lib.rs".into(), fill(RUST_LIB, "").into()));
            files.push((
                ".gitignore".into(),
                format!("/target\n/{name}.wasm\n").into(),
            ));
        }
        Lang::Js | Lang::Ts => {
            let (template, module) = match lang {
                Lang::Ts => (TS_MODULE, format!("src/{name}.ts")),
                _ => (JS_MODULE, format!("src/{name}.mjs")),
            };
            files.push((module.clone().into(), fill(template, "").into()));
            files.push((
                format!("{name}.test.mjs").into(),
                fill(JS_TEST, &module).into(),
            ));
            files.push(("package.json".into(), package_json(name, &module).into()));
            files.push(("package-lock.json".into(), package_lock(name).into()));
            files.push(("sdk/adapter.js".into(), sdk::ADAPTER.into()));
            files.push(("sdk/build.mjs".into(), sdk::BUILD.into()));
            files.push(("sdk/hookgate-js-runtime.wasm".into(), sdk::RUNTIME.into()));
            files.push((
                "sdk/README.md".into(),
                format!(
                    "<!-- The SDK's README, as in hookgate's repository (transforms/js-sdk): its \
                     commands and links are that repository's; here the project's package.json \
                     runs the build. -->\n\n{}",
                    sdk::README
                )
                .into(),
            ));
            files.push((
                ".gitignore".into(),
                format!("/node_modules\n/{name}.wasm\n").into(),
            ));
        }
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

/// The project's package.json: the SDK's own dependencies, a build script, a test script, and
/// the module (`hookgate.module`) that `transform build` reads back.
fn package_json(name: &str, module: &str) -> String {
    let sdk: serde_json::Value = serde_json::from_str(sdk::PACKAGE).unwrap_or_default();
    let package = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "scripts": {
            "build": format!("node sdk/build.mjs {module} -o {name}.wasm"),
            "test": "node --test",
        },
        "hookgate": { "module": module },
        "engines": sdk["engines"],
        "dependencies": sdk["dependencies"],
    });
    pretty(&package)
}

/// The SDK's lock file under the project's name: every package pinned as the SDK tests them.
fn package_lock(name: &str) -> String {
    let mut lock: serde_json::Value = serde_json::from_str(sdk::LOCK).unwrap_or_default();
    lock["name"] = serde_json::Value::from(name);
    lock["version"] = serde_json::Value::from("0.1.0");
    if let Some(root) = lock["packages"].get_mut("") {
        root["name"] = serde_json::Value::from(name);
        root["version"] = serde_json::Value::from("0.1.0");
    }
    pretty(&lock)
}

fn pretty(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

/// What `transform build PATH` builds, decided once from what `PATH` is.
enum Target<'a> {
    /// A directory with a Cargo.toml.
    Rust(&'a Path),
    /// A directory with a package.json (the SDK in its `sdk/`, as `transform new` writes it).
    Npm(&'a Path),
    /// One JavaScript or TypeScript module, built with the SDK the binary carries into the
    /// component beside it.
    Module {
        source: &'a Path,
        extension: &'static str,
    },
}

impl<'a> Target<'a> {
    fn of(path: &'a Path) -> Result<Target<'a>, String> {
        if path.is_dir() {
            return if path.join("Cargo.toml").is_file() {
                Ok(Target::Rust(path))
            } else if path.join("package.json").is_file() {
                Ok(Target::Npm(path))
            } else {
                Err(format!(
                    "{} has neither a Cargo.toml nor a package.json (make one with `hookgate transform new`)",
                    path.display()
                ))
            };
        }
        if !path.exists() {
            return Err(format!("{} does not exist", path.display()));
        }
        let extension = path.extension().and_then(|e| e.to_str());
        match JAVASCRIPT_EXTENSIONS
            .into_iter()
            .find(|e| Some(*e) == extension)
        {
            Some(extension) if path.is_file() => Ok(Target::Module {
                source: path,
                extension,
            }),
            _ => Err(format!(
                "{} is neither a JavaScript or TypeScript module (.{}) nor a project directory",
                path.display(),
                JAVASCRIPT_EXTENSIONS.join(", .")
            )),
        }
    }
}

/// `hookgate transform build [PATH]`: builds the project in the directory `PATH` (default `.`)
/// into `PATH/<name>.wasm`, or the module `PATH` (`x.mjs`, `x.ts`) into `x.wasm` beside it;
/// loads the component as `serve` would, and says where it goes.
pub fn build(path: &Path) -> ExitCode {
    let built = Target::of(path).and_then(|target| match target {
        Target::Rust(dir) => build_rust(dir),
        Target::Npm(dir) => build_javascript(dir),
        Target::Module { source, extension } => {
            let out = source.with_extension("wasm");
            sdk::build_module(source, &out)
                .map(|()| (out, Some(extension)))
                .map_err(|e| e.to_string())
        }
    });
    let (wasm, javascript) = match built {
        Ok(built) => built,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    match check_loads(&wasm, javascript) {
        Ok(contract) => {
            let size = std::fs::metadata(&wasm).map_or(0, |m| m.len());
            let file = wasm
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
            let stem = file.trim_end_matches(".wasm");
            let module = match javascript {
                Some(extension) => format!("{stem}.{extension}"),
                None => file.clone(),
            };
            println!(
                "built {} ({} KiB, {contract})",
                wasm.display(),
                size.div_ceil(1024)
            );
            println!(
                "to serve it: copy {file} into <config dir>/hooks/transforms/ and add a mapping\n  {{ match: {{ path: \"{stem}\" }}, transform: {{ module: \"{module}\" }} }}"
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {} does not load: {message}", wasm.display());
            ExitCode::FAILURE
        }
    }
}

/// `cargo build --release --target wasm32-wasip2`, then the component copied to `DIR/<name>.wasm`.
fn build_rust(dir: &Path) -> Result<(PathBuf, Option<&'static str>), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !output.status.success() {
        return Err(
            "cargo build failed (is the target installed? rustup target add wasm32-wasip2)".into(),
        );
    }
    // The component is the cdylib artifact of the project's own package.
    let artifact = String::from_utf8_lossy(&output.stdout)
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| {
            message["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "cdylib"))
        })
        .filter_map(|message| {
            let name = message["target"]["name"].as_str()?.replace('_', "-");
            let wasm = message["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))?
                .to_string();
            Some((name, wasm))
        })
        .next()
        .ok_or("cargo built no component (is crate-type cdylib?)")?;
    let (name, wasm) = artifact;
    let out = dir.join(format!("{name}.wasm"));
    std::fs::copy(&wasm, &out).map_err(|e| format!("cannot copy {wasm}: {e}"))?;
    Ok((out, None))
}

/// `npm install` when the packages are missing, then `npm run build`: `DIR/<name>.wasm`.
fn build_javascript(dir: &Path) -> Result<(PathBuf, Option<&'static str>), String> {
    let package: serde_json::Value = std::fs::read_to_string(dir.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .ok_or("package.json is not JSON")?;
    let name = package["name"]
        .as_str()
        .ok_or("package.json has no name")?
        .to_string();
    let npm = |args: &[&str]| -> Result<(), String> {
        let status = Command::new("npm")
            .args(args)
            .current_dir(dir)
            .status()
            .map_err(|e| format!("cannot run npm (is Node.js installed?): {e}"))?;
        status
            .success()
            .then_some(())
            .ok_or_else(|| format!("npm {} failed", args.join(" ")))
    };
    if !dir.join("node_modules").exists() {
        // The lock file pins every package as the SDK tests them.
        let install = if dir.join("package-lock.json").is_file() {
            "ci"
        } else {
            "install"
        };
        npm(&[install, "--no-audit", "--no-fund"])?;
    }
    npm(&["run", "--silent", "build"])?;
    let module = package["hookgate"]["module"].as_str().unwrap_or_default();
    // The mapping printed must name a source `javascript_component` knows, else it would not load.
    let extension = Path::new(module)
        .extension()
        .and_then(|e| JAVASCRIPT_EXTENSIONS.into_iter().find(|known| e == *known))
        .unwrap_or("mjs");
    Ok((dir.join(format!("{name}.wasm")), Some(extension)))
}

/// Loads the component as `serve` would (with a JavaScript module's limits for JavaScript) and
/// names the contract it was built against.
fn check_loads(wasm: &Path, javascript: Option<&str>) -> Result<String, String> {
    let mut limits = TransformLimits::default();
    if javascript.is_some() {
        limits = limits.for_javascript();
    }
    let engine = TransformEngine::new(&limits).map_err(|e| format!("{e:#}"))?;
    let cache: CompileCache = crate::user_compile_cache();
    let loaded = engine.load_file(wasm, &cache).map_err(|e| e.to_string())?;
    Ok(format!("hookgate:transform@{}", loaded.contract().as_str()))
}
