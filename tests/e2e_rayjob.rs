//! RayJobs, end to end: the real KubeRay operator (hack/cluster.sh --with-kuberay) creates the
//! RayJob's RayCluster and, once it is ready, the submitter Job; the Job controller creates the
//! submitter pod. sluice counts all of it in one DynamicWorkload, `rayjob-<name>`.

mod support;

use std::time::Duration;

use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use sluice::api::WorkloadPhase;
use support::*;

/// A RayCluster spec of 1-cpu pods: the head and `min` workers (at most 4).
fn cluster_spec(min: i64) -> Value {
    let container = |n: &str| ray_container(n, "1", "1Gi");
    raycluster_spec([min, min, 4], container, json!({}))
}

fn rayjobs(env: &TestEnv) -> Api<DynamicObject> {
    dynamic_api(env, ("ray.io", "v1", "RayJob"), "rayjobs")
}

fn rayjob(name: &str, queue: &str, cluster: Value, extra: Value) -> DynamicObject {
    let mut body = json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": cluster},
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        body["spec"][k] = v;
    }
    serde_json::from_value(body).expect("rayjob")
}

fn refusal(result: Result<DynamicObject, kube::Error>) -> String {
    match result {
        Ok(app) => panic!("accepted: {:?}", app.metadata.name),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_rayjob_is_one_workload_for_its_cluster_and_submitter_and_gives_it_back_when_it_ends() {
    let mut env = env_or_skip!("rayjob");
    // Head 1 + one worker 1 + the submitter's 500m = 2.5 cpu.
    let queue = env.queue("q", json!({"cpu": "3"}), "BestEffortFIFO").await;
    let rayjobs = rayjobs(&env);
    // The deadline ends it (kwok runs no Ray dashboard to report the job's end): Failed, and
    // shutdownAfterJobFinishes has KubeRay delete the cluster.
    let extra = json!({"shutdownAfterJobFinishes": true, "ttlSecondsAfterFinished": 0, "activeDeadlineSeconds": 25});
    rayjobs
        .create(
            &PostParams::default(),
            &rayjob("rj", &queue, cluster_spec(1), extra),
        )
        .await
        .expect("create rj");

    let dwl = env
        .wait_workload(
            "rayjob-rj",
            "rayjob-rj's DynamicWorkload",
            Duration::from_secs(30),
            |_| true,
        )
        .await;
    assert_eq!(
        pod_set_minimums(&dwl),
        [
            ("head".to_string(), 1),
            ("workers".to_string(), 1),
            ("submitter".to_string(), 1)
        ]
    );

    // KubeRay's RayCluster, owned by the RayJob, carries the queue; it has no ledger of its own.
    let clusters = rayclusters(&env);
    let cluster = wait_first(
        &clusters,
        &ListParams::default(),
        "the RayJob's RayCluster",
        Duration::from_secs(30),
    )
    .await;
    let cluster_name = cluster.metadata.name.clone().unwrap_or_default();
    // The head and the worker admitted as the RayJob's gang, with room kept for the submitter.
    env.wait_workload_status(
        "rayjob-rj",
        "rayjob-rj admitted",
        Duration::from_secs(60),
        |s| {
            s.pod_sets
                .iter()
                .filter(|p| p.name != "submitter")
                .all(|p| p.admitted + p.running >= 1)
        },
    )
    .await;
    assert!(
        env.workloads()
            .get_opt(&format!("raycluster-{cluster_name}"))
            .await
            .expect("get")
            .is_none(),
        "the RayJob's RayCluster is not counted twice"
    );
    let workloads = env
        .workloads()
        .list(&ListParams::default())
        .await
        .expect("list");
    assert_eq!(
        workloads.items.len(),
        1,
        "one DynamicWorkload in the namespace"
    );

    // The submitter pod KubeRay's Job creates is the RayJob's too (once the cluster is ready).
    let submitter = wait_for("the submitter pod", Duration::from_secs(60), || async {
        env.pods_labelled("batch.kubernetes.io/job-name=rj")
            .await
            .into_iter()
            .next()
    })
    .await;
    let labels = submitter.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("sluice.dev/workload").map(String::as_str),
        Some("rayjob-rj")
    );
    assert_eq!(
        labels.get("sluice.dev/pod-set").map(String::as_str),
        Some("submitter")
    );

    // The deadline passes: the RayJob fails, KubeRay deletes the cluster, the quota comes back.
    env.wait_workload_phase("rayjob-rj", WorkloadPhase::Failed, Duration::from_secs(90))
        .await;
    wait_for(
        "the cluster's pods to be gone",
        Duration::from_secs(60),
        || async {
            env.pods_labelled(&format!("ray.io/cluster={cluster_name}"))
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    env.wait_queue_counts(&queue, 0, 0).await;
    env.cleanup().await;
}

#[tokio::test]
async fn hostile_rayjobs_and_clusters_are_refused_naming_the_field() {
    let (env, queue) = env_and_queue!("rayjob-hostile", json!({"cpu": "3"}), "BestEffortFIFO");
    let rayjobs = rayjobs(&env);
    let create = |app: DynamicObject| {
        let rayjobs = rayjobs.clone();
        async move { rayjobs.create(&PostParams::default(), &app).await }
    };

    // Larger than the quota: the cluster's gang and the submitter, with the numbers.
    let err = refusal(create(rayjob("big", &queue, cluster_spec(2), json!({}))).await);
    assert!(
        err.contains("needs 3.5 cpu") && err.contains("quota of 3 cpu"),
        "{err}"
    );

    // A huge rayClusterSpec: more worker groups than sluice counts.
    let mut huge = cluster_spec(0);
    let group = huge["workerGroupSpecs"][0].clone();
    huge["workerGroupSpecs"] = Value::Array(
        (0..65)
            .map(|i| {
                let mut g = group.clone();
                g["groupName"] = json!(format!("g{i}"));
                g
            })
            .collect(),
    );
    let err = refusal(create(rayjob("huge", &queue, huge, json!({}))).await);
    assert!(
        err.contains("spec.rayClusterSpec.workerGroupSpecs: 65 worker groups"),
        "{err}"
    );

    // A worker group named like the submitter's pod set.
    let mut clash = cluster_spec(0);
    clash["workerGroupSpecs"][0]["groupName"] = json!("submitter");
    let err = refusal(create(rayjob("clash", &queue, clash, json!({}))).await);
    assert!(
        err.contains("spec.rayClusterSpec.workerGroupSpecs[0].groupName"),
        "{err}"
    );

    // A RayCluster of its own claiming a RayJob's label.
    let mut spec = cluster_spec(0);
    spec["headGroupSpec"]["template"]["metadata"] =
        json!({"labels": {"sluice.dev/ray-job": "victim"}});
    let stray: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "stray", "labels": {"sluice.dev/queue": queue}},
        "spec": spec,
    }))
    .expect("raycluster");
    let err = refusal(
        rayclusters(&env)
            .create(&PostParams::default(), &stray)
            .await,
    );
    assert!(
        err.contains("spec.headGroupSpec.template.metadata.labels[\\\"sluice.dev/ray-job\\\"]")
            || err.contains("spec.headGroupSpec.template.metadata.labels[\"sluice.dev/ray-job\"]"),
        "{err}"
    );
    env.cleanup().await;
}

/// Preemption reads the ledger the RayJob integration fills: a RayJob's workers above its
/// minimum go before anything of its gang.
#[tokio::test]
async fn preemption_takes_a_rayjobs_workers_above_the_minimum_first() {
    let mut env = env_or_skip!("rayjob-preempt");
    let classes = Priorities::create(&env, &[("low", 100), ("high", 1000)]).await;
    let (low, high) = (classes.name("low"), classes.name("high"));
    // Head 1 + 2 workers (minimum 1) + submitter 500m = 3.5 of 4 cpu.
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    let mut cluster = cluster_spec(1);
    cluster["workerGroupSpecs"][0]["replicas"] = json!(2);
    for template in [
        "/headGroupSpec/template/spec",
        "/workerGroupSpecs/0/template/spec",
    ] {
        if let Some(spec) = cluster.pointer_mut(template) {
            spec["priorityClassName"] = json!(low);
        }
    }
    rayjobs(&env)
        .create(
            &PostParams::default(),
            &rayjob("low", &queue, cluster, json!({})),
        )
        .await
        .expect("create low");
    let holding_workers = || async {
        let mut names: Vec<String> = env
            .pods_labelled("sluice.dev/ray-job=low,ray.io/node-type=worker")
            .await
            .into_iter()
            .filter(|p| !is_gated(p) && !is_ended(p) && p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        names
    };
    let before = wait_for("both workers admitted", Duration::from_secs(60), || async {
        let w = holding_workers().await;
        (w.len() == 2).then_some(w)
    })
    .await;
    let head = wait_for("the head admitted", Duration::from_secs(60), || async {
        env.pods_labelled("sluice.dev/ray-job=low,ray.io/node-type=head")
            .await
            .into_iter()
            .find(|p| !is_gated(p))
            .and_then(|p| p.metadata.name)
    })
    .await;

    // A high-priority pod of 1.5 cpu (whether the submitter has run or not, one worker's 1 cpu
    // makes it fit): one worker above the minimum goes, the head stays.
    let mut urgent = pod("urgent", &queue, "1500m");
    urgent.spec.as_mut().expect("spec").priority_class_name = Some(high.clone());
    env.create_pod(urgent).await;
    wait_for(
        "the urgent pod admitted",
        Duration::from_secs(60),
        || async {
            env.pods()
                .get("urgent")
                .await
                .ok()
                .filter(|p| !is_gated(p))
                .map(|_| ())
        },
    )
    .await;
    let after = holding_workers().await;
    assert_eq!(
        after.len(),
        1,
        "one worker taken, the minimum kept: {after:?}"
    );
    assert!(before.contains(&after[0]));
    let head_now = env.pods().get(&head).await.expect("the head");
    assert!(
        head_now.metadata.deletion_timestamp.is_none(),
        "the head stays"
    );
    drop(classes);
    env.cleanup().await;
}
