//! sluice's alerts against a real Prometheus (the Debian package's `/usr/bin/prometheus`) scraping
//! the sluice of the local cluster: every rule of `manifests/monitoring/sluice-alerts.rules.yaml`
//! loads and evaluates without error on live data, the per-queue gauges arrive under their names,
//! and `SluiceGatedWithRoom`'s expression (its thresholds shortened to seconds, its `for` removed)
//! fires for a queue that has room while a pod stays gated: here a pod of a namespace the queue does not admit, a
//! stand-in for a controller that admits nothing (the shared sluice of the cluster is not broken
//! on purpose: other tests run against it).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// A port free now on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `path` of the Prometheus at `addr`: its JSON `data`, None until it answers with success.
async fn api(addr: &str, path: &str) -> Option<Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: prometheus\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.ok()?;
    let json = body.split_once("\r\n\r\n")?.1;
    let value: Value = serde_json::from_str(json).ok()?;
    (value["status"] == "success").then(|| value["data"].clone())
}

async fn query(addr: &str, promql: &str) -> Vec<Value> {
    api(
        addr,
        &format!("/api/v1/query?query={}", percent_encode(promql)),
    )
    .await
    .and_then(|d| d["result"].as_array().cloned())
    .unwrap_or_default()
}

/// The rules file with `SluiceGatedWithRoom` added once more as `SluiceGatedWithRoomNow`: waits of
/// seconds instead of minutes, no `for`.
fn rules_with_a_quick_copy() -> String {
    let path = repo_root().join("manifests/monitoring/sluice-alerts.rules.yaml");
    let mut rules: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(path).expect("rules")).expect("rules YAML");
    let groups = rules["groups"].as_sequence_mut().expect("groups");
    let original = groups
        .iter()
        .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
        .find(|r| r["alert"].as_str() == Some("SluiceGatedWithRoom"))
        .expect("SluiceGatedWithRoom");
    let expr = original["expr"]
        .as_str()
        .expect("expr")
        .replace("> 600", "> 2");
    assert!(expr.contains("> 2"), "the rule's threshold changed: {expr}");
    let quick: serde_norway::Value = serde_norway::from_str(
        &serde_json::to_string(&json!({
            "name": "quick",
            "rules": [{"alert": "SluiceGatedWithRoomNow", "expr": expr, "labels": {"severity": "test"}}],
        }))
        .expect("json"),
    )
    .expect("yaml");
    groups.push(quick);
    serde_norway::to_string(&rules).expect("rules YAML")
}

#[tokio::test]
async fn a_real_prometheus_scrapes_sluice_loads_every_alert_and_sees_a_gated_pod_with_room() {
    let Some(mut env) = TestEnv::new_or_skip("promlive").await else {
        return;
    };
    if !std::path::Path::new("/usr/bin/prometheus").exists() {
        // hack/test.sh installs it (Debian's package, pinned in hack/versions.sh) and requires it.
        assert!(
            std::env::var_os("SLUICE_REQUIRE_PROMTOOL").is_none(),
            "/usr/bin/prometheus is not installed (hack/test.sh installs it as root)"
        );
        eprintln!("skipped: /usr/bin/prometheus is not installed (apt-get install prometheus)");
        env.cleanup().await;
        return;
    }
    let metrics =
        std::env::var("SLUICE_METRICS_ADDR").expect("SLUICE_METRICS_ADDR (hack/cluster.sh env)");
    // A queue whose namespaceSelector leaves the test's namespace out: a pod of that namespace
    // stays gated for good while the queue has all its room. (A pod larger than its queue is
    // refused at creation.)
    let queue = env
        .queue_with_spec(
            "q",
            json!({"quota": {"cpu": "4"}, "namespaceSelector": {"matchLabels": {"sluice-e2e-team": "nobody"}}}),
        )
        .await;
    env.create_pod(pod("outsider", &queue, "1")).await;
    env.wait_queue_counts(&queue, 1, 0).await;

    let dir = std::env::temp_dir().join(unique("prometheus"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("rules.yaml"), rules_with_a_quick_copy()).expect("rules");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: sluice\n    static_configs: [{{targets: ['{metrics}']}}]\n"
        ),
    )
    .expect("config");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let mut prometheus = tokio::process::Command::new("/usr/bin/prometheus")
        .current_dir(&dir)
        .args([
            "--config.file=prometheus.yml",
            "--storage.tsdb.path=data",
            &format!("--web.listen-address={addr}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start prometheus");

    let quota = wait_for(
        "Prometheus to scrape the queue's quota",
        Duration::from_secs(60),
        || async {
            query(
                &addr,
                &format!("sluice_queue_quota{{queue=\"{queue}\",resource=\"cpu\"}}"),
            )
            .await
            .first()
            .and_then(|s| s["value"][1].as_str().map(String::from))
        },
    )
    .await;
    assert_eq!(quota, "4");
    let firing = wait_for(
        "SluiceGatedWithRoomNow to fire for the queue",
        Duration::from_secs(60),
        || async {
            let alerts = api(&addr, "/api/v1/alerts").await?;
            alerts["alerts"]
                .as_array()?
                .iter()
                .find(|a| {
                    a["labels"]["alertname"] == "SluiceGatedWithRoomNow"
                        && a["labels"]["queue"] == queue.as_str()
                        && a["state"] == "firing"
                })
                .cloned()
        },
    )
    .await;
    eprintln!("firing: {firing}");
    // Every rule of the file evaluated on live data without an error.
    let rules = wait_for("every rule evaluated", Duration::from_secs(30), || async {
        let data = api(&addr, "/api/v1/rules").await?;
        let rules: Vec<Value> = data["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        rules
            .iter()
            .all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            })
            .then_some(rules)
    })
    .await;
    assert_eq!(rules.len(), 10, "9 rules and the quick copy");
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    let _ = prometheus.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    env.cleanup().await;
}
