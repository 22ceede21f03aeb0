//! What a ScavengerJob's current run is doing, judged from its Job and pods, and the status each
//! step leads to: pure functions.
//!
//! Interruption or failure: a pod evicted, preempted (condition `DisruptionTarget`) or deleted
//! from outside interrupts the run, whatever its exit code (a container stopped by SIGTERM exits
//! 143); a pod that ended Failed with an exit code other than 0 and was not disrupted fails it.

use super::plan::ramp;
use crate::api::{Condition, ConditionStatus, ScavengerJobStatus, ScavengerPhase};

/// What the judgement needs of the Job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobFacts {
    pub name: String,
    /// Seconds since the epoch.
    pub created: i64,
    /// Condition Complete is True.
    pub complete: bool,
    /// Condition Failed is True: (reason, message).
    pub failed: Option<(String, String)>,
    /// Pods of the Job the controller saw being deleted while they ran. Remembered from the pod
    /// watch because a pod may be gone before a pass looks: a program that exits at once on
    /// SIGTERM with a nonzero code fails the Job by its podFailurePolicy, and the Job controller
    /// then removes the pod, so the failure alone would look like the program's.
    pub pods_deleted_while_running: Vec<String>,
}

/// What the judgement needs of one of the Job's pods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunPod {
    pub name: String,
    /// Pending, Running, Succeeded, Failed.
    pub phase: String,
    /// It has a deletionTimestamp.
    pub deleting: bool,
    /// Condition DisruptionTarget is True (evicted, preempted, its node drained).
    pub disrupted: bool,
    /// The first container that ended with an exit code other than 0: (container, code).
    pub exit_code: Option<(String, i32)>,
    /// Bound to a node.
    pub scheduled: bool,
}

/// The run's state.
#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    /// Pods being created or scheduled, within the bound.
    Starting,
    /// Every pod runs.
    Running,
    Completed,
    /// A pod failed: the message says which and how.
    Failed(String),
    /// A pod was taken away from outside: the message says which and how.
    Interrupted(String),
    /// Not every pod was scheduled within the bound.
    Unschedulable(String),
}

/// Judges the run of `job` with its `pods` (`parallelism` expected) at `now`. `start_bound`:
/// seconds the pods may take to be scheduled. Pure.
pub fn observe(
    job: &JobFacts,
    pods: &[RunPod],
    parallelism: i32,
    now: i64,
    start_bound: i64,
) -> RunState {
    if let Some(pod) = pods.iter().find(|p| p.disrupted) {
        return RunState::Interrupted(format!(
            "pod {} was evicted or preempted (condition DisruptionTarget)",
            pod.name
        ));
    }
    // Before the deleting pods: once a pod fails the Job, the Job controller deletes the others.
    if let Some(state) = failed_by_policy(job) {
        return state;
    }
    // Deleted from outside while it ran: the container is killed on the way out (exit 137 or 143,
    // as a kubelet and kwok's stop-on-delete stage report it), which is the deletion's doing, not
    // the program's.
    if let Some(pod) = pods.iter().find(|p| p.deleting && p.phase != "Succeeded") {
        return RunState::Interrupted(format!("pod {} was deleted while it ran", pod.name));
    }
    if let Some((pod, (container, code))) = pods
        .iter()
        .find_map(|p| p.exit_code.as_ref().map(|e| (p, e)))
        .filter(|(p, _)| p.phase == "Failed")
    {
        return RunState::Failed(format!(
            "pod {} failed: container {container} exited with code {code}; a ScavengerJob that fails is never retried",
            pod.name
        ));
    }
    if job.complete {
        return RunState::Completed;
    }
    if let Some((reason, _)) = &job.failed {
        // A pod that vanished while it ran (deleted, its node gone) counts as a failed pod for
        // the Job (backoffLimit 0) without an exit code: an interruption.
        return RunState::Interrupted(format!(
            "Job {} stopped ({reason}): a pod was taken away while it ran",
            job.name
        ));
    }
    let scheduled = pods.iter().filter(|p| p.scheduled).count() as i64;
    if scheduled < i64::from(parallelism) {
        if now - job.created >= start_bound {
            return RunState::Unschedulable(format!(
                "{scheduled} of {parallelism} pod(s) were scheduled within {start_bound}s of the start; the Job was removed and the start will be retried"
            ));
        }
        return RunState::Starting;
    }
    if pods.iter().filter(|p| p.phase == "Running").count() as i64 >= i64::from(parallelism) {
        RunState::Running
    } else {
        RunState::Starting
    }
}

/// The Job failed by its podFailurePolicy (a container exited with a code other than 0): a
/// failure, unless the pod it names was seen deleted while it ran (it exited nonzero on SIGTERM).
fn failed_by_policy(job: &JobFacts) -> Option<RunState> {
    let (reason, message) = job.failed.as_ref()?;
    if reason != "PodFailurePolicy" || message.contains("DisruptionTarget") {
        return None;
    }
    // The message names the pod as `namespace/name`.
    let deleted = job
        .pods_deleted_while_running
        .iter()
        .find(|pod| message.contains(&format!("/{pod} ")));
    Some(match deleted {
        Some(pod) => RunState::Interrupted(format!("pod {pod} was deleted while it ran")),
        None => RunState::Failed(format!("Job {} failed: {message}", job.name)),
    })
}

/// The phase a job waits in: Interrupted once it has been, else Waiting.
pub fn waiting_phase(status: &ScavengerJobStatus) -> ScavengerPhase {
    if status.interrupted_count > 0 {
        ScavengerPhase::Interrupted
    } else {
        ScavengerPhase::Waiting
    }
}

/// One step of a ScavengerJob's life, decided by the controller's pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// It waits; the message says why.
    Wait(String),
    /// Its Job `job` was created: a run starts.
    Start {
        job: String,
    },
    /// It runs; progress on the ramp is recorded.
    Progress {
        started: i64,
        duration_secs: u64,
    },
    /// Its run was interrupted (from outside, or by sluice to give the room back).
    Interrupt(String),
    /// The start did not get scheduled in time: back to waiting.
    Requeue(String),
    Complete,
    Fail(String),
}

fn set_condition(status: &mut ScavengerJobStatus, type_: &str, on: bool, reason: &str, now: &str) {
    let previous = status.conditions.iter().find(|c| c.type_ == type_).cloned();
    let state = if on {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let condition = Condition::updated(
        previous.as_ref(),
        type_,
        state,
        reason,
        status.message.clone(),
        now,
    );
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.push(condition);
}

/// Timestamps lists are kept to their newest entries (a job interrupted ten thousand times must
/// not outgrow its object).
pub const MAX_TIMESTAMPS: usize = 50;

fn push_bounded(list: &mut Vec<String>, now: &str) {
    list.push(now.to_string());
    if list.len() > MAX_TIMESTAMPS {
        let extra = list.len() - MAX_TIMESTAMPS;
        list.drain(..extra);
    }
}

/// The status after `step` at `now` (RFC 3339 `now_text`, seconds `now`). Pure.
pub fn next_status(
    status: &ScavengerJobStatus,
    step: &Step,
    now: i64,
    now_text: &str,
) -> ScavengerJobStatus {
    let mut s = status.clone();
    match step {
        Step::Wait(message) => {
            s.phase = waiting_phase(status);
            s.message = message.clone();
            s.job_name = None;
        }
        Step::Start { job } => {
            s.phase = ScavengerPhase::Running;
            s.job_name = Some(job.clone());
            s.priority_step = 0;
            s.priority_start_over_timestamp = Some(now_text.to_string());
            // The counter continues over every run, even one that never got scheduled.
            push_bounded(&mut s.running_timestamps, now_text);
            s.message = format!("started as Job {job}");
        }
        Step::Progress {
            started,
            duration_secs,
        } => {
            let duration = std::time::Duration::from_secs(*duration_secs);
            let (step, into, _) = ramp(*started, duration, now);
            if step < i64::from(status.priority_step) || (into == 0 && now > *started) {
                s.priority_start_over_timestamp = Some(now_text.to_string());
            }
            s.priority_step = step as i32;
            s.message = format!(
                "running as Job {}; ramp step {step} of 0..{} (the lowest goes first when room is needed)",
                s.job_name.clone().unwrap_or_default(),
                super::plan::RAMP_STEPS - 1
            );
        }
        Step::Interrupt(message) => {
            s.interrupted_count = status.interrupted_count.saturating_add(1);
            push_bounded(&mut s.interrupted_timestamps, now_text);
            s.phase = ScavengerPhase::Interrupted;
            s.message = format!("interrupted: {message}; it waits to run again");
            s.job_name = None;
        }
        Step::Requeue(message) => {
            s.phase = waiting_phase(status);
            s.message = message.clone();
            s.job_name = None;
        }
        Step::Complete => {
            s.phase = ScavengerPhase::Completed;
            s.finished_timestamp = Some(now_text.to_string());
            s.message = "every pod finished with exit code 0".into();
        }
        Step::Fail(message) => {
            s.phase = ScavengerPhase::Failed;
            s.finished_timestamp = Some(now_text.to_string());
            s.message = message.clone();
        }
    }
    let phase = s.phase;
    set_condition(
        &mut s,
        "Running",
        phase == ScavengerPhase::Running,
        &phase.to_string(),
        now_text,
    );
    set_condition(
        &mut s,
        "Finished",
        phase.is_final(),
        &phase.to_string(),
        now_text,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobFacts {
        JobFacts {
            name: "sj-1".into(),
            created: 100,
            ..JobFacts::default()
        }
    }

    fn pod(name: &str, phase: &str) -> RunPod {
        RunPod {
            name: name.into(),
            phase: phase.into(),
            scheduled: phase != "Pending",
            ..RunPod::default()
        }
    }

    #[test]
    fn all_pods_running_is_running_and_pending_within_the_bound_is_starting() {
        let pods = [pod("a", "Running"), pod("b", "Running")];
        assert_eq!(observe(&job(), &pods, 2, 110, 60), RunState::Running);
        let pods = [pod("a", "Running"), pod("b", "Pending")];
        assert_eq!(observe(&job(), &pods, 2, 110, 60), RunState::Starting);
        assert_eq!(observe(&job(), &pods[..1], 2, 110, 60), RunState::Starting);
    }

    #[test]
    fn pods_not_scheduled_within_the_bound_make_it_unschedulable() {
        let pods = [pod("a", "Running"), pod("b", "Pending")];
        match observe(&job(), &pods, 2, 160, 60) {
            RunState::Unschedulable(m) => assert!(m.contains("1 of 2"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_disrupted_or_deleted_pod_interrupts_even_with_an_exit_code() {
        let mut evicted = pod("a", "Failed");
        evicted.disrupted = true;
        evicted.exit_code = Some(("work".into(), 143));
        assert!(matches!(
            observe(&job(), &[evicted], 1, 110, 60),
            RunState::Interrupted(_)
        ));
        let mut deleted = pod("a", "Running");
        deleted.deleting = true;
        assert!(matches!(
            observe(&job(), &[deleted], 1, 110, 60),
            RunState::Interrupted(_)
        ));
        // Killed on its way out of a deletion: Failed with 137, still an interruption.
        let mut killed = pod("a", "Failed");
        killed.deleting = true;
        killed.exit_code = Some(("work".into(), 137));
        assert!(matches!(
            observe(&job(), &[killed], 1, 110, 60),
            RunState::Interrupted(_)
        ));
    }

    #[test]
    fn a_job_failed_after_its_pod_was_seen_deleted_while_running_is_interrupted() {
        // The program exited 1 on SIGTERM: the Job failed by its podFailurePolicy and its pod is
        // gone before the pass; the watch saw the deletion.
        let mut failed = job();
        failed.failed = Some((
            "PodFailurePolicy".into(),
            "Container work for pod ns/a failed with exit code 1 matching FailJob rule".into(),
        ));
        assert!(matches!(
            observe(&failed, &[], 1, 110, 60),
            RunState::Failed(_)
        ));
        failed.pods_deleted_while_running = vec!["a".into()];
        match observe(&failed, &[], 1, 110, 60) {
            RunState::Interrupted(m) => assert!(m.contains("pod a was deleted"), "{m}"),
            other => panic!("{other:?}"),
        }
        // A Job that completed completed, whatever was deleted on the way.
        let mut complete = job();
        complete.complete = true;
        complete.pods_deleted_while_running = vec!["a".into()];
        assert_eq!(observe(&complete, &[], 1, 110, 60), RunState::Completed);
    }

    #[test]
    fn the_pods_the_job_controller_deletes_after_a_failure_do_not_make_it_an_interruption() {
        // Pod b exited 3 and failed the Job; the Job controller then deleted pod a, still running.
        let mut failed = job();
        failed.failed = Some((
            "PodFailurePolicy".into(),
            "Container work for pod ns/b failed with exit code 3 matching FailJob rule".into(),
        ));
        failed.pods_deleted_while_running = vec!["a".into()];
        let mut deleting = pod("a", "Running");
        deleting.deleting = true;
        match observe(&failed, &[deleting], 2, 110, 60) {
            RunState::Failed(m) => assert!(m.contains("code 3"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_nonzero_exit_code_fails_it_and_names_pod_container_and_code() {
        let mut failed = pod("a", "Failed");
        failed.exit_code = Some(("work".into(), 3));
        match observe(&job(), &[failed, pod("b", "Running")], 2, 110, 60) {
            RunState::Failed(m) => {
                assert!(
                    m.contains("pod a") && m.contains("work") && m.contains("code 3"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_jobs_own_end_decides_when_the_pods_are_gone() {
        let mut done = job();
        done.complete = true;
        assert_eq!(observe(&done, &[], 1, 110, 60), RunState::Completed);
        let mut policy = job();
        policy.failed = Some((
            "PodFailurePolicy".into(),
            "Container work for pod x failed with exit code 2 matching FailJob rule at index 1"
                .into(),
        ));
        assert!(matches!(
            observe(&policy, &[], 1, 110, 60),
            RunState::Failed(_)
        ));
        let mut vanished = job();
        vanished.failed = Some(("BackoffLimitExceeded".into(), "limit".into()));
        assert!(matches!(
            observe(&vanished, &[], 1, 110, 60),
            RunState::Interrupted(_)
        ));
    }

    #[test]
    fn a_life_waiting_running_interrupted_running_completed() {
        let s = ScavengerJobStatus::default();
        let s = next_status(&s, &Step::Start { job: "j-1".into() }, 10, "t10");
        assert_eq!(s.phase, ScavengerPhase::Running);
        assert_eq!(s.running_timestamps, ["t10"]);
        assert_eq!(s.job_name.as_deref(), Some("j-1"));
        let s = next_status(&s, &Step::Interrupt("pod x evicted".into()), 20, "t20");
        assert_eq!(s.phase, ScavengerPhase::Interrupted);
        assert_eq!(s.interrupted_count, 1);
        assert_eq!(s.interrupted_timestamps, ["t20"]);
        assert!(s.message.contains("pod x evicted"));
        let s = next_status(&s, &Step::Wait("no room".into()), 25, "t25");
        assert_eq!(s.phase, ScavengerPhase::Interrupted);
        let s = next_status(&s, &Step::Start { job: "j-2".into() }, 30, "t30");
        assert_eq!(s.running_timestamps, ["t10", "t30"]);
        let running = s.conditions.iter().find(|c| c.type_ == "Running");
        assert_eq!(running.map(|c| c.status), Some(ConditionStatus::True));
        let s = next_status(&s, &Step::Complete, 40, "t40");
        assert_eq!(s.phase, ScavengerPhase::Completed);
        assert_eq!(s.finished_timestamp.as_deref(), Some("t40"));
        let finished = s.conditions.iter().find(|c| c.type_ == "Finished");
        assert_eq!(finished.map(|c| c.status), Some(ConditionStatus::True));
    }

    #[test]
    fn a_requeue_goes_back_to_the_waiting_phase_it_had() {
        let fresh = ScavengerJobStatus::default();
        let s = next_status(&fresh, &Step::Start { job: "j".into() }, 1, "t1");
        let s = next_status(&s, &Step::Requeue("unschedulable".into()), 2, "t2");
        assert_eq!(s.phase, ScavengerPhase::Waiting);
        assert_eq!(s.interrupted_count, 0);
        let once = ScavengerJobStatus {
            interrupted_count: 1,
            ..ScavengerJobStatus::default()
        };
        let s = next_status(&once, &Step::Requeue("unschedulable".into()), 2, "t2");
        assert_eq!(s.phase, ScavengerPhase::Interrupted);
    }

    #[test]
    fn the_ramp_step_is_recorded_and_starting_over_is_timestamped() {
        let s = next_status(
            &ScavengerJobStatus::default(),
            &Step::Start { job: "j".into() },
            0,
            "t0",
        );
        let s = next_status(
            &s,
            &Step::Progress {
                started: 0,
                duration_secs: 100,
            },
            85,
            "t85",
        );
        assert_eq!(s.priority_step, 4);
        assert_eq!(s.priority_start_over_timestamp.as_deref(), Some("t0"));
        let s = next_status(
            &s,
            &Step::Progress {
                started: 0,
                duration_secs: 100,
            },
            105,
            "t105",
        );
        assert_eq!(s.priority_step, 0);
        assert_eq!(s.priority_start_over_timestamp.as_deref(), Some("t105"));
    }

    #[test]
    fn timestamp_lists_stay_bounded() {
        let mut s = ScavengerJobStatus::default();
        for i in 0..(MAX_TIMESTAMPS + 10) {
            s = next_status(&s, &Step::Interrupt("x".into()), i as i64, &format!("t{i}"));
        }
        assert_eq!(s.interrupted_timestamps.len(), MAX_TIMESTAMPS);
        assert_eq!(s.interrupted_count as usize, MAX_TIMESTAMPS + 10);
        assert_eq!(
            s.interrupted_timestamps.last().map(String::as_str),
            Some(format!("t{}", MAX_TIMESTAMPS + 9).as_str())
        );
    }
}
