//! Flavors end to end (`hack/cluster.sh up --with-sluice --with-kuberay`): kwok nodes labelled
//! with two GPU types (and tainted, so that only pods given the flavor's toleration land there),
//! a ResourceFlavor per type and a CapacityQueue with GPU quota per flavor:
//! - a RayCluster's GPU workers are admitted on the `a100` flavor until it is full, then on
//!   `h100`; each pod carries its flavor's nodeSelector, toleration and `sluice.dev/flavor`, and
//!   the scheduler puts it on a node of that type;
//! - a hostile user: a pod whose own nodeSelector asks for h100 is charged to h100 (never to
//!   a100, where it would not run); one asking for a type no flavor has waits saying so; a
//!   `sluice.dev/flavor` annotation set by the user is dropped at creation and refused later.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use sluice::api::ResourceFlavor;
use support::*;

const GPU_LABEL: &str = "e2e.sluice.dev/gpu";
const GPU_TAINT: &str = "e2e.sluice.dev/gpu";

/// Two kwok GPU nodes and a ResourceFlavor per type, named after the test's namespace; removed
/// by [`Gpus::remove`].
struct Gpus {
    client: kube::Client,
    /// (flavor, label value, node) per type: a100 first.
    types: Vec<(String, String, String)>,
}

impl Gpus {
    async fn create(env: &TestEnv) -> Gpus {
        let mut types = Vec::new();
        for kind in ["a100", "h100"] {
            let value = format!("{}-{kind}", env.namespace);
            let node_name = format!("kwok-{value}");
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": node_name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": node_name, GPU_LABEL: value}},
                "spec": {"taints": [{"key": GPU_TAINT, "value": "true", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "8"},
                    "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "8"},
                },
            }))
            .expect("node");
            create(&Api::<Node>::all(env.client.clone()), &node).await;
            let flavor: ResourceFlavor = serde_json::from_value(json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "ResourceFlavor",
                "metadata": {"name": value},
                "spec": {"nodeLabels": {GPU_LABEL: value},
                         "tolerations": [{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}]},
            }))
            .expect("flavor");
            create(&Api::<ResourceFlavor>::all(env.client.clone()), &flavor).await;
            types.push((value.clone(), value, node_name));
        }
        Gpus {
            client: env.client.clone(),
            types,
        }
    }

    fn flavor(&self, i: usize) -> &str {
        &self.types[i].0
    }

    /// A queue spec with `gpus` of quota in each flavor, a100 first.
    fn queue_spec(&self, gpus: &str) -> serde_json::Value {
        let flavors: Vec<_> = (self.types.iter())
            .map(|(f, _, _)| json!({"name": f, "quota": {"nvidia.com/gpu": gpus}}))
            .collect();
        json!({"flavors": flavors})
    }

    async fn remove(self) {
        for (flavor, _, node) in &self.types {
            let _ = Api::<Node>::all(self.client.clone())
                .delete(node, &DeleteParams::default())
                .await;
            let _ = Api::<ResourceFlavor>::all(self.client.clone())
                .delete(flavor, &DeleteParams::default())
                .await;
        }
    }
}

/// A governed pod asking for `gpus` GPUs.
fn gpu_pod(name: &str, queue: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {
            "containers": [{"name": "work", "image": "busybox", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": gpus.to_string()},
                "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .expect("pod")
}

fn flavor_of(pod: &Pod) -> Option<&str> {
    pod.annotations()
        .get("sluice.dev/flavor")
        .map(String::as_str)
}

/// Checks that an admitted pod is pinned to the flavor it says and scheduled on that type's node.
fn assert_pinned(pod: &Pod, gpus: &Gpus) {
    let flavor = flavor_of(pod).unwrap_or_else(|| panic!("{} has no flavor", pod.name_any()));
    let (_, value, node) = (gpus.types.iter())
        .find(|(f, _, _)| f == flavor)
        .expect("a flavor of the test");
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(
        spec.node_selector.as_ref().and_then(|s| s.get(GPU_LABEL)),
        Some(value),
        "{}'s nodeSelector",
        pod.name_any()
    );
    assert!(
        (spec.tolerations.iter().flatten()).any(|t| t.key.as_deref() == Some(GPU_TAINT)),
        "{} tolerates its flavor's taint",
        pod.name_any()
    );
    assert_eq!(
        spec.node_name.as_ref(),
        Some(node),
        "{} runs on its flavor's node",
        pod.name_any()
    );
}

fn rayclusters(env: &TestEnv) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    );
    Api::namespaced_with(env.client.clone(), &env.namespace, &resource)
}

fn gpu_raycluster(name: &str, queue: &str, workers: i64) -> DynamicObject {
    let head = json!({"name": "ray-head", "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}});
    let worker = json!({"name": "ray-worker", "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}, "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}});
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
            "workerGroupSpecs": [{"groupName": "gpu", "replicas": workers, "minReplicas": 1, "maxReplicas": 8, "rayStartParams": {},
                                  "template": {"spec": {"containers": [worker]}}}],
        },
    }))
    .expect("raycluster")
}

/// Waits until `count` pods of the namespace are admitted and scheduled, and returns them all.
async fn wait_scheduled(env: &TestEnv, count: usize) -> Vec<Pod> {
    wait_for(
        &format!("{count} pods admitted and scheduled"),
        Duration::from_secs(90),
        || async {
            let pods = env.list_pods().await;
            let placed = (pods.iter())
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (placed == count).then_some(pods)
        },
    )
    .await
}

#[tokio::test]
async fn a_rayclusters_gpu_workers_fill_a100_then_go_to_h100_pinned_to_their_nodes() {
    let Some(mut env) = TestEnv::new_or_skip("flavors-ray").await else {
        return;
    };
    let gpus = Gpus::create(&env).await;
    let queue = env.queue_with_spec("gpu", gpus.queue_spec("4")).await;
    // Head + 1 worker (the minimum gang) in a100, then 5 more workers: 3 fill a100 (its own
    // flavor first), the last 2 go to h100.
    create(&rayclusters(&env), &gpu_raycluster("train", &queue, 6)).await;
    let pods = wait_scheduled(&env, 7).await;
    let mut per_flavor: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in &pods {
        assert_pinned(pod, &gpus);
        let set = pod
            .labels()
            .get("ray.io/node-type")
            .cloned()
            .unwrap_or_default();
        per_flavor
            .entry(flavor_of(pod).unwrap_or_default().to_string())
            .or_default()
            .push(set);
    }
    let workers = |f: usize| {
        (per_flavor.get(gpus.flavor(f)).into_iter().flatten())
            .filter(|s| *s == "worker")
            .count()
    };
    assert_eq!((workers(0), workers(1)), (4, 2), "{per_flavor:?}");
    assert!(
        per_flavor[gpus.flavor(0)].iter().any(|s| s == "head"),
        "the head is in the gang's flavor"
    );
    // The queue's status says what each flavor holds.
    let status = wait_for(
        "the queue's status per flavor",
        Duration::from_secs(30),
        || async {
            let q = Api::<sluice::api::CapacityQueue>::all(env.client.clone())
                .get(&queue)
                .await
                .ok()?;
            let status = q.status?;
            (status.flavors.len() == 2
                && status.flavors[1]
                    .usage
                    .get("nvidia.com/gpu")
                    .map(|q| q.0.as_str())
                    == Some("2"))
            .then_some(status)
        },
    )
    .await;
    assert_eq!(status.flavors[0].name, gpus.flavor(0));
    assert_eq!(
        status.flavors[0]
            .usage
            .get("nvidia.com/gpu")
            .map(|q| q.0.as_str()),
        Some("4")
    );
    assert!(
        status
            .usage_summary
            .contains(&format!("{}:nvidia.com/gpu=4/4", gpus.flavor(0))),
        "{}",
        status.usage_summary
    );
    env.cleanup().await;
    gpus.remove().await;
}

#[tokio::test]
async fn a_hostile_pod_cannot_pick_forge_or_escape_its_flavor() {
    let Some(mut env) = TestEnv::new_or_skip("flavors-abuse").await else {
        return;
    };
    let gpus = Gpus::create(&env).await;
    let queue = env.queue_with_spec("gpu", gpus.queue_spec("2")).await;
    let h100_value = gpus.types[1].1.clone();
    // Asks for h100 nodes itself while a100 has room: charged to h100, where it runs.
    let mut sneaky = gpu_pod("sneaky", &queue, 1);
    sneaky.spec.as_mut().expect("spec").node_selector =
        Some(BTreeMap::from([(GPU_LABEL.to_string(), h100_value)]));
    env.create_pod(sneaky).await;
    // Asks for a type no flavor has: it waits, saying why.
    let mut nowhere = gpu_pod("nowhere", &queue, 1);
    nowhere.spec.as_mut().expect("spec").node_selector = Some(BTreeMap::from([(
        GPU_LABEL.to_string(),
        "v100".to_string(),
    )]));
    env.create_pod(nowhere).await;
    // Names h100 in sluice's own annotation: dropped as the pod is gated.
    let forger = with_annotations(
        gpu_pod("forger", &queue, 1),
        &[("sluice.dev/flavor", gpus.flavor(1))],
    );
    let created = env.create_pod(forger).await;
    assert_eq!(
        flavor_of(&created),
        None,
        "a user's sluice.dev/flavor is dropped at creation"
    );

    let pods = wait_scheduled(&env, 2).await;
    let by_name = |n: &str| pods.iter().find(|p| p.name_any() == n).expect("pod");
    assert_eq!(flavor_of(by_name("sneaky")), Some(gpus.flavor(1)));
    assert_eq!(flavor_of(by_name("forger")), Some(gpus.flavor(0)));
    assert_pinned(by_name("sneaky"), &gpus);
    assert_pinned(by_name("forger"), &gpus);
    assert!(is_gated(by_name("nowhere")));
    let message = wait_for("nowhere's reason", Duration::from_secs(30), || async {
        let list = env.workloads().list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .filter_map(|w| w.status.map(|s| s.message))
            .find(|m| m.contains("excludes every flavor"))
    })
    .await;
    assert!(message.contains(&queue), "{message}");

    // Changing the flavor of an admitted pod is refused.
    let refused = env
        .pods()
        .patch(
            "forger",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"sluice.dev/flavor": gpus.flavor(1)}}}),
            ),
        )
        .await;
    assert!(refused.is_err(), "a user rewrote sluice.dev/flavor");
    env.cleanup().await;
    gpus.remove().await;
}
