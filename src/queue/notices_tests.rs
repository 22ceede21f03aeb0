use super::*;

fn key() -> WorkloadKey {
    WorkloadKey {
        namespace: "ml".into(),
        name: "train".into(),
    }
}

fn quota(resource: &str, missing: i64) -> WaitReason {
    WaitReason::Quota {
        queue: "q".into(),
        resource: resource.into(),
        missing,
        used: 4000,
        reserved: 0,
        quota: 4000,
    }
}

fn seen<'a>(
    key: &'a WorkloadKey,
    waiting: Option<&'a WaitReason>,
    position: Option<u32>,
) -> Observed<'a> {
    Observed {
        key,
        queue: "q",
        phase: if waiting.is_some() {
            WorkloadPhase::Pending
        } else {
            WorkloadPhase::Running
        },
        pending_pods: if waiting.is_some() { 3 } else { 0 },
        admitted_pods: if waiting.is_some() { 0 } else { 3 },
        position,
        waiting,
        interrupted_count: 0,
        requeue_count: 0,
        last_preempted_by: None,
        requeue_exhausted: false,
        application_ended: false,
    }
}

fn new() -> Announced {
    Announced::from_status(None)
}

#[test]
fn a_new_waiting_workload_is_told_once_with_its_workload_queue_position_and_reason() {
    let (k, r, now) = (key(), quota("cpu", 1000), Instant::now());
    let (out, after) = notices(&new(), &seen(&k, Some(&r), Some(2)), now);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].reason, "Waiting");
    assert!(out[0].on_gated_pod);
    for part in [
        "DynamicWorkload ml/train",
        "queue q",
        "position 2",
        "needs 1 cpu more",
    ] {
        assert!(out[0].note.contains(part), "{part} not in {}", out[0].note);
    }
    // The same wait again, with other figures: nothing more.
    let r2 = quota("cpu", 2000);
    let (out, _) = notices(&after, &seen(&k, Some(&r2), Some(2)), now);
    assert!(out.is_empty());
}

#[test]
fn a_material_change_is_told_at_most_once_per_spacing() {
    let (k, now) = (key(), Instant::now());
    let (cpu, memory) = (quota("cpu", 1000), quota("memory", 1 << 30));
    let (_, after) = notices(&new(), &seen(&k, Some(&cpu), Some(9)), now);
    // Another resource, at once: too soon after the first event.
    let (out, after) = notices(
        &after,
        &seen(&k, Some(&memory), Some(9)),
        now + Duration::from_secs(5),
    );
    assert!(out.is_empty());
    // Later: told, and the position moved to the front too.
    let (out, after) = notices(
        &after,
        &seen(&k, Some(&memory), Some(1)),
        now + UPDATE_SPACING,
    );
    assert_eq!(out.len(), 1);
    assert!(out[0].note.starts_with("still waiting"), "{}", out[0].note);
    assert!(out[0].note.contains("position 1"));
    // A small move of the position is no news.
    let (out, _) = notices(
        &after,
        &seen(&k, Some(&memory), Some(2)),
        now + UPDATE_SPACING * 3,
    );
    assert!(out.is_empty());
}

#[test]
fn positions_move_materially_to_the_front_halved_or_far_back() {
    assert!(position_moved(Some(3), Some(1)));
    assert!(position_moved(Some(10), Some(5)));
    assert!(!position_moved(Some(10), Some(6)));
    assert!(!position_moved(Some(2), Some(4)));
    assert!(position_moved(Some(2), Some(9)));
    assert!(!position_moved(Some(4), Some(4)));
}

#[test]
fn a_waiting_workload_admitted_is_told_admitted_one_never_waiting_is_not() {
    let (k, r, now) = (key(), quota("cpu", 1000), Instant::now());
    let (_, after) = notices(&new(), &seen(&k, Some(&r), Some(1)), now);
    let (out, after) = notices(&after, &seen(&k, None, None), now);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].reason, "Admitted");
    assert_eq!(after.stage, Stage::Holding);
    let (out, _) = notices(&new(), &seen(&k, None, None), now);
    assert!(out.is_empty());
}

#[test]
fn a_preemption_is_told_without_naming_another_namespace_and_not_twice() {
    let (k, r, now) = (key(), quota("cpu", 1000), Instant::now());
    let (_, holding) = notices(&new(), &seen(&k, None, None), now);
    let mut s = seen(&k, Some(&r), Some(1));
    s.interrupted_count = 1;
    s.last_preempted_by = Some("other-team/secret-project");
    let (out, after) = notices(&holding, &s, now);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].reason, "Preempted");
    assert!(!out[0].note.contains("secret-project"), "{}", out[0].note);
    assert!(out[0].note.contains("another namespace"));
    let (out, _) = notices(&after, &s, now);
    assert!(out.is_empty());
    s.last_preempted_by = Some("ml/urgent");
    let (out, _) = notices(&holding, &s, now);
    assert!(out[0].note.contains("DynamicWorkload ml/urgent"));
}

#[test]
fn a_strict_fifo_blocker_of_another_namespace_is_not_named() {
    let k = key();
    let r = WaitReason::BehindInStrictFifo {
        queue: "q".into(),
        blocker: WorkloadKey {
            namespace: "finance".into(),
            name: "payroll".into(),
        },
    };
    let (out, _) = notices(&new(), &seen(&k, Some(&r), Some(2)), Instant::now());
    assert!(!out[0].note.contains("payroll") && !out[0].note.contains("finance"));
}

#[test]
fn a_wait_no_pass_can_end_is_a_refusal_warning() {
    let k = key();
    let r = WaitReason::NeverFits {
        queue: "q".into(),
        resource: "cpu".into(),
        needed: 8000,
        quota: 4000,
    };
    let (out, _) = notices(&new(), &seen(&k, Some(&r), None), Instant::now());
    assert_eq!((out[0].reason, out[0].warning), ("Refused", true));
}

#[test]
fn requeues_and_the_requeue_limit_are_told_and_then_nothing() {
    let (k, r, now) = (key(), quota("cpu", 1000), Instant::now());
    let (_, holding) = notices(&new(), &seen(&k, None, None), now);
    let mut s = seen(&k, Some(&r), Some(1));
    s.requeue_count = 1;
    let (out, after) = notices(&holding, &s, now);
    assert_eq!(
        out.iter().map(|n| n.reason).collect::<Vec<_>>(),
        ["Requeued"]
    );
    s.requeue_exhausted = true;
    s.phase = WorkloadPhase::Failed;
    let (out, done) = notices(&after, &s, now);
    assert_eq!(out[0].reason, "RequeueLimitExceeded");
    assert_eq!(done.stage, Stage::Done);
    assert!(notices(&done, &s, now).0.is_empty());
}

#[test]
fn after_a_restart_a_wait_the_status_shows_is_not_told_again() {
    let (k, r, now) = (key(), quota("cpu", 1000), Instant::now());
    let status = DynamicWorkloadStatus {
        phase: WorkloadPhase::Pending,
        pending_pods: 3,
        position: Some(4),
        ..Default::default()
    };
    let before = Announced::from_status(Some(&status));
    let (out, after) = notices(&before, &seen(&k, Some(&r), Some(4)), now);
    assert!(out.is_empty(), "{out:?}");
    // It learnt the reason: a later change of kind is told.
    let other = quota("memory", 1000);
    let (out, _) = notices(&after, &seen(&k, Some(&other), Some(4)), now);
    assert_eq!(out.len(), 1);
}

#[test]
fn notes_are_cut_to_what_events_accept_and_hold_no_control_character() {
    let long = format!("a\nb\u{7}{}", "é".repeat(2000));
    let c = clean(&long);
    assert!(c.len() <= 1000);
    assert!(!c.chars().any(char::is_control));
    assert!(c.starts_with("a b "));
}

#[test]
fn the_short_reason_names_the_kind_and_the_resource() {
    assert_eq!(ReasonKey::of(&quota("cpu", 1)).short(), "Quota:cpu");
}

#[test]
fn a_workload_whose_pods_were_all_evicted_is_still_told_its_preemption() {
    let (k, now) = (key(), Instant::now());
    let (_, holding) = notices(&new(), &seen(&k, None, None), now);
    // Its evicted pods show Failed for a pass before they are gone: not an end.
    let mut s = seen(&k, None, None);
    s.phase = WorkloadPhase::Failed;
    s.admitted_pods = 0;
    let (out, after) = notices(&holding, &s, now);
    assert!(out.is_empty());
    assert_ne!(after.stage, Stage::Done);
    s.interrupted_count = 1;
    let (out, _) = notices(&after, &s, now);
    assert_eq!(
        out.iter().map(|n| n.reason).collect::<Vec<_>>(),
        ["Preempted"]
    );
    // An application that ended is told nothing more.
    let mut ended = seen(&k, None, None);
    ended.application_ended = true;
    let (_, done) = notices(&holding, &ended, now);
    assert_eq!(done.stage, Stage::Done);
    ended.interrupted_count = 3;
    assert!(notices(&done, &ended, now).0.is_empty());
}
