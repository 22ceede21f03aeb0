//! Installing sluice the way a platform team does, on the real node (`hack/cluster.sh up
//! --real-node`): the image built from the Dockerfile (hack/image.sh, imported by hack/realnode.sh as
//! `sluice:<version>` and, for the upgrade, a second build `sluice:upgrade`), then
//!
//! - `helm install` of charts/sluice, or `kubectl apply --server-side -f sluice.yaml` (what
//!   hack/release.sh writes into dist/);
//! - a gang and a RayCluster (KubeRay on the host) through the gate; a ScavengerJob saying it needs
//!   the PriorityClass the install leaves out by default;
//! - an upgrade to the second build (`helm upgrade`, or the manifest applied again with the new
//!   image) while a pod is created every 100 ms: none refused, none left gated, the quota never
//!   exceeded (every change of every pod watched), the ledgers kept;
//! - uninstall (`helm uninstall`, whose pre-delete hook runs `sluice uninstall --keep-install`; or
//!   `sluice uninstall`): no webhook configuration left, no pod left gated;
//! - deleting only the namespace: pods refused and left gated, until `sluice uninstall` recovers.
//!
//! Not part of `cargo test --workspace` (`test = false`): it needs a cluster with the real node and
//! without sluice on the host, with KubeRay. hack/test.sh runs it in a phase of its own (after the
//! real node's other tests); alone: `hack/test.sh --test real_node_install`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DynamicObject, ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

const NAMESPACE: &str = "sluice-system";
const NODE_SELECTOR: (&str, &str) = ("sluice.dev/node", "real");
const NODE_TAINT: &str = "sluice.dev/real-node";
/// One install at a time: every story owns the webhook configurations and the namespace.
static ONE_INSTALL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// The second build hack/realnode.sh imports (SLUICE_REAL_NODE_IMAGES=sluice-upgrade).
const UPGRADE_TAG: &str = "upgrade";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Method {
    Helm,
    Manifest,
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

async fn command(program: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(repo_root())
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!("{program} ({e}): on PATH after eval \"$(hack/cluster.sh env)\"")
        });
    assert!(
        out.status.success(),
        "{program} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("sluice-install"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

/// Values that put sluice's pods (and the uninstall hook) on the real node, where its image is.
fn real_node_values() -> std::path::PathBuf {
    temp_file(
        "values.yaml",
        &format!(
            "nodeSelector:\n  {}: {}\ntolerations:\n  - key: {NODE_TAINT}\n    operator: Exists\n    effect: NoSchedule\n",
            NODE_SELECTOR.0, NODE_SELECTOR.1
        ),
    )
}

/// dist/ of hack/release.sh, written into a directory of this test.
async fn release_manifest() -> String {
    let out = std::env::temp_dir().join(unique("sluice-dist"));
    command(
        "hack/release.sh",
        &[version(), "--out", out.to_str().expect("path")],
    )
    .await;
    std::fs::read_to_string(out.join("sluice.yaml")).expect("sluice.yaml")
}

/// The release manifest with the Deployment on the real node: what a user's own overlay adds.
fn on_real_node(manifest: &str) -> String {
    let selector = format!(
        "      nodeSelector:\n        {}: {}\n      tolerations:\n        - key: {NODE_TAINT}\n          operator: Exists\n          effect: NoSchedule\n      affinity:\n",
        NODE_SELECTOR.0, NODE_SELECTOR.1
    );
    let (before, after) = manifest
        .split_once("kind: Deployment\n")
        .expect("a Deployment in the manifest");
    let after = after.replacen("      affinity:\n", &selector, 1);
    format!("{before}kind: Deployment\n{after}")
}

async fn install(method: Method) {
    match method {
        Method::Helm => {
            let values = real_node_values();
            command(
                "helm",
                &[
                    "install",
                    "sluice",
                    "charts/sluice",
                    "--namespace",
                    NAMESPACE,
                    "--create-namespace",
                    "--values",
                    values.to_str().expect("path"),
                    "--wait",
                    "--timeout",
                    "300s",
                ],
            )
            .await;
        }
        Method::Manifest => {
            let manifest = temp_file("sluice.yaml", &on_real_node(&release_manifest().await));
            apply_server_side(&manifest).await;
        }
    }
}

/// Held while a story has sluice installed: if the story fails (a panic), `sluice uninstall` runs
/// as it unwinds, so the next story finds a clean slate instead of timing out behind this one.
struct UninstallOnFailure;

impl Drop for UninstallOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("uninstall")
            .current_dir(repo_root())
            .output();
        match out {
            Ok(out) => eprintln!(
                "the story failed; sluice uninstall (exit {}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("the story failed; sluice uninstall could not run: {e}"),
        }
    }
}

async fn apply_server_side(manifest: &std::path::Path) {
    let path = manifest.to_str().expect("path");
    command("kubectl", &["apply", "--server-side", "-f", path]).await;
}

async fn upgrade(method: Method) {
    match method {
        Method::Helm => {
            command(
                "helm",
                &[
                    "upgrade",
                    "sluice",
                    "charts/sluice",
                    "--namespace",
                    NAMESPACE,
                    "--reuse-values",
                    "--set",
                    &format!("image.tag={UPGRADE_TAG}"),
                    "--wait",
                    "--timeout",
                    "300s",
                ],
            )
            .await;
        }
        Method::Manifest => {
            // The next release's manifest, applied the same way: only the image differs.
            let manifest = on_real_node(&release_manifest().await).replace(
                &format!("image: sluice:{}\n", version()),
                &format!("image: sluice:{UPGRADE_TAG}\n"),
            );
            let manifest = temp_file("sluice-upgrade.yaml", &manifest);
            apply_server_side(&manifest).await;
        }
    }
}

async fn uninstall(method: Method) -> String {
    match method {
        Method::Helm => {
            command(
                "helm",
                &[
                    "uninstall",
                    "sluice",
                    "--namespace",
                    NAMESPACE,
                    "--wait",
                    "--timeout",
                    "300s",
                ],
            )
            .await
        }
        Method::Manifest => command(env!("CARGO_BIN_EXE_sluice"), &["uninstall"]).await,
    }
}

/// Waits until the Deployment runs `replicas` ready pods of `image`, all on the real node.
async fn wait_rolled_out(env: &TestEnv, image: &str) {
    let what = format!("sluice's two replicas of {image} to be ready on the real node");
    wait_sluice_rolled_out(env, NAMESPACE, &what, Duration::from_secs(300), |p| {
        p.spec.as_ref().is_some_and(|s| {
            s.node_selector.as_ref().is_some_and(|n| {
                n.get(NODE_SELECTOR.0).map(String::as_str) == Some(NODE_SELECTOR.1)
            }) && s.containers.first().and_then(|c| c.image.as_deref()) == Some(image)
        })
    })
    .await;
}

/// Before a story: no sluice of an earlier one (webhooks gone, its namespace not terminating).
async fn wait_clean_slate(env: &TestEnv) {
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    wait_for(
        "no sluice installed (webhooks absent, sluice-system not terminating)",
        Duration::from_secs(180),
        || async {
            let terminating = namespaces
                .get_opt(NAMESPACE)
                .await
                .ok()?
                .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
            let webhooks = mutating.get_opt("sluice").await.ok()?.is_some();
            (!terminating && !webhooks).then_some(())
        },
    )
    .await;
}

/// A RayCluster in `queue` of busybox pods asking 250m: the head and one worker (at most 2).
fn busybox_raycluster(name: &str, queue: &str) -> DynamicObject {
    let container = |n: &str| json!({"name": n, "image": "busybox", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}});
    raycluster(
        name,
        Some(queue),
        raycluster_spec([1, 1, 2], container, json!({})),
    )
}

fn gang_pod(name: &str, queue: &str) -> Pod {
    with_annotations(
        with_labels(pod(name, queue, "250m"), &[("sluice.dev/workload", "gang")]),
        &[("sluice.dev/min-count", "2")],
    )
}

/// Pods of 10m created every 100 ms in `queue`, each ended as soon as it is seen admitted and
/// deleted once ended (the quota churns; the kwok nodes' pod slots are not used up): counts
/// creations and refusals, and records every pod seen admitted, until `stop`.
struct Load {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
    refused: Arc<std::sync::Mutex<Vec<String>>>,
    admitted: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const LOAD_POD_CPU: &str = "10m";
/// Room for ten load pods: the queue stays full while pods arrive every 100 ms.
const LOAD_QUOTA_CPU: &str = "100m";
const LOAD_QUOTA_MILLIS: i64 = 100;

fn start_load(env: &TestEnv, queue: &str) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    // Set by the creator once its last creation has returned: until then a pod may appear after an
    // empty list, so the ender cannot stop on `stop` alone.
    let creator_done = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(std::sync::Mutex::new(Vec::new()));
    let admitted = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    let (pods, queue) = (env.pods(), queue.to_string());
    let creator = {
        let (stop, creator_done, created, refused, pods) = (
            stop.clone(),
            creator_done.clone(),
            created.clone(),
            refused.clone(),
            pods.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let p = with_labels(
                    pod(&format!("load-{i}"), &queue, LOAD_POD_CPU),
                    &[("load", "true")],
                );
                match pods.create(&PostParams::default(), &p).await {
                    Ok(_) => {
                        created.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => refused
                        .lock()
                        .expect("refused")
                        .push(format!("load-{i}: {e}")),
                }
                i += 1;
            }
            creator_done.store(true, Ordering::SeqCst);
        })
    };
    let ender = {
        let (creator_done, pods, admitted) = (creator_done.clone(), pods.clone(), admitted.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            // Runs on after the creator's last pod until every pod is gone and none is left gated.
            // `done` is read before the list (a quorum read): an empty list then holds every pod
            // created, even one whose creation was under way when `stop` was set.
            loop {
                tick.tick().await;
                let done = creator_done.load(Ordering::SeqCst);
                let Ok(list) = pods.list(&ListParams::default().labels("load=true")).await else {
                    continue;
                };
                if done && list.items.is_empty() {
                    break;
                }
                end_and_delete(&pods, &list.items, &admitted).await;
            }
        })
    };
    Load {
        stop,
        created,
        refused,
        admitted,
        tasks: vec![creator, ender],
    }
}

/// Ends each admitted load pod (recording it) and deletes each ended one.
async fn end_and_delete(
    pods: &Api<Pod>,
    list: &[Pod],
    admitted: &std::sync::Mutex<std::collections::HashSet<String>>,
) {
    for p in list {
        let name = p.name_any();
        if is_ended(p) {
            let _ = pods
                .delete(&name, &kube::api::DeleteParams::default())
                .await;
        } else if !is_gated(p) && admitted.lock().expect("admitted").insert(name.clone()) {
            end_pod(pods, &name, "Succeeded").await;
        }
    }
}

/// Follows the load pods and records the largest cpu ever held by those admitted and not ended.
fn watch_load_usage(pods: Api<Pod>) -> (Arc<std::sync::Mutex<i64>>, tokio::task::JoinHandle<()>) {
    use kube::runtime::{WatchStreamExt, watcher};
    let peak = Arc::new(std::sync::Mutex::new(0i64));
    let peak_out = peak.clone();
    let task = tokio::spawn(async move {
        let mut holding = std::collections::HashMap::new();
        let config = watcher::Config::default().labels("load=true");
        let mut stream = std::pin::pin!(watcher(pods, config).default_backoff());
        while let Some(event) = futures::StreamExt::next(&mut stream).await {
            let (pod, gone) = match event {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => (p, false),
                Ok(watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            if !gone && !is_gated(&pod) && !is_ended(&pod) {
                holding.insert(pod.name_any(), cpu_millis(&pod));
            } else {
                holding.remove(&pod.name_any());
            }
            let total: i64 = holding.values().sum();
            let mut peak = peak.lock().expect("peak");
            *peak = (*peak).max(total);
        }
    });
    (peak_out, task)
}

/// The story of the module docs, for one install method.
async fn story(method: Method) {
    let Some(mut env) = TestEnv::new_or_skip(match method {
        Method::Helm => "install-helm",
        Method::Manifest => "install-manifest",
    })
    .await
    else {
        return;
    };
    wait_clean_slate(&env).await;

    // 1. Install, and wait for the two replicas of the release's image on the real node.
    let _uninstall_on_failure = UninstallOnFailure;
    install(method).await;
    let first_image = format!("sluice:{}", version());
    wait_rolled_out(&env, &first_image).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    wait_for(
        "sluice to write its CA bundle into the webhook configuration",
        Duration::from_secs(60),
        || async {
            let config = mutating.get("sluice").await.ok()?;
            let all = config.webhooks.unwrap_or_default();
            (!all.is_empty() && all.iter().all(|w| w.client_config.ca_bundle.is_some()))
                .then_some(())
        },
    )
    .await;

    // 2. A gang and a RayCluster through the gate.
    let gang_queue = env
        .queue("gang", json!({"cpu": "1"}), "BestEffortFIFO")
        .await;
    env.create_pod(gang_pod("gang-0", &gang_queue)).await;
    // The webhook ran: the pod was gated, or admitted at creation with the gang's places reserved.
    let first = env.pods().get("gang-0").await.expect("gang-0");
    let at_creation = first
        .annotations()
        .contains_key(sluice::api::AT_CREATION_ANNOTATION);
    assert!(
        is_gated(&first) != at_creation,
        "sluice's webhook either gated the gang's first pod or admitted it at creation: {:?}",
        first.metadata.annotations
    );
    env.create_pod(gang_pod("gang-1", &gang_queue)).await;
    env.wait_queue_counts(&gang_queue, 0, 2).await;
    let ledger = env
        .workloads()
        .get("gang")
        .await
        .expect("the gang's DynamicWorkload");
    let ray_queue = env
        .queue("ray", json!({"cpu": "500m"}), "BestEffortFIFO")
        .await;
    rayclusters(&env)
        .create(
            &PostParams::default(),
            &busybox_raycluster("rc", &ray_queue),
        )
        .await
        .expect("create the RayCluster");
    env.wait_queue_counts(&ray_queue, 0, 2).await;

    // The install has no PriorityClass by default (a globalDefault class is the cluster's call):
    // a ScavengerJob, which needs sluice-scavenger, does not start and says so.
    let sj: sluice::api::ScavengerJob = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": "needs-a-class"},
        "spec": {"image": "busybox", "command": ["sh", "-c", "sleep 3600"], "duration": "10m",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                               "limits": {"cpu": "100m", "memory": "64Mi"}}},
    }))
    .expect("ScavengerJob");
    let scavengers: Api<sluice::api::ScavengerJob> =
        Api::namespaced(env.client.clone(), &env.namespace);
    create(&scavengers, &sj).await;
    wait_for(
        "the ScavengerJob to say it needs the PriorityClass sluice-scavenger",
        Duration::from_secs(60),
        || async {
            let status = scavengers.get("needs-a-class").await.ok()?.status?;
            status
                .message
                .contains("the PriorityClass sluice-scavenger does not exist")
                .then_some(())
        },
    )
    .await;

    // 3. Upgrade to the second build while a pod is created every 100 ms.
    let load_queue = env
        .queue("load", json!({"cpu": LOAD_QUOTA_CPU}), "BestEffortFIFO")
        .await;
    let (peak, watcher) = watch_load_usage(env.pods());
    let load = start_load(&env, &load_queue);
    wait_for(
        "the load to be under way",
        Duration::from_secs(30),
        || async { (load.created.load(Ordering::SeqCst) >= 10).then_some(()) },
    )
    .await;
    upgrade(method).await;
    wait_rolled_out(&env, &format!("sluice:{UPGRADE_TAG}")).await;
    let before_stop = load.created.load(Ordering::SeqCst);
    wait_for(
        "20 more pods created after the rollout",
        Duration::from_secs(30),
        || async { (load.created.load(Ordering::SeqCst) >= before_stop + 20).then_some(()) },
    )
    .await;
    load.stop.store(true, Ordering::SeqCst);
    let mut tasks = load.tasks.into_iter();
    tasks.next().expect("creator").await.expect("creator task");
    let refused = load.refused.lock().expect("refused").clone();
    assert!(
        refused.is_empty(),
        "pod creations refused during the upgrade: {refused:?}"
    );
    let created = load.created.load(Ordering::SeqCst);
    // None stranded: the ender runs until every load pod was admitted, ended and deleted.
    let ender = tasks.next().expect("ender");
    tokio::time::timeout(Duration::from_secs(180), ender)
        .await
        .unwrap_or_else(|_| {
            panic!("load pods still there 180 s after the load stopped: some stayed gated")
        })
        .expect("ender task");
    let admitted = load.admitted.lock().expect("admitted").len();
    assert_eq!(admitted, created, "every load pod created was admitted");
    watcher.abort();
    // The quota held at every change of every load pod (a watch: every state each pod went
    // through, finer than any sampling): admitted, unended load pods never above the quota.
    let peak = *peak.lock().expect("peak");
    assert!(peak > 0, "the load was admitted at all");
    assert!(
        peak <= LOAD_QUOTA_MILLIS,
        "admitted unended load pods held {peak}m of a {LOAD_QUOTA_CPU} quota"
    );
    eprintln!(
        "{method:?}: {created} pods created during the upgrade, none refused, all admitted; peak {peak}m of {LOAD_QUOTA_CPU}"
    );
    // The ledgers kept: the gang's DynamicWorkload is the same object, still holding its two pods.
    let after = env
        .workloads()
        .get("gang")
        .await
        .expect("the gang's DynamicWorkload");
    assert_eq!(after.uid(), ledger.uid(), "the ledger survived the upgrade");
    assert_eq!(after.status.as_ref().map(|s| s.admitted_pods), Some(2));
    env.wait_queue_counts(&gang_queue, 0, 2).await;

    // 4. Uninstall with a pod still gated (600m where the gang holds 500m of 1 cpu; a pod that could
    // never fit is refused at creation): nothing stranded.
    env.create_pod(pod("too-big", &gang_queue, "600m")).await;
    assert!(is_gated(&env.pods().get("too-big").await.expect("too-big")));
    let said = uninstall(method).await;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    assert!(
        mutating.get_opt("sluice").await.expect("get").is_none(),
        "mutating webhook left: {said}"
    );
    assert!(
        validating.get_opt("sluice").await.expect("get").is_none(),
        "validating webhook left: {said}"
    );
    let all: Api<Pod> = Api::all(env.client.clone());
    let gated: Vec<String> = all
        .list(&ListParams::default())
        .await
        .expect("pods")
        .items
        .iter()
        .filter(|p| is_gated(p))
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    assert!(
        gated.is_empty(),
        "pods left gated after uninstall: {gated:?} ({said})"
    );
    assert!(
        !is_gated(&env.pods().get("too-big").await.expect("too-big")),
        "the gated pod was ungated"
    );
    // The namespace goes (sluice uninstall deletes it; Helm leaves what --create-namespace made).
    if method == Method::Manifest {
        assert!(said.contains("Namespace sluice-system: deleted"), "{said}");
    }
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NAMESPACE);
    wait_for(
        "sluice's Deployment to be gone",
        Duration::from_secs(120),
        || async {
            deployments
                .get_opt("sluice")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    env.cleanup().await;
}

/// Helm first, then the manifest on the same cluster: the manifest's server-side apply takes the
/// CRDs Helm left (helm.sh/resource-policy: keep) over without a conflict, while Helm would refuse
/// to adopt CRDs a manifest created (docs/src/operations/install.md says how to label them).
#[tokio::test]
async fn helm_then_the_release_manifest_gate_a_gang_and_a_raycluster_upgrade_without_stranding_and_uninstall_clean()
 {
    let _one = ONE_INSTALL.lock().await;
    story(Method::Helm).await;
    story(Method::Manifest).await;
}

/// What people often do instead of uninstalling: delete the namespace. The webhook configurations
/// stay, so governed pods are refused and a gated pod stays gated; `sluice uninstall` recovers
/// (docs/src/operations/uninstall.md).
#[tokio::test]
async fn deleting_the_namespace_alone_strands_pods_until_sluice_uninstall_recovers() {
    let mut env = env_or_skip!("nsdelete");
    let _one = ONE_INSTALL.lock().await;
    wait_clean_slate(&env).await;
    // With Helm: its release record lives in the namespace and goes with it, as it would for a
    // user; the CRDs it made keep its ownership, so the other stories can install either way.
    let _uninstall_on_failure = UninstallOnFailure;
    install(Method::Helm).await;
    wait_rolled_out(&env, &format!("sluice:{}", version())).await;
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    env.create_pod(pod("fits", &queue, "800m")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.create_pod(pod("waits", &queue, "800m")).await;
    assert!(is_gated(&env.pods().get("waits").await.expect("waits")));
    // Only the namespace goes.
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces
        .delete(NAMESPACE, &kube::api::DeleteParams::default())
        .await
        .expect("delete the namespace");
    wait_for(
        "sluice-system to be gone",
        Duration::from_secs(180),
        || async {
            namespaces
                .get_opt(NAMESPACE)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    match env
        .pods()
        .create(&PostParams::default(), &pod("refused", &queue, "100m"))
        .await
    {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains("sluice-webhook"),
            "refused by the webhook left behind: {}",
            s.message
        ),
        other => panic!("a governed pod is refused while the webhooks stay: {other:?}"),
    }
    assert!(
        is_gated(&env.pods().get("waits").await.expect("waits")),
        "the gated pod stays gated"
    );
    // Recover.
    let said = uninstall(Method::Manifest).await;
    assert!(said.contains("not found (already removed)"), "{said}");
    assert!(
        !is_gated(&env.pods().get("waits").await.expect("waits")),
        "ungated by sluice uninstall: {said}"
    );
    env.create_pod(pod("after", &queue, "100m")).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    assert!(mutating.get_opt("sluice").await.expect("get").is_none());
    env.cleanup().await;
}

/// The image says what it is: `sluice --version` in a container of the image built from the
/// Dockerfile prints the version and the commit baked in.
#[tokio::test]
async fn the_image_reports_its_version_and_commit() {
    let env = env_or_skip!("image-version");
    let p: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "version"},
        "spec": {
            "nodeSelector": {NODE_SELECTOR.0: NODE_SELECTOR.1},
            "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "containers": [{"name": "sluice", "image": format!("sluice:{}", version()),
                            "imagePullPolicy": "Never", "args": ["--version"]}],
        },
    }))
    .expect("pod");
    env.create_pod(p).await;
    wait_for(
        "the version pod to succeed",
        Duration::from_secs(90),
        || async {
            let p = env.pods().get("version").await.ok()?;
            (p.status?.phase.as_deref() == Some("Succeeded")).then_some(())
        },
    )
    .await;
    let log = env
        .pods()
        .logs("version", &LogParams::default())
        .await
        .expect("log");
    let expected = format!("sluice {} (commit ", version());
    assert!(
        log.starts_with(&expected),
        "{log:?} starts with {expected:?}"
    );
    assert!(
        !log.contains("(commit unknown)"),
        "a commit is baked in: {log:?}"
    );
    env.cleanup().await;
}
