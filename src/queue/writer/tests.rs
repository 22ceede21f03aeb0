//! The writer's unit tests: pacing of wanted values, the lazy-write budget, and the status patches.

use super::patch::merge_patch;
use super::slot::TRUST_WRITTEN_FOR;
use super::*;
use crate::api::WorkloadPhase;

/// Spacing of the tests: urgent values at once, lazy ones after 10 s.
const AT_ONCE: Spacing = Spacing {
    urgent: Duration::ZERO,
    lazy: Duration::from_secs(10),
    lazy_limit: usize::MAX,
};

/// What a round takes, as (key, value), sorted.
fn take(
    slot: &mut Slot<&'static str, u32>,
    spacing: Spacing,
    limit: usize,
) -> Vec<(&'static str, u32)> {
    let mut taken: Vec<_> = slot
        .take_due(spacing, limit)
        .into_iter()
        .map(|s| (s.key, s.value))
        .collect();
    taken.sort();
    taken
}

#[test]
fn a_wanted_value_is_news_only_when_it_differs_from_the_newest_known() {
    let mut slot: Slot<&str, u32> = Slot::new();
    // Nothing known: news.
    assert!(slot.want("a", 1, None, Patience::Urgent, false));
    // The same again before it is sent: not news, still one pending write.
    assert!(!slot.want("a", 1, None, Patience::Urgent, false));
    // A newer value replaces the pending one: one write, the newest.
    assert!(slot.want("a", 2, None, Patience::Urgent, false));
    assert_eq!(slot.pending.len(), 1);
    assert_eq!(slot.pending.get("a").map(|w| w.value), Some(2));
}

#[test]
fn a_written_value_is_believed_over_the_watch_until_the_watch_shows_it() {
    let mut slot: Slot<&str, u32> = Slot::new();
    slot.written.insert("a", (2, Instant::now()));
    // The watch still shows the old value 1: the write wins, so 2 is not news.
    assert_eq!(slot.newest(&"a", Some(&1)), Some(2));
    assert!(!slot.want("a", 2, Some(&1), Patience::Urgent, false));
    // The watch shows 2: the written entry is forgotten.
    assert_eq!(slot.newest(&"a", Some(&2)), Some(2));
    assert!(slot.written.is_empty());
    // Going back to what the watch shows is news again.
    assert!(slot.want("a", 1, Some(&2), Patience::Urgent, false));
}

#[test]
fn a_value_being_sent_is_not_wanted_again() {
    let mut slot: Slot<&str, u32> = Slot::new();
    assert!(slot.want("a", 1, None, Patience::Urgent, false));
    assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 1)]);
    // The watch does not show it yet and the write has not answered: not news.
    assert!(!slot.want("a", 1, None, Patience::Urgent, false));
    slot.sent("a", true);
    assert!(!slot.want("a", 1, None, Patience::Urgent, false));
    // A failed write is forgotten: the next pass wants it again.
    assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
    assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 2)]);
    slot.sent("a", false);
    assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
    // ... and is named to the controller, whose incremental pass looks at it again.
    assert!(slot.failed.contains("a"));
}

#[test]
fn a_lazy_change_waits_for_its_interval_an_urgent_one_does_not() {
    let mut slot: Slot<&str, u32> = Slot::new();
    assert!(slot.want("a", 1, None, Patience::Urgent, false));
    assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 1)]);
    slot.sent("a", true);
    // The watch shows the write; then only the wording changes.
    assert!(slot.want("a", 2, Some(&1), Patience::Lazy, false));
    assert!(
        take(&mut slot, AT_ONCE, usize::MAX).is_empty(),
        "written just now: waits"
    );
    // An urgent change on top makes the whole write urgent.
    assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
    assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 3)]);
    // Never written: a lazy value goes at once.
    assert!(slot.want("b", 1, None, Patience::Lazy, false));
    assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("b", 1)]);
}

#[test]
fn a_status_is_written_once_per_interval_at_most_and_at_once_after_a_quiet_one() {
    let spacing = Spacing {
        urgent: Duration::from_secs(60),
        lazy: Duration::from_secs(600),
        lazy_limit: usize::MAX,
    };
    let mut slot: Slot<&str, u32> = Slot::new();
    // Never written: goes at once, whatever the spacing.
    assert!(slot.want("a", 1, None, Patience::Urgent, false));
    assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("a", 1)]);
    slot.sent("a", true);
    // Changed again within the interval: waits for it (the newest value then, one write).
    assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
    assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
    assert!(take(&mut slot, spacing, usize::MAX).is_empty());
    // Another object is not held back by it.
    assert!(slot.want("b", 1, None, Patience::Urgent, false));
    assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("b", 1)]);
    // The interval has passed since "a" was written: its newest value goes.
    let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(61)) else {
        return; // a clock this young cannot express the case
    };
    slot.last_write.insert("a", long_ago);
    assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("a", 3)]);
}

#[test]
fn a_round_takes_few_changes_of_wording_only_the_oldest_first_and_every_urgent_one() {
    let spacing = Spacing {
        lazy_limit: 2,
        ..AT_ONCE
    };
    let mut slot: Slot<&str, u32> = Slot::new();
    let Some(start) = Instant::now().checked_sub(Duration::from_secs(10)) else {
        return; // a clock this young cannot express the case
    };
    for (age, key) in ["w1", "w2", "w3", "w4"].into_iter().enumerate() {
        assert!(slot.want(key, 1, None, Patience::Lazy, false));
        // Wanted one second apart, w1 first.
        if let Some(wanted) = slot.pending.get_mut(key) {
            wanted.since = start + Duration::from_secs(age as u64);
        }
    }
    assert!(slot.want("u1", 1, None, Patience::Urgent, false));
    assert!(slot.want("u2", 1, None, Patience::Urgent, false));
    // The urgent ones and the two oldest wording changes.
    assert_eq!(
        take(&mut slot, spacing, usize::MAX),
        vec![("u1", 1), ("u2", 1), ("w1", 1), ("w2", 1)]
    );
    // The others wait for the next rounds, nothing is lost.
    assert_eq!(
        take(&mut slot, spacing, usize::MAX),
        vec![("w3", 1), ("w4", 1)]
    );
    assert!(take(&mut slot, spacing, usize::MAX).is_empty());
}

#[test]
fn a_replacing_value_stays_urgent_when_either_is() {
    use Patience::*;
    assert_eq!(Lazy.and(Urgent), Urgent);
    assert_eq!(Urgent.and(Lazy), Urgent);
    assert_eq!(Urgent.and(Urgent), Urgent);
    assert_eq!(Lazy.and(Lazy), Lazy);
}

fn status(
    phase: WorkloadPhase,
    admitted: i32,
    running: i32,
    pending: i32,
) -> DynamicWorkloadStatus {
    DynamicWorkloadStatus {
        phase,
        admitted_pods: admitted + running,
        pending_pods: pending,
        pod_sets: vec![crate::api::PodSetStatus {
            name: "workers".into(),
            pending,
            admitted,
            running,
            finished: 0,
        }],
        ..DynamicWorkloadStatus::default()
    }
}

#[test]
fn a_preemption_is_never_a_change_of_wording_only() {
    let old = status(WorkloadPhase::Running, 0, 2, 0);
    let mut reworded = old.clone();
    reworded.message = "other words".into();
    assert!(same_but_for_wording(&old, &reworded));
    let mut preempted = old.clone();
    preempted.interrupted_count = 1;
    preempted.last_preempted_by = Some("ns/urgent".into());
    preempted.preempted_at = Some("2026-01-01T00:00:00Z".into());
    assert!(!same_but_for_wording(&old, &preempted));
    let mut by_another = preempted.clone();
    by_another.last_preempted_by = Some("ns/other".into());
    assert!(!same_but_for_wording(&preempted, &by_another));
}

#[test]
fn a_round_short_of_budget_sends_waiting_workloads_then_the_longest_waiting() {
    let mut slot: Slot<&str, u32> = Slot::new();
    for key in ["a", "b", "c", "d"] {
        assert!(slot.want(key, 1, None, Patience::Urgent, false));
        std::thread::sleep(Duration::from_millis(2));
    }
    // "a" changes again before its turn: it keeps its place (the time it was first wanted)
    // and only its newest value is written.
    assert!(slot.want("a", 2, None, Patience::Urgent, false));
    assert_eq!(take(&mut slot, AT_ONCE, 2), vec![("a", 2), ("b", 1)]);
    assert_eq!(slot.pending.len(), 2);
    // A workload with pods waiting behind the gate goes first, however new.
    assert!(slot.want("p", 1, None, Patience::Urgent, true));
    assert_eq!(take(&mut slot, AT_ONCE, 1), vec![("p", 1)]);
    assert_eq!(
        take(&mut slot, AT_ONCE, usize::MAX),
        vec![("c", 1), ("d", 1)]
    );
    // No budget: nothing is sent, nothing is lost.
    assert!(slot.want("e", 1, None, Patience::Urgent, false));
    assert!(take(&mut slot, AT_ONCE, 0).is_empty());
    assert_eq!(slot.pending.len(), 1);
}

#[test]
fn a_round_sends_each_value_with_what_the_api_server_holds() {
    let mut slot: Slot<&str, u32> = Slot::new();
    // Never written by this writer: what the watch showed.
    assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
    let sent = slot.take_due(AT_ONCE, usize::MAX);
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].value, sent[0].base), (2, Some(1)));
    slot.sent("a", true);
    // Written, the watch not caught up: the written value is the base.
    assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
    let sent = slot.take_due(AT_ONCE, usize::MAX);
    assert_eq!((sent[0].value, sent[0].base), (3, Some(2)));
    // That write failed: the base is the watch's again.
    slot.sent("a", false);
    slot.written.clear();
    assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
    let sent = slot.take_due(AT_ONCE, usize::MAX);
    assert_eq!((sent[0].value, sent[0].base), (3, Some(1)));
    // Nothing known: no base.
    assert!(slot.want("b", 1, None, Patience::Urgent, false));
    let sent = slot.take_due(AT_ONCE, usize::MAX);
    assert_eq!((sent[0].value, sent[0].base), (1, None));
}

#[test]
fn a_merge_patch_carries_what_changed_and_removes_what_is_gone() {
    let from = json!({"phase": "Admitted", "message": "m", "used": {"cpu": "1", "memory": "1Gi"},
        "queuedSince": "t", "podSets": [{"name": "w", "running": 0}], "same": {"x": 1}});
    let to = json!({"phase": "Running", "message": "m", "used": {"cpu": "2"},
        "podSets": [{"name": "w", "running": 1}], "same": {"x": 1}, "admittedAt": "t2"});
    assert_eq!(
        merge_patch(&from, &to),
        Some(
            json!({"phase": "Running", "used": {"cpu": "2", "memory": null},
            "queuedSince": null, "podSets": [{"name": "w", "running": 1}], "admittedAt": "t2"})
        )
    );
    // Nothing changed: nothing to write.
    assert_eq!(merge_patch(&from, &from), None);
    // A null in the new value removes the field (it was there) or says nothing (it was not).
    assert_eq!(
        merge_patch(&json!({"a": 1}), &json!({"a": null, "b": null})),
        Some(json!({"a": null}))
    );
    // Not an object: replaced whole.
    assert_eq!(merge_patch(&json!({"a": 1}), &json!([1])), Some(json!([1])));
}

/// Applies a merge patch as RFC 7386 says (the API server's part), for the round trip below.
fn apply(target: &mut serde_json::Value, patch: &serde_json::Value) {
    let (Some(target_map), Some(patch_map)) = (target.as_object_mut(), patch.as_object()) else {
        *target = patch.clone();
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else if value.is_object() && target_map.get(key).is_some_and(|t| t.is_object()) {
            if let Some(t) = target_map.get_mut(key) {
                apply(t, value);
            }
        } else {
            target_map.insert(key.clone(), value.clone());
        }
    }
}

#[test]
fn a_status_patch_applied_to_its_base_gives_the_new_status() {
    let mut old = status(WorkloadPhase::Pending, 0, 0, 4);
    old.queued_since = Some("2026-01-01T00:00:00Z".into());
    old.position = Some(3);
    old.used.insert(
        "memory".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
    );
    let mut new = status(WorkloadPhase::Running, 0, 4, 0);
    new.admitted_at = Some("2026-01-01T00:00:05Z".into());
    new.used.insert(
        "cpu".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
    );
    new.message = "4 pod(s) admitted in queue q".into();
    let Some(patch) = status_patch(Some(&old), &new) else {
        panic!("the statuses differ: a patch is due");
    };
    // Small: only what changed.
    assert!(patch.get("interruptedCount").is_none(), "{patch}");
    let mut server = serde_json::to_value(&old).unwrap_or_default();
    apply(&mut server, &patch);
    assert_eq!(server, serde_json::to_value(&new).unwrap_or_default());
    // Unchanged: no write.
    assert_eq!(status_patch(Some(&new), &new), None);
    // No base (the first status): the whole of it.
    assert_eq!(status_patch(None, &new), serde_json::to_value(&new).ok());
}

#[test]
fn the_write_budget_refills_at_its_rate_up_to_one_second_of_writes() {
    let mut unlimited = WriteBudget::new(0.0);
    assert_eq!(unlimited.available(), usize::MAX);
    unlimited.spend(1_000_000);
    assert_eq!(unlimited.available(), usize::MAX);

    let mut budget = WriteBudget::new(20.0);
    assert_eq!(budget.available(), 20);
    budget.spend(20);
    assert_eq!(budget.available(), 0);
    // Half a second later, about half a second's worth (never more than one second's).
    budget.refilled -= Duration::from_millis(500);
    assert_eq!(budget.available(), 10);
    budget.refilled -= Duration::from_secs(60);
    assert_eq!(budget.available(), 20);
    // Below one write per second, a write still comes through now and then.
    let mut slow = WriteBudget::new(0.5);
    assert_eq!(slow.available(), 1);
    slow.spend(1);
    assert_eq!(slow.available(), 0);
    slow.refilled -= Duration::from_secs(2);
    assert_eq!(slow.available(), 1);
}

#[test]
fn a_write_too_old_to_trust_gives_way_to_the_watch() {
    let mut slot: Slot<&str, u32> = Slot::new();
    let Some(long_ago) = Instant::now().checked_sub(TRUST_WRITTEN_FOR + Duration::from_secs(1))
    else {
        return; // a clock this young cannot express the case
    };
    slot.written.insert("a", (2, long_ago));
    assert_eq!(slot.newest(&"a", Some(&1)), Some(1));
    assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
}
