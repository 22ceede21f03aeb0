//! Cohorts: borrowing and lending limits, fair sharing, reclaim, and their properties.

use super::*;

fn in_cohort(name: &str, cpu: i64, cohort: &str) -> QueueSnapshot {
    let mut q = queue(name, cpu * CPU, QueueingStrategy::BestEffortFIFO);
    q.cohort = Some(CohortMembership::new(cohort));
    q
}

/// `n` gated single-pod workloads of one core in `queue`, queued at `t..`.
fn gated_singles(
    prefix: &str,
    queue: &str,
    n: i64,
    priority: i32,
    t: i64,
) -> Vec<WorkloadSnapshot> {
    in_queue(singles(prefix, n, 1, priority, t, PodState::Gated), queue)
}

fn admitted_in(s: &Snapshot, d: &Decisions, queue: &str) -> usize {
    d.admit
        .iter()
        .filter(|r| s.workloads[r.workload].queue == queue)
        .count()
}

#[test]
fn a_queue_borrows_the_idle_quota_of_its_cohort_and_says_how_much() {
    let s = Snapshot {
        queues: vec![in_cohort("a", 2, "c"), in_cohort("b", 4, "c")],
        workloads: gated_singles("a", "a", 8, 0, 0),
    };
    let d = decide(&s);
    // 2 of its own and the 4 b lends: the cohort's 6, never more.
    assert_eq!(admitted_in(&s, &d, "a"), 6);
    assert_eq!(d.queues["a"].borrowed.get("cpu"), 4 * CPU);
    assert_eq!(d.queues["b"].lent.get("cpu"), 4 * CPU);
    assert_eq!(d.queues["b"].borrowed.get("cpu"), 0);
    // The borrowing is charged to the newest workloads: the last four admitted.
    let borrowed: Vec<i64> = (0..6).map(|w| d.workloads[w].borrowed.get("cpu")).collect();
    assert_eq!(borrowed, vec![0, 0, CPU, CPU, CPU, CPU]);
    let reason = waiting(&d, 6).expect("the seventh waits");
    assert!(
        reason.contains("cohort c can lend it 0 cpu more"),
        "{reason}"
    );
    // Positions: the two waiting ones, in order.
    assert_eq!(d.workloads[6].position, Some(1));
    assert_eq!(d.workloads[7].position, Some(2));
    assert_eq!(d.workloads[0].position, None);
}

#[test]
fn borrowing_and_lending_limits_hold() {
    let mut a = in_cohort("a", 2, "c");
    let mut b = in_cohort("b", 4, "c");
    if let Some(c) = a.cohort.as_mut() {
        c.borrowing_limit.add("cpu", 3 * CPU);
    }
    let s = Snapshot {
        queues: vec![a.clone(), b.clone()],
        workloads: gated_singles("a", "a", 8, 0, 0),
    };
    assert_eq!(admitted_in(&s, &decide(&s), "a"), 5, "2 own + 3 borrowed");
    if let Some(c) = a.cohort.as_mut() {
        c.borrowing_limit = ResourceList::new();
    }
    if let Some(c) = b.cohort.as_mut() {
        c.lending_limit.add("cpu", CPU);
    }
    let mut workloads = gated_singles("a", "a", 8, 0, 0);
    workloads.extend(gated_singles("b", "b", 4, 0, 100));
    let mut s = Snapshot {
        queues: vec![a, b],
        workloads,
    };
    // b's own work goes first, within its quota: nothing is left to lend.
    let d = decide(&s);
    assert_eq!((admitted_in(&s, &d, "a"), admitted_in(&s, &d, "b")), (2, 4));
    // With 3 of b's: a borrows the one core b lends, and never more.
    s.workloads.pop();
    let d = decide(&s);
    assert_eq!((admitted_in(&s, &d, "a"), admitted_in(&s, &d, "b")), (3, 3));
    // With none of b's, still only the one core.
    s.workloads.truncate(8);
    assert_eq!(admitted_in(&s, &decide(&s), "a"), 3);
}

#[test]
fn queues_of_other_cohorts_or_none_share_nothing() {
    let mut lone = queue("b", 4 * CPU, QueueingStrategy::BestEffortFIFO);
    lone.cohort = None;
    let s = Snapshot {
        queues: vec![in_cohort("a", 2, "c"), lone, in_cohort("x", 4, "other")],
        workloads: gated_singles("a", "a", 8, 0, 0),
    };
    assert_eq!(admitted_in(&s, &decide(&s), "a"), 2);
}

#[test]
fn the_lender_reclaims_only_pods_running_on_borrowed_quota_newest_first() {
    // a (quota 2) runs 5 single pods: 3 on b's quota. b (quota 4) wants 2.
    let mut workloads = in_queue(admitted_singles("a", 5, 1, 0, 0), "a");
    workloads.extend(gated_singles("b", "b", 1, 0, 100));
    workloads.push({
        let p = pod("b-gang-p0", CPU, PodState::Gated, 101);
        let q = pod("b-gang-p1", CPU, PodState::Gated, 101);
        workload("b-gang", "b", 0, 101, 2, vec![p, q])
    });
    let s = Snapshot {
        queues: vec![in_cohort("a", 2, "c"), in_cohort("b", 4, "c")],
        workloads,
    };
    let d = decide(&s);
    // b takes its one free core at once (1 of its 4 was unused), and the gang reclaims two.
    assert_eq!(admitted_names(&s, &d), vec!["b0-p"]);
    assert_eq!(evicted_names(&s, &d), vec!["a4-p", "a3-p"]);
    assert!(
        d.evict
            .iter()
            .all(|e| e.reason == EvictionReason::CohortReclaim && e.preemptor == 6)
    );
    let reason = waiting(&d, 6).expect("the gang waits for the reclaim");
    assert!(
        reason.contains("waits for 2 pods of other queues"),
        "{reason}"
    );
    // Never: it waits instead.
    let mut never = s.clone();
    if let Some(c) = never.queues[1].cohort.as_mut() {
        c.reclaim = ReclaimPolicy::Never;
    }
    assert!(decide(&never).evict.is_empty());
    // LowerPriority: a's pods have the same priority: none is taken.
    if let Some(c) = never.queues[1].cohort.as_mut() {
        c.reclaim = ReclaimPolicy::LowerPriority;
    }
    assert!(decide(&never).evict.is_empty());
}

#[test]
fn reclaim_waits_for_terminating_borrowed_pods_without_a_second_round() {
    let mut workloads = in_queue(admitted_singles("a", 6, 1, 0, 0), "a");
    for w in &mut workloads[4..] {
        w.pod_sets[0].pods[0].terminating = true;
    }
    workloads.push(gated_gang("b", 4, 0, 100));
    workloads[6].queue = "b".into();
    let s = Snapshot {
        queues: vec![in_cohort("a", 2, "c"), in_cohort("b", 4, "c")],
        workloads,
    };
    let d = decide(&s);
    // 4 borrowed, 2 of them terminating: two more go, and no more than that.
    assert_eq!(evicted_names(&s, &d), vec!["a3-p", "a2-p"]);
}

/// The churn run's strand (issue 40, runs 12 and 14): a reclaim evicted the one admitted pod of a
/// borrowing gang, whose other places were reserved; while that pod terminated (16 s on a busy API
/// server) the reservation still held the pool, so pods that fit it waited for nothing.
#[test]
fn a_gang_whose_admitted_pods_all_terminate_gives_its_reserved_places_back_at_once() {
    // a (quota 4) holds 4 cores and a gang of 4 with 1 pod admitted (3 places reserved):
    // it borrows 4 of b's quota of 4. That one admitted pod is being evicted.
    let mut workloads = in_queue(admitted_singles("a", 4, 1, 0, 0), "a");
    let mut gang = gated_gang("gang", 4, 0, 10);
    gang.queue = "a".into();
    gang.pod_sets[0].pods.truncate(1);
    gang.pod_sets[0].pods[0].state = PodState::Admitted;
    gang.pod_sets[0].pods[0].terminating = true;
    workloads.push(gang);
    workloads.extend(gated_singles("b", "b", 3, 0, 20));
    let s = Snapshot {
        queues: vec![in_cohort("a", 4, "c"), in_cohort("b", 4, "c")],
        workloads,
    };
    let d = decide(&s);
    // The pool is 8: a takes 5 (its terminating pod still counts until it is gone), so b's three
    // fit. Before, the 3 reserved places kept the pool full until the pod was gone.
    assert_eq!(admitted_in(&s, &d, "b"), 3);
    assert_eq!(d.queues["a"].reserved.get("cpu"), 0);
    assert_eq!(d.queues["a"].usage.get("cpu"), 5 * CPU);
    assert!(d.evict.is_empty(), "nothing more to reclaim");

    // The same gang with a live pod beside the terminating one still holds its places.
    let mut live = s.clone();
    let gang = &mut live.workloads[4].pod_sets[0];
    let mut second = gang.pods[0].clone();
    second.name = "gang-p1".into();
    second.terminating = false;
    gang.pods.push(second);
    let d = decide(&live);
    assert_eq!(d.queues["a"].reserved.get("cpu"), 2 * CPU);
    // a takes 4 + 2 + 2 reserved: the whole pool; b's pods wait (and reclaim: a borrows).
    assert_eq!(admitted_in(&live, &d, "b"), 0);
}

#[test]
fn fair_sharing_alternates_borrowers_by_weight() {
    // c lends 6 idle cores; a and b (quota 1 each, used) each want 6 more. a's work is older.
    let mut workloads = in_queue(admitted_singles("a-run", 1, 1, 0, 0), "a");
    workloads.extend(in_queue(admitted_singles("b-run", 1, 1, 0, 0), "b"));
    workloads.extend(gated_singles("a", "a", 6, 0, 10));
    workloads.extend(gated_singles("b", "b", 6, 0, 50));
    let mut s = Snapshot {
        queues: vec![
            in_cohort("a", 1, "c"),
            in_cohort("b", 1, "c"),
            in_cohort("lender", 6, "c"),
        ],
        workloads,
    };
    let d = decide(&s);
    assert_eq!((admitted_in(&s, &d, "a"), admitted_in(&s, &d, "b")), (3, 3));
    if let Some(c) = s.queues[0].cohort.as_mut() {
        c.weight_milli = 2000;
    }
    let d = decide(&s);
    assert_eq!((admitted_in(&s, &d, "a"), admitted_in(&s, &d, "b")), (4, 2));
    if let Some(c) = s.queues[0].cohort.as_mut() {
        c.weight_milli = 0;
    }
    let d = decide(&s);
    assert_eq!((admitted_in(&s, &d, "a"), admitted_in(&s, &d, "b")), (0, 6));
}

/// Random cohort settings for the queues of a random snapshot: a cohort of two names or none,
/// lending and borrowing limits or none, a weight, a reclaim policy.
pub(super) fn arb_cohort_snapshot() -> impl Strategy<Value = Snapshot> {
    let settings = prop::collection::vec(
        (
            0u8..3,
            prop::option::of(0i64..8),
            prop::option::of(0i64..8),
            0i64..3,
            0u8..3,
        ),
        4,
    );
    (arb_snapshot_with(true), settings).prop_map(|(mut s, settings)| {
        for (q, (cohort, lend, borrow, weight, reclaim)) in s.queues.iter_mut().zip(settings) {
            if cohort == 2 {
                continue;
            }
            let mut c = CohortMembership::new(if cohort == 0 { "x" } else { "y" });
            if let Some(l) = lend {
                c.lending_limit.add("cpu", l * CPU);
            }
            if let Some(b) = borrow {
                c.borrowing_limit.add("cpu", b * CPU);
            }
            c.weight_milli = weight * 1000;
            c.reclaim = [
                ReclaimPolicy::Never,
                ReclaimPolicy::LowerPriority,
                ReclaimPolicy::Any,
            ][reclaim as usize];
            q.cohort = Some(c);
        }
        s
    })
}

/// (quota, guaranteed, cap) of a queue's cpu.
fn cpu_limits(q: &QueueSnapshot) -> (i64, i64, i64) {
    let quota = q.quota.get("cpu");
    let c = q.cohort.as_ref();
    let lend = c
        .and_then(|c| c.lending_limit.0.get("cpu").copied())
        .map_or(quota, |l| l.min(quota));
    let cap = c
        .and_then(|c| c.borrowing_limit.0.get("cpu").copied())
        .map_or(i64::MAX, |b| quota + b);
    (quota, quota - lend, cap)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Queues in a cohort that lend nothing decide exactly as queues alone (preemption included).
    #[test]
    fn a_cohort_that_lends_nothing_changes_nothing(s in arb_snapshot_with(true)) {
        let mut cohort = s.clone();
        for q in &mut cohort.queues {
            let mut c = CohortMembership::new("c");
            c.lending_limit = ResourceList(q.quota.0.keys().map(|k| (k.clone(), 0)).collect());
            q.cohort = Some(c);
        }
        let (alone, together) = (decide(&s), decide(&cohort));
        prop_assert_eq!(&alone.admit, &together.admit);
        prop_assert_eq!(&alone.evict, &together.evict);
        for (a, t) in alone.workloads.iter().zip(&together.workloads) {
            // The reasons differ in form (the cohort's say what it can lend), not in presence.
            prop_assert_eq!(a.waiting.is_some(), t.waiting.is_some());
            prop_assert_eq!(&a.used, &t.used);
            prop_assert_eq!(a.position, t.position);
        }
    }

    /// What a cohort holds of its pool (each queue's cpu above what it keeps for itself) never
    /// grows beyond what its queues lend, no queue grows beyond its quota plus borrowing limit,
    /// and reclaim takes pods only from other queues above their quota, for an item that fits its
    /// own queue's quota.
    #[test]
    fn a_cohort_never_holds_more_than_it_lends(s in arb_cohort_snapshot()) {
        let d = decide(&s);
        let none = std::collections::HashSet::new();
        let admitted: std::collections::HashSet<PodRef> = d.admit.iter().copied().collect();
        let held = |q: &str, admitted: &std::collections::HashSet<PodRef>| {
            crate::queue::admission_reference::held(&s, q, "cpu", admitted, &none)
        };
        for cohort in ["x", "y"] {
            let members: Vec<&QueueSnapshot> = s.queues.iter()
                .filter(|q| q.cohort.as_ref().is_some_and(|c| c.name == cohort)).collect();
            let (mut before, mut after, mut lendable) = (0, 0, 0);
            for q in &members {
                let (quota, guaranteed, cap) = cpu_limits(q);
                let (b, a) = (held(&q.name, &none), held(&q.name, &admitted));
                prop_assert!(a <= b.max(cap), "{} holds {a} over its cap {cap}", q.name);
                before += (b - guaranteed).max(0);
                after += (a - guaranteed).max(0);
                lendable += quota - guaranteed;
            }
            prop_assert!(after <= before.max(lendable), "cohort {cohort}: {after} > {lendable}");
        }
        for e in d.evict.iter().filter(|e| e.reason == EvictionReason::CohortReclaim) {
            let victim = &s.workloads[e.victim.workload];
            let preemptor = &s.workloads[e.preemptor];
            prop_assert_ne!(&victim.queue, &preemptor.queue);
            let q = s.queues.iter().find(|q| q.name == victim.queue).expect("victim's queue");
            prop_assert!(held(&q.name, &none) > q.quota.get("cpu"), "victim within its quota");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// With preemption and reclaim off, the pass decides cohorts exactly as the reference's
    /// straightforward statement of the cohort rules (`admission_reference::decide_cohort`): the
    /// same pods in the same order, the same tallies (borrowed, lent, charges, positions) and the
    /// same workloads kept waiting (the reasons' wording aside).
    #[test]
    fn cohorts_match_the_reference(s in arb_cohort_snapshot()) {
        let mut s = s;
        for q in &mut s.queues {
            q.preemption.within_queue = WithinQueue::Never;
            if let Some(c) = q.cohort.as_mut() {
                c.reclaim = ReclaimPolicy::Never;
            }
        }
        let fast = decide(&s);
        let reference = crate::queue::admission_reference::decide(&s);
        prop_assert_eq!(&fast.admit, &reference.admit);
        prop_assert!(fast.evict.is_empty());
        prop_assert_eq!(&fast.queues, &reference.queues);
        for (f, r) in fast.workloads.iter().zip(&reference.workloads) {
            let (mut f, mut r) = (f.clone(), r.clone());
            prop_assert_eq!(f.waiting.take().is_some(), r.waiting.take().is_some());
            prop_assert_eq!(f, r);
        }
    }
}
