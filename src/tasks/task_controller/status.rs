//! The statuses each step of the Task controller writes: pure functions of the status read.

use crate::api::{Condition, ConditionStatus, TaskHandle, TaskPhase, TaskStatus};
use crate::tasks::executors::Outcome;

fn finished_condition(
    previous: &TaskStatus,
    phase: TaskPhase,
    message: &str,
    now: &str,
) -> Vec<Condition> {
    let old = previous.conditions.iter().find(|c| c.type_ == "Finished");
    let status = if phase.is_final() {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    vec![Condition::updated(
        old,
        "Finished",
        status,
        &phase.to_string(),
        message.to_string(),
        now,
    )]
}

/// Staging, with the executor and when it was first seen. Pure.
pub(super) fn staging_status(status: &TaskStatus, executor: &str, stamp: &str) -> TaskStatus {
    let mut next = status.clone();
    next.executor = Some(executor.to_string());
    next.staging_at.get_or_insert_with(|| stamp.to_string());
    if next.conditions.is_empty() {
        next.conditions = finished_condition(status, TaskPhase::Staging, "", stamp);
    }
    next
}

/// Running on `handle`, recorded before the executor acts. `previous` is the status read (its
/// condition is the one updated). Pure.
pub(super) fn running_status(
    staged: &TaskStatus,
    previous: &TaskStatus,
    handle: &TaskHandle,
    worker: Option<String>,
    stamp: &str,
) -> TaskStatus {
    let mut next = staged.clone();
    next.phase = TaskPhase::Running;
    next.handle = Some(handle.clone());
    next.worker = worker;
    next.started_at = Some(stamp.to_string());
    next.message = format!("starting {} {}", handle.kind, handle.name);
    next.conditions = finished_condition(previous, TaskPhase::Running, "", stamp);
    next
}

/// The handle's `uid` recorded (what the executor started), with a message. Pure.
pub(super) fn acted_status(status: &TaskStatus, uid: String, message: String) -> TaskStatus {
    let mut next = status.clone();
    if let Some(h) = next.handle.as_mut() {
        h.uid = Some(uid);
    }
    next.message = message;
    next
}

/// Killing, with why. Pure.
pub(super) fn killing_status(status: &TaskStatus, reason: &str, stamp: &str) -> TaskStatus {
    let mut next = status.clone();
    next.phase = TaskPhase::Killing;
    next.killing_at = Some(stamp.to_string());
    next.message = reason.to_string();
    next.conditions = finished_condition(status, TaskPhase::Killing, reason, stamp);
    next
}

/// Ended in `phase` with the executor's outcome. `executor` is "none" when the Task names no
/// valid executor. Pure.
pub(super) fn finished_status(
    status: &TaskStatus,
    executor: &str,
    phase: TaskPhase,
    outcome: &Outcome,
    stamp: &str,
) -> TaskStatus {
    let mut next = status.clone();
    if next.executor.is_none() && executor != "none" {
        next.executor = Some(executor.to_string());
    }
    next.phase = phase;
    next.message = outcome.message.clone();
    next.result = outcome.result.clone();
    next.finished_at = Some(stamp.to_string());
    next.conditions = finished_condition(status, phase, &outcome.message, stamp);
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::task_controller::decide::tests::running;
    use crate::tasks::task_controller::decide::{failure, final_phase};
    use serde_json::json;

    #[test]
    fn statuses_record_each_transition() {
        let stamp = "2025-01-01T00:00:00.000Z";
        let staged = staging_status(&TaskStatus::default(), "pod", stamp);
        assert_eq!(staged.executor.as_deref(), Some("pod"));
        assert_eq!(staged.staging_at.as_deref(), Some(stamp));
        assert_eq!(staged.conditions[0].reason, "Staging");
        let again = staging_status(&staged, "pod", "2025-01-01T00:00:09.000Z");
        assert_eq!(again, staged, "a second pass changes nothing");

        let handle = running(None).handle.expect("a handle");
        let later = "2025-01-01T00:00:01.000Z";
        let started = running_status(&staged, &staged, &handle, Some("w".into()), later);
        assert_eq!(started.phase, TaskPhase::Running);
        assert_eq!(started.message, "starting Pod t-task");
        assert_eq!(started.worker.as_deref(), Some("w"));
        assert_eq!(started.started_at.as_deref(), Some(later));
        assert_eq!(started.staging_at.as_deref(), Some(stamp));
        assert_eq!(started.conditions[0].reason, "Running");

        let acted = acted_status(&started, "u1".into(), "started".into());
        assert_eq!(acted.handle.and_then(|h| h.uid).as_deref(), Some("u1"));

        let killing = killing_status(&started, "killed: x", later);
        assert_eq!(
            (killing.phase, killing.killing_at.as_deref()),
            (TaskPhase::Killing, Some(later))
        );

        let outcome = Outcome {
            success: true,
            result: Some(json!(9)),
            message: "pod succeeded".into(),
        };
        assert_eq!(final_phase(&outcome), TaskPhase::Success);
        assert_eq!(final_phase(&failure("x".into())), TaskPhase::Failed);
        let done = finished_status(&started, "pod", TaskPhase::Success, &outcome, later);
        assert_eq!(done.result, Some(json!(9)));
        assert_eq!(done.conditions[0].status, ConditionStatus::True);
        let invalid = finished_status(
            &TaskStatus::default(),
            "none",
            TaskPhase::Failed,
            &outcome,
            later,
        );
        assert_eq!(invalid.executor, None, "no executor named: none recorded");
    }
}
