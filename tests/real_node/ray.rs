//! Ray for real: a RayCluster with `enableInTreeAutoscaling: true` reconciled by the real KubeRay
//! operator (hack/cluster.sh --with-kuberay), its head on the real node with Ray's own autoscaler
//! as a sidecar, in the image hack/images/ builds (sluice.local/ray: Debian's Python 3.11 and
//! ray[default] from PyPI). A Ray program asks for more CPUs than the head has; the autoscaler
//! scales the worker group up; sluice gates the worker pods KubeRay creates while the queue is full
//! and admits them as quota frees; the program's result comes back; idle workers are scaled down by
//! the autoscaler and their quota goes back.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;
use sluice::api::CapacityQueue;

use super::support::*;
use super::{NODE_LABEL, NODE_TAINT};

/// hack/images/images.sh: sluice.local/ray:<RAY_VERSION of hack/versions.sh>.
const RAY_IMAGE: &str = "sluice.local/ray:2.52.0";
/// Ray nodes start (a Python runtime, GCS, raylet, dashboard) within this on 2 busy cores.
const NODE_TIMEOUT: Duration = Duration::from_secs(300);

/// The program, run in the head: a placement group of three 1-CPU bundles on three different nodes
/// (the head has 1 CPU: two workers are needed), a task in each; prints `RESULT {...}`.
const PROGRAM: &str = r#"
import json, socket, ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
ray.init(address="auto")
pg = placement_group([{"CPU": 1}] * 3, strategy="STRICT_SPREAD")
ray.get(pg.ready(), timeout=900)
@ray.remote(num_cpus=1)
def square(x):
    return x * x, socket.gethostname()
out = ray.get([square.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
    placement_group=pg, placement_group_bundle_index=i)).remote(i + 1) for i in range(3)])
remove_placement_group(pg)
print("RESULT " + json.dumps({"sum": sum(v for v, _ in out), "hosts": sorted({h for _, h in out})}), flush=True)
"#;

/// Head: 1 Ray CPU, a pod asking 250m (+100m for the autoscaler sidecar); workers: 1 Ray CPU,
/// 250m each, 0 to 2 of them. Small object stores (80 MB), memory limits of 1.5Gi / 1Gi.
fn raycluster(name: &str, queue: &str) -> DynamicObject {
    let container = |n: &str, memory: &str| {
        json!({
            "name": n, "image": RAY_IMAGE, "imagePullPolicy": "Never",
            "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": memory}},
        })
    };
    let pod_spec = |c: serde_json::Value| {
        json!({
            "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
            "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "containers": [c],
        })
    };
    let params = json!({"num-cpus": "1", "object-store-memory": "80000000"});
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {
            "enableInTreeAutoscaling": true,
            "autoscalerOptions": {
                "idleTimeoutSeconds": 15,
                "imagePullPolicy": "Never",
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
            },
            "headGroupSpec": {
                "rayStartParams": params,
                "template": {"spec": pod_spec(container("ray-head", "1536Mi"))},
            },
            "workerGroupSpecs": [{
                "groupName": "workers", "replicas": 0, "minReplicas": 0, "maxReplicas": 2,
                "rayStartParams": params,
                "template": {"spec": pod_spec(container("ray-worker", "1Gi"))},
            }],
        },
    }))
    .expect("raycluster")
}

async fn cluster_pods(env: &TestEnv, name: &str, kind: &str) -> Vec<Pod> {
    env.pods()
        .list(
            &ListParams::default()
                .labels(&format!("ray.io/cluster={name},ray.io/node-type={kind}")),
        )
        .await
        .expect("list Ray pods")
        .items
}

fn running(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// The queue's usage of cpu, in millicores.
async fn queue_cpu(env: &TestEnv, queue: &str) -> Option<i64> {
    let q = Api::<CapacityQueue>::all(env.client.clone())
        .get(queue)
        .await
        .ok()?;
    let cpu = q
        .status?
        .usage
        .get("cpu")
        .map(|c| c.0.clone())
        .unwrap_or_else(|| "0".into());
    match cpu.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => cpu.parse::<i64>().ok().map(|c| c * 1000),
    }
}

// Long: one story in steps (head up, program, scale-up gated, quota frees, result, scale-down),
// each asserting the queue and the ledger; split, the steps would pass many values between them.
#[tokio::test]
async fn ray_autoscaler_workers_on_the_real_node_wait_for_quota_and_give_it_back() {
    let mut env = env_or_skip!("real-ray");
    let (_heavy, node) = super::heavy_start(&env).await;
    // 850m: the head (350m) and one worker (250m) beside another workload's 250m; the second
    // worker waits until that workload ends.
    let queue = env
        .queue("q", json!({"cpu": "850m"}), "BestEffortFIFO")
        .await;
    env.create_pod(pod("other", &queue, "250m")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let api = rayclusters(&env);
    create(&api, &raycluster("sq", &queue)).await;
    let head = wait_for(
        "the head (with the autoscaler) to run on the real node",
        NODE_TIMEOUT,
        || async {
            let pods = cluster_pods(&env, "sq", "head").await;
            let p = pods.into_iter().next()?;
            let ready = p
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .all(|c| c.ready);
            (ready && p.spec.as_ref()?.node_name.as_deref() == Some(node.as_str())).then_some(p)
        },
    )
    .await;
    let containers: Vec<String> = head
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    assert!(
        containers.contains(&"autoscaler".to_string()),
        "KubeRay injected Ray's autoscaler: {containers:?}"
    );
    let head_name = head.metadata.name.clone().expect("name");
    let head_ip = head
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("the head's IP");
    env.wait_queue_counts(&queue, 0, 2).await;

    // The local cluster has no DNS: workers find the head's Service name (KubeRay's FQ_RAY_IP) in
    // their /etc/hosts. The autoscaler's new workers are made from this template.
    let fqdn = format!("sq-head-svc.{}.svc.cluster.local", env.namespace);
    let patch: json_patch::Patch = serde_json::from_value(json!([{
        "op": "add", "path": "/spec/workerGroupSpecs/0/template/spec/hostAliases",
        "value": [{"ip": head_ip, "hostnames": [fqdn]}],
    }]))
    .expect("patch");
    api.patch("sq", &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("give the workers the head's address");

    // The program asks for 3 CPUs on 3 nodes: the autoscaler asks KubeRay for 2 workers.
    let program = {
        let (ns, pod) = (env.namespace.clone(), head_name.clone());
        tokio::spawn(async move {
            tokio::process::Command::new("kubectl")
                .args([
                    "-n", &ns, "exec", &pod, "-c", "ray-head", "--", "python3", "-c", PROGRAM,
                ])
                .output()
                .await
        })
    };
    wait_for(
        "the autoscaler to scale the workers to 2",
        NODE_TIMEOUT,
        || async {
            let rc = api.get("sq").await.ok()?;
            (rc.data["spec"]["workerGroupSpecs"][0]["replicas"] == json!(2)).then_some(())
        },
    )
    .await;
    // One worker fits, the other waits behind sluice's gate.
    env.wait_queue_counts(&queue, 1, 3).await;
    let workers = cluster_pods(&env, "sq", "worker").await;
    assert_eq!(
        (workers.len(), gated(&workers).len()),
        (2, 1),
        "two workers, one gated"
    );
    let s = env
        .wait_workload_pods("raycluster-sq", 2, 1, Duration::from_secs(60))
        .await;
    eprintln!(
        "ledger while the queue is full: admitted {} pending {} ({}) {}",
        s.admitted_pods, s.pending_pods, s.pod_set_summary, s.message
    );
    wait_for("the admitted worker to run", NODE_TIMEOUT, || async {
        (running(&cluster_pods(&env, "sq", "worker").await) == 1).then_some(())
    })
    .await;

    // The other workload ends: the waiting worker is admitted, the placement group is placed.
    env.delete_pod_now("other").await;
    let s = env
        .wait_workload_pods("raycluster-sq", 3, 0, Duration::from_secs(60))
        .await;
    eprintln!(
        "ledger after the other workload ended: admitted {} pending {} ({})",
        s.admitted_pods, s.pending_pods, s.pod_set_summary
    );
    let out = tokio::time::timeout(Duration::from_secs(900), program)
        .await
        .expect("the program finishes")
        .expect("join")
        .expect("kubectl exec");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the program failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|r| serde_json::from_str(r).expect("RESULT is JSON"))
        .unwrap_or_else(|| panic!("no RESULT line: {stdout}"));
    eprintln!("program result: {result}");
    assert_eq!(result["sum"], json!(14), "1 + 4 + 9");
    let hosts = result["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 3, "three nodes ran a task each: {result}");
    assert!(
        hosts.contains(&json!(head_name)),
        "the head ran one: {result}"
    );

    // Idle workers: the autoscaler scales the group down, KubeRay deletes them, the quota goes
    // back to the head's 350m.
    wait_for(
        "the autoscaler to scale the idle workers down",
        NODE_TIMEOUT,
        || async {
            let rc = api.get("sq").await.ok()?;
            (rc.data["spec"]["workerGroupSpecs"][0]["replicas"] == json!(0)).then_some(())
        },
    )
    .await;
    wait_for(
        "the workers' quota back",
        Duration::from_secs(120),
        || async {
            let gone = cluster_pods(&env, "sq", "worker").await.is_empty();
            (gone && queue_cpu(&env, &queue).await? == 350).then_some(())
        },
    )
    .await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let s = env
        .wait_workload_pods("raycluster-sq", 1, 0, Duration::from_secs(60))
        .await;
    eprintln!(
        "ledger after scale-down: admitted {} pending {} ({})",
        s.admitted_pods, s.pending_pods, s.pod_set_summary
    );
    env.cleanup().await;
}
