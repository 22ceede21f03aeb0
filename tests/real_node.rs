//! The real node of the local cluster (`hack/cluster.sh up --real-node`, hack/realnode.sh): a kubelet
//! with containerd and runc beside the kwok nodes, running images built on this machine. Containers
//! really run here: exit codes, logs and ephemeral containers are the kubelet's, not made up.
//!
//! This target is not part of `cargo test --workspace` (`test = false` in Cargo.toml): two of its
//! tests deploy sluice in-cluster from manifests/ (once per process, shared), which cannot share a
//! cluster with `sluice serve --local` on the host (both own the webhook configurations named sluice
//! and the controller's Lease). One of them runs the counter demo of
//! manifests/samples/task-counter.yaml with the `container` executor and its final `workflow` step
//! (Argo Workflows: real_node/workflow.rs tests that executor alone).
//! hack/test.sh runs it on a cluster of its own; alone: `hack/test.sh --test real_node`.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

#[path = "real_node/ray.rs"]
mod ray;
#[path = "real_node/scavenger.rs"]
mod scavenger;
#[path = "real_node/spark.rs"]
mod spark;
#[path = "real_node/workflow.rs"]
mod workflow;

/// Held by the tests that run real workloads (Spark executors, Ray nodes) on the real node: one at
/// a time, on a machine of 2 cores.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

/// What hack/realnode.sh gives the node: a label to choose it, a taint so nothing lands by chance.
const NODE_LABEL: (&str, &str) = ("sluice.dev/node", "real");
const NODE_TAINT: &str = "sluice.dev/real-node";
/// busybox from Debian's busybox-static, imported by hack/realnode.sh (no registry: never pulled).
const BUSYBOX: &str = "sluice.local/busybox:1.35.0";
/// Containers start, run and end on the real node within this (images are local).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// A pod for the real node: its node selector and toleration, one busybox container running `script`.
fn real_pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
            "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
            }],
        },
    }))
    .expect("pod")
}

fn main_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// Fails the test with the pod's status when it was never scheduled to the real node.
async fn wait_running(env: &TestEnv, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} to run on the real node"),
        RUN_TIMEOUT,
        || async {
            let p = env.pods().get(name).await.ok()?;
            let running = main_status(&p)?.state.as_ref()?.running.is_some();
            running.then_some(p)
        },
    )
    .await
}

/// How a test of a real workload starts: [`HEAVY`] held (returned: held until the test ends), the
/// real node there (its name returned), sluice deployed in-cluster.
async fn heavy_start(env: &TestEnv) -> (tokio::sync::MutexGuard<'static, ()>, String) {
    let heavy = HEAVY.lock().await;
    let node = real_node_name(env).await;
    sluice_in_cluster(env).await;
    (heavy, node)
}

async fn real_node_name(env: &TestEnv) -> String {
    let nodes: Api<Node> = Api::all(env.client.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{}={}", NODE_LABEL.0, NODE_LABEL.1)))
        .await
        .expect("list nodes");
    let node = list.items.first().unwrap_or_else(|| {
        panic!(
            "no node labelled {}={}: bring the cluster up with `hack/cluster.sh up --real-node` (root only)",
            NODE_LABEL.0, NODE_LABEL.1
        )
    });
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == NODE_TAINT && t.effect == "NoSchedule"),
        "the real node carries the taint {NODE_TAINT}:NoSchedule, got {taints:?}"
    );
    // Its status is the kubelet's own, never kwok's (kwok manages only nodes annotated as fake).
    let info = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.clone())
        .unwrap_or_else(|| panic!("the real node reports nodeInfo: {:?}", node.status));
    assert!(
        info.kubelet_version.starts_with("v1."),
        "a real kubelet's version, got {:?}",
        info.kubelet_version
    );
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "containerd as the runtime, got {:?}",
        info.container_runtime_version
    );
    assert!(
        !node.annotations().contains_key("kwok.x-k8s.io/node"),
        "kwok does not manage the real node"
    );
    node.name_any()
}

#[tokio::test]
async fn a_failing_container_reports_its_exit_code_and_log() {
    let env = env_or_skip!("real-exit");
    let node = real_node_name(&env).await;
    env.create_pod(real_pod("exit3", "echo hi; exit 3")).await;
    let pod = wait_for("pod exit3 to fail", RUN_TIMEOUT, || async {
        let p = env.pods().get("exit3").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(p)
    })
    .await;
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str()),
        "ran on the real node"
    );
    let terminated = main_status(&pod)
        .and_then(|s| s.state.as_ref()?.terminated.clone())
        .unwrap_or_else(|| panic!("a terminated container status, got {:?}", pod.status));
    assert_eq!(terminated.exit_code, 3, "the container's real exit code");
    // The log subresource: the API server asks the kubelet (kubectl logs does the same).
    let log = env
        .pods()
        .logs("exit3", &LogParams::default())
        .await
        .expect("pod log through the API server");
    assert_eq!(log, "hi\n");
    env.cleanup().await;
}

#[tokio::test]
async fn an_ephemeral_container_runs_in_a_running_pod() {
    let env = env_or_skip!("real-ephemeral");
    env.create_pod(real_pod("target", "echo started; exec sleep 3600"))
        .await;
    wait_running(&env, "target").await;
    let patch = json!({"spec": {"ephemeralContainers": [{
        "name": "debug", "image": BUSYBOX, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "echo from the ephemeral container; ls /proc/1/cmdline >/dev/null; exit 7"],
    }]}});
    env.pods()
        .patch_ephemeral_containers("target", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("add an ephemeral container");
    let code = wait_for("the ephemeral container to end", RUN_TIMEOUT, || async {
        let p = env.pods().get("target").await.ok()?;
        let status = p
            .status?
            .ephemeral_container_statuses?
            .into_iter()
            .find(|s| s.name == "debug")?;
        status.state?.terminated.map(|t| t.exit_code)
    })
    .await;
    assert_eq!(code, 7, "the ephemeral container's real exit code");
    let log = env
        .pods()
        .logs(
            "target",
            &LogParams {
                container: Some("debug".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("the ephemeral container's log");
    assert_eq!(log, "from the ephemeral container\n");
    // The pod's own container is untouched and still runs.
    let p = env.pods().get("target").await.expect("pod");
    assert!(
        main_status(&p)
            .and_then(|s| s.state.as_ref()?.running.as_ref())
            .is_some(),
        "the main container still runs: {:?}",
        p.status
    );
    env.cleanup().await;
}

async fn kubectl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("kubectl")
        .args(args)
        .output()
        .await
        .expect("kubectl on PATH (eval \"$(hack/cluster.sh env)\")");
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Deploys sluice in-cluster from manifests/ on the real node, once per test process (the tests of
/// this file run in parallel and share it), and waits for its two replicas to be ready.
async fn sluice_in_cluster(env: &TestEnv) {
    static DEPLOYED: tokio::sync::Mutex<bool> = tokio::sync::Mutex::const_new(false);
    let mut deployed = DEPLOYED.lock().await;
    if *deployed {
        return;
    }
    let node = real_node_name(env).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    if let Some(existing) = mutating.get_opt("sluice").await.expect("get webhooks") {
        let url = existing
            .webhooks
            .unwrap_or_default()
            .iter()
            .any(|w| w.client_config.url.is_some());
        assert!(
            !url,
            "sluice runs on the host (sluice serve --local registered URL webhooks): this test needs a \
             cluster without --with-sluice; run it with `hack/test.sh --test real_node`"
        );
    }
    // The way the book tells users to install from manifests/, plus what this node needs: its toleration and selector.
    let root = repo_root();
    let crds = root.join("manifests/crds");
    let install = root.join("manifests/install");
    kubectl(&["apply", "--server-side", "-f", crds.to_str().expect("path")]).await;
    kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout",
        "60s",
        "-f",
        crds.to_str().expect("path"),
    ])
    .await;
    kubectl(&["apply", "-f", install.to_str().expect("path")]).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "sluice-system");
    let on_real_node = json!({"spec": {"template": {"spec": {
        "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
        "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }}}});
    deployments
        .patch(
            "sluice",
            &PatchParams::default(),
            &Patch::Strategic(&on_real_node),
        )
        .await
        .expect("put sluice on the real node");
    // (The status of the generation before the patch, pods on kwok nodes "ready" at once, does not
    // count.)
    wait_sluice_rolled_out(
        env,
        "sluice-system",
        "sluice's two replicas to be ready on the real node",
        Duration::from_secs(180),
        |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()),
    )
    .await;
    *deployed = true;
}

#[tokio::test]
async fn sluice_in_cluster_serves_its_webhooks_through_the_service_and_admits() {
    let mut env = env_or_skip!("real-sluice");
    let node = real_node_name(&env).await;
    sluice_in_cluster(&env).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let sluice_pods: Api<Pod> = Api::namespaced(env.client.clone(), "sluice-system");
    for p in sluice_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=sluice"))
        .await
        .expect("sluice pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(node.as_str())
        );
    }
    // The webhooks point at the Service, and the Service's endpoints are the pods on the real node.
    let config = mutating.get("sluice").await.expect("webhook configuration");
    for w in config.webhooks.unwrap_or_default() {
        let svc = w.client_config.service.as_ref().unwrap_or_else(|| {
            panic!(
                "webhook {} calls a Service, got {:?}",
                w.name, w.client_config
            )
        });
        assert_eq!(
            (svc.namespace.as_str(), svc.name.as_str()),
            ("sluice-system", "sluice-webhook")
        );
        assert!(
            w.client_config.ca_bundle.is_some(),
            "sluice wrote its CA bundle"
        );
    }
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "sluice-system");
    let ready = wait_for(
        "two ready endpoints of the Service sluice-webhook",
        Duration::from_secs(60),
        || async {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=sluice-webhook"))
                .await
                .ok()?;
            let n = list
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            (n == 2).then_some(n)
        },
    )
    .await;
    assert_eq!(ready, 2);

    // A queue of 1 cpu, two pods of 1 cpu: the webhook admits the first as it is created (or gates
    // it, when a replica that is not the leader answers: only the leader admits at creation), then
    // gates the second; the controller admits the second when the first ends.
    let queue = env.queue("q", json!({"cpu": "1"}), "StrictFIFO").await;
    let first = env.create_pod(pod("first", &queue, "1")).await;
    let at_creation = first
        .annotations()
        .contains_key(sluice::api::AT_CREATION_ANNOTATION);
    assert!(
        is_gated(&first) != at_creation,
        "the webhook ran: either gated or admitted at creation, not both, not neither: {:?}",
        first.metadata.annotations
    );
    wait_for("first to be admitted", Duration::from_secs(60), || async {
        let p = env.pods().get("first").await.ok()?;
        (!is_gated(&p)).then_some(())
    })
    .await;
    let second = env.create_pod(pod("second", &queue, "1")).await;
    assert!(is_gated(&second), "created with sluice's gate");
    env.wait_queue_counts(&queue, 1, 1).await;
    assert!(is_gated(&env.pods().get("second").await.expect("second")));
    end_pod(&env.pods(), "first", "Succeeded").await;
    wait_for("second to be admitted", Duration::from_secs(60), || async {
        let p = env.pods().get("second").await.ok()?;
        (!is_gated(&p)).then_some(())
    })
    .await;
    env.cleanup().await;
}

/// The sample's documents, moved into `namespace` and onto the queue `queue` (CapacityQueues are
/// cluster-wide); everything else as written in manifests/samples/task-counter.yaml.
fn counter_sample(namespace: &str, queue: &str) -> Vec<serde_json::Value> {
    let path = repo_root().join("manifests/samples/task-counter.yaml");
    let text = std::fs::read_to_string(&path).expect("read manifests/samples/task-counter.yaml");
    let mut docs = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let mut v: serde_json::Value =
            serde::Deserialize::deserialize(doc).expect("a YAML document of the sample");
        if v.is_null() {
            continue;
        }
        match v["kind"].as_str() {
            Some("CapacityQueue") => v["metadata"]["name"] = json!(queue),
            Some("TaskCluster") => {
                v["metadata"]["labels"]["sluice.dev/queue"] = json!(queue);
                v["metadata"]["namespace"] = json!(namespace);
            }
            Some("RoleBinding") => {
                v["metadata"]["namespace"] = json!(namespace);
                for s in v["subjects"].as_array_mut().expect("subjects") {
                    s["namespace"] = json!(namespace);
                }
            }
            _ => v["metadata"]["namespace"] = json!(namespace),
        }
        docs.push(v);
    }
    docs
}

/// One ephemeral container's end, as the kubelet reported it in the worker's status.
#[derive(Debug, Clone)]
struct Ended {
    pod: String,
    exit_code: i32,
    container_id: Option<String>,
    message: Option<String>,
}

#[tokio::test]
async fn the_counter_demo_runs_to_its_limit_in_ephemeral_containers() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    use sluice::api::{TASK_CLUSTER_LABEL, Task, TaskPhase};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    const LIMIT: i64 = 10;
    let mut env = env_or_skip!("real-counter");
    let node = real_node_name(&env).await;
    sluice_in_cluster(&env).await;
    let queue = unique("counter");
    env.queues.push(queue.clone());
    let docs = counter_sample(&env.namespace, &queue);
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "TaskCluster")
        .expect("the sample has a TaskCluster");
    let cluster_name = cluster["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let max_tasks_per_worker = cluster["spec"]["maxTasksPerWorker"]
        .as_u64()
        .expect("the sample bounds the Tasks per worker") as usize;

    // Every ephemeral container's terminated state, from a watch on the workers (a retired worker
    // is deleted soon after its last Task; the watch still saw its last status).
    let ended: Arc<Mutex<BTreeMap<String, Ended>>> = Arc::default();
    let workers_seen: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let watch = {
        let (ended, workers_seen) = (ended.clone(), workers_seen.clone());
        let pods = env.pods();
        let selector = format!("{TASK_CLUSTER_LABEL}={cluster_name}");
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(
                watcher(pods, watcher::Config::default().labels(&selector)).default_backoff()
            );
            while let Some(event) = stream.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(p))
                    | Ok(watcher::Event::InitApply(p))
                    | Ok(watcher::Event::Delete(p)) => p,
                    _ => continue,
                };
                if let Some(n) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    workers_seen
                        .lock()
                        .expect("workers")
                        .insert(pod.name_any(), n);
                }
                let statuses = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.ephemeral_container_statuses.clone())
                    .unwrap_or_default();
                for s in statuses {
                    if let Some(t) = s.state.and_then(|st| st.terminated) {
                        ended.lock().expect("ended").insert(
                            s.name.clone(),
                            Ended {
                                pod: pod.name_any(),
                                exit_code: t.exit_code,
                                container_id: t.container_id,
                                message: t.message,
                            },
                        );
                    }
                }
            }
        })
    };

    let file = std::env::temp_dir().join(format!("{}.json", env.namespace));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&file, list.to_string()).expect("write the sample");
    let started = tokio::time::Instant::now();
    kubectl(&["apply", "-f", file.to_str().expect("path")]).await;
    let _ = std::fs::remove_file(&file);

    let tasks: Api<Task> = Api::namespaced(env.client.clone(), &env.namespace);
    let last = format!("task-{LIMIT}");
    // task-final (the Workflow task-10 spawns) ends the demo.
    let final_step = sluice::tasks::client::COUNTER_FINAL_TASK;
    wait_for(
        &format!("{last} and then {final_step} (its workflow) to succeed"),
        Duration::from_secs(600),
        || async {
            let list = tasks.list(&ListParams::default()).await.ok()?;
            for t in &list.items {
                let st = t.status.as_ref()?;
                if st.phase.is_final() && st.phase != TaskPhase::Success {
                    panic!("Task {} ended {}: {}", t.name_any(), st.phase, st.message);
                }
            }
            list.items
                .iter()
                .any(|t| {
                    t.name_any() == final_step
                        && t.status.as_ref().map(|s| s.phase) == Some(TaskPhase::Success)
                })
                .then_some(())
        },
    )
    .await;
    let took = started.elapsed();
    let shown = kubectl(&["-n", &env.namespace, "get", "tasks"]).await;
    eprintln!(
        "counter demo: task-0 .. {last}, {final_step} Success {:.1} s after kubectl apply\n$ kubectl get tasks\n{shown}",
        took.as_secs_f64()
    );

    // All 11 Tasks, each once, in order, with their parsed results, each spawned by the previous.
    let mut all = tasks
        .list(&ListParams::default())
        .await
        .expect("list Tasks")
        .items;
    // The last step is the workflow's: checked apart (real_node/workflow.rs).
    let final_task = all
        .iter()
        .position(|t| t.name_any() == final_step)
        .map(|i| all.remove(i))
        .expect("task-final");
    workflow::assert_counter_final_step(&env, &final_task, LIMIT, &node).await;
    all.sort_by_key(|t| {
        t.name_any()
            .strip_prefix("task-")
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(i64::MAX)
    });
    let names: Vec<String> = all.iter().map(|t| t.name_any()).collect();
    let want: Vec<String> = (0..=LIMIT).map(|i| format!("task-{i}")).collect();
    assert_eq!(
        names, want,
        "task-0 .. task-{LIMIT} and task-final, no more"
    );
    let mut per_worker: BTreeMap<String, usize> = BTreeMap::new();
    let mut previous_start: Option<String> = None;
    for (i, t) in all.iter().enumerate() {
        let i = i as i64;
        let st = t.status.as_ref().expect("status");
        assert_eq!(st.phase, TaskPhase::Success, "{} {st:?}", t.name_any());
        assert_eq!(st.executor.as_deref(), Some("container"));
        assert_eq!(
            st.result,
            Some(json!({"count": i, "limit": LIMIT})),
            "{}'s result, parsed from its termination message",
            t.name_any()
        );
        if i > 0 {
            assert_eq!(t.spec.parent, Some(format!("task-{}", i - 1)));
        }
        // Started in creation order (RFC 3339 in UTC: strings compare as times).
        let start = st.started_at.clone().expect("startedAt");
        if let Some(p) = &previous_start {
            assert!(*p <= start, "{} started before its parent", t.name_any());
        }
        previous_start = Some(start);
        let worker = st.worker.clone().expect("the worker it ran on");
        *per_worker.entry(worker.clone()).or_default() += 1;

        // Its ephemeral container really ran on the real node: the kubelet's terminated state.
        let container = format!("t-{}", t.name_any());
        let e = wait_for(
            &format!("the kubelet's terminated state of {container}"),
            Duration::from_secs(30),
            || async { ended.lock().expect("ended").get(&container).cloned() },
        )
        .await;
        assert_eq!(e.pod, worker, "{container} ran in the Task's worker");
        assert_eq!(e.exit_code, 0, "{container}: {e:?}");
        assert!(
            e.container_id
                .as_deref()
                .is_some_and(|id| id.starts_with("containerd://")),
            "{container} was a containerd container: {e:?}"
        );
        assert_eq!(
            e.message
                .as_deref()
                .map(|m| serde_json::from_str::<serde_json::Value>(m).ok()),
            Some(Some(json!({"count": i, "limit": LIMIT}))),
            "{container}'s termination message"
        );
        assert_eq!(
            workers_seen.lock().expect("workers").get(&worker),
            Some(&node),
            "worker {worker} ran on the real node"
        );
    }

    // Workers are retired after maxTasksPerWorker Tasks: 11 Tasks need at least 3 workers, and a
    // worker that reached the bound is deleted.
    eprintln!("Tasks per worker: {per_worker:?}");
    assert!(
        per_worker.values().all(|&n| n <= max_tasks_per_worker),
        "no worker ran more than {max_tasks_per_worker} Tasks: {per_worker:?}"
    );
    let full: Vec<String> = per_worker
        .iter()
        .filter(|(_, n)| **n == max_tasks_per_worker)
        .map(|(w, _)| w.clone())
        .collect();
    assert!(
        per_worker.len() >= (LIMIT as usize + 1).div_ceil(max_tasks_per_worker) && !full.is_empty(),
        "workers retired after {max_tasks_per_worker} Tasks: {per_worker:?}"
    );
    for w in &full {
        wait_for(
            &format!("the retired worker {w} to be deleted"),
            Duration::from_secs(60),
            || async { env.pods().get_opt(w).await.ok()?.is_none().then_some(()) },
        )
        .await;
    }

    // The last Task's output, through the API server from the kubelet.
    let last_worker = all
        .last()
        .and_then(|t| t.status.as_ref()?.worker.clone())
        .expect("worker");
    if env
        .pods()
        .get_opt(&last_worker)
        .await
        .expect("get")
        .is_some()
    {
        let log = env
            .pods()
            .logs(
                &last_worker,
                &LogParams {
                    container: Some(format!("t-{last}")),
                    ..LogParams::default()
                },
            )
            .await
            .expect("the last Task's log");
        assert!(
            log.contains(&format!("{{\"count\":{LIMIT},\"limit\":{LIMIT}}}")),
            "the last Task's log: {log:?}"
        );
    }
    eprintln!(
        "$ kubectl get tc\n{}",
        kubectl(&["-n", &env.namespace, "get", "tc"]).await
    );
    watch.abort();
    env.cleanup().await;
}
