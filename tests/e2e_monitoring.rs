//! sluice's alerts against a real Prometheus (the Debian package's `/usr/bin/prometheus`) scraping
//! the sluice of the local cluster: every rule of `manifests/monitoring/sluice-alerts.rules.yaml`
//! loads and evaluates without error on live data, the per-queue gauges arrive under their names,
//! and the controller is broken on purpose: a ValidatingAdmissionPolicy (matching only this test's
//! namespace) refuses every patch that takes sluice's admission gate off a pod, as a policy engine
//! or a broken RBAC would. A pod then stays gated in a queue with all its room: the copies of
//! `SluiceGatedWithRoom` and `SluiceUngateErrors` (thresholds shortened to seconds, no `for`) fire.
//! Its own test binary: nothing else runs beside it.

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

/// The rules file with `SluiceGatedWithRoom` and `SluiceUngateErrors` added once more as
/// `...Now`: waits of seconds instead of minutes, no `for`.
fn rules_with_quick_copies() -> String {
    let path = repo_root().join("manifests/monitoring/sluice-alerts.rules.yaml");
    let mut rules: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(path).expect("rules")).expect("rules YAML");
    let groups = rules["groups"].as_sequence_mut().expect("groups");
    let expr_of = |name: &str| -> String {
        groups
            .iter()
            .flat_map(|g| g["rules"].as_sequence().cloned().unwrap_or_default())
            .find(|r| r["alert"].as_str() == Some(name))
            .and_then(|r| r["expr"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("no alert {name}"))
    };
    let gated = expr_of("SluiceGatedWithRoom").replace("> 600", "> 2");
    assert!(
        gated.contains("> 2"),
        "the rule's threshold changed: {gated}"
    );
    let ungate = expr_of("SluiceUngateErrors").replace("[5m]", "[30s]");
    assert!(
        ungate.contains("[30s]"),
        "the rule's window changed: {ungate}"
    );
    let quick: serde_norway::Value = serde_norway::from_str(
        &serde_json::to_string(&json!({
            "name": "quick",
            "rules": [
                {"alert": "SluiceGatedWithRoomNow", "expr": gated, "labels": {"severity": "test"}},
                {"alert": "SluiceUngateErrorsNow", "expr": ungate, "labels": {"severity": "test"}},
            ],
        }))
        .expect("json"),
    )
    .expect("yaml");
    groups.push(quick);
    serde_norway::to_string(&rules).expect("rules YAML")
}

/// The annotation whose addition the breaking policy also refuses: a dry run adding it tells when
/// the API server enforces the policy.
const PROBE_ANNOTATION: &str = "sluice-e2e/probe";

/// A ValidatingAdmissionPolicy and its binding, limited to `namespace`, that refuse any update
/// taking sluice's admission gate off a pod (and any adding [`PROBE_ANNOTATION`]).
async fn break_ungating(client: &kube::Client, namespace: &str) -> String {
    use kube::api::{DynamicObject, PostParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let name = format!("{namespace}-keep-gates");
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["pods"]}]},
            "validations": [
                {"expression": "!has(oldObject.spec.schedulingGates) || oldObject.spec.schedulingGates.all(g, g.name != 'sluice.dev/admission') || (has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == 'sluice.dev/admission'))",
                 "message": "the e2e test breaks sluice on purpose: the admission gate stays on"},
                {"expression": format!("!has(object.metadata.annotations) || !('{PROBE_ANNOTATION}' in object.metadata.annotations)"),
                 "message": "probe refused"},
            ],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    });
    for (kind, object) in [
        ("ValidatingAdmissionPolicy", policy),
        ("ValidatingAdmissionPolicyBinding", binding),
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: kube::Api<DynamicObject> =
            kube::Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        let object: DynamicObject = serde_json::from_value(object).expect(kind);
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("create the {kind}: {e}"));
    }
    name
}

async fn mend_ungating(client: &kube::Client, name: &str) {
    use kube::api::{DeleteParams, DynamicObject};
    use kube::core::{ApiResource, GroupVersionKind};
    for kind in [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ] {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let api: kube::Api<DynamicObject> =
            kube::Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

/// Waits until the API server enforces the breaking policy on `pod` (a dry run adding the probe
/// annotation is refused with the policy's message).
async fn wait_until_enforced(pods: &kube::Api<k8s_openapi::api::core::v1::Pod>, pod: &str) {
    use kube::api::{Patch, PatchParams};
    let patch = json!({"metadata": {"annotations": {PROBE_ANNOTATION: "1"}}});
    let params = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    wait_for(
        "the policy keeping gates on to be enforced",
        Duration::from_secs(60),
        || async {
            match pods.patch(pod, &params, &Patch::Merge(&patch)).await {
                Err(e) if e.to_string().contains("probe refused") => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

/// Starts `/usr/bin/prometheus` in `dir` scraping sluice's metrics at `metrics` every second with
/// `rules`; its API at the returned address.
fn start_prometheus(
    dir: &std::path::Path,
    metrics: &str,
    rules: &str,
) -> (String, tokio::process::Child) {
    std::fs::create_dir_all(dir).expect("temp dir");
    std::fs::write(dir.join("rules.yaml"), rules).expect("rules");
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: sluice\n    static_configs: [{{targets: ['{metrics}']}}]\n"
        ),
    )
    .expect("config");
    let addr = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let child = tokio::process::Command::new("/usr/bin/prometheus")
        .current_dir(dir)
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
    (addr, child)
}

/// The firing alert `name` for `queue` (any queue when None), once Prometheus has it.
async fn wait_firing(addr: &str, name: &str, queue: Option<&str>) -> Value {
    wait_for(
        &format!("{name} to fire"),
        Duration::from_secs(90),
        || async {
            let alerts = api(addr, "/api/v1/alerts").await?;
            alerts["alerts"]
                .as_array()?
                .iter()
                .find(|a| {
                    a["labels"]["alertname"] == name
                        && queue.is_none_or(|q| a["labels"]["queue"] == q)
                        && a["state"] == "firing"
                })
                .cloned()
        },
    )
    .await
}

#[tokio::test]
async fn a_real_prometheus_fires_gated_with_room_when_the_controller_cannot_ungate() {
    let mut env = env_or_skip!("promlive");
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
    // A full queue and a pod waiting behind the gate for its room.
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    env.create_pod(pod("filler", &queue, "4")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.create_pod(pod("stuck", &queue, "1")).await;
    env.wait_queue_counts(&queue, 1, 1).await;

    // Break the controller: nothing may take the gate off a pod of this namespace any more.
    let policy = break_ungating(&env.client, &env.namespace).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    wait_until_enforced(&pods, "filler").await;
    let errors_before = sluice_metric("sluice_ungate_errors_total")
        .await
        .unwrap_or(0.0);
    // The queue empties: sluice admits the stuck pod and fails to ungate it, pass after pass.
    let _ = pods
        .delete(
            "filler",
            &kube::api::DeleteParams::default().grace_period(0),
        )
        .await;

    let dir = std::env::temp_dir().join(unique("prometheus"));
    let (addr, mut prometheus) = start_prometheus(&dir, &metrics, &rules_with_quick_copies());
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
    let firing = wait_firing(&addr, "SluiceGatedWithRoomNow", Some(&queue)).await;
    eprintln!("firing: {firing}");
    let firing = wait_firing(&addr, "SluiceUngateErrorsNow", None).await;
    eprintln!("firing: {firing}");
    let errors_after = sluice_metric("sluice_ungate_errors_total")
        .await
        .unwrap_or(0.0);
    assert!(
        errors_after > errors_before,
        "sluice counted no ungate error ({errors_before} then {errors_after})"
    );
    let stuck = pods.get("stuck").await.expect("the stuck pod");
    assert!(
        stuck
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty()),
        "the policy let the gate come off"
    );
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
    assert_eq!(rules.len(), 11, "9 rules and the two quick copies");
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    // Mended: the pod is admitted.
    mend_ungating(&env.client, &policy).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let _ = prometheus.kill().await;
    let _ = std::fs::remove_dir_all(&dir);
    env.cleanup().await;
}
