//! The quota promise against a hostile namespace user (issue 16), end to end on the local control
//! plane with sluice running on the host: each test tries one attack and checks that the queue's
//! admitted pods stay within its quota, and that the refusal names what was wrong.
//! Run with `hack/test.sh --test e2e_attacks`.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::*;

const TOKEN_ANNOTATION: &str = "sluice.dev/admitted-at-creation";

/// The cpu (milli) of the queue's pods that hold quota: admitted, not ended.
fn admitted_cpu(pods: &[Pod]) -> i64 {
    holding(pods).iter().map(|p| cpu_millis(p)).sum()
}

/// Waits until `name` is admitted (no gate) and returns it.
async fn wait_admitted(env: &TestEnv, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} to be admitted"),
        Duration::from_secs(30),
        || async { env.pods().get(name).await.ok().filter(|p| !is_gated(p)) },
    )
    .await
}

/// Hole 1: a pod admitted at creation carries its token; copying that token onto bigger pods
/// (replay) once let them in ungated with no room check: 8 cpu in a 2-cpu queue. (Each big pod
/// fits the queue alone, so it is not refused as one that could never start: issue 31.)
#[tokio::test]
async fn big_pods_replaying_an_admission_token_are_gated_and_the_quota_holds() {
    let (env, queue) = env_and_queue!("replay", json!({"cpu": "2"}), "BestEffortFIFO");
    let small = env.create_pod(pod("small", &queue, "1")).await;
    let token = small
        .annotations()
        .get(TOKEN_ANNOTATION)
        .cloned()
        .expect("an empty queue admits its first pod at creation, with a token");
    assert!(!is_gated(&small));

    let replays = (0..4).map(|i| {
        with_annotations(
            pod(&format!("big-{i}"), &queue, "2"),
            &[(TOKEN_ANNOTATION, &token)],
        )
    });
    for created in env.create_pods_at_once(replays).await {
        assert!(
            is_gated(&created),
            "{} carries a copied token but must wait behind the gate",
            created.name_any()
        );
        assert!(
            !created.annotations().contains_key(TOKEN_ANNOTATION),
            "the copied token is removed from a gated pod"
        );
    }
    env.wait_queue_counts(&queue, 4, 1).await;
    let pods = env.list_pods().await;
    assert_eq!(admitted_cpu(&pods), 1000, "only the small pod holds quota");
    env.cleanup().await;
}

/// Hole 2: the mutating webhook runs before the API server validates the pod; a negative request
/// once counted as negative usage and let 3 cpu into a 2-cpu queue.
#[tokio::test]
async fn a_pod_with_a_negative_cpu_request_is_refused_naming_the_field() {
    let (env, queue) = env_and_queue!("negative", json!({"cpu": "2"}), "BestEffortFIFO");
    let message = env
        .refused(
            &pod("minus", &queue, "-1000"),
            "a negative request is refused",
        )
        .await;
    assert!(
        message.contains("spec.containers[0].resources.requests.cpu")
            && message.contains("negative"),
        "the refusal names the field and the rule: {message}"
    );
    // The quota is still whole: two 1-cpu pods are admitted, a third waits.
    for i in 0..3 {
        env.create_pod(pod(&format!("p{i}"), &queue, "1")).await;
    }
    env.wait_queue_counts(&queue, 1, 2).await;
    assert_eq!(admitted_cpu(&env.list_pods().await), 2000);
    env.cleanup().await;
}

/// A RayCluster in `queue`: a 1-cpu head, one worker of `worker_cpu`.
fn raycluster_with_worker_cpu(name: &str, queue: &str, worker_cpu: &str) -> DynamicObject {
    let container =
        |n: &str| ray_container(n, if n == "ray-worker" { worker_cpu } else { "1" }, "1Gi");
    raycluster(
        name,
        Some(queue),
        raycluster_spec([1, 1, 4], container, json!({})),
    )
}

/// Hole 2: application templates are never validated as pods, so a negative worker request
/// reached the DynamicWorkload and its reservations.
#[tokio::test]
async fn a_raycluster_with_a_negative_worker_cpu_is_refused_naming_the_field() {
    let (env, queue) = env_and_queue!("ray-negative", json!({"cpu": "4"}), "BestEffortFIFO");
    let err = rayclusters(&env)
        .create(
            &PostParams::default(),
            &raycluster_with_worker_cpu("minus", &queue, "-8"),
        )
        .await
        .expect_err("a negative template request is refused");
    let message = err.to_string();
    assert!(
        message.contains("workerGroupSpecs[0]") && message.contains("negative"),
        "the refusal names the field and the rule: {message}"
    );
    env.cleanup().await;
}

/// Hole 4: relabelling an admitted application moved its running usage into another queue with
/// no fit check.
#[tokio::test]
async fn relabelling_a_running_raycluster_into_another_queue_is_refused() {
    let mut env = env_or_skip!("relabel");
    let home = env
        .queue("home", json!({"cpu": "4"}), "BestEffortFIFO")
        .await;
    let tiny = env
        .queue("tiny", json!({"cpu": "1"}), "BestEffortFIFO")
        .await;
    let api = rayclusters(&env);
    api.create(
        &PostParams::default(),
        &raycluster_with_worker_cpu("rc", &home, "1"),
    )
    .await
    .expect("create raycluster");
    env.wait_queue_counts(&home, 0, 2).await;
    let patch = json!({"metadata": {"labels": {"sluice.dev/queue": tiny}}});
    let err = api
        .patch("rc", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("moving an admitted application to another queue is refused");
    let message = err.to_string();
    assert!(
        message.contains("delete it and create it again"),
        "the refusal says how to move it: {message}"
    );
    let unlabel = json!({"metadata": {"labels": {"sluice.dev/queue": null}}});
    api.patch("rc", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .expect_err("removing the queue label is refused too");
    // Other edits still go through.
    let other = json!({"metadata": {"labels": {"team": "a"}}});
    api.patch("rc", &PatchParams::default(), &Patch::Merge(&other))
        .await
        .expect("an edit that keeps the queue is allowed");
    env.cleanup().await;
}

/// Hole 5: pod-level resources (`spec.resources`) were not counted: a pod asking 8 cpu at pod
/// level and 100m in its container was admitted into a 2-cpu queue.
#[tokio::test]
async fn a_pod_level_cpu_request_counts_against_the_quota() {
    let (env, queue) = env_and_queue!("podlevel", json!({"cpu": "2"}), "BestEffortFIFO");
    let pod_level = |name: &str, cpu: &str| {
        let mut p = pod(name, &queue, "100m");
        p.spec.as_mut().expect("spec").resources = Some(
            serde_json::from_value(json!({"requests": {"cpu": cpu, "memory": "64Mi"}}))
                .expect("resources"),
        );
        p
    };
    // Counted at 8 cpu, not 100m: more than the queue could ever give, refused with the numbers.
    let err = env
        .refused(
            &pod_level("huge", "8"),
            "8 cpu in a 2-cpu queue could never start",
        )
        .await;
    assert!(err.contains("needs 8 cpu"), "{err}");
    env.create_pod(pod("holder", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let created = env.create_pod(pod_level("pod-level", "2")).await;
    assert!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .is_some(),
        "the API server keeps pod-level resources (PodLevelResources is on)"
    );
    assert!(is_gated(&created), "2 cpu does not fit the 1 cpu left");
    env.wait_queue_counts(&queue, 1, 1).await;
    env.cleanup().await;
}

/// Hole 5: in-place resize (`pods/resize`) grew admitted pods past the quota.
#[tokio::test]
async fn an_inplace_resize_growing_an_admitted_pod_is_refused_and_shrinking_is_allowed() {
    let (env, queue) = env_and_queue!("resize", json!({"cpu": "2"}), "BestEffortFIFO");
    // Admitted but never scheduled (no node matches): the API server refuses resizes of pods
    // bound to kwok nodes on its own ("node without support for resize") before any webhook.
    let mut unscheduled = pod("p", &queue, "1");
    unscheduled.spec.as_mut().expect("spec").node_selector =
        Some([("sluice.dev/no-such-node".to_string(), "true".to_string())].into());
    env.create_pod(unscheduled).await;
    wait_admitted(&env, "p").await;
    let resize = |cpu: &str| json!({"spec": {"containers": [{"name": "work", "resources": {"requests": {"cpu": cpu}}}]}});
    let err = env
        .pods()
        .patch_subresource(
            "resize",
            "p",
            &PatchParams::default(),
            &Patch::Strategic(resize("16")),
        )
        .await
        .expect_err("growing an admitted pod in place is refused");
    let message = err.to_string();
    assert!(
        message.contains("cpu 1 -> 16"),
        "the refusal gives the numbers: {message}"
    );
    env.pods()
        .patch_subresource(
            "resize",
            "p",
            &PatchParams::default(),
            &Patch::Strategic(resize("500m")),
        )
        .await
        .expect("shrinking is allowed");
    assert!(admitted_cpu(&env.list_pods().await) <= 2000);
    env.cleanup().await;
}
