//! What `contrib/` ships, checked by the tools that will read it: the systemd units by systemd
//! itself (`systemd-analyze`, Debian package systemd), the alerting rules by Prometheus's
//! `promtool` (Debian package prometheus) against the metrics the real binary exports, and the
//! Debian package that `scripts/package --check` builds (docs/operations.md#the-debian-package).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::harness::*;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The unit at `path` with its binary (`installed`) replaced by the binary under test, since
/// `verify` checks that it exists.
fn unit(path: &str, installed: &str) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("hookgate.service");
    std::fs::write(&unit, text.replace(installed, binary())).unwrap();
    (dir, unit)
}

/// The hand-installed unit, and the one the Debian package installs.
const UNITS: [(&str, &str); 2] = [
    ("contrib/hookgate.service", "/usr/local/bin/hookgate"),
    ("contrib/debian/hookgate.service", "/usr/bin/hookgate"),
];

#[test]
fn the_systemd_units_verify_cleanly() {
    for (path, installed) in UNITS {
        let (_dir, unit) = unit(path, installed);
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()
            .expect("systemd-analyze (Debian package systemd) must be installed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{path}: {stderr}");
        assert!(
            stderr.trim().is_empty(),
            "systemd-analyze complained of {path}: {stderr}"
        );
    }
}

#[test]
fn the_systemd_units_are_hardened() {
    for (path, installed) in UNITS {
        let (_dir, unit) = unit(path, installed);
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(&unit)
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
            .unwrap_or_else(|| panic!("no exposure level for {path} in: {stdout}"));
        // 0 is fully locked down, 10 not at all; systemd calls under 2 "OK". What keeps it above
        // 0: network families (a server needs them) and no MemoryDenyWriteExecute (wasmtime's
        // JIT).
        assert!(level <= 2.0, "{path}: exposure {level}:\n{stdout}");
        for line in ["PrivateNetwork=", "MemoryDenyWriteExecute="] {
            assert!(stdout.contains(line), "{stdout}");
        }
    }
}

/// The package's unit is the hand-installed one with the package's paths and its system user:
/// a hardening line added to one and not the other fails here.
#[test]
fn the_package_unit_is_the_contrib_unit_with_the_package_user_and_paths() {
    let lines = |path: &str| -> Vec<String> {
        std::fs::read_to_string(repo(path))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| l.replace("/usr/local/bin/hookgate", "/usr/bin/hookgate"))
            .collect()
    };
    let contrib = lines("contrib/hookgate.service");
    let package = lines("contrib/debian/hookgate.service");
    // A DynamicUser owns no files, so the hand-installed unit hands it the tokens as
    // credentials; the package's user reads them from /etc/hookgate/credentials (group hookgate).
    let replaced = |l: &&String| l.starts_with("DynamicUser=") || l.starts_with("LoadCredential=");
    let added = |l: &&String| {
        ["User=hookgate", "Group=hookgate"].contains(&l.as_str()) || l.starts_with("Documentation=")
    };
    let kept: Vec<_> = contrib.iter().filter(|l| !replaced(l)).collect();
    let packaged: Vec<_> = package.iter().filter(|l| !added(l)).collect();
    assert_eq!(kept, packaged);
    assert!(package.iter().any(|l| l == "User=hookgate"));
    assert!(contrib.iter().any(|l| l == "DynamicUser=yes"));
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo("contrib"))
        .output()
        .expect("promtool (Debian package prometheus) must be installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alerting_rules_are_valid_and_fire_as_their_tests_say() {
    let checked = promtool(&["check", "rules", "prometheus-alerts.yml"]);
    assert!(checked.contains("SUCCESS: 10 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "prometheus-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// Every hookgate metric the rules name is one the binary exports: a renamed metric would leave
/// an alert that can never fire.
#[tokio::test]
async fn the_alerting_rules_name_metrics_hookgate_exports() {
    let rules = std::fs::read_to_string(repo("contrib/prometheus-alerts.yml")).unwrap();
    let mut families: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
        .filter(|word| word.starts_with("hookgate_"))
        .map(|name| {
            ["_total", "_count", "_sum", "_bucket"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(name)
        })
        .collect();
    families.sort_unstable();
    families.dedup();
    assert!(families.len() >= 6, "{families:?}");

    // A family shows once it has a sample: a relay (forward mode, to an upstream that is not
    // there, so it is retried), a run, and a transform that fails.
    let mut config = base_config();
    set(&mut config, "gateway.mode", json!("forward"));
    let closed = crate::runtime::free_port();
    set(
        &mut config,
        "gateway.forward",
        json!({"url": format!("http://127.0.0.1:{closed}"), "token": "upstream-token"}),
    );
    let (server, _dir) = start_with_trapping_alerts(config, json!({}));
    let trapped = server.hook("/hooks/alerts").json(&json!({})).send().await;
    assert_eq!(trapped.unwrap().status(), 500);
    let run = server
        .hook("/hooks/agent")
        .json(&json!({"message": "m"}))
        .send();
    assert_eq!(run.await.unwrap().status(), 200);
    let mut missing = Vec::new();
    eventually("every family the rules name to be exported", async || {
        let text = server.metrics().await;
        missing = families
            .iter()
            .filter(|family| !text.contains(&format!("# TYPE {family} ")))
            .copied()
            .collect();
        missing.is_empty()
    })
    .await;
    assert!(missing.is_empty(), "{missing:?}");
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .expect("dpkg-deb");
    assert_succeeded(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// The package `scripts/package --check` built (it sets `HOOKGATE_DEB`): the binary, the unit
/// and the configuration of contrib/debian/, the maintainer scripts, and a configuration that
/// `check` accepts once the postinst's tokens are beside it. Without `HOOKGATE_DEB` (a plain
/// `scripts/test`, which builds no package) there is nothing to check.
#[test]
fn the_debian_package_holds_the_binary_unit_configuration_and_user() {
    let Some(deb) = std::env::var_os("HOOKGATE_DEB") else {
        eprintln!("HOOKGATE_DEB is not set: scripts/package --check checks the package");
        return;
    };
    let deb = Path::new(&deb);
    let contents = dpkg_deb(&["--contents"], deb);
    for (mode, path) in [
        ("-rwxr-xr-x", "./usr/bin/hookgate"),
        ("-rw-r--r--", "./usr/lib/systemd/system/hookgate.service"),
        ("-rw-r--r--", "./etc/hookgate/hookgate.json5"),
        (
            "-rw-r--r--",
            "./usr/share/doc/hookgate/prometheus-alerts.yml",
        ),
        ("-rw-r--r--", "./usr/share/doc/hookgate/README.md"),
        ("-rw-r--r--", "./usr/share/doc/hookgate/docs/operations.md"),
    ] {
        assert!(
            contents
                .lines()
                .any(|l| l.starts_with(mode) && l.ends_with(&format!(" {path}"))),
            "{mode} {path} missing:\n{contents}"
        );
    }
    let info = dpkg_deb(&["--info"], deb);
    for field in [
        "Package: hookgate",
        "Section: net",
        "Depends: adduser",
        "conffiles",
        "postinst",
        "postrm",
    ] {
        assert!(info.contains(field), "{field} missing:\n{info}");
    }
    let control = |file: &str| {
        let out = Command::new("dpkg-deb")
            .arg("--info")
            .arg(deb)
            .arg(file)
            .output()
            .unwrap();
        assert!(out.status.success(), "no {file} in the package");
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(control("conffiles").trim(), "/etc/hookgate/hookgate.json5");
    let postinst = control("postinst");
    for step in [
        "adduser --system --group",
        "install -d -o hookgate -g hookgate -m 0700 /var/lib/hookgate",
        "deb-systemd-helper enable hookgate.service",
    ] {
        assert!(postinst.contains(step), "{step} missing:\n{postinst}");
    }
    assert!(control("postrm").contains("rm -rf /var/lib/hookgate"));

    let root = tempfile::tempdir().unwrap();
    let out = Command::new("dpkg-deb")
        .arg("--extract")
        .arg(deb)
        .arg(root.path())
        .status()
        .unwrap();
    assert!(out.success());
    for (installed, source) in [
        (
            "usr/lib/systemd/system/hookgate.service",
            "contrib/debian/hookgate.service",
        ),
        (
            "etc/hookgate/hookgate.json5",
            "contrib/debian/hookgate.json5",
        ),
        (
            "usr/share/doc/hookgate/prometheus-alerts.yml",
            "contrib/prometheus-alerts.yml",
        ),
    ] {
        assert_eq!(
            std::fs::read(root.path().join(installed)).unwrap(),
            std::fs::read(repo(source)).unwrap(),
            "{installed}"
        );
    }
    let hookgate = root.path().join("usr/bin/hookgate");
    let version = Command::new(&hookgate).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with(&format!("hookgate {} ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    // The configuration as installed, with tokens where the postinst writes them. Its state
    // directory is moved into the extracted tree: `check` refuses one of another user, and
    // /var/lib/hookgate is the hookgate user's where the package is installed.
    let etc = root.path().join("etc/hookgate");
    let state = root.path().join("var/lib/hookgate");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let config = std::fs::read_to_string(etc.join("hookgate.json5")).unwrap();
    assert!(
        config.contains(r#"stateDir: "/var/lib/hookgate""#),
        "{config}"
    );
    std::fs::write(
        etc.join("hookgate.json5"),
        config.replace("/var/lib/hookgate", state.to_str().unwrap()),
    )
    .unwrap();
    std::fs::create_dir_all(etc.join("credentials")).unwrap();
    std::fs::write(etc.join("credentials/hook-token"), HOOK_TOKEN).unwrap();
    std::fs::write(etc.join("credentials/gateway-token"), GATEWAY_TOKEN).unwrap();
    std::fs::write(
        etc.join("credentials/secrets-key"),
        "a-secrets-key-of-at-least-32-characters",
    )
    .unwrap();
    let out = Command::new(&hookgate)
        .arg("check")
        .env("HOOKGATE_CONFIG", etc.join("hookgate.json5"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("ok: "), "{text}");
}

/// A process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "hookgate"])
        .output()
        .unwrap();
    assert!(out.status.success(), "no hookgate user");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The installed package, as its unit runs it: /usr/bin/hookgate as the `hookgate` user on
/// /etc/hookgate/hookgate.json5 and the postinst's tokens, with its store in /var/lib/hookgate.
/// `scripts/package --check` runs this between `dpkg -i` and the purge (it sets
/// `HOOKGATE_INSTALLED`).
#[tokio::test]
async fn the_installed_package_serves_as_its_user() {
    if std::env::var_os("HOOKGATE_INSTALLED").is_none() {
        eprintln!("HOOKGATE_INSTALLED is not set: scripts/package --check installs the package");
        return;
    }
    use std::os::unix::process::CommandExt;
    let token = |name: &str| {
        std::fs::read_to_string(format!("/etc/hookgate/credentials/{name}"))
            .unwrap()
            .trim()
            .to_string()
    };
    let (hook_token, gateway_token) = (token("hook-token"), token("gateway-token"));
    let mut child = Command::new("/usr/bin/hookgate")
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("HOOKGATE_CONFIG", "/etc/hookgate/hookgate.json5")
        .uid(id_of("-u"))
        .gid(id_of("-g"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut log = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
        log
    });
    let mut server = Killed(child);
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let Some(base) = first.strip_prefix("listening on ").map(str::to_string) else {
        let _ = server.0.wait();
        panic!(
            "the installed hookgate did not start:\n{}",
            log.join().unwrap()
        );
    };
    std::thread::spawn(move || for _ in lines {});

    let ready = client().get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(
        ready.status(),
        200,
        "the store in /var/lib/hookgate commits"
    );
    let woke = client()
        .post(format!("{base}/hooks/wake"))
        .bearer_auth(&hook_token)
        .header("x-api-key", "installed-secret")
        .json(&json!({"text": "installed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(woke.status(), 200);
    let id = request_id(&woke);
    // The configuration captures requests, with x-api-key redacted.
    let mut record = Value::Null;
    eventually("the wake's record", async || {
        let response = client()
            .get(format!("{base}/api/requests/{id}"))
            .bearer_auth(&gateway_token)
            .send()
            .await
            .unwrap();
        record = response.json().await.unwrap();
        record["captured"] == true
    })
    .await;
    let headers = record["capture"]["headers"].as_array().unwrap();
    assert!(
        headers.contains(&json!(["x-api-key", "[redacted]"])),
        "{record}"
    );
    drop(server);
}
