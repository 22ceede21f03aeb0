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

mod queue;

pub use queue::{queue_status, summary_quota, usage_summary};

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

#[cfg(test)]
mod tests;
