//! Ray, end to end: the real KubeRay operator (started by hack/cluster.sh --with-kuberay) reconciles
//! labelled RayClusters; sluice gates the head and worker pods it creates.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

/// A RayCluster in `queue` of 1-cpu pods: `replicas` workers, at least `min`, at most 4.
fn cluster(name: &str, queue: &str, replicas: i64, min: i64) -> DynamicObject {
    let container = |n: &str| ray_container(n, "1", "1Gi");
    raycluster(
        name,
        Some(queue),
        raycluster_spec([replicas, min, 4], container, json!({})),
    )
}

/// How many of `pods` hold quota and belong to the RayCluster `cluster`.
fn holding_of_cluster(pods: &[Pod], cluster: &str) -> usize {
    holding(pods)
        .iter()
        .filter(|p| p.labels().get("ray.io/cluster").map(String::as_str) == Some(cluster))
        .count()
}

async fn scale(api: &Api<DynamicObject>, name: &str, replicas: i64, min: i64) {
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/minReplicas", "value": min},
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas},
    ]))
    .expect("patch");
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .unwrap_or_else(|e| panic!("scale {name}: {e}"));
}

#[tokio::test]
async fn rayclusters_are_admitted_as_gangs_grow_wait_and_give_quota_back() {
    let (env, queue) = env_and_queue!("ray", json!({"cpu": "3"}), "BestEffortFIFO");
    let api = rayclusters(&env);

    // A: head + 2 minimum workers = 3 cpu: admitted together.
    create(&api, &cluster("a", &queue, 2, 2)).await;
    env.wait_queue_counts(&queue, 0, 3).await;
    let dwl = env
        .wait_workload(
            "raycluster-a",
            "raycluster-a's DynamicWorkload",
            Duration::from_secs(30),
            |_| true,
        )
        .await;
    assert_eq!(
        pod_set_minimums(&dwl),
        vec![("head".to_string(), 1), ("workers".to_string(), 2)]
    );
    assert_eq!(
        dwl.spec.source.as_ref().map(|s| s.kind.as_str()),
        Some("RayCluster")
    );
    assert_eq!(
        dwl.metadata
            .owner_references
            .as_ref()
            .map(|o| o[0].name.as_str()),
        Some("a"),
        "owned by its RayCluster"
    );

    // B: head + 1 worker = 2 cpu, no room: nothing of it is admitted.
    create(&api, &cluster("b", &queue, 1, 1)).await;
    env.wait_queue_counts(&queue, 2, 3).await;
    let pods = env.list_pods().await;
    let b_admitted = holding_of_cluster(&pods, "b");
    assert_eq!(b_admitted, 0, "no part of B's gang runs");
    let message = wait_for("B's message", Duration::from_secs(30), || async {
        env.workloads()
            .get("raycluster-b")
            .await
            .ok()?
            .status
            .filter(|s| s.pending_pods == 2)
            .map(|s| s.message)
    })
    .await;
    assert_eq!(
        message,
        format!("needs 2 cpu more in queue {queue}: 3/3 cpu used, 0 cpu reserved")
    );

    // A grows like the autoscaler would: the new worker waits.
    scale(&api, "a", 3, 2).await;
    env.wait_queue_counts(&queue, 3, 3).await;

    // A shrinks to its head: its workers are deleted, the quota goes back, B's gang is admitted.
    scale(&api, "a", 0, 0).await;
    env.wait_queue_counts(&queue, 0, 3).await;
    let pods = env.list_pods().await;
    let by_cluster = |c: &str| holding_of_cluster(&pods, c);
    assert_eq!((by_cluster("a"), by_cluster("b")), (1, 2));
    env.cleanup().await;
}

#[tokio::test]
async fn a_raycluster_whose_gang_can_never_fit_is_refused_at_submit_time() {
    let (env, queue) = env_and_queue!("ray-deny", json!({"cpu": "2"}), "BestEffortFIFO");
    let api = rayclusters(&env);
    // The queue cache of the webhook may lag the queue's creation by a moment: retry until it answers
    // about the quota rather than a missing queue.
    let message = wait_for(
        "a denial that names the quota",
        Duration::from_secs(30),
        || async {
            match api
                .create(&PostParams::default(), &cluster("big", &queue, 3, 3))
                .await
            {
                Ok(_) => panic!("a 4-cpu gang in a 2-cpu queue must be refused"),
                Err(e) => Some(e.to_string()).filter(|m| m.contains("quota")),
            }
        },
    )
    .await;
    assert!(
        message.contains("needs 4 cpu") && message.contains("quota of 2 cpu"),
        "{message}"
    );
    let err = api
        .create(
            &PostParams::default(),
            &cluster("lost", "no-such-queue", 1, 1),
        )
        .await
        .expect_err("missing queue");
    assert!(err.to_string().contains("does not exist"), "{err}");
    env.cleanup().await;
}
