//! What each viewer sees: nothing of a namespace that is not theirs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::api::{
    CapacityQueueSpec, CapacityQueueStatus, DynamicWorkloadSpec, DynamicWorkloadStatus,
};
use crate::dashboard::detail::workload_detail;
use crate::dashboard::tracker::Tracker;

fn queue(name: &str, team: Option<&str>, cohort: Option<&str>) -> Arc<CapacityQueue> {
    let spec: CapacityQueueSpec =
        serde_json::from_value(serde_json::json!({ "quota": { "cpu": "4" } })).expect("spec");
    let mut cq = CapacityQueue::new(name, spec);
    cq.spec.cohort = cohort.map(str::to_string);
    cq.spec.namespace_selector = team.map(|t| LabelSelector {
        match_labels: Some([("team".to_string(), t.to_string())].into()),
        ..Default::default()
    });
    cq.status = Some(CapacityQueueStatus {
        usage: [("cpu".to_string(), Quantity("3".into()))].into(),
        reserved: [("cpu".to_string(), Quantity("500m".into()))].into(),
        ..Default::default()
    });
    Arc::new(cq)
}

fn waiting(
    ns: &str,
    name: &str,
    queue: &str,
    position: i32,
    message: &str,
) -> Arc<DynamicWorkload> {
    let spec: DynamicWorkloadSpec = serde_json::from_value(serde_json::json!({
        "queueName": queue, "priority": 0, "podSets": []
    }))
    .expect("spec");
    let mut w = DynamicWorkload::new(name, spec);
    w.metadata.namespace = Some(ns.to_string());
    w.status = Some(DynamicWorkloadStatus {
        position: Some(position),
        reason: Some("Quota:cpu".into()),
        message: message.to_string(),
        pending_pods: 1,
        queued_since: Some("2026-11-27T10:00:00Z".into()),
        ..Default::default()
    });
    Arc::new(w)
}

fn labels(ns: &str) -> Option<BTreeMap<String, String>> {
    match ns {
        "a" => Some([("team".to_string(), "a".to_string())].into()),
        "b" => Some([("team".to_string(), "b".to_string())].into()),
        _ => None,
    }
}

fn only(ns: &[&str]) -> Scope {
    Scope::Namespaces(ns.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>())
}

struct Fixture {
    queues: Vec<Arc<CapacityQueue>>,
    workloads: Vec<Arc<DynamicWorkload>>,
    preemptions: Vec<Preemption>,
}

fn fixture() -> Fixture {
    Fixture {
        queues: vec![
            queue("qa", Some("a"), Some("pool")),
            queue("qb", Some("b"), Some("pool")),
            queue("shared", None, None),
        ],
        workloads: vec![
            waiting(
                "a",
                "wa",
                "shared",
                2,
                "waits behind b/secret-b in StrictFIFO queue shared",
            ),
            waiting("b", "secret-b", "shared", 1, "waits for cpu: 1 missing"),
            waiting("a", "wa2", "qa", 1, "waits for cpu"),
        ],
        preemptions: vec![
            Preemption {
                at: "2026-11-27T10:00:00Z".into(),
                namespace: "a".into(),
                name: "wa".into(),
                queue: "shared".into(),
                kind: EvictionKind::Reclaim,
                by: Some("b/secret-b".into()),
                interruption: 1,
                why: "1 pod(s) evicted to make room for b/secret-b in queue qb (CohortReclaim)"
                    .into(),
                message: "preempted by b/secret-b".into(),
            },
            Preemption {
                at: "2026-11-27T10:01:00Z".into(),
                namespace: "b".into(),
                name: "victim-b".into(),
                queue: "qb".into(),
                kind: EvictionKind::Preemption,
                by: Some("b/secret-b".into()),
                interruption: 1,
                why: String::new(),
                message: String::new(),
            },
        ],
    }
}

fn view(f: &Fixture, scope: &Scope) -> StateView {
    state_view(
        &Inputs {
            queues: &f.queues,
            workloads: &f.workloads,
            preemptions: &f.preemptions,
            labels: &labels,
            now: "2026-11-27T10:05:00Z".parse().expect("time"),
        },
        scope,
    )
}

#[test]
fn an_operator_sees_every_queue_workload_and_preemption() {
    let v = view(&fixture(), &Scope::All);
    assert_eq!(
        v.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
        ["qa", "qb", "shared"]
    );
    assert_eq!(v.waiting_total, 3);
    // Admission order within each queue, queues by name.
    let order: Vec<_> = v
        .waiting
        .iter()
        .map(|w| (w.queue.as_str(), w.name.as_str()))
        .collect();
    assert_eq!(
        order,
        [("qa", "wa2"), ("shared", "secret-b"), ("shared", "wa")]
    );
    assert_eq!(v.preemptions.len(), 2);
    assert_eq!(v.preemptions[1].by, "b/secret-b");
    assert_eq!(v.cohorts[0].queues, ["qa", "qb"]);
    let cpu = &v.queues[0].bars[0];
    assert_eq!((cpu.quota, cpu.used, cpu.reserved), (4000, 3000, 500));
}

#[test]
fn a_namespace_user_sees_nothing_of_another_namespace() {
    let f = fixture();
    let v = view(&f, &only(&["a"]));
    let json = serde_json::to_string(&v).expect("json");
    assert!(
        !json.contains("secret-b"),
        "leaks another namespace: {json}"
    );
    assert!(
        !json.contains("victim-b"),
        "leaks another namespace: {json}"
    );
    assert!(
        !json.contains("\"qb\""),
        "shows a queue that does not admit a: {json}"
    );
    assert_eq!(
        v.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
        ["qa", "shared"]
    );
    assert_eq!(v.waiting_total, 2);
    // Positions stay the queue's own (one ahead, not named).
    let wa = v.waiting.iter().find(|w| w.name == "wa").expect("wa");
    assert_eq!(wa.position, 2);
    assert_eq!(
        wa.message,
        "waits behind <a workload of another namespace> in StrictFIFO queue shared"
    );
    assert_eq!(v.preemptions.len(), 1);
    assert_eq!(v.preemptions[0].by, "a workload of another namespace");
    // The cohort shows only the viewer's queues, its pool in totals.
    assert_eq!(v.cohorts[0].queues, ["qa"]);
    assert_eq!(v.cohorts[0].pool[0].quota, 8000);
}

#[test]
fn a_user_without_namespaces_sees_only_queues_open_to_all_and_no_workload() {
    let v = view(&fixture(), &only(&[]));
    assert!(v.queues.is_empty(), "{:?}", v.queues);
    assert_eq!(v.waiting_total, 0);
    assert!(v.preemptions.is_empty());
    let v = view(&fixture(), &only(&["unlabelled"]));
    assert_eq!(
        v.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
        ["shared"]
    );
}

#[test]
fn redaction_keeps_resources_and_own_names() {
    let scope = only(&["a"]);
    assert_eq!(
        redact(
            "behind (b/x), a/y and nvidia.com/gpu sluice.dev/queue",
            &scope
        ),
        "behind (<a workload of another namespace>), a/y and nvidia.com/gpu sluice.dev/queue"
    );
    assert_eq!(redact("b/x", &Scope::All), "b/x");
    // Ratios are figures, not names.
    assert_eq!(
        redact(
            "needs 1 cpu more: 2/2 cpu used, 1500m/4 and 3Gi/8Gi",
            &scope
        ),
        "needs 1 cpu more: 2/2 cpu used, 1500m/4 and 3Gi/8Gi"
    );
    assert_eq!(
        redact("behind 2b/x.", &scope),
        "behind <a workload of another namespace>."
    );
}

#[test]
fn a_workload_page_hides_its_preemptor_of_another_namespace() {
    let f = fixture();
    let mut w = (*f.workloads[0]).clone();
    if let Some(s) = w.status.as_mut() {
        s.last_preempted_by = Some("b/secret-b".into());
    }
    let d = workload_detail(&w, vec![], &only(&["a"]));
    let json = serde_json::to_string(&d).expect("json");
    assert!(!json.contains("secret-b"), "{json}");
    let d = workload_detail(&w, vec![], &Scope::All);
    assert_eq!(d.last_preempted_by, "b/secret-b");
}

#[test]
fn waiting_rows_are_bounded() {
    let mut f = fixture();
    f.workloads = (0..MAX_WAITING_ROWS as i32 + 50)
        .map(|i| waiting("a", &format!("w{i}"), "qa", i + 1, "m"))
        .collect();
    let v = view(&f, &Scope::All);
    assert_eq!(v.waiting.len(), MAX_WAITING_ROWS);
    assert_eq!(v.waiting_total, MAX_WAITING_ROWS + 50);
}

#[test]
fn the_tracker_records_each_preemption_once_and_bounds_its_memory() {
    let mut t = Tracker::default();
    let mut w = (*waiting("a", "wa", "qa", 1, "m")).clone();
    t.saw(&w, "2026-11-27T10:00:00Z");
    if let Some(s) = w.status.as_mut() {
        s.preempted_at = Some("2026-11-27T10:00:01Z".into());
        s.last_preempted_by = Some("a/big".into());
        s.interrupted_count = 1;
    }
    t.saw(&w, "2026-11-27T10:00:02Z");
    t.saw(&w, "2026-11-27T10:00:03Z");
    assert_eq!(t.preemptions.len(), 1);
    assert_eq!(t.preemptions[0].by.as_deref(), Some("a/big"));
    // Unchanged states are not repeated.
    assert_eq!(t.states("a", "wa").len(), 1);
    for i in 0..100 {
        if let Some(s) = w.status.as_mut() {
            s.position = Some(i);
        }
        t.saw(&w, "2026-11-27T10:00:04Z");
    }
    assert_eq!(
        t.states("a", "wa").len(),
        crate::dashboard::tracker::STATES_PER_WORKLOAD
    );
    let queues = fixture().queues;
    for i in 0..50 {
        t.sample(&queues, i, 10);
    }
    assert_eq!(t.history["qa"].len(), 10);
    t.sample(&queues[..1], 60, 10);
    assert_eq!(t.history.len(), 1, "a queue gone is forgotten");
    t.gone(&w);
    assert!(t.states("a", "wa").is_empty());
}

#[test]
fn the_tracker_tells_preemptions_reclaims_and_requeues_apart() {
    use crate::api::{Condition, ConditionStatus};
    let condition = |type_: &str, reason: &str, at: &str| Condition {
        type_: type_.into(),
        status: ConditionStatus::True,
        reason: reason.into(),
        message: format!("{reason} at {at} for b/big"),
        last_transition_time: at.into(),
        observed_generation: None,
    };
    let mut t = Tracker::default();
    let mut w = (*waiting("a", "wa", "qa", 1, "m")).clone();
    let evict = |w: &mut DynamicWorkload, at: &str, c: Condition, requeue: bool| {
        let s = w.status.as_mut().expect("status");
        s.preempted_at = Some(at.into());
        s.last_preempted_by = Some(if requeue { "a/wa" } else { "b/big" }.into());
        if requeue {
            s.requeued_at = Some(at.into());
        }
        s.conditions.retain(|old| old.type_ != c.type_);
        s.conditions.push(c);
    };
    let t1 = "2026-11-27T10:00:01Z";
    evict(
        &mut w,
        t1,
        condition("Preempted", "InQueuePriority", t1),
        false,
    );
    t.saw(&w, t1);
    let t2 = "2026-11-27T10:00:02Z";
    evict(
        &mut w,
        t2,
        condition("Preempted", "CohortReclaim", t2),
        false,
    );
    t.saw(&w, t2);
    let t3 = "2026-11-27T10:00:03Z";
    evict(
        &mut w,
        t3,
        condition("Requeued", "PodsReadyTimeout", t3),
        true,
    );
    t.saw(&w, t3);
    let kinds: Vec<_> = t.evictions("a", "wa").iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            EvictionKind::Preemption,
            EvictionKind::Reclaim,
            EvictionKind::Requeue
        ]
    );
    // The recent list holds preemptions and reclaims; a requeue is the workload's own.
    assert_eq!(t.preemptions.len(), 2);
    let row = preemption_row(&t.preemptions[1], &only(&["a"]));
    assert_eq!(row.kind, EvictionKind::Reclaim);
    assert_eq!(row.by, "a workload of another namespace");
    assert!(row.why.starts_with("CohortReclaim") && !row.why.contains("b/big"));
    let requeue = preemption_row(&t.evictions("a", "wa")[2], &Scope::All);
    assert_eq!(requeue.by, "its own pods not running in time");
}

#[test]
fn a_queue_with_flavors_shows_a_bar_per_flavor_and_resource() {
    let spec: CapacityQueueSpec = serde_json::from_value(serde_json::json!({
        "flavors": [{"name": "a100", "quota": {"nvidia.com/gpu": "8"}},
                    {"name": "h100", "quota": {"nvidia.com/gpu": "4"}}]
    }))
    .expect("spec");
    let mut cq = CapacityQueue::new("gpus", spec);
    cq.status = Some(CapacityQueueStatus {
        usage: [
            ("a100:nvidia.com/gpu".to_string(), Quantity("8".into())),
            ("h100:nvidia.com/gpu".to_string(), Quantity("2".into())),
        ]
        .into(),
        ..Default::default()
    });
    let mut f = fixture();
    f.queues = vec![Arc::new(cq)];
    let v = view(&f, &Scope::All);
    let bars: Vec<_> = v.queues[0]
        .bars
        .iter()
        .map(|b| (b.resource.as_str(), b.used, b.quota))
        .collect();
    assert_eq!(
        bars,
        [
            ("a100:nvidia.com/gpu", 8000, 8000),
            ("h100:nvidia.com/gpu", 2000, 4000)
        ]
    );
}
