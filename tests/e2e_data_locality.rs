//! Data locality end to end (`hack/cluster.sh up --with-sluice`): four kwok nodes of the test's
//! own (3 cpus each, tainted so that only the test's pods land there), `cache` pods bound with
//! `nodeName` to two of them:
//! - a gang asking `sluice.dev/data-pods: app=cache` runs only on the cache's two nodes: each pod
//!   carries `kubernetes.io/hostname In [...]` in its required node affinity (added to every
//!   term of an affinity of its own: the API server takes it on a gated pod) and
//!   `sluice.dev/data-nodes`; the scheduler binds it there;
//! - a gang too big for the room left there waits, saying where the data is and how much room it
//!   has; the same gang with `sluice.dev/data-locality: preferred` runs elsewhere;
//! - a claim: a local PersistentVolume with node affinity to one node, pre-bound to a claim; a
//!   gang asking `sluice.dev/data-claim` runs on that node;
//! - a batch/v1 Job whose pod template asks: all its pods beside the cache;
//! - Spark (its own spark-submit, dynamic allocation): executors annotated through
//!   `spark.kubernetes.executor.annotation.*` all run beside the cache, the later ones too;
//! - a hostile tenant: a selector cannot reach another namespace's pods, a claim naming another
//!   tenant's volume finds nothing, a forged `sluice.dev/data-nodes` is dropped at creation and
//!   refused later, a malformed selector is refused at creation.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use support::*;

const TAINT: &str = "e2e.sluice.dev/data";

/// Four 3-cpu kwok nodes, each with its hostname label. Removed by [`Nodes::remove`].
struct Nodes {
    client: kube::Client,
    names: Vec<String>,
}

impl Nodes {
    async fn create(env: &TestEnv) -> Nodes {
        Nodes::create_tainted(env, true).await
    }

    /// `tainted`: only pods tolerating [`TAINT`] run there (Spark's executors do not).
    async fn create_tainted(env: &TestEnv, tainted: bool) -> Nodes {
        let taints = if tainted {
            json!([{"key": TAINT, "value": "true", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        let mut names = Vec::new();
        for i in 0..4 {
            let name = format!("kwok-{}-{i}", env.namespace);
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name}},
                "spec": {"taints": taints},
                "status": {
                    "allocatable": {"cpu": "3", "memory": "16Gi", "pods": "110"},
                    "capacity": {"cpu": "3", "memory": "16Gi", "pods": "110"},
                },
            }))
            .expect("node");
            create(&Api::<Node>::all(env.client.clone()), &node).await;
            names.push(name);
        }
        Nodes {
            client: env.client.clone(),
            names,
        }
    }

    async fn remove(self) {
        for node in &self.names {
            let _ = Api::<Node>::all(self.client.clone())
                .delete(node, &DeleteParams::default())
                .await;
        }
    }
}

/// An ungoverned `app=cache` pod bound to `node` (no requests: the data is on its node).
async fn cache_pod(env: &TestEnv, name: &str, node: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "cache"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "cache", "image": "busybox"}]},
    }))
    .expect("cache pod");
    env.create_pod(pod).await;
}

/// A pod of gang `gang` (`size` pods) asking for its data's nodes, tolerating the nodes' taint.
fn data_pod(name: &str, queue: &str, cpu: &str, gang: (&str, u32), ask: &[(&str, &str)]) -> Pod {
    let mut annotations = vec![("sluice.dev/min-count", gang.1.to_string())];
    annotations.extend(ask.iter().map(|(k, v)| (*k, v.to_string())));
    let annotations: Vec<(&str, &str)> =
        annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut pod = with_annotations(
        with_labels(pod(name, queue, cpu), &[("sluice.dev/workload", gang.0)]),
        &annotations,
    );
    let spec = pod.spec.as_mut().expect("spec");
    spec.tolerations = Some(vec![
        serde_json::from_value(json!({"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}))
            .expect("toleration"),
    ]);
    pod
}

/// The nodes the `size` pods of `gang` run on once all are admitted and bound; each pinned by
/// its annotation and its required node affinity (in every term) to `pinned`.
async fn nodes_of(
    env: &TestEnv,
    gang: &str,
    size: usize,
    pinned: Option<&str>,
) -> BTreeSet<String> {
    let selector = format!("sluice.dev/workload={gang}");
    let pods = wait_for(
        &format!("the {size} pods of {gang} admitted and bound"),
        Duration::from_secs(90),
        || async {
            let pods = env.pods_labelled(&selector).await;
            let bound = (pods.iter())
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (bound == size).then_some(pods)
        },
    )
    .await;
    let mut seen = BTreeSet::new();
    for pod in &pods {
        let name = pod.name_any();
        let annotation = pod
            .annotations()
            .get("sluice.dev/data-nodes")
            .map(String::as_str);
        assert_eq!(annotation, pinned, "{name}'s sluice.dev/data-nodes");
        if let Some(pinned) = pinned {
            let hosts: Vec<&str> = pinned.split(',').collect();
            let spec = serde_json::to_value(pod.spec.as_ref().expect("spec")).expect("json");
            let terms =
                spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                    ["nodeSelectorTerms"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
            assert!(!terms.is_empty(), "{name} has a required node affinity");
            for term in &terms {
                let pins = term["matchExpressions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| {
                        r["key"] == "kubernetes.io/hostname"
                            && r["operator"] == "In"
                            && r["values"] == json!(hosts)
                    });
                assert!(pins, "{name}: every term pins the hosts: {term}");
            }
        }
        seen.insert(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .expect("bound"),
        );
    }
    seen
}

#[tokio::test]
async fn executors_go_beside_their_data_and_a_gang_too_big_waits_or_runs_elsewhere() {
    let Some(mut env) = TestEnv::new_or_skip("data-pods").await else {
        return;
    };
    let nodes = Nodes::create(&env).await;
    let (n, queue) = (
        &nodes.names,
        env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await,
    );
    cache_pod(&env, "cache-0", &n[2]).await;
    cache_pod(&env, "cache-1", &n[3]).await;
    let ask = [("sluice.dev/data-pods", "app=cache")];
    // 4 executors of 1.5 cpu: the cache's two nodes hold exactly two each. Two of them have a
    // required node affinity of their own (two terms): the pin is added to each.
    for i in 0..4 {
        let mut p = data_pod(&format!("a-{i}"), &queue, "1500m", ("a", 4), &ask);
        if i < 2 {
            p.spec.as_mut().expect("spec").affinity = Some(
                serde_json::from_value(json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "type", "operator": "In", "values": ["kwok"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n[3]]}]},
                ]}}}))
                .expect("affinity"),
            );
        }
        env.create_pod(p).await;
    }
    let pinned = format!("{},{}", n[2], n[3]);
    let a = nodes_of(&env, "a", 4, Some(&pinned)).await;
    assert!(
        a.is_subset(&BTreeSet::from([n[2].clone(), n[3].clone()])),
        "{a:?}"
    );
    // Two more of 1 cpu: the cache's nodes are full; required waits, saying where the data is.
    for i in 0..2 {
        env.create_pod(data_pod(&format!("b-{i}"), &queue, "1", ("b", 2), &ask))
            .await;
    }
    // The settled reason, not the one shown before the data's nodes are looked up.
    let message = env.wait_workload_message("b", "they have room for").await;
    assert!(
        message.contains(&format!(
            "fits queue {queue} but its data (pods app=cache) is on nodes {}, {}; they have room for 0 of its 2 pods",
            n[2], n[3]
        )),
        "{message}"
    );
    assert!(
        env.pods_labelled("sluice.dev/workload=b")
            .await
            .iter()
            .all(is_gated)
    );
    // Preferred: runs elsewhere (the cache's nodes are full), not pinned.
    let preferred = [
        ("sluice.dev/data-pods", "app=cache"),
        ("sluice.dev/data-locality", "preferred"),
    ];
    for i in 0..2 {
        env.create_pod(data_pod(
            &format!("c-{i}"),
            &queue,
            "1",
            ("c", 2),
            &preferred,
        ))
        .await;
    }
    let c = nodes_of(&env, "c", 2, None).await;
    assert!(!c.contains(&n[2]) && !c.contains(&n[3]), "{c:?}");
    env.cleanup().await;
    nodes.remove().await;
}

/// A local PersistentVolume on `node` (its node affinity), pre-bound to `namespace`/`claim`.
async fn local_volume(env: &TestEnv, name: &str, node: &str, (namespace, claim): (&str, &str)) {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": "e2e-local", "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": "/tmp/data"},
            "claimRef": {"namespace": namespace, "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
    }))
    .expect("pv");
    create(&Api::<PersistentVolume>::all(env.client.clone()), &pv).await;
}

/// A claim of `env`'s namespace for the volume `volume`.
async fn claim(env: &TestEnv, name: &str, volume: &str) {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "e2e-local",
            "volumeName": volume, "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("pvc");
    create(
        &Api::<PersistentVolumeClaim>::namespaced(env.client.clone(), &env.namespace),
        &pvc,
    )
    .await;
}

#[tokio::test]
async fn a_gang_goes_to_the_node_of_its_claims_local_volume() {
    let Some(mut env) = TestEnv::new_or_skip("data-claim").await else {
        return;
    };
    let nodes = Nodes::create(&env).await;
    let (n, queue) = (
        &nodes.names,
        env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await,
    );
    let volume = format!("{}-cache", env.namespace);
    local_volume(&env, &volume, &n[1], (&env.namespace, "cache")).await;
    claim(&env, "cache", &volume).await;
    let ask = [("sluice.dev/data-claim", "cache")];
    for i in 0..2 {
        env.create_pod(data_pod(&format!("a-{i}"), &queue, "1", ("a", 2), &ask))
            .await;
    }
    let a = nodes_of(&env, "a", 2, Some(&n[1])).await;
    assert_eq!(a, BTreeSet::from([n[1].clone()]));
    env.cleanup().await;
    let _ = Api::<PersistentVolume>::all(nodes.client.clone())
        .delete(&volume, &DeleteParams::default())
        .await;
    nodes.remove().await;
}

#[tokio::test]
async fn a_hostile_tenant_cannot_reach_anothers_data_nor_forge_its_pin() {
    let Some(mut env) = TestEnv::new_or_skip("data-abuse").await else {
        return;
    };
    let other = TestEnv::new("data-other").await;
    let nodes = Nodes::create(&env).await;
    let (n, queue) = (
        &nodes.names,
        env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await,
    );
    // The other tenant's cache and its volume (bound to its own claim).
    cache_pod(&other, "cache", &n[0]).await;
    let volume = format!("{}-theirs", other.namespace);
    local_volume(&env, &volume, &n[0], (&other.namespace, "theirs")).await;
    claim(&other, "theirs", &volume).await;
    // A selector matching their cache's labels finds nothing in this namespace.
    let reach = [("sluice.dev/data-pods", "app=cache")];
    env.create_pod(data_pod("reach-0", &queue, "1", ("reach", 1), &reach))
        .await;
    let message = env
        .wait_workload_message("reach", "matches it runs on")
        .await;
    assert!(
        message.contains(&format!(
            "no pod of namespace {} that matches it runs on a node",
            env.namespace
        )),
        "{message}"
    );
    // A claim of its own naming their volume is never bound to it: nothing found either.
    claim(&env, "mine", &volume).await;
    let steal = [("sluice.dev/data-claim", "mine")];
    env.create_pod(data_pod("steal-0", &queue, "1", ("steal", 1), &steal))
        .await;
    // Until the claim is looked up the reason says so; wait for the looked-up one.
    let message = env.wait_workload_message("steal", "not bound").await;
    assert!(message.contains("no node holds"), "{message}");
    // A forged pin is dropped at creation, and a user's change of it refused later.
    let forger = with_annotations(
        data_pod("forger", &queue, "1", ("forger", 1), &[]),
        &[("sluice.dev/data-nodes", &n[0])],
    );
    let created = env.create_pod(forger).await;
    assert_eq!(created.annotations().get("sluice.dev/data-nodes"), None);
    env.patch_refused(
        "forger",
        json!({"metadata": {"annotations": {"sluice.dev/data-nodes": "x"}}}),
        "a user rewrote sluice.dev/data-nodes",
    )
    .await;
    // A malformed selector is refused, saying what to set.
    let bad = data_pod(
        "bad",
        &queue,
        "1",
        ("bad", 1),
        &[("sluice.dev/data-pods", "app in (cache")],
    );
    let refusal = env.refused(&bad, "a malformed selector").await;
    assert!(refusal.contains("is not a label selector"), "{refusal}");
    assert!(refusal.contains("e.g. app=cache"), "{refusal}");
    env.cleanup().await;
    let _ = Api::<PersistentVolume>::all(other.client.clone())
        .delete(&volume, &DeleteParams::default())
        .await;
    other.cleanup().await;
    nodes.remove().await;
}

#[tokio::test]
async fn a_jobs_pods_asking_in_their_template_run_beside_the_cache() {
    let Some(mut env) = TestEnv::new_or_skip("data-job").await else {
        return;
    };
    let nodes = Nodes::create(&env).await;
    let n = &nodes.names;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    cache_pod(&env, "cache", &n[1]).await;
    // 3 pods of 1 cpu: the cache's node holds exactly them.
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "scan", "labels": {"sluice.dev/queue": queue}},
        "spec": {"parallelism": 3, "completions": 3, "template": {
            "metadata": {"annotations": {"sluice.dev/kwok-hold": "true",
                "sluice.dev/data-pods": "app=cache"}},
            "spec": {"restartPolicy": "Never",
                "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "w", "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}},
    }))
    .expect("job");
    create(
        &Api::<Job>::namespaced(env.client.clone(), &env.namespace),
        &job,
    )
    .await;
    let selector = "batch.kubernetes.io/job-name=scan";
    let pods = wait_for(
        "the Job's 3 pods admitted and bound",
        Duration::from_secs(90),
        || async {
            let pods = env.pods_labelled(selector).await;
            let bound = (pods.iter())
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (bound == 3).then_some(pods)
        },
    )
    .await;
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name.as_ref(), Some(&n[1]), "{}", pod.name_any());
        assert_eq!(
            pod.annotations().get("sluice.dev/data-nodes"),
            Some(&n[1]),
            "{}",
            pod.name_any()
        );
    }
    env.cleanup().await;
    nodes.remove().await;
}

#[tokio::test]
async fn spark_executors_go_beside_their_data() {
    let Some(mut env) = TestEnv::new_or_skip("data-spark").await else {
        return;
    };
    let nodes = Nodes::create_tainted(&env, false).await;
    let n = &nodes.names;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    cache_pod(&env, "cache-0", &n[2]).await;
    cache_pod(&env, "cache-1", &n[3]).await;
    env.create_service_account("spark").await;
    // Up to 4 executors of 1 cpu (896Mi with overhead): the cache's two 3-cpu nodes hold them.
    let beside = [
        format!("spark.kubernetes.executor.label.sluice.dev/queue={queue}"),
        "spark.kubernetes.executor.annotation.sluice.dev/data-pods=app=cache".to_string(),
    ];
    let spark = submit_dynamic_spark(&env, "near", 4, &beside).await;
    let executors = wait_for(
        "Spark's 4 executors admitted and bound",
        Duration::from_secs(240),
        || async {
            let pods = env.pods_labelled("spark-role=executor").await;
            let bound = (pods.iter())
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (bound >= 4).then_some(pods)
        },
    )
    .await;
    let data = BTreeSet::from([n[2].clone(), n[3].clone()]);
    for pod in executors.iter().filter(|p| !is_gated(p)) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        assert!(
            node.is_some_and(|n| data.contains(&n)),
            "{} runs beside the cache",
            pod.name_any()
        );
        assert_eq!(
            pod.annotations().get("sluice.dev/data-nodes"),
            Some(&format!("{},{}", n[2], n[3])),
            "{}",
            pod.name_any()
        );
    }
    drop(spark);
    env.cleanup().await;
    nodes.remove().await;
}
