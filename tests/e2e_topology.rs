//! Topology-aware gangs end to end (`hack/cluster.sh up --with-sluice`): kwok nodes labelled into
//! two racks (a label key of the test's own, and tainted so that only the test's pods land there):
//! - a gang asking `sluice.dev/topology-required: <rack key>` that fits its queue is admitted all
//!   in the one rack with room for it: every pod carries the rack in its nodeSelector and
//!   `sluice.dev/topology-domain`, and the scheduler binds it to a node of that rack;
//! - a gang that fits the queue but no single rack waits, its DynamicWorkload saying so;
//! - with flavors: a gang whose first flavor has quota but no rack with room goes to the next
//!   flavor whose rack has room, charged and pinned there; one no flavor can hold waits;
//! - a rack whose room pods sluice does not govern hold is not chosen;
//! - a hostile user: a forged `sluice.dev/topology-domain` is dropped at creation and refused
//!   later, a nodeSelector naming the small rack keeps the gang out of the big one (it waits), an
//!   ask that is not a label key is refused at creation;
//! - a batch/v1 Job whose pod template asks: all its pods in one rack;
//! - Spark (its own spark-submit, dynamic allocation): executors annotated through
//!   `spark.kubernetes.executor.annotation.*` all run in one rack, the later ones too.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use sluice::api::ResourceFlavor;
use support::*;

const TAINT: &str = "e2e.sluice.dev/topology";

/// Two racks of kwok nodes under a label key of the test's own: `r1` with two 2-cpu nodes, `r2`
/// with two 3-cpu nodes (or the nodes [`Racks::with_nodes`] is given). Removed, with the
/// ResourceFlavors of [`Racks::flavor`], by [`Racks::remove`].
struct Racks {
    client: kube::Client,
    key: String,
    /// The label key of the nodes' tier (for flavors).
    tier_key: String,
    /// (node, rack value).
    nodes: Vec<(String, String)>,
    flavors: Vec<String>,
}

impl Racks {
    async fn create(env: &TestEnv) -> Racks {
        let two_racks = [
            ("r1", "2", ""),
            ("r1", "2", ""),
            ("r2", "3", ""),
            ("r2", "3", ""),
        ];
        Racks::with_nodes(env, &two_racks).await
    }

    /// A node per `(rack, cpu, tier)`; a tier, when not empty, is the node's label
    /// [`Racks::tier_key`].
    async fn with_nodes(env: &TestEnv, nodes_of: &[(&str, &str, &str)]) -> Racks {
        let key = format!("{}.e2e.sluice.dev/rack", env.namespace);
        let tier_key = format!("{}.e2e.sluice.dev/tier", env.namespace);
        let mut nodes = Vec::new();
        for (rack, cpu, tier) in nodes_of {
            let value = format!("{}-{rack}", env.namespace);
            let name = format!("kwok-{}-{}", env.namespace, nodes.len());
            let mut labels =
                json!({"type": "kwok", "kubernetes.io/hostname": name, key.as_str(): value});
            if !tier.is_empty() {
                labels[tier_key.as_str()] = json!(tier);
            }
            let node: Node = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
                "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]},
                "status": {
                    "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                    "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                },
            }))
            .expect("node");
            create(&Api::<Node>::all(env.client.clone()), &node).await;
            nodes.push((name, value));
        }
        Racks {
            client: env.client.clone(),
            key,
            tier_key,
            nodes,
            flavors: Vec::new(),
        }
    }

    /// A ResourceFlavor of the nodes of `tier` (named after the test's namespace); its name.
    async fn flavor(&mut self, env: &TestEnv, tier: &str) -> String {
        let name = format!("{}-{tier}", env.namespace);
        let flavor: ResourceFlavor = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": {"nodeLabels": {self.tier_key.as_str(): tier},
                     "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]},
        }))
        .expect("flavor");
        create(&Api::<ResourceFlavor>::all(env.client.clone()), &flavor).await;
        self.flavors.push(name.clone());
        name
    }

    fn rack(&self, short: &str) -> String {
        let found = self.nodes.iter().find(|(_, v)| v.ends_with(short));
        found.expect("a rack of the test").1.clone()
    }

    async fn remove(self) {
        for (node, _) in &self.nodes {
            let _ = Api::<Node>::all(self.client.clone())
                .delete(node, &DeleteParams::default())
                .await;
        }
        for flavor in &self.flavors {
            let _ = Api::<ResourceFlavor>::all(self.client.clone())
                .delete(flavor, &DeleteParams::default())
                .await;
        }
    }
}

/// A pod of gang `gang` (`size` pods) asking for one rack, tolerating the racks' taint.
fn rack_pod(racks: &Racks, name: &str, queue: &str, cpu: &str, gang: (&str, u32)) -> Pod {
    let mut pod = with_annotations(
        with_labels(pod(name, queue, cpu), &[("sluice.dev/workload", gang.0)]),
        &[
            ("sluice.dev/min-count", &gang.1.to_string()),
            ("sluice.dev/topology-required", &racks.key),
        ],
    );
    let spec = pod.spec.as_mut().expect("spec");
    spec.tolerations = Some(vec![
        serde_json::from_value(json!({"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}))
            .expect("toleration"),
    ]);
    pod
}

/// The rack each pod of `gang` is pinned to and runs in, once all `size` are bound.
async fn racks_of(env: &TestEnv, racks: &Racks, gang: &str, size: usize) -> BTreeSet<String> {
    let selector = format!("sluice.dev/workload={gang}");
    racks_selected(env, racks, &selector, size, Duration::from_secs(90)).await
}

/// [`racks_of`] for the pods `selector` selects.
async fn racks_selected(
    env: &TestEnv,
    racks: &Racks,
    selector: &str,
    size: usize,
    within: Duration,
) -> BTreeSet<String> {
    let pods = wait_for(
        &format!("the {size} pods {selector} admitted and bound"),
        within,
        || async {
            let pods = env.pods_labelled(selector).await;
            let bound = (pods.iter())
                .filter(|p| !is_gated(p) && p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
                .count();
            (bound == size).then_some(pods)
        },
    )
    .await;
    let mut seen = BTreeSet::new();
    for pod in &pods {
        let spec = pod.spec.as_ref().expect("spec");
        let pinned = (spec.node_selector.as_ref()).and_then(|s| s.get(&racks.key));
        let pinned = pinned.unwrap_or_else(|| panic!("{} is not pinned", pod.name_any()));
        assert_eq!(
            pod.annotations().get("sluice.dev/topology-domain"),
            Some(&format!("{}={pinned}", racks.key)),
            "{}",
            pod.name_any()
        );
        let node = spec.node_name.as_ref().expect("bound");
        let (_, rack) = (racks.nodes.iter())
            .find(|(n, _)| n == node)
            .expect("a rack node");
        assert_eq!(
            rack,
            pinned,
            "{} runs in the rack it is pinned to",
            pod.name_any()
        );
        seen.insert(rack.clone());
    }
    seen
}

#[tokio::test]
async fn a_gang_goes_whole_into_the_rack_with_room_and_one_that_fits_no_rack_waits() {
    let Some(mut env) = TestEnv::new_or_skip("topo-gang").await else {
        return;
    };
    let racks = Racks::create(&env).await;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    // 4 pods of 1.5 cpu: a 2-cpu node of r1 holds one, a 3-cpu node of r2 two: only r2 fits.
    for i in 0..4 {
        env.create_pod(rack_pod(
            &racks,
            &format!("a-{i}"),
            &queue,
            "1500m",
            ("a", 4),
        ))
        .await;
    }
    let a = racks_of(&env, &racks, "a", 4).await;
    assert_eq!(a, BTreeSet::from([racks.rack("r2")]));
    // 5 pods of 1 cpu: r1 holds 4, r2 has 0 left; the queue has room for all of them.
    for i in 0..5 {
        env.create_pod(rack_pod(&racks, &format!("b-{i}"), &queue, "1", ("b", 5)))
            .await;
    }
    let message = env.wait_workload_message("b", "no single").await;
    assert!(
        message.contains(&format!(
            "fits queue {queue} but no single {} has room for its 5 pods; the most any {} has room for is 4",
            racks.key, racks.key
        )),
        "{message}"
    );
    assert!(
        env.pods_labelled("sluice.dev/workload=b")
            .await
            .iter()
            .all(is_gated),
        "nothing of b is admitted"
    );
    env.cleanup().await;
    racks.remove().await;
}

/// Pods sluice does not govern (no queue label: another tenant's, a DaemonSet's) bound straight
/// to r1's nodes, 1 cpu on each: r1 has 1 cpu left per node though sluice admitted nothing there.
/// A gang of two 1.5-cpu pods fits only r2 then; counting only its own pods, sluice would pick r1
/// (the rack with the least room that fits) and pin the gang where the scheduler cannot place it.
#[tokio::test]
async fn a_rack_filled_by_pods_sluice_does_not_govern_has_no_room_for_a_gang() {
    let Some(mut env) = TestEnv::new_or_skip("topo-others").await else {
        return;
    };
    let racks = Racks::create(&env).await;
    let r1_nodes = (racks.nodes.iter()).filter(|(_, rack)| *rack == racks.rack("r1"));
    for (i, (node, _)) in r1_nodes.enumerate() {
        let filler: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("other-{i}"), "labels": {"app": "other-tenant"}},
            "spec": {"nodeName": node,
                "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .expect("pod");
        env.create_pod(filler).await;
    }
    wait_for(
        "the other tenant's pods running",
        Duration::from_secs(60),
        || async {
            let pods = env.pods_labelled("app=other-tenant").await;
            let running = (pods.iter())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            (running.count() == 2).then_some(())
        },
    )
    .await;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    for i in 0..2 {
        env.create_pod(rack_pod(
            &racks,
            &format!("g-{i}"),
            &queue,
            "1500m",
            ("g", 2),
        ))
        .await;
    }
    let g = racks_of(&env, &racks, "g", 2).await;
    assert_eq!(g, BTreeSet::from([racks.rack("r2")]));
    env.cleanup().await;
    racks.remove().await;
}

/// Flavors and topology together: a queue of two flavors, `spot` then `ondemand` (the nodes'
/// tiers). spot has quota but no node that holds a pod of the gang: the gang goes whole to
/// ondemand's rack, charged to ondemand and pinned to its nodes. A gang no flavor's racks can
/// hold waits, saying why per flavor.
#[tokio::test]
async fn a_gang_goes_to_the_flavor_whose_racks_have_room() {
    let Some(mut env) = TestEnv::new_or_skip("topo-flavors").await else {
        return;
    };
    let tiers = [
        ("s1", "1", "spot"),
        ("s1", "1", "spot"),
        ("o1", "2", "ondemand"),
        ("o1", "2", "ondemand"),
    ];
    let mut racks = Racks::with_nodes(&env, &tiers).await;
    let spot = racks.flavor(&env, "spot").await;
    let ondemand = racks.flavor(&env, "ondemand").await;
    let flavors = json!({"flavors": [
        {"name": spot, "quota": {"cpu": "20"}},
        {"name": ondemand, "quota": {"cpu": "20"}},
    ]});
    let queue = env.queue_with_spec("q", flavors).await;
    // 2 pods of 1.5 cpu: no spot node holds one; each ondemand node holds one.
    for i in 0..2 {
        let pod = rack_pod(&racks, &format!("a-{i}"), &queue, "1500m", ("a", 2));
        env.create_pod(pod).await;
    }
    let a = racks_of(&env, &racks, "a", 2).await;
    assert_eq!(a, BTreeSet::from([racks.rack("o1")]));
    for pod in env.pods_labelled("sluice.dev/workload=a").await {
        assert_eq!(
            pod.annotations().get("sluice.dev/flavor"),
            Some(&ondemand),
            "{} is charged to the flavor it runs in",
            pod.name_any()
        );
    }
    // 3 more of 1.5 cpu: spot holds none, ondemand's nodes have 0.5 cpu left each.
    for i in 0..3 {
        let pod = rack_pod(&racks, &format!("b-{i}"), &queue, "1500m", ("b", 3));
        env.create_pod(pod).await;
    }
    let message = env.wait_workload_message("b", "no flavor of queue").await;
    for flavor in [&spot, &ondemand] {
        let why = format!("{flavor}: fits queue {queue} but no single {}", racks.key);
        assert!(message.contains(&why), "{message}");
    }
    let b = env.pods_labelled("sluice.dev/workload=b").await;
    assert!(b.iter().all(is_gated), "nothing of b is admitted");
    // A pod whose own nodeSelector says spot, asking for a rack spot's nodes cannot hold, is never
    // moved to ondemand (it would not run there, and would be charged where it does not run): it
    // waits, and only spot is tried.
    let mut own = rack_pod(&racks, "own-0", &queue, "1500m", ("own", 1));
    own.spec.as_mut().expect("spec").node_selector =
        Some([(racks.tier_key.clone(), "spot".to_string())].into());
    env.create_pod(own).await;
    let message = env.wait_workload_message("own", "no flavor of queue").await;
    assert!(
        message.contains(&format!(
            "{spot}: fits queue {queue} but no single {}",
            racks.key
        )),
        "{message}"
    );
    assert!(
        !message.contains(&format!("{ondemand}:")),
        "ondemand is not tried for a pod that asks for spot's nodes: {message}"
    );
    let own = env.pods().get("own-0").await.expect("own-0");
    assert!(is_gated(&own), "own-0 waits");
    assert_eq!(own.annotations().get("sluice.dev/flavor"), None);
    env.cleanup().await;
    racks.remove().await;
}

#[tokio::test]
async fn a_hostile_pod_cannot_forge_or_escape_its_rack() {
    let Some(mut env) = TestEnv::new_or_skip("topo-abuse").await else {
        return;
    };
    let racks = Racks::create(&env).await;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    // An ask that is no label key: refused at creation, saying what to set.
    let mut bad = rack_pod(&racks, "bad", &queue, "1", ("bad", 1));
    bad.annotations_mut()
        .insert("sluice.dev/topology-required".into(), "my rack".into());
    let refusal = env.refused(&bad, "an ask that is no label key").await;
    assert!(refusal.contains("is not a node label key"), "{refusal}");
    // Forges its domain (r1) as it is created: dropped; sluice chooses (r1 is the tightest fit).
    let forger = with_annotations(
        rack_pod(&racks, "forger", &queue, "1", ("forger", 1)),
        &[(
            "sluice.dev/topology-domain",
            &format!("{}={}", racks.key, racks.rack("r2")),
        )],
    );
    let created = env.create_pod(forger).await;
    assert_eq!(
        created.annotations().get("sluice.dev/topology-domain"),
        None
    );
    assert_eq!(racks_of(&env, &racks, "forger", 1).await.len(), 1);
    // ... and a user's change of it later is refused.
    env.patch_refused(
        "forger",
        json!({"metadata": {"annotations": {"sluice.dev/topology-domain": "x=y"}}}),
        "a user rewrote sluice.dev/topology-domain",
    )
    .await;
    // Its own nodeSelector names r1, whose 2-cpu nodes cannot hold a 3-cpu pod: never charged
    // to r2 (where it would not run), it waits.
    let mut narrow = rack_pod(&racks, "narrow", &queue, "3", ("narrow", 1));
    narrow.spec.as_mut().expect("spec").node_selector =
        Some([(racks.key.clone(), racks.rack("r1"))].into());
    env.create_pod(narrow).await;
    let message = env.wait_workload_message("narrow", "no single").await;
    assert!(message.contains("the most any"), "{message}");
    env.cleanup().await;
    racks.remove().await;
}

#[tokio::test]
async fn a_jobs_pods_asking_in_their_template_all_run_in_one_rack() {
    let Some(mut env) = TestEnv::new_or_skip("topo-job").await else {
        return;
    };
    let racks = Racks::create(&env).await;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    // 3 pods of 1.5 cpu at once: only r2's 3-cpu nodes hold two each.
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "shuffle", "labels": {"sluice.dev/queue": queue}},
        "spec": {"parallelism": 3, "completions": 3, "template": {
            "metadata": {"annotations": {"sluice.dev/kwok-hold": "true",
                "sluice.dev/topology-required": racks.key}},
            "spec": {"restartPolicy": "Never",
                "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "w", "image": "busybox",
                    "resources": {"requests": {"cpu": "1500m", "memory": "64Mi"}}}]}}},
    }))
    .expect("job");
    create(
        &Api::<Job>::namespaced(env.client.clone(), &env.namespace),
        &job,
    )
    .await;
    let job_pods = "batch.kubernetes.io/job-name=shuffle";
    let seen = racks_selected(&env, &racks, job_pods, 3, Duration::from_secs(90)).await;
    assert_eq!(seen, BTreeSet::from([racks.rack("r2")]));
    env.cleanup().await;
    racks.remove().await;
}

#[tokio::test]
async fn spark_executors_all_run_in_one_rack() {
    let Some(mut env) = TestEnv::new_or_skip("topo-spark").await else {
        return;
    };
    let racks = Racks::create(&env).await;
    let queue = env.queue("q", json!({"cpu": "20"}), "BestEffortFIFO").await;
    env.create_service_account("spark").await;
    // The racks are tainted: the executors tolerate it through a pod template (Spark has no
    // toleration conf).
    let template = std::env::temp_dir().join(format!("{}-executor.yaml", env.namespace));
    let tolerate = format!(
        "apiVersion: v1\nkind: Pod\nspec:\n  tolerations:\n  - {{key: {TAINT}, operator: Exists, effect: NoSchedule}}\n"
    );
    std::fs::write(&template, tolerate).expect("pod template");
    // Up to 4 executors of 1 cpu, requested as dynamic allocation goes: either rack holds them.
    let confs = [
        format!("spark.kubernetes.executor.label.sluice.dev/queue={queue}"),
        format!(
            "spark.kubernetes.executor.annotation.sluice.dev/topology-required={}",
            racks.key
        ),
        format!(
            "spark.kubernetes.executor.podTemplateFile={}",
            template.display()
        ),
    ];
    let spark = submit_dynamic_spark(&env, "racked", 4, &confs).await;
    let seen = racks_selected(
        &env,
        &racks,
        "spark-role=executor",
        4,
        Duration::from_secs(240),
    )
    .await;
    assert_eq!(seen.len(), 1, "Spark's executors all in one rack: {seen:?}");
    drop(spark);
    env.cleanup().await;
    racks.remove().await;
}
