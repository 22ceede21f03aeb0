//! Pure decisions of the Task controller: when a Task must be killed, when it is looked at again,
//! and what one reconcile does, from the recorded status alone.

use std::time::Duration;

use crate::api::{Task, TaskHandle, TaskPhase, TaskStatus};
use crate::tasks::executors::Outcome;

use super::RESYNC;

pub(super) fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// RFC 3339 with milliseconds: Tasks start and end within the same second.
pub(super) fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

pub(super) fn parse_time(text: Option<&str>) -> Option<jiff::Timestamp> {
    text?.parse().ok()
}

/// Why the Task must be killed now, if it must. Pure.
pub fn kill_reason(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<String> {
    if let Some(at) = &task.spec.kill_timestamp {
        // An unreadable killTimestamp kills at once: it was set to kill.
        let due = at
            .parse::<jiff::Timestamp>()
            .map(|t| t <= now)
            .unwrap_or(true);
        if due {
            return Some(format!("killed: spec.killTimestamp is {at}"));
        }
    }
    let timeout = task.spec.timeout.as_deref()?;
    let limit = crate::duration::parse_duration(timeout).ok()?;
    let started = parse_time(status.started_at.as_deref())?;
    let elapsed = now.duration_since(started);
    (elapsed.as_secs_f64() >= limit.as_secs_f64())
        .then(|| format!("killed: timeout {timeout} exceeded"))
}

/// The Task's `timeout`, when it has one, parses. Pure.
pub fn check_timeout(task: &Task) -> Result<(), String> {
    match task.spec.timeout.as_deref() {
        Some(text) => crate::duration::parse_duration(text)
            .map(|_| ())
            .map_err(|e| format!("spec.timeout {e}: the Task cannot run without a valid timeout")),
        None => Ok(()),
    }
}

/// When the Task must be looked at again for its timeout or a future killTimestamp. Pure.
fn next_deadline(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<Duration> {
    let kill_at = parse_time(task.spec.kill_timestamp.as_deref());
    let timeout = task
        .spec
        .timeout
        .as_deref()
        .and_then(|t| crate::duration::parse_duration(t).ok())
        .and_then(|t| jiff::SignedDuration::try_from(t).ok());
    let timeout_at = match (timeout, parse_time(status.started_at.as_deref())) {
        (Some(span), Some(started)) => started.checked_add(span).ok(),
        _ => None,
    };
    kill_at
        .into_iter()
        .chain(timeout_at)
        .min()
        .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
        .map(|d| d + Duration::from_millis(50))
}

/// The latest the Task is looked at again: its next deadline, at most [`RESYNC`]. Pure.
pub(super) fn resync_after(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Duration {
    next_deadline(task, status, now).map_or(RESYNC, |d| d.min(RESYNC))
}

/// What a running executor does in this reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// An HTTP request not sent yet: record that it goes, then send it (at most once).
    SendOnce,
    /// Recorded but not known to be started: start it (idempotent), then record that.
    Start,
    /// Started: read its progress.
    Observe,
}

/// What one reconcile does, decided from the recorded status alone.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Killed while Staging: it ends Killed without having run.
    KillBeforeStart(String),
    /// Wait for the input and a slot, then record the handle (phase Running).
    Stage,
    /// Running without a handle: nothing can be resumed, it fails.
    FailNoHandle,
    /// Running and to be killed: record Killing first.
    BeginKill(String),
    /// Running: drive the executor on the recorded handle.
    Act(Act, TaskHandle),
    /// Killing: kill until the work is gone, then Killed.
    Kill,
    /// Ended: nothing to do.
    Nothing,
}

/// The step for a Task in `status` run by an `executor` (its kind), given why it must be killed
/// now, if it must. Pure.
pub fn next_step(status: &TaskStatus, executor: &str, kill: Option<String>) -> Step {
    match status.phase {
        TaskPhase::Staging => kill.map_or(Step::Stage, Step::KillBeforeStart),
        TaskPhase::Running => {
            let Some(handle) = &status.handle else {
                return Step::FailNoHandle;
            };
            if let Some(reason) = kill {
                return Step::BeginKill(reason);
            }
            let act = match (&handle.uid, executor) {
                (None, "http") => Act::SendOnce,
                (None, _) => Act::Start,
                (Some(_), _) => Act::Observe,
            };
            Step::Act(act, handle.clone())
        }
        TaskPhase::Killing => Step::Kill,
        TaskPhase::Success | TaskPhase::Failed | TaskPhase::Killed => Step::Nothing,
    }
}

/// How often a running Task of this executor is polled. Pure.
pub(super) fn poll_interval(executor: &str) -> Duration {
    // Objects of any kind are polled (no watch per kind); an HTTP request in flight is looked at
    // often, its end is not an API event; pods are watched, the poll is a backstop.
    match executor {
        "resource" | "workflow" => Duration::from_secs(1),
        "http" => Duration::from_millis(300),
        _ => Duration::from_secs(10),
    }
}

/// The phase an executor's outcome ends the Task in. Pure.
pub(super) fn final_phase(outcome: &Outcome) -> TaskPhase {
    if outcome.success {
        TaskPhase::Success
    } else {
        TaskPhase::Failed
    }
}

pub(super) fn failure(message: String) -> Outcome {
    Outcome {
        success: false,
        result: None,
        message,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn task(kill: Option<&str>, timeout: Option<&str>) -> Task {
        let mut t = Task::new("t", Default::default());
        t.spec.kill_timestamp = kill.map(str::to_string);
        t.spec.timeout = timeout.map(str::to_string);
        t
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    pub(in crate::tasks::task_controller) fn running(uid: Option<&str>) -> TaskStatus {
        TaskStatus {
            phase: TaskPhase::Running,
            started_at: Some("2025-01-01T00:00:00Z".into()),
            handle: Some(TaskHandle {
                kind: "Pod".into(),
                name: "t-task".into(),
                uid: uid.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn kill_by_timestamp_and_timeout() {
        let now = at("2025-01-01T00:01:00Z");
        let running = running(Some("u"));
        assert_eq!(kill_reason(&task(None, None), &running, now), None);
        assert!(kill_reason(&task(Some("2025-01-01T00:00:30Z"), None), &running, now).is_some());
        assert_eq!(
            kill_reason(&task(Some("2025-01-01T00:05:00Z"), None), &running, now),
            None
        );
        assert_eq!(
            kill_reason(&task(None, Some("30s")), &running, now).as_deref(),
            Some("killed: timeout 30s exceeded")
        );
        assert_eq!(kill_reason(&task(None, Some("5m")), &running, now), None);
        // Not started: a timeout does not run yet.
        assert_eq!(
            kill_reason(&task(None, Some("1s")), &TaskStatus::default(), now),
            None
        );
        let d = next_deadline(&task(None, Some("5m")), &running, now).unwrap();
        assert!(
            d > Duration::from_secs(239) && d < Duration::from_secs(241),
            "{d:?}"
        );
    }

    #[test]
    fn a_timeout_that_does_not_parse_is_refused() {
        assert_eq!(check_timeout(&task(None, None)), Ok(()));
        assert_eq!(check_timeout(&task(None, Some("90s"))), Ok(()));
        for bad in ["5 min", "1.5h", "3651d", "soon", ""] {
            let why = check_timeout(&task(None, Some(bad))).expect_err(bad);
            assert!(why.starts_with("spec.timeout "), "{why}");
        }
    }

    #[test]
    fn resync_is_the_nearest_deadline_at_most_30s() {
        let now = at("2025-01-01T00:01:00Z");
        let running = running(Some("u"));
        assert_eq!(resync_after(&task(None, None), &running, now), RESYNC);
        assert_eq!(resync_after(&task(None, Some("5m")), &running, now), RESYNC);
        let soon = resync_after(
            &task(Some("2025-01-01T00:01:02Z"), Some("5m")),
            &running,
            now,
        );
        assert_eq!(soon, Duration::from_millis(2050));
        // A deadline past: look again at once (plus the margin).
        let past = resync_after(&task(None, Some("30s")), &running, now);
        assert_eq!(past, Duration::from_millis(50));
    }

    #[test]
    fn the_step_follows_the_recorded_phase() {
        let staging = TaskStatus::default();
        assert_eq!(next_step(&staging, "pod", None), Step::Stage);
        assert_eq!(
            next_step(&staging, "pod", Some("k".into())),
            Step::KillBeforeStart("k".into())
        );
        let no_handle = TaskStatus {
            phase: TaskPhase::Running,
            ..Default::default()
        };
        assert_eq!(next_step(&no_handle, "pod", None), Step::FailNoHandle);
        assert_eq!(
            next_step(&no_handle, "pod", Some("k".into())),
            Step::FailNoHandle,
            "without a handle there is nothing to kill"
        );
        let handle = |s: &TaskStatus| s.handle.clone().expect("a handle");
        let recorded = running(None);
        assert_eq!(
            next_step(&recorded, "pod", None),
            Step::Act(Act::Start, handle(&recorded))
        );
        assert_eq!(
            next_step(&recorded, "http", None),
            Step::Act(Act::SendOnce, handle(&recorded))
        );
        let started = running(Some("u"));
        for kind in ["pod", "http", "container", "resource"] {
            assert_eq!(
                next_step(&started, kind, None),
                Step::Act(Act::Observe, handle(&started))
            );
        }
        assert_eq!(
            next_step(&started, "pod", Some("k".into())),
            Step::BeginKill("k".into())
        );
        let killing = TaskStatus {
            phase: TaskPhase::Killing,
            ..started.clone()
        };
        assert_eq!(next_step(&killing, "pod", Some("k".into())), Step::Kill);
        for phase in [TaskPhase::Success, TaskPhase::Failed, TaskPhase::Killed] {
            let ended = TaskStatus {
                phase,
                ..Default::default()
            };
            assert_eq!(next_step(&ended, "pod", Some("k".into())), Step::Nothing);
        }
    }
}
