//! The status builders' unit tests: workload phases, messages and conditions, preemptions and
//! requeues, and queue statuses.

use super::*;
use crate::queue::admission::{PodSnapshot, WaitReason};
use crate::queue::admission_tests::one_set_workload;
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
    let snapshots = pods
        .iter()
        .enumerate()
        .map(|(i, (state, _))| {
            PodSnapshot::plain(format!("p{i}"), Arc::new(cpu(1)), *state, i as i64)
        })
        .collect();
    let workload = one_set_workload("w", "exec", cpu(1), 1, snapshots);
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

/// The tally of a workload holding `pods` admitted pods of one cpu each.
fn admitted(pods: u32) -> WorkloadTally {
    WorkloadTally {
        used: cpu(i64::from(pods)),
        admitted_pods: pods,
        ..WorkloadTally::default()
    }
}

/// The status a pass writes for a workload it sees for the first time, admitting none of its
/// pods this pass.
fn first_status(view: &WorkloadView, tally: &WorkloadTally) -> DynamicWorkloadStatus {
    workload_status(view, tally, &HashSet::new(), None, NOW)
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
    let status = first_status(&f.view(), &tally);
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
    let status = first_status(&f.view(), &tally);
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
    let status = first_status(&f.view(), &WorkloadTally::default());
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
    let status = first_status(&f.view(), &tally);
    assert_eq!(status.phase, WorkloadPhase::Admitted);
    assert_eq!(status.reserved, cpu(2).to_quantities());
}

#[test]
fn a_running_workload_keeps_its_first_admission_time_and_transition_times() {
    let f = fixture(&[(PodState::Admitted, Some("Running"))]);
    let tally = admitted(1);
    let first = first_status(&f.view(), &tally);
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
    let done = first_status(&f.view(), &WorkloadTally::default());
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
    let status = first_status(&view, &tally);
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
    let status = first_status(&view, &tally);
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
    let status = first_status(&view, &WorkloadTally::default());
    assert_eq!(status.phase, WorkloadPhase::Failed);
    for says in ["requeueLimit", "1 pod(s) left behind"] {
        assert!(status.message.contains(says), "{}", status.message);
    }
}

#[test]
fn a_requeue_is_counted_once_as_a_requeue_not_a_preemption() {
    let f = fixture(&[(PodState::Admitted, Some("Pending"))]);
    let tally = admitted(1);
    let old = first_status(&f.view(), &tally);
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
    let tally = admitted(2);
    let before = first_status(&f.view(), &tally);
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
    let status = first_status(&view, &tally);
    assert_eq!(status.phase, WorkloadPhase::Preempted);
    assert_eq!(status.interrupted_count, 1);
    assert!(status.message.starts_with("needs 1 cpu more"), "{status:?}");
    // Admitted again: the phase follows its pods, the record stays.
    let f = fixture(&[(PodState::Admitted, Some("Running"))]);
    let tally = admitted(1);
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
    let status = first_status(&view, &tally);
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
