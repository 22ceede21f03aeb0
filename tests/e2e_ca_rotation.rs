//! A CA rotation on the local cluster, end to end, while pods are created through the webhooks
//! (failurePolicy Fail: a creation the API server cannot verify sluice for is refused).
//!
//! sluice is stopped, its certificate Secret replaced by certificates of a CA made seven years ago
//! (ten-year life: in its last third, so due for rotation) with a fresh serving certificate, and
//! sluice started again with a check interval of 1 s and a rotation overlap of 6 s. It publishes the
//! aged CA, then rotates: the new CA joins the bundle (publishing), signs the served certificate
//! (retiring), and the old CA leaves (steady). Throughout, a pod is created every 100 ms: none may
//! be refused, and pods created after the old CA left prove the API server trusts what is served.
//! At the end sluice is restarted with its default settings (the new CA stays).
//! Its own test binary: it stops the shared sluice process, which other tests must not see.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::*;

const NAMESPACE: &str = "sluice-system";
const SECRET: &str = "sluice-webhook-tls";
const CONFIGURATION: &str = "sluice";

/// Where a rotation stands, as the Secret shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    /// One CA: the aged one.
    Aged,
    /// The incoming CA's key waits in `ca-next.key`; the bundle holds both.
    Publishing,
    /// The new CA signs; the old one is still in the bundle.
    Retiring,
    /// One CA again: the new one.
    Steady,
}

fn text(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

fn certificates_in(pem: &str) -> usize {
    pem.matches("BEGIN CERTIFICATE").count()
}

fn stage(secret: &Secret, aged_ca: &str) -> Stage {
    let bundle = text(secret, sluice_certs::CA_CERT_KEY).unwrap_or_default();
    if text(secret, sluice_certs::NEXT_CA_KEY_KEY).is_some() {
        Stage::Publishing
    } else if certificates_in(&bundle) > 1 {
        Stage::Retiring
    } else if bundle.trim() == aged_ca.trim() {
        Stage::Aged
    } else {
        Stage::Steady
    }
}

/// The CA bundles of every webhook sluice registers.
async fn published_bundles(client: &kube::Client) -> Vec<String> {
    let bundle = |b: Option<&ByteString>| {
        b.map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .expect("read the mutating webhook configuration");
    for w in mutating.webhooks.unwrap_or_default() {
        out.push(bundle(w.client_config.ca_bundle.as_ref()));
    }
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(CONFIGURATION)
        .await
        .expect("read the validating webhook configuration");
    for w in validating.webhooks.unwrap_or_default() {
        out.push(bundle(w.client_config.ca_bundle.as_ref()));
    }
    out
}

fn stop_sluice() {
    let path = cluster_state().join("pids/sluice.pid");
    let pid = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (hack/cluster.sh up --with-sluice)", path.display()));
    let status = std::process::Command::new("kill")
        .arg(pid.trim())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {pid} failed");
}

/// `hack/cluster.sh up --with-sluice --no-build` with `env` (it restarts sluice when its SLUICE_*
/// settings change, and waits for /readyz).
fn start_sluice(env: &[(&str, &str)]) {
    let mut command = std::process::Command::new(repo_root().join("hack/cluster.sh"));
    command.args(["up", "--with-sluice", "--no-build"]);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_CERT_")) {
        command.env_remove(k);
    }
    command.envs(env.iter().copied());
    let status = command.status().expect("run hack/cluster.sh up");
    assert!(status.success(), "hack/cluster.sh up --with-sluice failed");
}

/// What sluice's --local settings want of the certificates.
fn settings() -> sluice_certs::CertSettings {
    sluice_certs::CertSettings {
        ip_addresses: vec![std::net::IpAddr::from([127, 0, 0, 1])],
        ..sluice_certs::CertSettings::for_service(NAMESPACE, "sluice-webhook", SECRET)
    }
}

/// Certificates from a CA made `years_ago`.
fn aged_certificates(years_ago: i64) -> sluice_certs::ServingCerts {
    let settings = settings();
    let then = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(years_ago * 365 * 24);
    let aged = sluice_certs::generate_at(&settings, then).expect("an aged CA");
    // A serving certificate of today from that CA: only the CA is due.
    sluice_certs::issue_serving(&aged, &settings).expect("a serving certificate")
}

async fn write_secret(client: &kube::Client, certs: &sluice_certs::ServingCerts) {
    let api: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let mut secret = api.get(SECRET).await.expect("read the certificate Secret");
    // Also drops a rotation's `ca-next.key`: these certificates carry none.
    sluice_certs::write_into_secret(&mut secret, certs, &settings());
    api.replace(SECRET, &PostParams::default(), &secret)
        .await
        .expect("write the aged certificates");
}

#[derive(Default)]
struct Record {
    stages: Vec<Stage>,
    created: Vec<Stage>,
    refused: Vec<(Stage, String)>,
}

#[tokio::test]
async fn a_ca_rotation_refuses_no_creation_and_ends_with_the_new_ca_alone() {
    let (env, queue) = env_and_queue!("ca-rotation", json!({"cpu": "1000"}), "BestEffortFIFO");
    let client = env.client.clone();

    stop_sluice();
    let aged = aged_certificates(7);
    write_secret(&client, &aged).await;
    start_sluice(&[
        ("SLUICE_CERT_CHECK_INTERVAL", "1s"),
        ("SLUICE_CERT_ROTATION_OVERLAP", "6s"),
    ]);

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let record = Arc::new(Mutex::new(Record::default()));
    let done = tokio_util::sync::CancellationToken::new();
    let creator = {
        let (record, done, pods, secrets) =
            (record.clone(), done.clone(), env.pods(), secrets.clone());
        let (queue, aged_ca) = (queue.clone(), aged.ca_pem.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !done.is_cancelled() {
                let now = match secrets.get(SECRET).await {
                    Ok(s) => stage(&s, &aged_ca),
                    Err(e) => panic!("read the Secret: {e}"),
                };
                let created = pods
                    .create(
                        &PostParams::default(),
                        &pod(&format!("p-{n}"), &queue, "10m"),
                    )
                    .await;
                {
                    let mut r = record.lock().expect("record");
                    if r.stages.last() != Some(&now) {
                        r.stages.push(now);
                    }
                    match created {
                        Ok(_) => r.created.push(now),
                        Err(e) => r.refused.push((now, e.to_string())),
                    }
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // The rotation ends with the new CA alone in the Secret and in every webhook's bundle.
    let new_ca = wait_for("the rotation to end", Duration::from_secs(120), || {
        let (secrets, client, aged_ca) = (secrets.clone(), client.clone(), aged.ca_pem.clone());
        async move {
            let secret = secrets.get(SECRET).await.ok()?;
            (stage(&secret, &aged_ca) == Stage::Steady).then_some(())?;
            let ca = text(&secret, sluice_certs::CA_CERT_KEY)?;
            let bundles = published_bundles(&client).await;
            bundles.iter().all(|b| b.trim() == ca.trim()).then_some(ca)
        }
    })
    .await;
    // Creations after the old CA left every bundle: the API server trusts only the new CA now.
    let created_before = record.lock().expect("record").created.len();
    wait_for(
        "20 creations with the new CA alone",
        Duration::from_secs(60),
        || {
            let record = record.clone();
            async move {
                let r = record.lock().expect("record");
                (r.created.len() >= created_before + 20).then_some(())
            }
        },
    )
    .await;
    done.cancel();
    creator.await.expect("the creator task");

    let r = std::mem::take(&mut *record.lock().expect("record"));
    let per_stage = |stage| r.created.iter().filter(|s| **s == stage).count();
    eprintln!(
        "created {} pods: {} with the aged CA, {} publishing, {} retiring, {} steady; refused {}",
        r.created.len(),
        per_stage(Stage::Aged),
        per_stage(Stage::Publishing),
        per_stage(Stage::Retiring),
        per_stage(Stage::Steady),
        r.refused.len()
    );
    assert!(
        r.refused.is_empty(),
        "creations refused during the rotation: {:?}",
        r.refused
    );
    for stage in [Stage::Publishing, Stage::Retiring, Stage::Steady] {
        assert!(
            r.created.contains(&stage),
            "no pod was created while the Secret was {stage:?} (stages seen: {:?})",
            r.stages
        );
    }
    let mut sorted = r.stages.clone();
    sorted.sort();
    assert_eq!(sorted, r.stages, "the rotation went backwards");
    assert_ne!(new_ca.trim(), aged.ca_pem.trim(), "the CA was replaced");
    assert_eq!(certificates_in(&new_ca), 1);

    start_sluice(&[]);
    env.cleanup().await;
}
