//! Admitted but never running: a queue's `spec.podsReadyTimeout` and `spec.requeueLimit`. A
//! workload with an admitted pod that has not run for longer than the timeout since it was admitted
//! (a node selector no node has, an image that never pulls) gives its quota back: its admitted pods
//! are evicted (reason `PodsReadyTimeout`, through the same evictor as preemption; an owner such as
//! a Job recreates them, gated), its DynamicWorkload counts it (`status.requeueCount`, condition
//! `Requeued`) and it waits again at the back of its priority level (`status.requeuedAt` is its new
//! queueing time). Sent back more than `requeueLimit` times, it is Failed: none of its pods is
//! admitted again. Pure functions of the built snapshot, the queues and now.

use std::collections::HashMap;
use std::sync::Arc;

use crate::api::{CapacityQueue, DynamicWorkloadStatus};
use crate::queue::admission::{Decisions, Eviction, EvictionReason, PodRef, PodState};
use crate::queue::snapshot::Built;
use crate::queue::status::Preemption;

pub use crate::queue::snapshot::{exhausted, timeout_ms};
pub use crate::queue::status::REQUEUE_REASON as REASON;

/// Per queue with a readable timeout: (timeout in milliseconds, requeue limit).
pub fn rules(queues: &[Arc<CapacityQueue>]) -> HashMap<String, (i64, Option<i32>)> {
    queues
        .iter()
        .filter_map(|q| {
            let timeout = timeout_ms(&q.spec).ok()??;
            Some((q.metadata.name.clone()?, (timeout, q.spec.requeue_limit)))
        })
        .collect()
}

/// How often a workload has been sent back: its status's count, plus a requeue the evictor has
/// sent that the status does not show yet (`pending`: its newest eviction record).
pub fn requeues(status: Option<&DynamicWorkloadStatus>, pending: Option<&Preemption>) -> i32 {
    let count = status.map_or(0, |s| s.requeue_count);
    let unrecorded = pending.is_some_and(|p| {
        p.reason == REASON && status.and_then(|s| s.requeued_at.as_deref()) != Some(p.at.as_str())
    });
    count.saturating_add(i32::from(unrecorded))
}

/// Requeues the evictor has sent whose status is not written yet, as the snapshot (built from the
/// statuses seen) does not show them: the workload queues from the requeue (the back of its
/// priority level), and one sent back more often than its queue's requeueLimit has its gated pods
/// left out of the pass.
pub fn apply_pending_requeues(
    built: &mut Built,
    rules: &HashMap<String, (i64, Option<i32>)>,
    pending: &HashMap<crate::queue::admission::WorkloadKey, Preemption>,
) {
    for w in 0..built.snapshot.workloads.len() {
        let workload = &built.snapshot.workloads[w];
        let Some((_, limit)) = rules.get(&workload.queue) else {
            continue;
        };
        let newest = pending.get(&workload.key).filter(|p| p.reason == REASON);
        let status = built.workloads[w].as_ref().and_then(|d| d.status.as_ref());
        let exhausted = limit.is_some_and(|l| requeues(status, newest) > l);
        if let Some(at) = newest.and_then(|p| p.at.parse::<jiff::Timestamp>().ok()) {
            let queued = &mut built.snapshot.workloads[w].queued_at;
            *queued = (*queued).max(at.as_millisecond());
        }
        if exhausted {
            crate::queue::snapshot::leave_gated_behind(built, w);
        }
    }
}

/// The workloads to send back now, each with its admitted pods to evict, and when the next one
/// would be due (milliseconds since the epoch), for the controller's next wake-up.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Overdue {
    pub workloads: Vec<(usize, Vec<PodRef>)>,
    pub next_due: Option<i64>,
}

/// When a pod was admitted: its `sluice.dev/admitted-at` annotation, else its creation.
fn admitted_at(pod: &crate::queue::pod_cache::CachedPod) -> i64 {
    pod.admitted_at
        .unwrap_or_else(|| crate::queue::snapshot::millis(pod.metadata.creation_timestamp.as_ref()))
}

/// Finds the workloads whose admitted pods have not all run within their queue's timeout: a
/// workload whose gang (each set's minimum) runs gives back only its late pods, any other all its
/// admitted pods.
pub fn overdue(built: &Built, rules: &HashMap<String, (i64, Option<i32>)>, now: i64) -> Overdue {
    let mut out = Overdue::default();
    for (w, workload) in built.snapshot.workloads.iter().enumerate() {
        let Some((timeout, _)) = rules.get(&workload.queue) else {
            continue;
        };
        let (mut pods, mut late) = (Vec::new(), Vec::new());
        let mut gang_up = true;
        for (s, set) in workload.pod_sets.iter().enumerate() {
            let mut running_in_set = 0u32;
            for (p, pod) in set.pods.iter().enumerate() {
                if pod.state != PodState::Admitted || pod.terminating {
                    continue;
                }
                pods.push(PodRef {
                    workload: w,
                    pod_set: s,
                    pod: p,
                });
                let object = &built.pods[w][s][p];
                let running = object
                    .status
                    .as_ref()
                    .and_then(|st| st.phase.as_deref())
                    .is_some_and(|phase| phase == "Running");
                if running {
                    running_in_set += 1;
                    continue;
                }
                // Still gated in the cache: its ungate is in flight, so it was admitted moments
                // ago, whatever its age (a gang that waited longer than the timeout is not late
                // the moment it is admitted). Its time starts when the cache shows it ungated.
                let admitted = if crate::queue::snapshot::is_gated(object) {
                    now
                } else {
                    admitted_at(object)
                };
                let due = admitted.saturating_add(*timeout);
                if due <= now {
                    late.push(pods[pods.len() - 1]);
                } else {
                    out.next_due = Some(out.next_due.map_or(due, |n| n.min(due)));
                }
            }
            gang_up &= running_in_set >= set.min_count;
        }
        // A workload whose gang runs loses only its late pods (elastic ones: an executor no node
        // takes); one whose gang never came up gives back everything it holds.
        match (late.is_empty(), gang_up) {
            (true, _) => {}
            (false, true) => out.workloads.push((w, late)),
            (false, false) => out.workloads.push((w, pods)),
        }
    }
    out
}

/// Adds the evictions of the overdue workloads to the pass's decisions (each is its own
/// "preemptor"), except those the pass admits pods of or takes pods from already.
pub fn add_evictions(decisions: &mut Decisions, overdue: &[(usize, Vec<PodRef>)]) {
    for (w, pods) in overdue {
        let busy = decisions.admit.iter().any(|r| r.workload == *w)
            || (decisions.evict.iter()).any(|e| e.victim.workload == *w || e.preemptor == *w);
        if busy {
            continue;
        }
        decisions.evict.extend(pods.iter().map(|&victim| Eviction {
            victim,
            preemptor: *w,
            reason: EvictionReason::PodsReadyTimeout,
        }));
    }
}

/// The workloads admission at creation must admit nothing of until a pass says otherwise: those
/// Failed because their queue's podsReadyTimeout sent them back more than its `requeueLimit`
/// (counting requeues sent and not yet recorded, `pending`), and those whose pods this pass evicts
/// (a podsReadyTimeout requeue or a preemption): their owners' replacement pods wait behind the
/// gate, so Failed means nothing more of it is admitted.
pub fn closed_workloads(
    built: &Built,
    decisions: &Decisions,
    rules: &HashMap<String, (i64, Option<i32>)>,
    pending: &HashMap<crate::queue::admission::WorkloadKey, Preemption>,
) -> std::collections::HashSet<crate::queue::admission::WorkloadKey> {
    let mut closed = std::collections::HashSet::new();
    for (w, workload) in built.snapshot.workloads.iter().enumerate() {
        let Some((_, Some(limit))) = rules.get(&workload.queue) else {
            continue;
        };
        let newest = pending.get(&workload.key).filter(|p| p.reason == REASON);
        let status = built.workloads[w].as_ref().and_then(|d| d.status.as_ref());
        let this_pass = decisions
            .evict
            .iter()
            .any(|e| e.victim.workload == w && e.reason == EvictionReason::PodsReadyTimeout);
        let count =
            requeues(status, newest).saturating_add(i32::from(this_pass && newest.is_none()));
        if count > *limit {
            closed.insert(workload.key.clone());
        }
    }
    for eviction in &decisions.evict {
        if let Some(workload) = built.snapshot.workloads.get(eviction.victim.workload) {
            closed.insert(workload.key.clone());
        }
    }
    closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::snapshot::build;

    fn pod(
        name: &str,
        gated: bool,
        phase: &str,
        admitted_at: &str,
    ) -> Arc<crate::queue::pod_cache::CachedPod> {
        let mut json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"sluice.dev/queue": "q", "sluice.dev/workload": "w"},
                "annotations": {"sluice.dev/admitted-at": admitted_at}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": phase},
        });
        if gated {
            json["spec"]["schedulingGates"] =
                serde_json::json!([{"name": crate::api::ADMISSION_GATE}]);
        }
        Arc::new(serde_json::from_value(json).expect("pod"))
    }

    fn queue(timeout: &str) -> Arc<CapacityQueue> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "q"},
                "spec": {"quota": {"cpu": "4"}, "podsReadyTimeout": timeout, "requeueLimit": 1},
            }))
            .expect("queue"),
        )
    }

    fn at(text: &str) -> i64 {
        text.parse::<jiff::Timestamp>()
            .expect("time")
            .as_millisecond()
    }

    #[test]
    fn a_workload_with_a_pod_not_running_past_the_timeout_gives_all_its_admitted_pods_back() {
        let queues = vec![queue("1m")];
        let pods = vec![
            pod("a", false, "Pending", "2026-01-01T00:01:00Z"),
            pod("b", false, "Pending", "2026-01-01T00:00:30Z"),
            pod("c", true, "Pending", "2026-01-01T00:00:00Z"),
        ];
        let built = build(&queues, &[], &pods, &[], &Default::default());
        let rules = rules(&queues);
        assert_eq!(rules.get("q"), Some(&(60_000, Some(1))));
        // Before b's minute is up: nothing, and the next check is when it is.
        let early = overdue(&built, &rules, at("2026-01-01T00:01:00Z"));
        assert!(early.workloads.is_empty());
        assert_eq!(early.next_due, Some(at("2026-01-01T00:01:30Z")));
        let late = overdue(&built, &rules, at("2026-01-01T00:01:30Z"));
        assert_eq!(late.workloads.len(), 1);
        // Its gang never ran: both admitted pods go (a is not late yet), not the gated one.
        assert_eq!(
            late.workloads[0].1.len(),
            2,
            "both admitted pods, not the gated one"
        );
        let mut decisions = Decisions::default();
        add_evictions(&mut decisions, &late.workloads);
        assert!(
            (decisions.evict.iter())
                .all(|e| e.reason == EvictionReason::PodsReadyTimeout && e.preemptor == 0)
        );
        assert_eq!(decisions.evict.len(), 2);
    }

    #[test]
    fn a_workload_whose_gang_runs_gives_back_only_its_late_pods() {
        let queues = vec![queue("1m")];
        // min-count 1 (the annotation is absent: 1): a runs, so only b, late, goes.
        let pods = vec![
            pod("a", false, "Running", "2026-01-01T00:00:00Z"),
            pod("b", false, "Pending", "2026-01-01T00:00:00Z"),
        ];
        let built = build(&queues, &[], &pods, &[], &Default::default());
        let late = overdue(&built, &rules(&queues), at("2026-01-01T00:05:00Z"));
        assert_eq!(late.workloads.len(), 1);
        let victims = &late.workloads[0].1;
        assert_eq!(victims.len(), 1);
        let r = victims[0];
        assert_eq!(
            built.pods[r.workload][r.pod_set][r.pod]
                .metadata
                .name
                .as_deref(),
            Some("b")
        );
    }

    #[test]
    fn running_pods_are_never_overdue_and_bad_timeouts_are_refused_by_field() {
        let queues = vec![queue("1s")];
        let pods = vec![pod("a", false, "Running", "2026-01-01T00:00:00Z")];
        let built = build(&queues, &[], &pods, &[], &Default::default());
        let found = overdue(&built, &rules(&queues), at("2027-01-01T00:00:00Z"));
        assert_eq!(found, Overdue::default());
        for bad in ["soon", "0s", "-5m", "99999999999999999999d"] {
            let err = timeout_ms(&queue(bad).spec).expect_err("refused");
            assert!(err.starts_with("spec.podsReadyTimeout"), "{bad}: {err}");
        }
    }
}
