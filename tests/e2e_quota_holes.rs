//! The quota promise, second round (issue 31), end to end on the local control plane with sluice
//! running on the host: each test makes one attack of API calls, as a namespace user could, and
//! checks that every pod counts in the queue its own label names and that the refusal names what
//! was wrong. Run with `hack/test.sh --test e2e_quota_holes`.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use support::*;

/// Per queue (as each pod's own label names it), the cpu (milli) of the pods that hold quota.
fn held_by_label(pods: &[Pod], queue: &str) -> i64 {
    holding(pods)
        .into_iter()
        .filter(|p| p.labels().get("sluice.dev/queue").map(String::as_str) == Some(queue))
        .map(cpu_millis)
        .sum()
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// Hole 1 as the issue made it: a small pod names a queue that does not exist and workload w1; a
/// 2-cpu pod of a real 2-cpu queue then joins w1. Once a pass has seen w1, the join is refused
/// with both queues named, no ledger is recorded for the ghost queue, and the real queue holds
/// what its own pods hold.
#[tokio::test]
async fn a_pod_joining_a_workload_of_a_ghost_queue_is_refused_naming_both_queues() {
    let (env, queue) = env_and_queue!("ghost", json!({"cpu": "2"}), "StrictFIFO");
    let ghost = format!("{}-ghost", env.namespace);
    let w1 = [("sluice.dev/workload", "w1")];
    env.create_pod(with_labels(pod("small", &ghost, "100m"), &w1))
        .await;
    let big = with_labels(pod("big", &queue, "2"), &w1);
    // A dry run goes through the same webhook: refused once a pass has seen w1 in the ghost queue.
    let refusal = wait_for(
        "the webhook to know workload w1",
        Duration::from_secs(30),
        || async {
            let refused = env.pods().create(&dry_run(), &big).await.err()?;
            refused.to_string().contains(&ghost).then_some(refused)
        },
    )
    .await
    .to_string();
    assert!(
        refusal.contains(&format!("{queue:?}")) && refusal.contains(&format!("{ghost:?}")),
        "both queues are named: {refusal}"
    );
    let err = env.refused(&big, "the join is refused").await;
    assert!(err.contains("w1"), "{err}");
    // The real queue still admits its own pods, and holds no more than its quota.
    env.create_pod(pod("own", &queue, "2")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let pods = env.list_pods().await;
    assert_eq!(held_by_label(&pods, &queue), 2000);
    assert!(
        env.workloads().get_opt("w1").await.expect("get").is_none(),
        "no ledger is recorded for a queue that does not exist"
    );
    env.cleanup().await;
}

/// Hole 1, variant: the ledger of admitted pods is edited to name another tenant's queue. The pods
/// keep counting in their own queue (full: the next pod waits), the other queue shows nothing, and
/// the controller writes the pods' queue back into the ledger it recorded.
#[tokio::test]
async fn moving_a_ledger_to_another_queue_moves_none_of_its_pods() {
    let (mut env, queue) = env_and_queue!("ledgermove", json!({"cpu": "2"}), "BestEffortFIFO");
    let theirs = env
        .queue("theirs", json!({"cpu": "8"}), "BestEffortFIFO")
        .await;
    let w1 = [("sluice.dev/workload", "w1")];
    env.create_pod(with_labels(pod("a", &queue, "1"), &w1))
        .await;
    env.create_pod(with_labels(pod("b", &queue, "1"), &w1))
        .await;
    env.wait_queue_counts(&queue, 0, 2).await;
    let ledger = wait_for("ledger w1", Duration::from_secs(30), || async {
        env.workloads().get_opt("w1").await.ok().flatten()
    })
    .await;
    assert_eq!(ledger.spec.queue_name, queue);
    env.workloads()
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"queueName": theirs}})),
        )
        .await
        .expect("an admin may edit a ledger");
    env.create_pod(with_labels(pod("c", &queue, "1"), &w1))
        .await;
    env.wait_workload(
        "w1",
        "the controller to write the pods' queue back",
        Duration::from_secs(30),
        |l| l.spec.queue_name == queue,
    )
    .await;
    env.wait_queue_counts(&queue, 1, 2).await;
    env.wait_queue_counts(&theirs, 0, 0).await;
    assert_eq!(held_by_label(&env.list_pods().await, &queue), 2000);
    env.cleanup().await;
}

/// Hole 2: the labels an integration joins pods by, and the annotations a gang is read from, are
/// fixed on a governed pod: moving a Ray worker into another cluster's ledger, or growing a pod's
/// gang, is refused naming the key; an unrelated label may still change.
#[tokio::test]
async fn relabelling_a_governed_pod_into_another_workload_is_refused_naming_the_key() {
    let (env, queue) = env_and_queue!("relabel", json!({"cpu": "4"}), "BestEffortFIFO");
    let worker = with_labels(
        pod("worker", &queue, "1"),
        &[
            ("ray.io/cluster", "mine"),
            ("ray.io/node-type", "worker"),
            ("ray.io/group", "cpu"),
        ],
    );
    env.create_pod(worker).await;
    let err = env
        .patch_refused(
            "worker",
            json!({"metadata": {"labels": {"ray.io/cluster": "theirs"}}}),
            "moving it to another cluster is refused",
        )
        .await;
    assert!(err.to_string().contains("ray.io/cluster"), "{err}");

    env.create_pod(with_labels(
        pod("plain", &queue, "1"),
        &[("sluice.dev/workload", "w")],
    ))
    .await;
    let err = env
        .patch_refused(
            "plain",
            json!({"metadata": {"annotations": {"sluice.dev/min-count": "100000"}}}),
            "growing its gang is refused",
        )
        .await;
    assert!(err.to_string().contains("sluice.dev/min-count"), "{err}");
    env.pods()
        .patch(
            "plain",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "blue"}}})),
        )
        .await
        .expect("an unrelated label may change");
    env.cleanup().await;
}

/// Holes 4 and 9: what could never fit is refused at creation with the numbers: a pod larger than
/// its queue, and a gang (`sluice.dev/min-count`) of absurd size; in a StrictFIFO queue neither is
/// left to block the pods behind it.
#[tokio::test]
async fn a_pod_or_gang_that_could_never_fit_is_refused_with_the_numbers() {
    let (env, queue) = env_and_queue!("neverfits", json!({"cpu": "2"}), "StrictFIFO");
    let message = env
        .refused(&pod("huge", &queue, "3"), "3 cpu in a 2-cpu queue")
        .await;
    assert!(
        message.contains("needs 3 cpu") && message.contains("a quota of 2 cpu"),
        "{message}"
    );
    let gang = with_annotations(
        with_labels(pod("gang", &queue, "100m"), &[("sluice.dev/workload", "g")]),
        &[("sluice.dev/min-count", "100000")],
    );
    let err = env.refused(&gang, "a gang of 100000").await;
    assert!(err.contains("100000"), "{err}");
    // Nothing blocks the queue: an ordinary pod is admitted.
    env.create_pod(pod("fits", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.cleanup().await;
}

fn scavengers(env: &TestEnv) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sluice.dev", "v1alpha1", "ScavengerJob"),
        "scavengerjobs",
    );
    Api::namespaced_with(env.client.clone(), &env.namespace, &resource)
}

/// Hole 8: a ScavengerJob's parallelism, resources and queue are what its running pods hold of
/// its queue's scavengerQuota: the API server refuses changing them once it exists.
#[tokio::test]
async fn shrinking_or_unqueueing_a_scavenger_job_is_refused() {
    let mut env = env_or_skip!("sjfixed");
    let queue = env
        .queue_with_spec(
            "q",
            json!({"quota": {"cpu": "8"}, "scavengerQuota": {"cpu": "4"}}),
        )
        .await;
    let sj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": "soak"},
        "spec": {"image": "busybox", "parallelism": 2, "queueName": queue,
                 "resources": {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}},
    }))
    .expect("scavengerjob");
    create(&scavengers(&env), &sj).await;
    for (change, what) in [
        (json!({"spec": {"parallelism": 1}}), "parallelism"),
        (json!({"spec": {"queueName": null}}), "queueName"),
        (
            json!({"spec": {"resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}}}),
            "resources",
        ),
    ] {
        let err = scavengers(&env)
            .patch("soak", &PatchParams::default(), &Patch::Merge(change))
            .await
            .expect_err("the change is refused");
        assert!(
            err.to_string().contains("fixed once a ScavengerJob exists"),
            "{what}: {err}"
        );
    }
    env.cleanup().await;
}

/// Hole 11: Kubernetes 1.36 accepts an in-place resize of a pod that is still behind a scheduling
/// gate (checked on the local cluster: a shrink goes through). sluice refuses one that grows the
/// pod: a pass may have decided to admit it at its old size.
#[tokio::test]
async fn growing_a_gated_pod_by_resize_is_refused() {
    let (env, queue) = env_and_queue!("resizegated", json!({"cpu": "1"}), "StrictFIFO");
    env.create_pod(pod("holder", &queue, "1")).await;
    let waiting = env.create_pod(pod("waiting", &queue, "1")).await;
    assert!(is_gated(&waiting), "the queue is full: it waits");
    let err = env
        .pods()
        .patch_subresource(
            "resize",
            "waiting",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [
                {"name": "work", "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}}]}})),
        )
        .await
        .expect_err("growing a gated pod is refused");
    assert!(
        err.to_string().contains("pods.sluice.dev")
            && err.to_string().contains("may shrink it but not grow it"),
        "refused by sluice's webhook, saying why: {err}"
    );
    env.wait_queue_counts(&queue, 1, 1).await;
    assert_eq!(held_by_label(&env.list_pods().await, &queue), 1000);
    env.cleanup().await;
}

/// Hole 7: a victim with a day-long `terminationGracePeriodSeconds` (one that ignores SIGTERM
/// keeps its quota that long) is evicted with sluice's grace cap (`--eviction-grace-period`, 2
/// minutes by default), not its own: the API server records the grace given on the pod.
#[tokio::test]
async fn a_victim_asking_a_day_to_stop_is_evicted_with_the_grace_cap() {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let mut env = env_or_skip!("gracecap");
    let classes = Priorities::create(&env, &[("low", 0), ("high", 1000)]).await;
    let (low, high) = (classes.name("low"), classes.name("high"));
    let queue = env.queue("q", json!({"cpu": "1"}), "StrictFIFO").await;
    let mut victim = pod("victim", &queue, "1");
    let spec = victim.spec.as_mut().expect("spec");
    spec.priority_class_name = Some(low.clone());
    spec.termination_grace_period_seconds = Some(86_400);
    env.create_pod(victim).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let watch = watcher(
        env.pods(),
        watcher::Config::default().fields("metadata.name=victim"),
    )
    .applied_objects();
    let mut preemptor = pod("preemptor", &queue, "1");
    preemptor.spec.as_mut().expect("spec").priority_class_name = Some(high.clone());
    env.create_pod(preemptor).await;
    let deleting = tokio::time::timeout(
        Duration::from_secs(60),
        watch
            .filter_map(
                |p| async move { p.ok().filter(|p| p.metadata.deletion_timestamp.is_some()) },
            )
            .boxed()
            .next(),
    )
    .await
    .expect("the victim is evicted within 60 s")
    .expect("a watch event");
    assert_eq!(
        deleting.metadata.deletion_grace_period_seconds,
        Some(120),
        "the eviction gave the cap, not the pod's day"
    );
    drop(classes);
    env.cleanup().await;
}

/// Issue 40, found as a new user would: a Job whose gang (parallelism 8) is above its queue's own
/// quota (4 cpu) but within what its cohort can lend (another 4) is not refused as one that could
/// never start: it is admitted whole, borrowing. One above the whole cohort still is refused.
#[tokio::test]
async fn a_job_whose_gang_fits_only_with_its_cohorts_help_is_admitted_by_borrowing() {
    use k8s_openapi::api::batch::v1::Job;
    let mut env = env_or_skip!("cohortgang");
    let cohort = env.namespace.clone();
    let mine = env
        .queue_with_spec("mine", json!({"quota": {"cpu": "4"}, "cohort": cohort}))
        .await;
    env.queue_with_spec("lender", json!({"quota": {"cpu": "4"}, "cohort": cohort}))
        .await;
    let job = |name: &str, parallelism: i32| -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {"sluice.dev/queue": mine}},
            // kwok holds these pods Running (it completes a Job's pods otherwise).
            "spec": {"parallelism": parallelism, "completions": parallelism, "template": {
                "metadata": {"annotations": {"sluice.dev/kwok-hold": "true"}},
                "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
        }))
        .expect("job")
    };
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.namespace);
    let err = jobs
        .create(&PostParams::default(), &job("nine", 9))
        .await
        .expect_err("9 cpu: more than the whole cohort");
    assert!(
        err.to_string().contains("can borrow at most 4 cpu more"),
        "{err}"
    );
    jobs.create(&PostParams::default(), &job("eight", 8))
        .await
        .expect("8 cpu fits with the cohort's help");
    let pods = wait_for(
        "the Job's 8 pods admitted",
        Duration::from_secs(60),
        || async {
            let pods = env.list_pods().await;
            (holding(&pods).len() == 8).then_some(pods)
        },
    )
    .await;
    assert_eq!(held_by_label(&pods, &mine), 8000, "4 own + 4 borrowed");
    env.cleanup().await;
}
