//! Runs the real `hookgate` binary on 127.0.0.1 with a configuration in a temporary directory.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use serde_json::{Value, json};

use crate::processes::dies_with_its_test;

pub const HOOK_TOKEN: &str = "hook-token-0123456789";
pub const GATEWAY_TOKEN: &str = "gateway-token-9876543210";

/// A configuration with hooks enabled and the two tokens above.
pub fn base_config() -> Value {
    json!({
        "gateway": { "auth": { "token": GATEWAY_TOKEN } },
        "hooks": { "enabled": true, "token": HOOK_TOKEN },
    })
}

/// Sets `value` at the dotted `path` inside `config`, creating objects on the way.
pub fn set(config: &mut Value, path: &str, value: Value) {
    let mut node = config;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if keys.peek().is_none() {
            node[key] = value;
            return;
        }
        if node.get(key).is_none() {
            node[key] = json!({});
        }
        node = &mut node[key];
    }
}

/// A configuration directory that outlives server restarts.
pub struct ConfigDir {
    dir: tempfile::TempDir,
}

impl ConfigDir {
    pub fn new(config: &Value) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let this = ConfigDir { dir };
        this.write(config);
        this
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_file(&self) -> PathBuf {
        self.dir.path().join("hookgate.json5")
    }

    /// Replaces the configuration file atomically (write then rename), as an editor would.
    pub fn write(&self, config: &Value) {
        self.write_text(&serde_json::to_string_pretty(config).unwrap());
    }

    pub fn write_text(&self, text: &str) {
        let tmp = self.dir.path().join(".hookgate.json5.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config_file()).unwrap();
    }
}

/// A running server; killed when dropped.
pub struct Hookgate {
    pub base: String,
    child: Child,
    stderr: Option<std::thread::JoinHandle<String>>,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_hookgate")
}

impl Hookgate {
    /// Starts a server on `config` in a fresh directory; the directory lives as long as the server.
    pub fn start(config: &Value) -> (Hookgate, ConfigDir) {
        let dir = ConfigDir::new(config);
        (Hookgate::start_in(&dir), dir)
    }

    /// Starts a server on the configuration in `dir` and waits for its `listening on` line.
    pub fn start_in(dir: &ConfigDir) -> Hookgate {
        Self::try_start_in(dir, &[]).unwrap_or_else(|e| panic!("hookgate did not start: {e}"))
    }

    pub fn try_start_in(dir: &ConfigDir, env: &[(&str, &str)]) -> Result<Hookgate, String> {
        Self::spawn(dir, env, 0)
    }

    /// Starts on a given port, for a server that must come back on the same address.
    pub fn try_start_on(dir: &ConfigDir, port: u16) -> Result<Hookgate, String> {
        Self::spawn(dir, &[], port)
    }

    fn spawn(dir: &ConfigDir, env: &[(&str, &str)], port: u16) -> Result<Hookgate, String> {
        let mut child = dies_with_its_test(&mut Command::new(binary()))
            .args(["serve", "--config"])
            .arg(dir.config_file())
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .envs(env.iter().copied())
            .env("RUST_LOG", "hookgate=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hookgate");
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok);
        match first
            .as_deref()
            .and_then(|l| l.strip_prefix("listening on "))
        {
            Some(base) => {
                let base = base.to_string();
                // Keep draining stdout so the child never blocks on a full pipe.
                std::thread::spawn(move || for _ in lines {});
                Ok(Hookgate {
                    base,
                    child,
                    stderr: Some(stderr),
                })
            }
            None => {
                let _ = child.wait();
                Err(stderr.join().unwrap_or_default())
            }
        }
    }

    /// The main session's events, oldest first (at most 1000).
    pub async fn events(&self) -> Vec<Value> {
        let response = self
            .api("/api/sessions/main/events?limit=1000")
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(response).await;
        assert_eq!(status, 200, "{body}");
        body["events"].as_array().unwrap().clone()
    }

    /// The texts of the main session's events, oldest first.
    pub async fn event_texts(&self) -> Vec<String> {
        let events = self.events().await;
        events
            .iter()
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    }

    /// The texts of the main session's system events (wakes), oldest first: run summaries, which
    /// the runtime adds as runs finish, left out.
    pub async fn wake_texts(&self) -> Vec<String> {
        let events = self.events().await;
        events
            .iter()
            .filter(|e| e["kind"] == "system")
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    }

    /// The run record named by a `{"ok":true,"runId":...}` reply.
    pub async fn run_of(&self, reply: &Value) -> Value {
        let run_id = reply["runId"]
            .as_str()
            .unwrap_or_else(|| panic!("no runId in {reply}"));
        let response = self
            .api(&format!("/api/runs/{run_id}"))
            .send()
            .await
            .unwrap();
        let (status, run) = json_of(response).await;
        assert_eq!(status, 200, "{run}");
        run
    }

    /// The server's process id (to read its memory use from `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A POST to `path` carrying the hook token.
    pub fn hook(&self, path: &str) -> reqwest::RequestBuilder {
        client().post(self.url(path)).bearer_auth(HOOK_TOKEN)
    }

    /// A GET of the operator API carrying the gateway token.
    pub fn api(&self, path: &str) -> reqwest::RequestBuilder {
        client().get(self.url(path)).bearer_auth(GATEWAY_TOKEN)
    }

    /// POSTs `body` to the hook `path`: the answer's status and JSON body.
    pub async fn hook_json(&self, path: &str, body: &Value) -> (u16, Value) {
        json_of(self.hook(path).json(body).send().await.unwrap()).await
    }

    /// GETs the operator API `path`: the answer's status and JSON body.
    pub async fn api_json(&self, path: &str) -> (u16, Value) {
        json_of(self.api(path).send().await.unwrap()).await
    }

    /// The `/metrics` text, fetched with the gateway token.
    pub async fn metrics(&self) -> String {
        let response = self.api("/metrics").send().await.unwrap();
        response.text().await.unwrap()
    }

    /// Sends a signal (`-TERM`, `-HUP`, ...) without waiting.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// SIGTERM, then waits; returns the exit status and everything the server logged.
    pub fn terminate(self) -> (ExitStatus, String) {
        self.signal("-TERM");
        self.wait()
    }

    /// Waits for the process to exit; returns the exit status and everything it logged.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().expect("wait");
        (status, self.checked_log())
    }

    /// The whole log of the exited process, checked for the tokens every test server is given:
    /// each suite runs with debug logging, so every test also shows that no path through the
    /// server writes a token to its log.
    fn checked_log(&mut self) -> String {
        let log = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !std::thread::panicking() {
            assert_no_secrets(&log, &[HOOK_TOKEN, GATEWAY_TOKEN]);
        }
        log
    }

    /// SIGKILL: the process gets no chance to flush anything.
    pub fn kill(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Hookgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.checked_log();
    }
}

/// Fails the test when `log` contains any of `secrets`.
pub fn assert_no_secrets(log: &str, secrets: &[&str]) {
    for secret in secrets {
        if let Some(line) = log.lines().find(|l| l.contains(secret)) {
            panic!("the server log contains the secret `{secret}`: {line}");
        }
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// Runs `hookgate check` on `config`; returns the exit status and stdout + stderr.
pub fn check(config: &Value) -> (ExitStatus, String, ConfigDir) {
    let dir = ConfigDir::new(config);
    let (status, output) = check_in(&dir);
    (status, output, dir)
}

pub fn check_in(dir: &ConfigDir) -> (ExitStatus, String) {
    let out = Command::new(binary())
        .args(["check", "--config"])
        .arg(dir.config_file())
        .output()
        .expect("run check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status, text)
}

/// Retries `probe` until it returns true, every 50 ms for at most ten seconds (for effects that
/// happen in the background, such as a config reload). Fails the test when it never does.
pub async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let limit = std::time::Duration::from_secs(10);
    let every = std::time::Duration::from_millis(50);
    eventually_within(what, limit, every, async || {
        probe().await.then_some(()).ok_or_else(String::new)
    })
    .await
}

/// Sends the request `request` builds until it is answered 200, as [`eventually`] retries.
pub async fn eventually_200(what: &str, request: impl Fn() -> reqwest::RequestBuilder) {
    eventually(what, async || {
        request().send().await.unwrap().status() == 200
    })
    .await
}

/// Retries `probe` every `every` until it returns `Ok`, for at most `limit`, and returns what it
/// found: for effects slower than [`eventually`] waits for (a cluster electing its leaders, a
/// backlog of runs), or polled more gently. Fails the test when it never does, with `what` and
/// the last `Err`, which says what was found instead. `probe` may also fail the test itself, on
/// what must never be seen while waiting.
pub async fn eventually_within<T>(
    what: &str,
    limit: std::time::Duration,
    every: std::time::Duration,
    mut probe: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let found = match probe().await {
            Ok(value) => return value,
            Err(found) => found,
        };
        if std::time::Instant::now() >= deadline {
            let found = if found.is_empty() {
                found
            } else {
                format!(": {found}")
            };
            panic!("{what} did not happen within {limit:?}{found}");
        }
        tokio::time::sleep(every).await;
    }
}

/// Sends `head` (a request's line and headers, with `expect: 100-continue`) and reads the server's
/// interim answer, which says the handler has begun reading the body: from then on the request
/// is in flight and a signal sent after this cannot overtake it.
pub async fn send_head_until_continue(stream: &mut tokio::net::TcpStream, head: &str) {
    use tokio::io::AsyncWriteExt;
    assert!(head.contains("expect: 100-continue\r\n"), "{head}");
    stream.write_all(head.as_bytes()).await.unwrap();
    let interim = read_head(stream).await;
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
}

/// Reads the head of the server's next answer (interim or final) on `stream`, byte by byte so
/// that nothing after it is consumed.
pub async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// Reads the server's next final answer on `stream`, its body included (by its
/// `content-length`), so that the connection can carry another; returns its status.
pub async fn read_answer_status(stream: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let head = read_head(stream).await;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or_else(|| panic!("no content-length in {head:?}"));
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.unwrap();
    head.split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"))
}

/// The JSON body of a response, with its status.
pub async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body = response.json().await.expect("json body");
    (status, body)
}

/// The target directory the tests build WebAssembly components in: one of its own, since the
/// outer `cargo test` may still hold the lock of its own.
pub fn wasm_target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("wasm-transforms"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms/target"),
    }
}

/// The example and fixture transforms, built once per test process for `wasm32-wasip2`.
/// Returns the directory holding `<name>.wasm`.
pub fn transforms() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("transforms");
        let target = wasm_target_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip2",
                "--manifest-path",
            ])
            .arg(root.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("run cargo to build the transforms");
        assert!(
            status.success(),
            "building the transforms failed (is the wasm32-wasip2 target installed?)"
        );
        target.join("wasm32-wasip2/release")
    })
}

/// Copies built transforms (`github`, `hostile`, ...) into `dir`'s transforms root.
pub fn install_transforms(dir: &ConfigDir, names: &[&str]) {
    install_from(transforms(), dir, names);
}

/// Copies `<name>.wasm` of each name from `built` into `dir`'s transforms root.
pub fn install_from(built: &Path, dir: &ConfigDir, names: &[&str]) {
    let root = dir.path().join("hooks/transforms");
    std::fs::create_dir_all(&root).unwrap();
    for name in names {
        std::fs::copy(
            built.join(format!("{name}.wasm")),
            root.join(format!("{name}.wasm")),
        )
        .unwrap_or_else(|e| panic!("copy {name}.wasm: {e}"));
    }
}

/// Replaces a file the way a deploy does: write aside, rename over.
pub fn replace_file(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("incoming");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// The `X-Request-Id` a response carries.
pub fn request_id(response: &reqwest::Response) -> String {
    response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// A mapping `alerts` (with `extra` keys over it) whose transform, `live.wasm`, traps until
/// [`fix_alerts`] replaces it with the passthrough transform (a wake of the payload): a failed
/// request an operator mends and replays.
pub fn start_with_trapping_alerts(mut config: Value, extra: Value) -> (Hookgate, ConfigDir) {
    let mut mapping = json!({
        "id": "alerts",
        "match": {"path": "alerts"},
        "transform": {"module": "live.wasm", "config": {"mode": "trap", "action": "wake"}},
    });
    if let Value::Object(extra) = extra {
        mapping.as_object_mut().unwrap().extend(extra);
    }
    set(&mut config, "hooks.mappings", json!([mapping]));
    let dir = ConfigDir::new(&config);
    install_transforms(&dir, &["hostile", "passthrough"]);
    let root = dir.path().join("hooks/transforms");
    std::fs::copy(root.join("hostile.wasm"), root.join("live.wasm")).unwrap();
    (Hookgate::start_in(&dir), dir)
}

/// Deploys the fixed `alerts` transform of [`start_with_trapping_alerts`].
pub fn fix_alerts(dir: &ConfigDir) {
    let root = dir.path().join("hooks/transforms");
    replace_file(
        &root.join("live.wasm"),
        &std::fs::read(root.join("passthrough.wasm")).unwrap(),
    );
}

/// Fails the test, showing the binary's stderr, unless the command it ran succeeded.
#[track_caller]
pub fn assert_succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
