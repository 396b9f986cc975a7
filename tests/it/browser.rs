//! A headless Chromium driven through chromedriver's WebDriver protocol (Debian's `chromium` and
//! `chromium-driver`, which `scripts/test` installs), for the tests of the console.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;
use crate::processes::{Group, Member, list, living_in_group};

/// A chromedriver process and one headless Chromium session. When dropped, the session is ended
/// (chromedriver closes the browser), then the driver's process group is killed whole: nothing
/// either started outlives the test, whether it ends or panics.
pub(crate) struct Browser {
    driver: Group,
    session: String,
    port: u16,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Group::spawn(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("chromedriver (Debian package chromium-driver) must be installed");
        let base = format!("http://127.0.0.1:{port}");
        let profile = tempfile::tempdir().unwrap();
        let mut browser = Browser {
            driver,
            session: String::new(),
            port,
            base,
            _profile: profile,
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    // Nothing but loopback is reachable: no background connections to refuse.
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--disable-quic", "--no-first-run",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", browser._profile.path().display()),
                ],
            },
        }}});
        let (limit, every) = (Duration::from_secs(20), Duration::from_millis(100));
        let session = eventually_within("chromedriver to answer", limit, every, async || {
            let session = client()
                .post(format!("{}/session", browser.base))
                .json(&capabilities)
                .send()
                .await
                .map_err(|err| format!("chromedriver did not answer: {err}"))?;
            Ok(session.json::<Value>().await.unwrap())
        })
        .await;
        browser.session = session["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {session}"))
            .to_string();
        browser
    }

    pub(crate) async fn command(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let request = client().request(method.clone(), url);
        // chromedriver refuses a GET that carries a body.
        let request = match method {
            reqwest::Method::GET => request,
            _ => request.json(&body),
        };
        let response = request.send().await.unwrap();
        let answer: Value = response.json().await.unwrap();
        answer["value"].clone()
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, body).await
    }

    pub(crate) async fn go(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) async fn run(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// The element `css` selects, once it exists.
    pub(crate) async fn element(&self, css: &str) -> String {
        let mut found = String::new();
        eventually(&format!("{css} to appear"), async || {
            let value = self
                .post("/element", json!({"using": "css selector", "value": css}))
                .await;
            match value.as_object().and_then(|o| o.values().next()) {
                Some(Value::String(id)) if value.get("error").is_none() => {
                    found = id.clone();
                    true
                }
                _ => false,
            }
        })
        .await;
        found
    }

    pub(crate) async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.post(&format!("/element/{id}/click"), json!({})).await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.post(&format!("/element/{id}/value"), json!({"text": text}))
            .await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let id = self.element(css).await;
        let value = self
            .command(
                reqwest::Method::GET,
                &format!("/element/{id}/text"),
                Value::Null,
            )
            .await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// Waits until the element `css` shows text containing `wanted`.
    pub(crate) async fn wait_for_text(&self, css: &str, wanted: &str) -> String {
        eventually_within(
            &format!("{css} showing {wanted:?}"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            async || {
                let seen = self.text(css).await;
                if seen.contains(wanted) {
                    Ok(seen)
                } else {
                    Err(format!("it shows {seen:?}"))
                }
            },
        )
        .await
    }

    pub(crate) async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let value = self
            .command(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap())
            .unwrap()
    }

    /// The processes of the driver's group still running: chromedriver, and Chromium's once a
    /// session has started.
    pub(crate) fn processes(&self) -> Vec<Member> {
        living_in_group(self.driver.id())
    }

    /// The id of the driver's process group.
    pub(crate) fn group(&self) -> u32 {
        self.driver.id()
    }

    /// `DELETE /session/{id}`, which closes the browser, sent over a plain socket: `Drop` may run
    /// on a runtime's worker, where no blocking client may, and during a panic.
    fn end_session(&self) {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            self.session, self.port
        );
        if stream.write_all(request.as_bytes()).is_ok() {
            // The answer comes once the browser has closed; its content does not matter.
            let _ = stream.read_to_end(&mut Vec::new());
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            self.end_session();
        }
        // `driver` is dropped next: its whole process group is killed.
    }
}

fn chromium() -> &'static str {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .expect("chromium (Debian package chromium) must be installed")
}

/// A browser leaves no process behind, whether its test ends or panics: chromedriver and every
/// Chromium process it started are gone once the `Browser` is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_leaves_no_process_behind_when_its_test_ends_or_panics() {
    let browser = Browser::start().await;
    let group = browser.group();
    let running = browser.processes();
    // Not a vacuous check: Chromium's processes are in the group the drop kills.
    assert!(
        running
            .iter()
            .any(|p| p.name.starts_with("chrom") && p.name != "chromedriver"),
        "no Chromium process in the driver's group: {}",
        list(&running)
    );
    drop(browser);
    all_gone(group).await;

    // A test of its own, on a thread of its own, that panics while its browser runs.
    let (started, group) = std::sync::mpsc::channel();
    let failed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let browser = Browser::start().await;
            started.send(browser.group()).unwrap();
            panic!("a test that fails while its browser runs");
        })
    })
    .join();
    assert!(failed.is_err(), "the test did not panic");
    all_gone(group.recv().unwrap()).await;
}

async fn all_gone(group: u32) {
    let (limit, every) = (Duration::from_secs(20), Duration::from_millis(100));
    eventually_within("the browser's processes to end", limit, every, async || {
        match living_in_group(group).as_slice() {
            [] => Ok(()),
            left => Err(format!("still running: {}", list(left))),
        }
    })
    .await;
}
