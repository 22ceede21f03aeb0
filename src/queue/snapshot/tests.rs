//! The snapshot builder's unit tests: queues (cohorts, preemption policy, priority cap), workloads
//! and their pods as a pass sees them, and snapshots from remembered facts.

use serde_json::json;

use super::*;
use crate::queue::admission::decide;

fn pod(name: &str, role: &str, gated: bool, phase: &str) -> Arc<CachedPod> {
    decoded(pod_json(name, role, gated, phase))
}

fn decoded(pod: serde_json::Value) -> Arc<CachedPod> {
    Arc::new(serde_json::from_value(pod).expect("pod"))
}

fn pod_json(name: &str, role: &str, gated: bool, phase: &str) -> serde_json::Value {
    let gates = if gated {
        json!([{"name": ADMISSION_GATE}])
    } else {
        json!([])
    };
    json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": "2026-11-23T00:00:00Z",
                "labels": {"sluice.dev/queue": "q", "spark-app-selector": "spark-1", "spark-role": role, "sparkoperator.k8s.io/app-name": "etl"}},
            "spec": {"schedulingGates": gates, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": phase},
    })
}

fn workload(ended: Option<&str>) -> Arc<DynamicWorkload> {
    let mut spec = json!({"queueName": "q", "podSets": [
        {"name": "driver", "requests": {"cpu": "1"}, "minCount": 1},
        {"name": "executor", "requests": {"cpu": "1"}, "minCount": 2},
    ]});
    if let Some(end) = ended {
        spec["applicationEnded"] = json!(end);
    }
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "metadata": {"name": "sparkapplication-etl", "namespace": "ns"}, "spec": spec}),
        )
        .expect("dwl"),
    )
}

fn queue() -> Arc<CapacityQueue> {
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "q"}, "spec": {"quota": {"cpu": "10"}}}),
        )
        .expect("queue"),
    )
}

#[test]
fn an_ended_application_reserves_nothing_and_its_gated_pods_stay_gated() {
    let pods = vec![
        pod("driver", "driver", false, "Running"),
        pod("exec-1", "executor", true, "Pending"),
    ];
    let running = build(
        &[queue()],
        &[workload(None)],
        &pods,
        &[],
        &Default::default(),
    );
    let decisions = decide(&running.snapshot);
    assert_eq!(
        decisions.admit.len(),
        1,
        "the executor fills its reserved place"
    );
    assert_eq!(
        decisions.workloads[0].reserved.get("cpu"),
        1000,
        "one executor not created yet"
    );

    let ended = build(
        &[queue()],
        &[workload(Some("Succeeded"))],
        &pods,
        &[],
        &Default::default(),
    );
    assert_eq!(ended.left_behind, vec![1]);
    let decisions = decide(&ended.snapshot);
    assert!(
        decisions.admit.is_empty(),
        "nothing of an ended application is admitted"
    );
    assert_eq!(
        decisions.workloads[0].reserved.get("cpu"),
        0,
        "and nothing reserved"
    );
    assert_eq!(
        decisions.workloads[0].used.get("cpu"),
        1000,
        "the driver still counts while it runs"
    );
}

#[test]
fn a_recorded_workload_takes_its_pods_priority_when_higher() {
    let mut driver = pod_json("driver", "driver", true, "Pending");
    driver["spec"]["priority"] = json!(100);
    let built = build(
        &[queue()],
        &[workload(None)],
        &[decoded(driver)],
        &[],
        &Default::default(),
    );
    assert_eq!(built.snapshot.workloads[0].priority, 100);
    let built = build(&[queue()], &[workload(None)], &[], &[], &Default::default());
    assert_eq!(
        built.snapshot.workloads[0].priority, 0,
        "no pods yet: the ledger's own"
    );
}

fn queue_with(spec: serde_json::Value) -> Arc<CapacityQueue> {
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "q"}, "spec": spec}),
        )
        .expect("queue"),
    )
}

#[test]
fn a_queue_snapshot_carries_its_cohort_and_refuses_unreadable_limits_by_field() {
    let read = |spec: serde_json::Value| {
        let q = queue_with(spec);
        cohort_membership(&q.spec)
    };
    assert_eq!(read(serde_json::json!({"quota": {"cpu": "4"}})), Ok(None));
    let c = read(serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team",
        "borrowingLimit": {"cpu": "2"}, "lendingLimit": {"cpu": "1"},
        "fairSharing": {"weight": "0.5"}, "preemption": {"reclaimWithinCohort": "Never"}}))
    .expect("readable")
    .expect("in a cohort");
    assert_eq!(
        (
            c.name.as_str(),
            c.borrowing_limit.get("cpu"),
            c.lending_limit.get("cpu")
        ),
        ("team", 2000, 1000)
    );
    assert_eq!((c.weight_milli, c.reclaim), (500, ReclaimPolicy::Never));
    let defaults = read(serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team"}))
        .expect("readable")
        .expect("in a cohort");
    assert_eq!(
        (defaults.weight_milli, defaults.reclaim),
        (1000, ReclaimPolicy::Any)
    );
    for (field, spec) in [
        (
            "spec.borrowingLimit",
            serde_json::json!({"borrowingLimit": {"cpu": "-1"}}),
        ),
        (
            "spec.lendingLimit",
            serde_json::json!({"lendingLimit": {"cpu": "lots"}}),
        ),
        (
            "spec.fairSharing.weight",
            serde_json::json!({"fairSharing": {"weight": "-2"}}),
        ),
    ] {
        let mut full = serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team"});
        if let (Some(full), Some(spec)) = (full.as_object_mut(), spec.as_object()) {
            full.extend(spec.clone());
        }
        let err = read(full).expect_err("refused");
        assert!(err.starts_with(field), "{err}");
    }
}

#[test]
fn a_queue_snapshot_carries_its_preemption_policy_lower_priority_by_default() {
    let within = |queue: Arc<CapacityQueue>| {
        build(&[queue], &[], &[], &[], &Default::default())
            .snapshot
            .queues[0]
            .preemption
            .within_queue
    };
    assert_eq!(within(queue()), WithinQueue::LowerPriority, "no field");
    assert_eq!(
        within(queue_with(
            json!({"quota": {"cpu": "10"}, "preemption": {"maxPriority": 5}})
        )),
        WithinQueue::LowerPriority
    );
    assert_eq!(
        within(queue_with(
            json!({"quota": {"cpu": "10"}, "preemption": {"withinQueue": "Never"}})
        )),
        WithinQueue::Never
    );
}

#[test]
fn an_admitted_pod_being_deleted_still_counts_and_is_marked_terminating() {
    let deleting = |mut pod: serde_json::Value| {
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-23T00:01:00Z");
        decoded(pod)
    };
    let pods = vec![
        pod("driver", "driver", false, "Running"),
        deleting(pod_json("exec-1", "executor", false, "Running")),
        deleting(pod_json("exec-2", "executor", true, "Pending")),
    ];
    let built = build(
        &[queue()],
        &[workload(None)],
        &pods,
        &[],
        &Default::default(),
    );
    let seen: Vec<(&str, PodState, bool)> = built.snapshot.workloads[0]
        .pod_sets
        .iter()
        .flat_map(|s| &s.pods)
        .map(|p| (p.name.as_str(), p.state, p.terminating))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("driver", PodState::Admitted, false),
            ("exec-1", PodState::Admitted, true),
            ("exec-2", PodState::Ended, false),
        ],
        "an admitted pod on its way out holds its quota until it is gone; a gated one held none"
    );
    let decisions = decide(&built.snapshot);
    assert_eq!(decisions.workloads[0].used.get("cpu"), 2000);
}

#[test]
fn no_workload_counts_above_its_queues_max_priority() {
    let mut driver = pod_json("driver", "driver", false, "Running");
    driver["spec"]["priority"] = json!(1_000_000);
    let pods = [decoded(driver)];
    let priority = |queue: Arc<CapacityQueue>| {
        build(&[queue], &[workload(None)], &pods, &[], &Default::default())
            .snapshot
            .workloads[0]
            .priority
    };
    assert_eq!(priority(queue()), 1_000_000, "no cap");
    assert_eq!(
        priority(queue_with(
            json!({"quota": {"cpu": "10"}, "preemption": {"maxPriority": 100}})
        )),
        100,
        "a pod created before the cap was set counts as the cap"
    );
}

#[test]
fn each_pod_version_is_read_once_when_decoded() {
    let adapters = Adapters::default();
    let mut memo = PodMemo;
    let driver = pod("d", "driver", false, "Running");
    let executor = pod("e", "executor", true, "Pending");
    let first = memo.refresh(&adapters, &[driver.clone(), executor.clone()]);
    let fact = |facts: &[Option<Arc<PodFacts>>], i: usize| facts[i].clone().expect("governed");
    assert_eq!(fact(&first, 1).pod_set, "executor");
    assert_eq!(
        fact(&first, 1).requests.as_ref().map(|r| r.get("cpu")),
        Ok(1000)
    );
    // The same pods: the very same facts, not read again.
    let second = memo.refresh(&adapters, &[driver.clone(), executor.clone()]);
    assert!(Arc::ptr_eq(&fact(&first, 0), &fact(&second, 0)));
    assert!(Arc::ptr_eq(&fact(&first, 1), &fact(&second, 1)));
    // A new version of a pod is a new decode: read again.
    let mut bigger = pod_json("e", "executor", true, "Pending");
    bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("3");
    let third = memo.refresh(&adapters, &[decoded(bigger)]);
    assert_eq!(
        fact(&third, 0).requests.as_ref().map(|r| r.get("cpu")),
        Ok(3000)
    );
}

#[test]
fn a_snapshot_from_remembered_facts_is_the_snapshot_from_the_pods() {
    let adapters = Adapters::default();
    let pods = vec![
        pod("d", "driver", false, "Running"),
        pod("e1", "executor", true, "Pending"),
        pod("e2", "executor", false, "Succeeded"),
    ];
    let queues = vec![queue()];
    let workloads = vec![workload(None)];
    let fresh = build(&queues, &workloads, &pods, &[], &Default::default());
    let facts = PodMemo.refresh(&adapters, &pods);
    let remembered = build_from_facts(&queues, &workloads, &pods, &facts, &[], &Default::default());
    assert_eq!(
        format!("{:?}", fresh.snapshot),
        format!("{:?}", remembered.snapshot)
    );
    assert_eq!(fresh.snapshot.workloads.len(), 1);
    assert_eq!(
        fresh.snapshot.workloads[0]
            .pod_sets
            .iter()
            .map(|s| s.pods.len())
            .sum::<usize>(),
        3
    );
}
