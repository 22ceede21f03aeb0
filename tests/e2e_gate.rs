//! The core gate, end to end on the local control plane with sluice running on the host.
//! Run with `hack/test.sh` (it brings the cluster and sluice up and down).

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use sluice::api::WorkloadPhase;
use support::*;

#[tokio::test]
async fn quota_holds_and_ended_pods_give_it_back() {
    let (env, queue) = env_and_queue!(
        "quota",
        json!({"cpu": "4", "memory": "8Gi"}),
        "BestEffortFIFO"
    );
    for i in 0..10 {
        env.create_pod(pod(&format!("p{i}"), &queue, "1")).await;
    }
    env.wait_queue_counts(&queue, 6, 4).await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 4, "exactly 4 admitted");
    assert_eq!(gated(&pods).len(), 6, "exactly 6 gated");

    // Every workload has its ledger; a waiting one says why.
    let waiting = gated(&pods)[0].name_any();
    let dwl = wait_for(
        "the DynamicWorkload of a waiting pod to explain why",
        Duration::from_secs(30),
        || async {
            let d = env.workloads().get(&waiting).await.ok()?;
            d.status
                .as_ref()
                .filter(|s| s.message.contains("needs 1 cpu more"))
                .map(|_| d.clone())
        },
    )
    .await;
    let status = dwl.status.expect("status");
    assert_eq!(status.phase, WorkloadPhase::Pending);
    assert_eq!(
        status.message,
        format!("needs 1 cpu more in queue {queue}: 4/4 cpu used, 0 cpu reserved")
    );

    // Delete two admitted pods: exactly two more are admitted.
    let admitted: Vec<String> = holding(&pods).iter().map(|p| p.name_any()).collect();
    for name in &admitted[..2] {
        env.delete_pod_now(name).await;
    }
    env.wait_queue_counts(&queue, 4, 4).await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 4);
    assert_eq!(gated(&pods).len(), 4);
    // A workload recorded from a pod goes with its last pod.
    for name in &admitted[..2] {
        wait_absent(&env.workloads(), name, Duration::from_secs(30)).await;
    }

    // Complete two: two more again.
    let running: Vec<String> = holding(&pods).iter().map(|p| p.name_any()).collect();
    end_pod(&env.pods(), &running[0], "Succeeded").await;
    end_pod(&env.pods(), &running[1], "Failed").await;
    env.wait_queue_counts(&queue, 2, 4).await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 4);
    assert_eq!(gated(&pods).len(), 2);
    env.cleanup().await;
}

#[tokio::test]
async fn a_gang_that_does_not_fit_waits_whole_and_says_what_is_missing() {
    let (env, queue) = env_and_queue!("gang", json!({"cpu": "3"}), "BestEffortFIFO");
    // One pod holds 1 cpu: room for 2 more, the gang needs 3.
    env.create_pod(pod("holder", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    for i in 0..3 {
        let p = with_annotations(
            with_labels(
                pod(&format!("gang-{i}"), &queue, "1"),
                &[("sluice.dev/workload", "gang")],
            ),
            &[("sluice.dev/min-count", "3")],
        );
        env.create_pod(p).await;
    }
    env.wait_queue_counts(&queue, 3, 1).await;
    let dwl = env
        .wait_workload(
            "gang",
            "the gang's DynamicWorkload to say what is missing",
            Duration::from_secs(30),
            |d| {
                d.status
                    .as_ref()
                    .is_some_and(|s| s.pending_pods == 3 && !s.message.is_empty())
            },
        )
        .await;
    let status = dwl.status.expect("status");
    assert_eq!(status.admitted_pods, 0);
    assert_eq!(
        status.message,
        format!("needs 1 cpu more in queue {queue}: 1/3 cpu used, 0 cpu reserved")
    );
    assert_eq!(dwl.spec.pod_sets[0].min_count, 3);

    // Free the room: the whole gang goes at once.
    env.delete_pod_now("holder").await;
    env.wait_queue_counts(&queue, 0, 3).await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 3);
    env.cleanup().await;
}

async fn strategy_run(strategy: &str) -> (bool, String) {
    let mut env = TestEnv::new(&strategy.to_lowercase()).await;
    let queue = env.queue("q", json!({"cpu": "4"}), strategy).await;
    env.create_pod(pod("running", &queue, "2")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.create_pod(pod("big", &queue, "3")).await;
    env.wait_queue_counts(&queue, 1, 1).await; // "big" seen and waiting before "small" exists
    env.create_pod(pod("small", &queue, "1")).await;
    let small_admitted = if strategy == "StrictFIFO" {
        env.wait_queue_counts(&queue, 2, 1).await;
        false
    } else {
        env.wait_queue_counts(&queue, 1, 2).await;
        true
    };
    let small: Pod = env.pods().get("small").await.expect("small");
    assert_eq!(!is_gated(&small), small_admitted);
    let message = env
        .wait_workload_status(
            "small",
            "small's DynamicWorkload status",
            Duration::from_secs(30),
            |_| true,
        )
        .await
        .message;
    env.cleanup().await;
    (small_admitted, message)
}

#[tokio::test]
async fn strict_fifo_holds_the_line_best_effort_lets_smaller_pods_pass() {
    if !cluster_or_skip() {
        return;
    }
    let (admitted, message) = strategy_run("StrictFIFO").await;
    assert!(!admitted);
    assert!(message.starts_with("waits behind "), "{message}");
    let (admitted, _) = strategy_run("BestEffortFIFO").await;
    assert!(admitted);
}

#[tokio::test]
async fn a_higher_priority_workload_goes_first() {
    let mut env = env_or_skip!("prio");
    // Ordering alone: with preemption on (the default), the high pod would evict the holder
    // (tests/e2e_preemption.rs covers that).
    let queue = env
        .queue_with_spec(
            "q",
            json!({"quota": {"cpu": "1"}, "queueingStrategy": "BestEffortFIFO",
                   "preemption": {"withinQueue": "Never"}}),
        )
        .await;
    let classes = Priorities::create(&env, &[("high", 1000)]).await;
    let high = classes.name("high");

    env.create_pod(pod("holder", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.create_pod(pod("early-low", &queue, "1")).await;
    env.wait_queue_counts(&queue, 1, 1).await;
    let mut late = pod("late-high", &queue, "1");
    late.spec.as_mut().expect("spec").priority_class_name = Some(high.clone());
    env.create_pod(late).await;
    env.wait_queue_counts(&queue, 2, 1).await;

    env.delete_pod_now("holder").await;
    env.wait_queue_counts(&queue, 1, 1).await;
    assert!(
        !is_gated(&env.pods().get("late-high").await.expect("pod")),
        "the high-priority pod was admitted"
    );
    assert!(
        is_gated(&env.pods().get("early-low").await.expect("pod")),
        "the earlier low-priority pod still waits"
    );
    drop(classes);
    env.cleanup().await;
}

#[tokio::test]
async fn a_user_cannot_remove_the_gate_or_relabel_a_governed_pod() {
    let (env, queue) = env_and_queue!("tamper", json!({"cpu": "1"}), "BestEffortFIFO");
    env.create_pod(pod("holder", &queue, "1")).await;
    env.create_pod(pod("waiting", &queue, "1")).await;
    env.wait_queue_counts(&queue, 1, 1).await;

    let remove_gate = json!([{"op": "remove", "path": "/spec/schedulingGates/0"}]);
    let patch: json_patch::Patch = serde_json::from_value(remove_gate).expect("patch");
    let err = env
        .pods()
        .patch(
            "waiting",
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .expect_err("the gate removal must be refused");
    let text = err.to_string();
    assert!(
        text.contains("sluice.dev/admission"),
        "message names the gate: {text}"
    );

    let relabel = json!({"metadata": {"labels": {"sluice.dev/queue": "elsewhere"}}});
    let err = env
        .patch_refused("waiting", &relabel, "relabelling must be refused")
        .await;
    assert!(err.to_string().contains("sluice.dev/"), "{err}");

    // Other edits stay allowed.
    let annotate = json!({"metadata": {"annotations": {"team": "research"}}});
    env.pods()
        .patch("waiting", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .expect("annotations are the user's");
    assert!(is_gated(&env.pods().get("waiting").await.expect("pod")));
    env.cleanup().await;
}

#[tokio::test]
async fn an_ungoverned_pod_is_untouched() {
    let env = env_or_skip!("plain");
    let plain: Pod = serde_json::from_value(json!({
        "metadata": {"name": "plain", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    let created = env.create_pod(plain).await;
    assert!(!is_gated(&created));
    assert!(
        created
            .labels()
            .keys()
            .all(|k| !k.starts_with("sluice.dev/"))
    );
    wait_for(
        "the ungoverned pod to run",
        Duration::from_secs(60),
        || async {
            let p = env.pods().get("plain").await.ok()?;
            (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
        },
    )
    .await;
    env.cleanup().await;
}

fn admitted_at_creation(pod: &Pod) -> bool {
    pod.annotations()
        .contains_key(sluice::api::AT_CREATION_ANNOTATION)
}

#[tokio::test]
async fn a_pod_that_fits_is_admitted_at_creation_and_a_burst_never_exceeds_the_quota() {
    let (env, queue) = env_and_queue!("atcreation", json!({"cpu": "5"}), "BestEffortFIFO");

    // Room and nobody waiting: the pod comes back from its creation without the gate.
    let first = env.create_pod(pod("first", &queue, "1")).await;
    assert!(!is_gated(&first), "admitted as it was created");
    assert!(admitted_at_creation(&first), "marked admitted at creation");

    // A burst of 20 concurrent creations against the 4 cpu left.
    let created = env
        .create_pods_at_once((0..20).map(|i| pod(&format!("burst-{i}"), &queue, "1")))
        .await;
    let ungated_at_creation = created.iter().filter(|p| !is_gated(p)).count();
    assert!(
        ungated_at_creation <= 4,
        "{ungated_at_creation} pods admitted at creation with room for 4"
    );
    // Whatever way each was admitted, exactly the quota is used.
    env.wait_queue_counts(&queue, 16, 5).await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 5, "exactly 5 admitted");
    assert_eq!(gated(&pods).len(), 16);
    // The ledger of a pod admitted at creation exists like any other.
    env.wait_workload_status(
        "first",
        "the ledger of the first pod",
        Duration::from_secs(30),
        |s| s.admitted_pods == 1,
    )
    .await;

    // Freed room goes to the waiting pods through a pass, never to a newcomer at creation.
    env.delete_pod_now("first").await;
    let late = env.create_pod(pod("late", &queue, "1")).await;
    assert!(is_gated(&late), "a pod created while others wait waits too");
    env.wait_queue_counts(&queue, 16, 5).await;
    assert!(is_gated(&env.pods().get("late").await.expect("pod")));
    env.cleanup().await;
}

#[tokio::test]
async fn a_queue_admitting_in_pass_gates_every_pod() {
    let mut env = env_or_skip!("inpass");
    let queue = env
        .queue_with_spec("q", json!({"quota": {"cpu": "5"}, "admission": "InPass"}))
        .await;
    let created = env.create_pod(pod("p", &queue, "1")).await;
    assert!(is_gated(&created), "gated at creation despite the room");
    assert!(!admitted_at_creation(&created));
    env.wait_queue_counts(&queue, 0, 1).await;
    assert!(!is_gated(&env.pods().get("p").await.expect("pod")));
    env.cleanup().await;
}

/// A status with admitted pods not started yet is written at once (no waiting for the pods to
/// start): pods that cannot start leave the workload Admitted.
#[tokio::test]
async fn an_admitted_workload_whose_pods_cannot_start_shows_admitted() {
    let (env, queue) = env_and_queue!("settling", json!({"cpu": "4"}), "BestEffortFIFO");
    let mut stuck = pod("stuck", &queue, "1");
    if let Some(spec) = stuck.spec.as_mut() {
        // No node has this label: admitted by sluice, never scheduled.
        spec.node_selector =
            Some([("sluice.dev/test-no-such-node".to_string(), "x".to_string())].into());
    }
    env.create_pod(stuck).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    let status = env
        .wait_workload_phase("stuck", WorkloadPhase::Admitted, Duration::from_secs(30))
        .await;
    assert_eq!(status.admitted_pods, 1);
    assert_eq!(status.pod_sets.iter().map(|s| s.admitted).sum::<i32>(), 1);
    assert_eq!(status.pod_sets.iter().map(|s| s.running).sum::<i32>(), 0);
    assert_eq!(
        status.message,
        format!("1 pod(s) admitted in queue {queue}")
    );
    env.cleanup().await;
}

/// A burst of workloads at once: none loses its status (every workload gets one showing its
/// admitted pod), and once they are written nothing is left waiting (`sluice_status_writes_pending`
/// drains to 0). Whether the gauge shows statuses waiting during the burst is not asserted: without
/// a write budget (the default) they wait a quarter of a status interval at most, which a poll may
/// or may not catch.
#[tokio::test]
async fn a_burst_of_workloads_loses_no_status_and_the_pending_gauge_drains() {
    if !cluster_or_skip() {
        return;
    }
    assert!(
        std::env::var("SLUICE_METRICS_ADDR").is_ok(),
        "SLUICE_METRICS_ADDR is not set: run through hack/test.sh, which sets it"
    );
    let (env, queue) = env_and_queue!("budget", json!({"cpu": "100"}), "BestEffortFIFO");
    const WORKLOADS: usize = 60;
    env.create_pods_at_once((0..WORKLOADS).map(|i| pod(&format!("single-{i}"), &queue, "100m")))
        .await;

    let workloads = env.workloads();
    wait_for(
        &format!("all {WORKLOADS} DynamicWorkloads to show their admitted pod"),
        Duration::from_secs(90),
        || {
            let workloads = workloads.clone();
            async move {
                let list = workloads.list(&Default::default()).await.ok()?;
                let written = list
                    .items
                    .iter()
                    .filter(|w| w.status.as_ref().is_some_and(|s| s.admitted_pods == 1))
                    .count();
                (written == WORKLOADS).then_some(())
            }
        },
    )
    .await;
    wait_for(
        "sluice_status_writes_pending to drain to 0",
        Duration::from_secs(60),
        || async {
            let pending = sluice_metric("sluice_status_writes_pending").await?;
            (pending == 0.0).then_some(())
        },
    )
    .await;
    env.cleanup().await;
}

/// A creation the API server refuses after sluice's webhook admitted it at creation (here by a
/// ResourceQuota on the pod count, checked after the mutating webhooks) leaves room held for a pod
/// that never exists. Once the hold is overdue, the controller asks the API server, which has no
/// such pod, and the room comes back: a pod that waited for it is admitted.
#[tokio::test]
async fn room_held_for_a_creation_refused_later_comes_back_once_the_api_server_has_no_such_pod() {
    let (env, queue) = env_and_queue!("refusedlater", json!({"cpu": "2"}), "BestEffortFIFO");
    let quotas: kube::Api<k8s_openapi::api::core::v1::ResourceQuota> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    let one_pod = serde_json::from_value(json!({
        "metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}
    }))
    .expect("quota");
    create(&quotas, &one_pod).await;
    // The quota's admission refuses everything until the quota controller has counted.
    wait_for(
        "the ResourceQuota counted",
        Duration::from_secs(30),
        || async {
            let q = quotas.get("one-pod").await.ok()?;
            q.status.and_then(|s| s.hard).map(|_| ())
        },
    )
    .await;
    let first = env.create_pod(pod("first", &queue, "1")).await;
    assert!(admitted_at_creation(&first), "room and nobody waiting");
    // sluice's webhook admits the second at creation (1 cpu of room held for it), then the
    // ResourceQuota refuses the creation: no pod carries that hold.
    let refusal = env
        .refused(
            &pod("refused", &queue, "1"),
            "one pod only in the namespace",
        )
        .await;
    assert!(refusal.contains("exceeded quota"), "{refusal}");
    quotas
        .delete("one-pod", &Default::default())
        .await
        .expect("lift the ResourceQuota");
    // The third fits only in the refused pod's room: it is admitted once that room is back
    // (at creation, or by a pass after the hold's check).
    let third = wait_for(
        "the ResourceQuota to be lifted",
        Duration::from_secs(30),
        || async {
            env.pods()
                .create(&Default::default(), &pod("third", &queue, "1"))
                .await
                .ok()
        },
    )
    .await;
    wait_for(
        "the third pod admitted into the refused pod's room",
        Duration::from_secs(60),
        || async {
            let p = env.pods().get(&third.name_any()).await.ok()?;
            (!is_gated(&p)).then_some(())
        },
    )
    .await;
    let pods = env.list_pods().await;
    assert_eq!(holding(&pods).len(), 2, "the quota of 2 cpu, never more");
    env.cleanup().await;
}
