//! The statuses a pass writes, built from its decisions: pure functions of the snapshot, the
//! decisions and the status known before (kept for transition times and first timestamps), with
//! `now` passed in. The controller only compares and hands them to the writer.

use std::collections::HashSet;
use std::sync::Arc;

use crate::api::{
    ApplicationEnd, CapacityQueueStatus, Condition, ConditionStatus, DynamicWorkloadStatus,
    PodSetStatus, WorkloadPhase,
};
use crate::queue::admission::{PodState, QueueTally, WorkloadSnapshot, WorkloadTally};
use crate::queue::notices::ReasonKey;
use crate::queue::pod_cache::CachedPod;
use crate::queue::snapshot::Built;

/// What a pass knows of one workload, as its status needs it.
pub struct WorkloadView<'a> {
    pub workload: &'a WorkloadSnapshot,
    /// The pod objects, indexed like `workload.pod_sets[s].pods` (their phases are read).
    pub pods: &'a [Vec<Arc<CachedPod>>],
    /// What the application object said of its end (`spec.applicationEnded`).
    pub ended: Option<ApplicationEnd>,
    /// Gated pods of an ended application, kept out of the pass.
    pub left_behind: u32,
    /// Its newest preemption, when the status known may not record it yet.
    pub preempted: Option<&'a Preemption>,
    /// Why it waits to preempt, when a PodDisruptionBudget holds its victims (replaces the
    /// message of its wait).
    pub held: Option<&'a str>,
    /// Failed because its queue's podsReadyTimeout sent it back more than `requeueLimit` times
    /// (`ended` is then `Failed`): the message says so.
    pub requeue_exhausted: bool,
}

/// The reason of the evictions of a workload whose pods did not all run within its queue's
/// `podsReadyTimeout` (it is its own "preemptor"), and of its `Requeued` condition.
pub const REQUEUE_REASON: &str = "PodsReadyTimeout";

/// One preemption of a workload: some of its pods were evicted to make room for `by`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preemption {
    /// The preemptor, `namespace/name`.
    pub by: String,
    /// Why the preemptor could take quota back (`InQueuePriority`).
    pub reason: String,
    pub queue: String,
    /// What the preemptor needed, described (e.g. `2 cpu, 4Gi memory`).
    pub needed: String,
    /// Pods of this workload evicted for it.
    pub pods: u32,
    /// When (RFC 3339): with `by`, what tells this preemption from an earlier one.
    pub at: String,
}

impl Preemption {
    /// The message of the `Preempted` condition and of the victim's event.
    pub fn message(&self) -> String {
        format!(
            "{} pod(s) evicted to make room for {} in queue {} ({}), which needed {}",
            self.pods, self.by, self.queue, self.reason, self.needed
        )
    }

    /// Whether `status` already counts this preemption.
    fn recorded_in(&self, status: Option<&DynamicWorkloadStatus>) -> bool {
        if self.reason == REQUEUE_REASON {
            return status.is_some_and(|s| s.requeued_at.as_deref() == Some(self.at.as_str()));
        }
        status.is_some_and(|s| {
            s.preempted_at.as_deref() == Some(self.at.as_str())
                && s.last_preempted_by.as_deref() == Some(self.by.as_str())
        })
    }
}

impl<'a> WorkloadView<'a> {
    /// The view of `built.snapshot.workloads[w]`.
    pub fn of(built: &'a Built, w: usize) -> Self {
        WorkloadView {
            workload: &built.snapshot.workloads[w],
            pods: &built.pods[w],
            ended: built.workloads[w]
                .as_ref()
                .and_then(|d| d.spec.application_ended),
            left_behind: built.left_behind.get(w).copied().unwrap_or(0),
            preempted: None,
            held: None,
            requeue_exhausted: false,
        }
    }
}

/// The pods of a workload, counted per pod set and in all.
#[derive(Debug, Default)]
struct PodCounts {
    pod_sets: Vec<PodSetStatus>,
    total: i32,
    running: i32,
    finished: i32,
    failed: i32,
}

/// Counts each pod set's pods by what they are after the pass: `admitted_now` holds the
/// (pod set, pod) positions this pass admits, which the snapshot still shows gated.
fn count_pods(view: &WorkloadView, admitted_now: &HashSet<(usize, usize)>) -> PodCounts {
    let mut counts = PodCounts {
        pod_sets: Vec::with_capacity(view.workload.pod_sets.len()),
        ..PodCounts::default()
    };
    for (s, set) in view.workload.pod_sets.iter().enumerate() {
        let mut set_counts = PodSetStatus {
            name: set.name.clone(),
            ..PodSetStatus::default()
        };
        for (p, pod) in set.pods.iter().enumerate() {
            counts.total += 1;
            let phase = view
                .pods
                .get(s)
                .and_then(|pods| pods.get(p))
                .and_then(|o| o.status.as_ref())
                .and_then(|st| st.phase.as_deref());
            let state = if admitted_now.contains(&(s, p)) {
                PodState::Admitted
            } else {
                pod.state
            };
            match state {
                PodState::Gated => set_counts.pending += 1,
                PodState::Ended => {
                    set_counts.finished += 1;
                    if phase == Some("Failed") {
                        counts.failed += 1;
                    }
                }
                PodState::Admitted if phase == Some("Running") => set_counts.running += 1,
                PodState::Admitted => set_counts.admitted += 1,
            }
        }
        counts.running += set_counts.running;
        counts.finished += set_counts.finished;
        counts.pod_sets.push(set_counts);
    }
    counts
}

/// The workload's phase: the application's own word when it has ended, else what its pods say.
fn phase_of(
    ended: Option<ApplicationEnd>,
    counts: &PodCounts,
    tally: &WorkloadTally,
    pending_pods: i32,
) -> WorkloadPhase {
    if let Some(end) = ended {
        // The application's own word is final, whatever its pods still do.
        return match end {
            ApplicationEnd::Succeeded => WorkloadPhase::Finished,
            ApplicationEnd::Failed => WorkloadPhase::Failed,
        };
    }
    let admitted_pods = tally.admitted_pods as i32;
    if counts.total > 0 && pending_pods == 0 && admitted_pods == 0 && counts.finished > 0 {
        if counts.failed > 0 {
            WorkloadPhase::Failed
        } else {
            WorkloadPhase::Finished
        }
    } else if counts.running > 0 {
        WorkloadPhase::Running
    } else if admitted_pods > 0 || !tally.reserved.is_empty() {
        WorkloadPhase::Admitted
    } else {
        WorkloadPhase::Pending
    }
}

/// The status message: why the workload waits, how it ended, or what it holds.
fn message_of(
    view: &WorkloadView,
    tally: &WorkloadTally,
    counts: &PodCounts,
    phase: WorkloadPhase,
) -> String {
    let (finished, failed) = (counts.finished, counts.failed);
    match (&tally.waiting, phase) {
        _ if view.requeue_exhausted => format!(
            "its admitted pods did not all run within queue {}'s podsReadyTimeout more often than its requeueLimit allows: Failed, and {} pod(s) left behind the gate are not admitted",
            view.workload.queue, view.left_behind
        ),
        _ if view.ended.is_some() => {
            let how = match phase {
                WorkloadPhase::Failed => "failed",
                _ => "succeeded",
            };
            match view.left_behind {
                0 => format!("the application {how}"),
                n => format!(
                    "the application {how}; {n} pod(s) left behind the gate are not admitted"
                ),
            }
        }
        (Some(_), _) if view.held.is_some() => view.held.unwrap_or_default().to_string(),
        // Never the name of another namespace's workload: its users may read this status.
        (Some(reason), _) => crate::queue::notices::describe(reason, &view.workload.key),
        (None, WorkloadPhase::Finished) => format!("all {finished} pod(s) ended"),
        (None, WorkloadPhase::Failed) => format!("all {finished} pod(s) ended, {failed} failed"),
        (None, WorkloadPhase::Pending) => "no pods yet".to_string(),
        (None, WorkloadPhase::Preempted) => "preempted: no pod of it waits yet".to_string(),
        (None, _) => format!(
            "{} pod(s) admitted in queue {}",
            tally.admitted_pods as i32, view.workload.queue
        ),
    }
}

/// The conditions `QuotaReserved` and `Finished`, keeping the old transition times of those whose
/// status did not change.
fn conditions_of(
    old: Option<&DynamicWorkloadStatus>,
    ended: Option<ApplicationEnd>,
    phase: WorkloadPhase,
    holds: bool,
    message: &str,
    now: &str,
) -> Vec<Condition> {
    let old_condition = |t: &str| old.and_then(|s| s.conditions.iter().find(|c| c.type_ == t));
    let finished = matches!(phase, WorkloadPhase::Finished | WorkloadPhase::Failed);
    let status = |yes: bool| {
        if yes {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    };
    let reserved_reason = if holds {
        "Admitted"
    } else if finished {
        "Finished"
    } else {
        "Waiting"
    };
    let finished_reason = match (ended, phase) {
        (Some(ApplicationEnd::Failed), _) => "ApplicationFailed",
        (Some(ApplicationEnd::Succeeded), _) => "ApplicationSucceeded",
        (None, WorkloadPhase::Failed) => "PodsFailed",
        (None, WorkloadPhase::Finished) => "PodsSucceeded",
        _ => "PodsActive",
    };
    vec![
        Condition::updated(
            old_condition("QuotaReserved"),
            "QuotaReserved",
            status(holds),
            reserved_reason,
            message.to_string(),
            now,
        ),
        Condition::updated(
            old_condition("Finished"),
            "Finished",
            status(finished),
            finished_reason,
            String::new(),
            now,
        ),
    ]
}

/// What a status says of the workload's preemptions.
struct PreemptionFields {
    interrupted_count: i32,
    /// Sent back by its queue's podsReadyTimeout: how often, the newest time, condition `Requeued`.
    requeue_count: i32,
    requeued_at: Option<String>,
    requeued: Option<Condition>,
    last_preempted_by: Option<String>,
    preempted_at: Option<String>,
    /// `Preempted`: True since the newest preemption, its message naming the preemptor and what
    /// it needed.
    condition: Option<Condition>,
}

/// The preemption fields after this pass: the old status's, plus one interruption when `newest`
/// is a preemption the old status does not count yet (so building the status again, or from a
/// status that already counts it, never counts it twice).
fn preemption_fields(
    old: Option<&DynamicWorkloadStatus>,
    newest: Option<&Preemption>,
) -> PreemptionFields {
    let requeue = || {
        (
            old.map_or(0, |s| s.requeue_count),
            old.and_then(|s| s.requeued_at.clone()),
            old.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Requeued"))
                .cloned(),
        )
    };
    let kept = || PreemptionFields {
        interrupted_count: old.map_or(0, |s| s.interrupted_count),
        requeue_count: requeue().0,
        requeued_at: requeue().1,
        requeued: requeue().2,
        last_preempted_by: old.and_then(|s| s.last_preempted_by.clone()),
        preempted_at: old.and_then(|s| s.preempted_at.clone()),
        condition: old
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Preempted"))
            .cloned(),
    };
    match newest.filter(|p| !p.recorded_in(old)) {
        // Its own pods did not run in time: sent back, not preempted by another workload.
        Some(p) if p.reason == REQUEUE_REASON => {
            let count = old.map_or(0, |s| s.requeue_count).saturating_add(1);
            PreemptionFields {
                requeue_count: count,
                requeued_at: Some(p.at.clone()),
                requeued: Some(Condition {
                    type_: "Requeued".into(),
                    status: ConditionStatus::True,
                    reason: p.reason.clone(),
                    message: format!(
                        "{} admitted pod(s) not running within queue {}'s podsReadyTimeout were evicted (requeue {count}): it waits again at the back of its priority level, or is Failed past the queue's requeueLimit",
                        p.pods, p.queue
                    ),
                    last_transition_time: p.at.clone(),
                    observed_generation: None,
                }),
                // The evictor's record names it as its own preemptor (kept so that the evictor
                // sees it recorded); the interrupted count and `Preempted` stay as they were.
                last_preempted_by: Some(p.by.clone()),
                preempted_at: Some(p.at.clone()),
                ..kept()
            }
        }
        Some(p) => PreemptionFields {
            requeue_count: requeue().0,
            requeued_at: requeue().1,
            requeued: requeue().2,
            interrupted_count: old.map_or(0, |s| s.interrupted_count).saturating_add(1),
            last_preempted_by: Some(p.by.clone()),
            preempted_at: Some(p.at.clone()),
            condition: Some(Condition {
                type_: "Preempted".into(),
                status: ConditionStatus::True,
                reason: p.reason.clone(),
                message: p.message(),
                last_transition_time: p.at.clone(),
                observed_generation: None,
            }),
        },
        None => kept(),
    }
}

/// The status a DynamicWorkload should have after this pass. `admitted_now`: the (pod set, pod)
/// positions of the workload this pass admits; `old`: the newest status known, whose transition
/// times, interrupted count and first timestamps carry over.
pub fn workload_status(
    view: &WorkloadView,
    tally: &WorkloadTally,
    admitted_now: &HashSet<(usize, usize)>,
    old: Option<&DynamicWorkloadStatus>,
    now: &str,
) -> DynamicWorkloadStatus {
    let counts = count_pods(view, admitted_now);
    let admitted_pods = tally.admitted_pods as i32;
    let pending_pods = tally.pending_pods as i32 + view.left_behind as i32;
    let preempted = preemption_fields(old, view.preempted);
    let phase = match phase_of(view.ended, &counts, tally, pending_pods) {
        // Taken back and holding nothing: it waits to be admitted again.
        WorkloadPhase::Pending if preempted.condition.is_some() => WorkloadPhase::Preempted,
        phase => phase,
    };
    let mut message = message_of(view, tally, &counts, phase);
    if view.left_behind > 0 && view.ended.is_none() && !view.requeue_exhausted {
        // Pods whose own queue label is not the workload's: a workload's pods run in one queue.
        message.push_str(&format!(
            "; {} pod(s) labelled for another queue than {} are never admitted",
            view.left_behind, view.workload.queue
        ));
    }
    let holds = admitted_pods > 0 || !tally.reserved.is_empty();
    let finished = matches!(phase, WorkloadPhase::Finished | WorkloadPhase::Failed);
    let mut conditions = conditions_of(old, view.ended, phase, holds, &message, now);
    conditions.extend(preempted.condition);
    conditions.extend(preempted.requeued);
    let pod_set_summary = counts
        .pod_sets
        .iter()
        .map(|p| format!("{}={}/{}", p.name, p.admitted + p.running, p.pending))
        .collect::<Vec<_>>()
        .join(" ");
    DynamicWorkloadStatus {
        phase,
        message,
        conditions,
        pod_set_summary,
        pod_sets: counts.pod_sets,
        pending_pods,
        admitted_pods,
        used: tally.used.to_quantities(),
        reserved: tally.reserved.to_quantities(),
        interrupted_count: preempted.interrupted_count,
        last_preempted_by: preempted.last_preempted_by,
        preempted_at: preempted.preempted_at,
        admitted_at: old
            .and_then(|s| s.admitted_at.clone())
            .or_else(|| holds.then(|| now.to_string())),
        finished_at: if finished {
            old.and_then(|s| s.finished_at.clone())
                .or_else(|| Some(now.to_string()))
        } else {
            None
        },
        requeue_count: preempted.requeue_count,
        requeued_at: preempted.requeued_at,
        borrowed: tally.borrowed.to_quantities(),
        position: tally.position.map(|p| i32::try_from(p).unwrap_or(i32::MAX)),
        queued_since: (pending_pods > 0 && !finished).then(|| {
            old.and_then(|s| s.queued_since.clone())
                .unwrap_or_else(|| now.to_string())
        }),
        reason: tally
            .waiting
            .as_ref()
            .filter(|_| pending_pods > 0 && !finished)
            .map(|r| ReasonKey::of(r).short()),
    }
}

/// The status a CapacityQueue should have after this pass: its tally, or (no tally: its quota
/// could not be read, so the pass skipped it) inactive. `old`: the newest status known.
pub fn queue_status(
    tally: Option<&QueueTally>,
    old: Option<&CapacityQueueStatus>,
    generation: Option<i64>,
    now: &str,
) -> CapacityQueueStatus {
    let previous = old.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Active"));
    match tally {
        Some(t) => CapacityQueueStatus {
            usage: t.usage.to_quantities(),
            reserved: t.reserved.to_quantities(),
            pending_workloads: t.pending_workloads as i32,
            admitted_workloads: t.admitted_workloads as i32,
            pending_pods: t.pending_pods as i32,
            admitted_pods: t.admitted_pods as i32,
            borrowed: t.borrowed.to_quantities(),
            lent: t.lent.to_quantities(),
            conditions: vec![Condition::updated(
                previous,
                "Active",
                ConditionStatus::True,
                "QuotaValid",
                "the queue admits pods".into(),
                now,
            )],
            observed_generation: generation,
            usage_summary: String::new(),
        },
        None => CapacityQueueStatus {
            conditions: vec![Condition::updated(
                previous,
                "Active",
                ConditionStatus::False,
                "InvalidQuota",
                "spec.quota (or spec.borrowingLimit, spec.lendingLimit, spec.fairSharing.weight) holds a quantity sluice cannot read: nothing is admitted".into(),
                now,
            )],
            observed_generation: generation,
            ..CapacityQueueStatus::default()
        },
    }
}

/// `kubectl get cq`'s `Used/Quota`: per resource the quota names, what is used and reserved
/// (from the status's quantities) over the quota, e.g. `cpu=3/4 memory=1Gi/8Gi`.
pub fn usage_summary(
    quota: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
    status: &CapacityQueueStatus,
) -> String {
    use crate::resources::{ResourceList, format_quantity};
    let held = |m: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >| { ResourceList::from_quantities(m).unwrap_or_default() };
    let (usage, reserved) = (held(&status.usage), held(&status.reserved));
    quota
        .iter()
        .map(|(name, q)| {
            let used = usage.get(name).saturating_add(reserved.get(name));
            format!("{name}={}/{}", format_quantity(name, used), q.0)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::admission::{PodSetSnapshot, PodSnapshot, WaitReason, WorkloadKey};
    use crate::queue::pod_cache::CachedPodStatus;
    use crate::resources::ResourceList;

    const NOW: &str = "2026-01-01T00:00:00Z";
    const LATER: &str = "2026-01-01T00:01:00Z";

    fn cpu(cores: i64) -> ResourceList {
        let mut r = ResourceList::new();
        r.add("cpu", cores * 1000);
        r
    }

    /// A workload of one pod set `exec` whose pods are in `states`, their objects in `phases`.
    struct Fixture {
        workload: WorkloadSnapshot,
        pods: Vec<Vec<Arc<CachedPod>>>,
    }

    fn fixture(pods: &[(PodState, Option<&str>)]) -> Fixture {
        let workload = WorkloadSnapshot {
            key: WorkloadKey {
                namespace: "ns".into(),
                name: "w".into(),
            },
            queue: "q".into(),
            namespace_allowed: true,
            priority: 0,
            interrupted_count: 0,
            queued_at: 0,
            pod_sets: vec![PodSetSnapshot {
                name: "exec".into(),
                per_pod: cpu(1),
                min_count: 1,
                pods: pods
                    .iter()
                    .enumerate()
                    .map(|(i, (state, _))| PodSnapshot {
                        name: format!("p{i}"),
                        requests: Arc::new(cpu(1)),
                        state: *state,
                        created_at: i as i64,
                        terminating: false,
                        eviction_blocked: false,
                    })
                    .collect(),
            }],
        };
        let objects = pods
            .iter()
            .map(|(_, phase)| {
                Arc::new(CachedPod {
                    status: Some(CachedPodStatus {
                        phase: phase.map(|p| p.to_string().into()),
                    }),
                    ..CachedPod::default()
                })
            })
            .collect();
        Fixture {
            workload,
            pods: vec![objects],
        }
    }

    impl Fixture {
        fn view(&self) -> WorkloadView<'_> {
            WorkloadView {
                workload: &self.workload,
                pods: &self.pods,
                ended: None,
                left_behind: 0,
                preempted: None,
                held: None,
                requeue_exhausted: false,
            }
        }
    }

    fn condition<'a>(status: &'a DynamicWorkloadStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no condition {type_} in {status:?}"))
    }

    #[test]
    fn a_preemptor_says_how_many_pods_it_waits_for() {
        let f = fixture(&[(PodState::Gated, Some("Pending"))]);
        let tally = WorkloadTally {
            pending_pods: 1,
            waiting: Some(WaitReason::Preempting {
                queue: "q".into(),
                victims: 3,
            }),
            ..WorkloadTally::default()
        };
        let status = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Pending);
        assert_eq!(
            status.message,
            "waits for 3 lower-priority pods to be preempted in queue q"
        );
        assert_eq!(condition(&status, "QuotaReserved").message, status.message);
    }

    /// One pod pending in a full 4-cpu queue q, 1 cpu short.
    fn waiting_for_one_cpu() -> WorkloadTally {
        WorkloadTally {
            pending_pods: 1,
            waiting: Some(WaitReason::Quota {
                queue: "q".into(),
                resource: "cpu".into(),
                missing: 1000,
                used: 4000,
                reserved: 0,
                quota: 4000,
            }),
            ..WorkloadTally::default()
        }
    }

    #[test]
    fn a_pending_workload_says_how_much_it_needs() {
        let f = fixture(&[(PodState::Gated, Some("Pending"))]);
        let tally = waiting_for_one_cpu();
        let status = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Pending);
        assert_eq!(
            status.message,
            "needs 1 cpu more in queue q: 4/4 cpu used, 0 cpu reserved"
        );
        assert_eq!(status.pending_pods, 1);
        assert_eq!(status.pod_set_summary, "exec=0/1");
        let reserved = condition(&status, "QuotaReserved");
        assert_eq!(
            (reserved.status, reserved.reason.as_str()),
            (ConditionStatus::False, "Waiting")
        );
        assert_eq!(reserved.message, status.message);
        assert_eq!(status.admitted_at, None);
        assert_eq!(status.finished_at, None);
    }

    #[test]
    fn a_workload_without_pods_says_so() {
        let f = fixture(&[]);
        let status = workload_status(
            &f.view(),
            &WorkloadTally::default(),
            &HashSet::new(),
            None,
            NOW,
        );
        assert_eq!(
            (status.phase, status.message.as_str()),
            (WorkloadPhase::Pending, "no pods yet")
        );
    }

    #[test]
    fn pods_admitted_by_this_pass_count_as_admitted_with_the_time() {
        let f = fixture(&[
            (PodState::Gated, Some("Pending")),
            (PodState::Gated, Some("Pending")),
        ]);
        let tally = WorkloadTally {
            used: cpu(1),
            admitted_pods: 1,
            pending_pods: 1,
            ..WorkloadTally::default()
        };
        let admitted_now = HashSet::from([(0, 0)]);
        let status = workload_status(&f.view(), &tally, &admitted_now, None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Admitted);
        assert_eq!(status.message, "1 pod(s) admitted in queue q");
        assert_eq!(status.pod_sets[0].admitted, 1);
        assert_eq!(status.pod_sets[0].pending, 1);
        assert_eq!(status.pod_set_summary, "exec=1/1");
        assert_eq!(status.used, cpu(1).to_quantities());
        assert_eq!(status.admitted_at.as_deref(), Some(NOW));
        let reserved = condition(&status, "QuotaReserved");
        assert_eq!(
            (reserved.status, reserved.reason.as_str()),
            (ConditionStatus::True, "Admitted")
        );
    }

    #[test]
    fn a_reservation_alone_makes_a_workload_admitted() {
        let f = fixture(&[]);
        let tally = WorkloadTally {
            reserved: cpu(2),
            ..WorkloadTally::default()
        };
        let status = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Admitted);
        assert_eq!(status.reserved, cpu(2).to_quantities());
    }

    #[test]
    fn a_running_workload_keeps_its_first_admission_time_and_transition_times() {
        let f = fixture(&[(PodState::Admitted, Some("Running"))]);
        let tally = WorkloadTally {
            used: cpu(1),
            admitted_pods: 1,
            ..WorkloadTally::default()
        };
        let first = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        assert_eq!(first.phase, WorkloadPhase::Running);
        assert_eq!(first.pod_sets[0].running, 1);
        let old = DynamicWorkloadStatus {
            interrupted_count: 2,
            ..first.clone()
        };
        let again = workload_status(&f.view(), &tally, &HashSet::new(), Some(&old), LATER);
        assert_eq!(again.admitted_at.as_deref(), Some(NOW));
        assert_eq!(again.interrupted_count, 2);
        assert_eq!(condition(&again, "QuotaReserved").last_transition_time, NOW);
        assert_eq!(
            DynamicWorkloadStatus {
                interrupted_count: 0,
                ..again
            },
            first
        );
    }

    #[test]
    fn a_workload_whose_pods_all_ended_finished_or_failed() {
        let f = fixture(&[
            (PodState::Ended, Some("Succeeded")),
            (PodState::Ended, Some("Succeeded")),
        ]);
        let done = workload_status(
            &f.view(),
            &WorkloadTally::default(),
            &HashSet::new(),
            None,
            NOW,
        );
        assert_eq!(done.phase, WorkloadPhase::Finished);
        assert_eq!(done.message, "all 2 pod(s) ended");
        assert_eq!(done.finished_at.as_deref(), Some(NOW));
        let finished = condition(&done, "Finished");
        assert_eq!(
            (finished.status, finished.reason.as_str()),
            (ConditionStatus::True, "PodsSucceeded")
        );
        assert_eq!(condition(&done, "QuotaReserved").reason, "Finished");

        let f = fixture(&[
            (PodState::Ended, Some("Succeeded")),
            (PodState::Ended, Some("Failed")),
        ]);
        let failed = workload_status(
            &f.view(),
            &WorkloadTally::default(),
            &HashSet::new(),
            Some(&done),
            LATER,
        );
        assert_eq!(failed.phase, WorkloadPhase::Failed);
        assert_eq!(failed.message, "all 2 pod(s) ended, 1 failed");
        assert_eq!(failed.finished_at.as_deref(), Some(NOW), "kept from before");
        assert_eq!(condition(&failed, "Finished").reason, "PodsFailed");
    }

    #[test]
    fn an_ended_application_is_final_whatever_its_pods_do() {
        let f = fixture(&[
            (PodState::Admitted, Some("Running")),
            (PodState::Gated, Some("Pending")),
        ]);
        let view = WorkloadView {
            ended: Some(ApplicationEnd::Failed),
            left_behind: 2,
            ..f.view()
        };
        let tally = WorkloadTally {
            admitted_pods: 1,
            ..WorkloadTally::default()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Failed);
        assert_eq!(
            status.message,
            "the application failed; 2 pod(s) left behind the gate are not admitted"
        );
        assert_eq!(
            status.pending_pods, 2,
            "the pods left behind count as pending"
        );
        assert_eq!(condition(&status, "Finished").reason, "ApplicationFailed");

        let view = WorkloadView {
            ended: Some(ApplicationEnd::Succeeded),
            ..f.view()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), None, NOW);
        assert_eq!(
            (status.phase, status.message.as_str()),
            (WorkloadPhase::Finished, "the application succeeded")
        );
        assert_eq!(
            condition(&status, "Finished").reason,
            "ApplicationSucceeded"
        );
    }

    fn preemption(at: &str) -> Preemption {
        Preemption {
            by: "ns/urgent".into(),
            reason: "InQueuePriority".into(),
            queue: "q".into(),
            needed: "2 cpu".into(),
            pods: 1,
            at: at.into(),
        }
    }

    #[test]
    fn a_workload_failed_by_its_requeue_limit_says_why() {
        let f = fixture(&[(PodState::Gated, None)]);
        let view = WorkloadView {
            ended: Some(ApplicationEnd::Failed),
            left_behind: 1,
            requeue_exhausted: true,
            ..f.view()
        };
        let status = workload_status(&view, &WorkloadTally::default(), &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Failed);
        assert!(
            status.message.contains("requeueLimit"),
            "{}",
            status.message
        );
        assert!(
            status.message.contains("1 pod(s) left behind"),
            "{}",
            status.message
        );
    }

    #[test]
    fn a_requeue_is_counted_once_as_a_requeue_not_a_preemption() {
        let f = fixture(&[(PodState::Admitted, Some("Pending"))]);
        let tally = WorkloadTally {
            used: cpu(1),
            admitted_pods: 1,
            ..WorkloadTally::default()
        };
        let old = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        let requeue = Preemption {
            by: "ns/w".into(),
            reason: REQUEUE_REASON.into(),
            ..preemption(LATER)
        };
        let view = WorkloadView {
            preempted: Some(&requeue),
            ..f.view()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), Some(&old), LATER);
        assert_eq!((status.requeue_count, status.interrupted_count), (1, 0));
        assert_eq!(status.requeued_at.as_deref(), Some(LATER));
        let requeued = condition(&status, "Requeued");
        assert_eq!(requeued.reason, "PodsReadyTimeout");
        assert!(
            requeued.message.contains("podsReadyTimeout"),
            "{}",
            requeued.message
        );
        assert!(status.conditions.iter().all(|c| c.type_ != "Preempted"));
        let again = workload_status(&view, &tally, &HashSet::new(), Some(&status), LATER);
        assert_eq!(again.requeue_count, 1, "counted once");
    }

    #[test]
    fn a_preemption_is_counted_once_and_recorded_with_who_when_and_why() {
        let f = fixture(&[
            (PodState::Admitted, Some("Running")),
            (PodState::Admitted, Some("Running")),
        ]);
        let tally = WorkloadTally {
            used: cpu(2),
            admitted_pods: 2,
            ..WorkloadTally::default()
        };
        let before = workload_status(&f.view(), &tally, &HashSet::new(), None, NOW);
        let old = DynamicWorkloadStatus {
            interrupted_count: 1,
            ..before
        };
        let first = preemption(LATER);
        let view = WorkloadView {
            preempted: Some(&first),
            ..f.view()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), Some(&old), LATER);
        assert_eq!(status.interrupted_count, 2);
        assert_eq!(status.last_preempted_by.as_deref(), Some("ns/urgent"));
        assert_eq!(status.preempted_at.as_deref(), Some(LATER));
        let preempted = condition(&status, "Preempted");
        assert_eq!(
            (
                preempted.status,
                preempted.reason.as_str(),
                preempted.last_transition_time.as_str()
            ),
            (ConditionStatus::True, "InQueuePriority", LATER)
        );
        assert_eq!(
            preempted.message,
            "1 pod(s) evicted to make room for ns/urgent in queue q (InQueuePriority), which needed 2 cpu"
        );
        // Still holding quota (an executor above the minimum was taken): still running.
        assert_eq!(status.phase, WorkloadPhase::Running);
        // Built again from a status that counts it (the next pass): not counted twice.
        let again = workload_status(&view, &tally, &HashSet::new(), Some(&status), LATER);
        assert_eq!(again, status);
        // Without the preemption at hand (the watch shows it recorded): carried forward.
        let later = workload_status(&f.view(), &tally, &HashSet::new(), Some(&status), LATER);
        assert_eq!(later, status);
        // Another preemption, by the same preemptor later: counted again.
        let second = preemption("2026-01-01T00:02:00Z");
        let view = WorkloadView {
            preempted: Some(&second),
            ..f.view()
        };
        let third = workload_status(&view, &tally, &HashSet::new(), Some(&status), LATER);
        assert_eq!(third.interrupted_count, 3);
        assert_eq!(
            condition(&third, "Preempted").last_transition_time,
            "2026-01-01T00:02:00Z"
        );
    }

    #[test]
    fn a_workload_preempted_whole_waits_as_preempted() {
        let f = fixture(&[(PodState::Gated, Some("Pending"))]);
        let tally = waiting_for_one_cpu();
        let p = preemption(NOW);
        let view = WorkloadView {
            preempted: Some(&p),
            ..f.view()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), None, NOW);
        assert_eq!(status.phase, WorkloadPhase::Preempted);
        assert_eq!(status.interrupted_count, 1);
        assert!(status.message.starts_with("needs 1 cpu more"), "{status:?}");
        // Admitted again: the phase follows its pods, the record stays.
        let f = fixture(&[(PodState::Admitted, Some("Running"))]);
        let tally = WorkloadTally {
            used: cpu(1),
            admitted_pods: 1,
            ..WorkloadTally::default()
        };
        let back = workload_status(&f.view(), &tally, &HashSet::new(), Some(&status), LATER);
        assert_eq!(back.phase, WorkloadPhase::Running);
        assert_eq!(back.interrupted_count, 1);
        assert_eq!(condition(&back, "Preempted").last_transition_time, NOW);
    }

    #[test]
    fn a_preemptor_held_by_a_disruption_budget_says_so() {
        let f = fixture(&[(PodState::Gated, Some("Pending"))]);
        let tally = waiting_for_one_cpu();
        let view = WorkloadView {
            held: Some("waits to preempt: a PodDisruptionBudget blocks the eviction of pod ns/p"),
            ..f.view()
        };
        let status = workload_status(&view, &tally, &HashSet::new(), None, NOW);
        assert_eq!(
            status.message,
            "waits to preempt: a PodDisruptionBudget blocks the eviction of pod ns/p"
        );
        assert_eq!(status.phase, WorkloadPhase::Pending);
    }

    #[test]
    fn a_queue_shows_its_usage_reservations_and_counts() {
        let tally = QueueTally {
            usage: cpu(3),
            reserved: cpu(1),
            pending_workloads: 2,
            admitted_workloads: 1,
            pending_pods: 5,
            admitted_pods: 3,
            borrowed: cpu(2),
            lent: ResourceList::new(),
            ceiling: None,
        };
        let status = queue_status(Some(&tally), None, Some(4), NOW);
        assert_eq!(status.usage, cpu(3).to_quantities());
        assert_eq!(status.borrowed, cpu(2).to_quantities());
        assert!(status.lent.is_empty());
        assert_eq!(status.reserved, cpu(1).to_quantities());
        assert_eq!(
            (
                status.pending_workloads,
                status.admitted_workloads,
                status.pending_pods,
                status.admitted_pods
            ),
            (2, 1, 5, 3)
        );
        assert_eq!(status.observed_generation, Some(4));
        let active = &status.conditions[0];
        assert_eq!(
            (active.type_.as_str(), active.status, active.reason.as_str()),
            ("Active", ConditionStatus::True, "QuotaValid")
        );
        let again = queue_status(Some(&tally), Some(&status), Some(4), LATER);
        assert_eq!(again, status, "nothing changed: the same status to write");
    }

    #[test]
    fn a_queue_whose_quota_cannot_be_read_is_inactive() {
        let active = queue_status(Some(&QueueTally::default()), None, Some(1), NOW);
        let status = queue_status(None, Some(&active), Some(2), LATER);
        assert_eq!(status.usage, Default::default());
        assert_eq!(status.observed_generation, Some(2));
        let condition = &status.conditions[0];
        assert_eq!(
            (
                condition.status,
                condition.reason.as_str(),
                condition.last_transition_time.as_str()
            ),
            (ConditionStatus::False, "InvalidQuota", LATER)
        );
    }
}
