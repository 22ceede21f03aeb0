//! Issue 31's holes in the pass (the snapshot, podsReadyTimeout), as unit tests of the pure
//! functions: each names the attack and checks the quota promise per queue as each pod's own
//! label names it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::json;

use crate::api::{
    ADMISSION_GATE, CapacityQueue, DynamicWorkload, MIN_COUNT_ANNOTATION, QUEUE_LABEL,
    WORKLOAD_LABEL,
};
use crate::queue::admission::{Decisions, Eviction, EvictionReason, PodRef, WorkloadKey, decide};
use crate::queue::pod_cache::CachedPod;
use crate::queue::{ready, snapshot};

fn queue(name: &str, cpu: &str) -> Arc<CapacityQueue> {
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": name}, "spec": {"quota": {"cpu": cpu}}}),
        )
        .expect("queue"),
    )
}

fn ledger(name: &str, queue: &str) -> Arc<DynamicWorkload> {
    Arc::new(
        serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "metadata": {"name": name, "namespace": "ns", "labels": {"sluice.dev/recorded-from": "pods"}},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "requests": {"cpu": "1"}, "minCount": 1}]}}))
        .expect("dwl"),
    )
}

/// A plain pod of workload `workload` labelled for `queue`, created at second `created`.
fn pod(
    name: &str,
    queue: &str,
    workload: &str,
    cpu: &str,
    gated: bool,
    created: u32,
    min_count: Option<&str>,
) -> Arc<CachedPod> {
    let gates = if gated {
        json!([{"name": ADMISSION_GATE}])
    } else {
        json!([])
    };
    let mut p = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
            "creationTimestamp": format!("2026-11-27T00:00:{created:02}Z"),
            "labels": {QUEUE_LABEL: queue, WORKLOAD_LABEL: workload}},
        "spec": {"schedulingGates": gates, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": if gated { "Pending" } else { "Running" }},
    });
    if let Some(min) = min_count {
        p["metadata"]["annotations"] = json!({MIN_COUNT_ANNOTATION: min});
    }
    Arc::new(serde_json::from_value(p).expect("pod"))
}

/// Per queue, the cpu (milli) of admitted, non-ended pods as each pod's own label names it.
fn usage_by_label(pods: &[Arc<CachedPod>], admitted: &HashSet<String>) -> HashMap<String, i64> {
    let mut usage = HashMap::new();
    for p in pods {
        let facts = p.facts.as_ref().expect("governed");
        let uid = p.metadata.uid.clone().unwrap_or_default();
        if !snapshot::is_gated(p) || admitted.contains(&uid) {
            let cpu = facts.requests.as_ref().map(|r| r.get("cpu")).unwrap_or(0);
            *usage.entry(facts.queue.clone()).or_insert(0) += cpu;
        }
    }
    usage
}

/// The uids a decision admits.
fn admitted_uids(built: &snapshot::Built, decisions: &Decisions) -> HashSet<String> {
    decisions
        .admit
        .iter()
        .map(|r| {
            built.pods[r.workload][r.pod_set][r.pod]
                .metadata
                .uid
                .clone()
                .unwrap_or_default()
        })
        .collect()
}

/// Hole 1 as the issue tried it: a small pod names a queue that does not exist and workload w1,
/// so the ledger of w1 names that queue; a 2-cpu pod of the real 2-cpu queue joins w1 (admitted at
/// creation). It counts in its own queue: the real queue shows 2 cpu used and admits nothing more.
#[test]
fn a_ghost_queue_ledger_does_not_hide_a_pod_admitted_in_a_real_queue() {
    let queues = [queue("q", "2")];
    let pods = vec![
        pod("small", "ghost", "w1", "100m", true, 0, None),
        pod("big", "q", "w1", "2", false, 1, None),
        pod("more", "q", "w2", "1", true, 2, None),
    ];
    let built = snapshot::build(
        &queues,
        &[ledger("w1", "ghost")],
        &pods,
        &[],
        &Default::default(),
    );
    let decisions = decide(&built.snapshot);
    assert_eq!(
        decisions.queues["q"].usage.get("cpu"),
        2000,
        "the big pod counts in q"
    );
    let admitted = admitted_uids(&built, &decisions);
    assert!(admitted.is_empty(), "q is full: nothing more is admitted");
    let usage = usage_by_label(&pods, &admitted);
    assert!(
        usage["q"] <= 2000,
        "the promise per queue as labelled: {usage:?}"
    );
    assert!(
        built
            .problems
            .iter()
            .any(|p| p.contains("small") && p.contains("ghost")),
        "the stray pod is said: {:?}",
        built.problems
    );
}

/// Hole 1, variant: the ledger is moved to another tenant's queue (a forged or re-recorded
/// spec.queueName); its admitted pods keep counting in the queue their labels name.
#[test]
fn a_ledger_moved_to_another_queue_does_not_move_its_admitted_pods() {
    let queues = [queue("q", "2"), queue("theirs", "4")];
    let pods = vec![
        pod("a", "q", "w1", "1", false, 0, None),
        pod("b", "q", "w1", "1", false, 1, None),
        pod("c", "q", "w2", "1", true, 2, None),
    ];
    let built = snapshot::build(
        &queues,
        &[ledger("w1", "theirs")],
        &pods,
        &[],
        &Default::default(),
    );
    let decisions = decide(&built.snapshot);
    assert_eq!(decisions.queues["q"].usage.get("cpu"), 2000);
    assert_eq!(decisions.queues["theirs"].usage.get("cpu"), 0);
    assert!(admitted_uids(&built, &decisions).is_empty(), "q is full");
}

/// Hole 1, variant: pods of one workload in two queues; the gated one naming another queue than
/// the workload's is never admitted, though its own queue has room, and the ledger's status says so.
#[test]
fn a_gated_pod_labelled_for_another_queue_than_its_workload_is_never_admitted() {
    let queues = [queue("q", "4"), queue("other", "4")];
    let pods = vec![
        pod("first", "q", "w1", "1", false, 0, None),
        pod("stray", "other", "w1", "1", true, 1, None),
    ];
    let built = snapshot::build(&queues, &[], &pods, &[], &Default::default());
    let decisions = decide(&built.snapshot);
    assert!(admitted_uids(&built, &decisions).is_empty());
    assert_eq!(built.left_behind, vec![1]);
    assert_eq!(built.snapshot.workloads[0].queue, "q");
}

/// Hole 4: a pod joining a started workload with `sluice.dev/min-count: 100000` does not grow
/// its gang: the set's minimum is its earliest pod's, so nothing is reserved for it and the queue
/// is not blocked.
#[test]
fn a_later_pod_cannot_grow_a_started_gang() {
    let queues = [queue("q", "4")];
    let pods = vec![
        pod("first", "q", "w1", "1", false, 0, Some("1")),
        pod("greedy", "q", "w1", "1", true, 1, Some("100000")),
        pod("other", "q", "w2", "1", true, 2, None),
    ];
    let built = snapshot::build(&queues, &[], &pods, &[], &Default::default());
    let w1 = &built.snapshot.workloads[built.snapshot.position_of("w1")];
    assert_eq!(w1.pod_sets[0].min_count, 1, "the earliest pod's minimum");
    let decisions = decide(&built.snapshot);
    let admitted = admitted_uids(&built, &decisions);
    assert!(
        admitted.contains("other"),
        "the queue is not blocked: {admitted:?}"
    );
    assert!(admitted.contains("greedy"), "admitted as one elastic pod");
}

/// Hole 5: a gang that waited longer than podsReadyTimeout is not sent back by the pass right
/// after its admission: a pod whose ungate is in flight is timed from its admission (now).
#[test]
fn a_pod_whose_ungate_is_in_flight_is_not_late_for_pods_ready_timeout() {
    let mut q = (*queue("q", "4")).clone();
    q.spec.pods_ready_timeout = Some("1s".into());
    let queues = [Arc::new(q)];
    let old = pod("waited", "q", "w1", "1", true, 0, None);
    let in_flight: snapshot::InFlight = ["waited".to_string()].into_iter().collect();
    let built = snapshot::build(&queues, &[], &[old], &[], &in_flight);
    let rules = ready::rules(&queues);
    let now = jiff::Timestamp::now().as_millisecond();
    let overdue = ready::overdue(&built, &rules, now);
    assert!(
        overdue.workloads.is_empty(),
        "not late: {:?}",
        overdue.workloads
    );
    assert!(
        overdue.next_due.is_some_and(|due| due > now),
        "due a timeout from now"
    );
}

/// Hole 6: a workload sent back more than its queue's requeueLimit is closed to admission at
/// creation, as is one whose pods a pass evicts.
#[test]
fn a_workload_failed_by_requeue_limit_or_losing_pods_is_closed() {
    let mut q = (*queue("q", "4")).clone();
    q.spec.pods_ready_timeout = Some("1s".into());
    q.spec.requeue_limit = Some(1);
    let queues = [Arc::new(q)];
    let mut failed = (*ledger("w1", "q")).clone();
    failed.status = Some(crate::api::DynamicWorkloadStatus {
        requeue_count: 2,
        ..Default::default()
    });
    let pods = vec![
        pod("a", "q", "w1", "1", false, 0, None),
        pod("b", "q", "w2", "1", false, 1, None),
        pod("c", "q", "w3", "1", false, 2, None),
    ];
    let built = snapshot::build(
        &queues,
        &[Arc::new(failed)],
        &pods,
        &[],
        &Default::default(),
    );
    let mut decisions = decide(&built.snapshot);
    let w3 = built.snapshot.position_of("w3");
    decisions.evict.push(Eviction {
        victim: PodRef {
            workload: w3,
            pod_set: 0,
            pod: 0,
        },
        preemptor: w3,
        reason: EvictionReason::InQueuePriority,
    });
    let closed =
        ready::closed_workloads(&built, &decisions, &ready::rules(&queues), &HashMap::new());
    let key = |n: &str| WorkloadKey {
        namespace: "ns".into(),
        name: n.into(),
    };
    assert!(closed.contains(&key("w1")), "Failed by requeueLimit");
    assert!(closed.contains(&key("w3")), "losing pods");
    assert!(!closed.contains(&key("w2")));
}

/// Found by the model-based test: a pass admits workload w1's gated pod in queue "a" while, in
/// the same moment, admission at creation admits another pod of w1 labelled "solo" (neither knew
/// of the other). Both are admitted; each counts in the queue its own label names (the one outside
/// the workload's queue as a part of it there, with no ledger of its own).
#[test]
fn admitted_pods_of_one_workload_in_two_queues_each_count_in_their_own() {
    let queues = [queue("a", "4"), queue("solo", "4")];
    let pods = vec![
        pod("first", "a", "w1", "1", false, 0, None),
        pod("racer", "solo", "w1", "2", false, 1, None),
        pod("waiting", "solo", "w2", "3", true, 2, None),
    ];
    let built = snapshot::build(&queues, &[], &pods, &[], &Default::default());
    let decisions = decide(&built.snapshot);
    assert_eq!(decisions.queues["a"].usage.get("cpu"), 1000);
    assert_eq!(decisions.queues["solo"].usage.get("cpu"), 2000);
    assert!(
        admitted_uids(&built, &decisions).is_empty(),
        "solo has 2 of 4 cpu left: the 3-cpu pod waits"
    );
    let part = built
        .snapshot
        .workloads
        .iter()
        .find(|w| snapshot::stray_part_of(&w.key).is_some())
        .expect("the part of w1 in solo");
    assert_eq!(
        (part.queue.as_str(), part.key.name.as_str()),
        ("solo", "w1/solo")
    );
}
