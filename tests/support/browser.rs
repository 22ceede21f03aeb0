//! A real headless Chromium (Debian's `chromium`, pinned in hack/versions.sh and installed by
//! hack/test.sh) driven over the DevTools protocol: one browser process per viewer (its own
//! profile, so its own cookies), one page, a handful of commands (navigate, evaluate, screenshot).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Set to 1 by hack/test.sh: a missing Chromium fails the test instead of skipping it.
pub const REQUIRE_CHROMIUM: &str = "SLUICE_REQUIRE_CHROMIUM";

pub struct Browser {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    profile: PathBuf,
}

/// Whether Chromium is there; without it a plain `cargo test` skips, hack/test.sh fails.
pub fn chromium_or_skip() -> bool {
    if Path::new(CHROMIUM).exists() {
        return true;
    }
    if std::env::var(REQUIRE_CHROMIUM).is_ok_and(|v| v == "1") {
        panic!("{CHROMIUM} is missing and {REQUIRE_CHROMIUM}=1: hack/test.sh installs it");
    }
    eprintln!("skipped: the dashboard's browser tests need {CHROMIUM} (hack/test.sh installs it)");
    false
}

impl Browser {
    /// Starts Chromium with a fresh profile and opens one page of `width`x`height`.
    pub async fn launch(name: &str, width: u32, height: u32) -> Browser {
        let profile =
            std::env::temp_dir().join(format!("sluice-chromium-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--window-size={width},{height}"))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromium");
        let url = devtools_url(&mut child).await;
        let (ws, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connect to chromium's DevTools");
        let mut browser = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 0,
            profile,
        };
        let target = browser
            .call_browser("Target.createTarget", json!({"url": "about:blank"}))
            .await["targetId"]
            .clone();
        let attached = browser
            .call_browser(
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"].as_str().expect("session").to_string();
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await;
        browser
    }

    async fn send(&mut self, session: Option<String>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::Text(message.to_string().into()))
            .await
            .expect("send to chromium");
        loop {
            let answer = self
                .ws
                .next()
                .await
                .expect("chromium closed its DevTools connection")
                .expect("read from chromium");
            let Message::Text(text) = answer else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str()).expect("DevTools JSON");
            if value["id"] != json!(id) {
                continue; // an event, or an answer to nobody
            }
            if let Some(error) = value.get("error") {
                panic!("{method}: {error}");
            }
            return value["result"].clone();
        }
    }

    async fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(None, method, params).await
    }

    /// A command to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(session), method, params).await
    }

    pub async fn goto(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
    }

    /// The value of a JavaScript expression in the page (promises awaited); None if it threw.
    pub async fn eval(&mut self, expression: &str) -> Option<Value> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if r.get("exceptionDetails").is_some() {
            return None;
        }
        Some(r["result"]["value"].clone())
    }

    /// The text the page shows in `element` (an expression: `document.body`, ...); empty if it
    /// cannot be read.
    pub async fn text(&mut self, element: &str) -> String {
        let value = self.eval(&format!("{element}.innerText")).await;
        value
            .as_ref()
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    }

    /// Polls `expression` until it is truthy (not null, false, "" or 0); returns its value and
    /// how long it took. Fails after `timeout`, saying `what`.
    pub async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        expression: &str,
    ) -> (Value, Duration) {
        let start = Instant::now();
        loop {
            let v = self.eval(expression).await.unwrap_or(Value::Null);
            let truthy =
                !matches!(&v, Value::Null | Value::Bool(false)) && v != json!("") && v != json!(0);
            if truthy {
                return (v, start.elapsed());
            }
            if start.elapsed() > timeout {
                let text = self
                    .eval("document.body.innerText")
                    .await
                    .unwrap_or_default();
                panic!("timed out after {timeout:?} waiting for {what}; the page shows:\n{text}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A PNG of the page as shown, written to `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": false}),
            )
            .await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    pub async fn close(mut self) {
        // No answer awaited: the connection closes with the browser.
        let close = json!({"id": u64::MAX, "method": "Browser.close", "params": {}});
        let _ = self.ws.send(Message::Text(close.to_string().into())).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Chromium prints `DevTools listening on ws://...` on stderr once it listens.
async fn devtools_url(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("chromium's stderr");
    let mut lines = BufReader::new(stderr).lines();
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(url) = line.strip_prefix("DevTools listening on ") {
                return Some(url.trim().to_string());
            }
        }
        None
    })
    .await;
    let url = found
        .ok()
        .flatten()
        .expect("chromium did not say where DevTools listens within 30 s");
    // Keep draining stderr so Chromium never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    url
}
