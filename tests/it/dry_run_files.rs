//! docs/operations.md "Trying a change on recorded traffic": a candidate's secret files are read
//! inside the configuration directory only, and its problems never tell whether a path exists
//! on the server.

use serde_json::{Value, json};

use crate::dry_run::{dry_run, logged};
use crate::harness::*;

/// The live configuration: one mapping, every request captured.
fn live_config() -> Value {
    let mut config = base_config();
    set(&mut config, "hooks.capture", json!({"enabled": true}));
    let quick = json!({"id": "quick", "match": {"path": "quick"}, "messageTemplate": "q"});
    set(&mut config, "hooks.mappings", json!([quick]));
    config
}

/// The live configuration with the provider's API key, and the hook token, read from `file`.
fn reading(file: &str) -> Value {
    let mut candidate = live_config();
    let provider = json!({"baseUrl": "http://127.0.0.1:9", "apiKey": {"file": file}});
    set(&mut candidate, "agents.defaults.provider", provider);
    set(&mut candidate, "hooks.token", json!({"file": file}));
    candidate
}

#[tokio::test]
async fn a_candidate_reads_no_file_outside_the_config_dir_and_tells_no_path_apart() {
    let dir = ConfigDir::new(&live_config());
    std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/key"), "a-key-in-the-config-dir\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join("secrets/out")).unwrap();
    let server = Hookgate::start_in(&dir);
    let (status, _) = server.hook_json("/hooks/quick", &json!({})).await;
    assert_eq!(status, 200);
    logged(&server, 1).await;
    let try_file = async |file: &str| {
        let candidate = serde_json::to_string(&reading(file)).unwrap();
        dry_run(&server, &json!({"config": candidate})).await
    };

    // Inside the configuration directory: read, as the configuration in force reads it.
    let (status, answer) = try_file("secrets/key").await;
    assert_eq!(status, 200, "{answer}");

    // Outside, existing or not, or through a symlink: the same two problems, in the same words.
    let refused = |key: &str| {
        format!(
            "{key}: cannot read the secret file: a candidate's secret files must be readable \
             regular text files of at most 65536 bytes inside the configuration directory"
        )
    };
    let mut said = None;
    for file in [
        "/proc/self/environ",
        "/etc/passwd",
        "/nonexistent/hookgate-probe",
        "../../../../../../etc/passwd",
        "secrets/out",
        "secrets/absent",
        "secrets",
    ] {
        let (status, answer) = try_file(file).await;
        assert_eq!(status, 400, "{file}: {answer}");
        let problems = answer["problems"].clone();
        for key in ["agents.defaults.provider.apiKey", "hooks.token"] {
            let listed = problems.as_array().unwrap();
            assert!(listed.contains(&json!(refused(key))), "{file}: {answer}");
        }
        for shown in [file, "No such file", "os error", "denied", "not a regular"] {
            assert!(!problems.to_string().contains(shown), "{file}: {answer}");
        }
        assert_eq!(said.get_or_insert(problems.clone()), &problems, "{file}");
    }
}
