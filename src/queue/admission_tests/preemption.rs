//! Preemption within a queue: victims, their order and their minimal set, and its properties.

use super::*;

#[test]
fn a_high_priority_gang_evicts_exactly_as_many_low_pods_as_it_needs() {
    let mut workloads = admitted_singles("low", 4, 1, 0, 0);
    workloads.push(gated_gang("high", 2, 10, 10));
    let s = in_best_effort(4, workloads);
    let d = decide(&s);
    // Newest first among equals; the preemptor is not admitted in the pass that evicts.
    assert_eq!(evicted_names(&s, &d), vec!["low3-p", "low2-p"]);
    assert!(
        d.evict
            .iter()
            .all(|e| e.preemptor == 4 && e.reason == EvictionReason::InQueuePriority)
    );
    assert!(d.admit.is_empty());
    assert_eq!(
        d.workloads[4].waiting,
        Some(WaitReason::Preempting {
            queue: "q".into(),
            victims: 2
        })
    );
    assert_eq!(
        waiting(&d, 4).as_deref(),
        Some("waits for 2 lower-priority pods to be preempted in queue q")
    );
}

#[test]
fn elastic_pods_above_the_minimum_go_before_any_whole_workload() {
    // "spark" runs 3 pods with a minimum of 1: two are above it. "lowest" has a lower priority
    // still, but only a gang of one: it is spared while elastic pods can make the room.
    let spark_pods = (0..3)
        .map(|i| pod(&format!("spark-e{i}"), CPU, PodState::Admitted, i))
        .collect();
    let lowest = pod("lowest-p", CPU, PodState::Admitted, 9);
    let s = in_best_effort(
        4,
        vec![
            workload("spark", "q", 0, 0, 1, spark_pods),
            workload("lowest", "q", -5, 9, 1, vec![lowest]),
            gated_gang("high", 2, 10, 10),
        ],
    );
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d), vec!["spark-e2", "spark-e1"]);
    // Once the elastic pods are not enough, whole workloads go, lowest priority first.
    let mut s = s;
    s.workloads[2] = gated_gang("high", 3, 10, 10);
    let d = decide(&s);
    assert_eq!(
        evicted_names(&s, &d),
        vec!["spark-e2", "spark-e1", "lowest-p"]
    );
}

#[test]
fn a_gang_victim_goes_whole() {
    let gang = (0..3)
        .map(|i| pod(&format!("gang-p{i}"), CPU, PodState::Admitted, i))
        .collect();
    let s = in_best_effort(
        4,
        vec![
            workload("gang", "q", 0, 0, 3, gang),
            gated_gang("high", 2, 10, 10),
        ],
    );
    let d = decide(&s);
    // One core is missing, but the gang cannot lose one member: all three go.
    let mut names = evicted_names(&s, &d);
    names.sort();
    assert_eq!(names, vec!["gang-p0", "gang-p1", "gang-p2"]);
}

#[test]
fn equal_priority_never_preempts() {
    let mut workloads = admitted_singles("same", 2, 1, 5, 0);
    workloads.push(gated_gang("other", 1, 5, 10));
    let s = in_best_effort(2, workloads);
    let d = decide(&s);
    waits_for_quota_without_preempting(&d, 2);
}

#[test]
fn never_withinqueue_never_preempts() {
    let mut workloads = admitted_singles("low", 4, 1, 0, 0);
    workloads.push(gated_gang("high", 2, 10, 10));
    let mut q = best_effort(4);
    q.preemption.within_queue = WithinQueue::Never;
    let s = Snapshot {
        queues: vec![q],
        workloads,
    };
    let d = decide(&s);
    assert!(d.evict.is_empty());
    assert_eq!(
        waiting(&d, 4).as_deref(),
        Some("needs 2 cpu more in queue q: 4/4 cpu used, 0 cpu reserved")
    );
}

#[test]
fn terminating_victims_count_as_freed_and_no_second_round_is_chosen() {
    // Quota 5, four low pods, a gang of 3 waits, and a low pod queued after it.
    let mut workloads = admitted_singles("low", 4, 1, 0, 0);
    workloads.push(gated_gang("high", 3, 10, 10));
    workloads.push(gated_gang("late", 1, 0, 20));
    let mut s = in_best_effort(5, workloads);
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d), vec!["low3-p", "low2-p"]);
    // The core left free is held for the preemptor: "late" does not take it.
    assert!(d.admit.is_empty());
    // Next pass: the victims are terminating. They still hold their quota, nothing is admitted,
    // and no further victim is chosen for the same need.
    for w in [2, 3] {
        s.workloads[w].pod_sets[0].pods[0].terminating = true;
    }
    let d = decide(&s);
    assert!(d.evict.is_empty());
    assert!(d.admit.is_empty());
    assert_eq!(
        waiting(&d, 4).as_deref(),
        Some("waits for 2 lower-priority pods to be preempted in queue q")
    );
    assert_eq!(d.queues["q"].usage.get("cpu"), 4 * CPU);
    // Once they are gone, the preemptor is admitted, and the quota is never exceeded.
    for w in [2, 3] {
        s.workloads[w].pod_sets[0].pods[0].state = PodState::Ended;
    }
    let d = decide(&s);
    assert!(d.evict.is_empty());
    assert_eq!(
        admitted_names(&s, &d),
        vec!["high-p0", "high-p1", "high-p2"]
    );
    assert_eq!(d.queues["q"].usage.get("cpu"), 5 * CPU);
}

#[test]
fn no_victim_for_a_preemptor_that_would_not_fit_anyway() {
    // Even with both low pods gone, 2 (higher priority, kept) + 3 > 4.
    let mut workloads = admitted_singles("low", 2, 1, 0, 0);
    workloads.extend(admitted_singles("top", 2, 1, 20, 0));
    workloads.push(gated_gang("mid", 3, 10, 10));
    let s = in_best_effort(4, workloads);
    let d = decide(&s);
    waits_for_quota_without_preempting(&d, 4);
}

#[test]
fn the_victim_set_is_minimal() {
    // Newest first would take "small" (1 core) then "big" (3 cores); "big" alone is enough, so
    // "small" is spared.
    let s = in_best_effort(
        6,
        vec![
            single_pod("old", "old-p", 0, 1, 2 * CPU, PodState::Admitted),
            single_pod("big", "big-p", 0, 4, 3 * CPU, PodState::Admitted),
            single_pod("small", "small-p", 0, 5, CPU, PodState::Admitted),
            gated_gang("high", 3, 10, 10),
        ],
    );
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d), vec!["big-p"]);
}

#[test]
fn a_pod_whose_eviction_a_budget_refused_is_passed_over() {
    let spark_pods = (0..3)
        .map(|i| pod(&format!("spark-e{i}"), CPU, PodState::Admitted, i))
        .collect();
    let mut s = in_best_effort(
        4,
        vec![
            workload("spark", "q", 0, 0, 1, spark_pods),
            single_pod("gang", "gang-p", 0, 5, CPU, PodState::Admitted),
            gated_gang("high", 1, 10, 10),
        ],
    );
    // The newest elastic pod is blocked: the next one above the minimum goes instead.
    s.workloads[0].pod_sets[0].pods[2].eviction_blocked = true;
    assert_eq!(evicted_names(&s, &decide(&s)), vec!["spark-e1"]);
    // Which pods are above the minimum is a matter of age: the oldest stands in for them.
    s.workloads[0].pod_sets[0].pods[1].eviction_blocked = true;
    assert_eq!(evicted_names(&s, &decide(&s)), vec!["spark-e0"]);
    // With every pod of it blocked, a whole workload goes; a blocked gang never does.
    s.workloads[0].pod_sets[0].pods[0].eviction_blocked = true;
    assert_eq!(evicted_names(&s, &decide(&s)), vec!["gang-p"]);
    s.workloads[1].pod_sets[0].pods[0].eviction_blocked = true;
    let d = decide(&s);
    waits_for_quota_without_preempting(&d, 2);
}

#[test]
fn an_elastic_pod_of_a_running_workload_preempts_too() {
    let running = vec![
        pod("ray-head", CPU, PodState::Admitted, 0),
        pod("ray-w1", CPU, PodState::Gated, 5),
    ];
    let mut workloads = admitted_singles("low", 3, 1, 0, 0);
    workloads.push(workload("ray", "q", 10, 0, 1, running));
    let s = in_best_effort(4, workloads);
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d), vec!["low2-p"]);
    assert!(d.evict.iter().all(|e| e.preemptor == 3));
    assert!(d.admit.is_empty());
}

#[test]
fn one_preemptor_per_queue_per_pass_and_a_strict_queue_preempts_for_its_head_only() {
    let mut workloads = admitted_singles("low", 4, 1, 0, 0);
    workloads.push(gated_gang("first", 1, 10, 10));
    workloads.push(gated_gang("second", 1, 10, 11));
    for strategy in [
        QueueingStrategy::BestEffortFIFO,
        QueueingStrategy::StrictFIFO,
    ] {
        let s = Snapshot {
            queues: vec![queue("q", 4 * CPU, strategy)],
            workloads: workloads.clone(),
        };
        let d = decide(&s);
        assert_eq!(evicted_names(&s, &d), vec!["low3-p"], "{strategy:?}");
        assert!(d.evict.iter().all(|e| e.preemptor == 4));
        assert!(matches!(
            d.workloads[5].waiting,
            Some(WaitReason::Quota { .. }) | Some(WaitReason::BehindInStrictFifo { .. })
        ));
    }
}

#[test]
fn a_workload_losing_pods_admits_none_in_the_same_pass() {
    // "spark" loses its whole gang of 2 (it has nothing above its minimum); its gated executor
    // would fit in what is left, but it is not admitted while the gang is being evicted.
    let spark = vec![
        pod("spark-d", CPU, PodState::Admitted, 0),
        pod("spark-e0", CPU, PodState::Admitted, 0),
        pod("spark-e1", CPU, PodState::Gated, 1),
    ];
    let s = in_best_effort(
        4,
        vec![
            workload("spark", "q", 0, 0, 2, spark),
            gated_gang("high", 3, 10, 10),
        ],
    );
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d).len(), 2);
    assert!(d.admit.is_empty());
}

/// The preemptor's candidate items: its gang if it has not started, else each of its gated pods
/// not admitted by the pass.
fn preemptor_items(s: &Snapshot, d: &Decisions, p: usize) -> Vec<Vec<PodRef>> {
    let wl = &s.workloads[p];
    // Started: an admitted pod not terminating (all terminating: stopped, a gang again).
    let started = wl.pod_sets.iter().any(|set| {
        set.pods
            .iter()
            .any(|x| x.state == PodState::Admitted && !x.terminating)
    });
    if !started {
        return vec![crate::queue::admission_reference::gang_pods(s, p)];
    }
    let mut items = Vec::new();
    for (si, set) in wl.pod_sets.iter().enumerate() {
        for (pi, x) in set.pods.iter().enumerate() {
            let at = PodRef {
                workload: p,
                pod_set: si,
                pod: pi,
            };
            if x.state == PodState::Gated && !d.admit.contains(&at) {
                items.push(vec![at]);
            }
        }
    }
    items
}

/// The victims grouped into what was chosen: one unit per elastic pod, or a whole workload.
fn victim_units(s: &Snapshot, victims: &[PodRef]) -> Result<Vec<Vec<PodRef>>, String> {
    let mut units = Vec::new();
    let mut by_workload: std::collections::BTreeMap<usize, Vec<PodRef>> = Default::default();
    for v in victims {
        by_workload.entry(v.workload).or_default().push(*v);
    }
    for (w, pods) in by_workload {
        let wl = &s.workloads[w];
        let live = |si: usize| {
            wl.pod_sets[si]
                .pods
                .iter()
                .filter(|x| x.state == PodState::Admitted && !x.terminating)
                .count()
        };
        let all: usize = (0..wl.pod_sets.len()).map(live).sum();
        let elastic = pods.len() < all
            && wl.pod_sets.iter().enumerate().all(|(si, set)| {
                let n = pods.iter().filter(|v| v.pod_set == si).count();
                n == 0 || n + set.min_count as usize <= live(si)
            });
        if elastic {
            units.extend(pods.into_iter().map(|v| vec![v]));
        } else if pods.len() == all {
            units.push(pods);
        } else {
            return Err(format!(
                "workload {} split: {} of {} pods evicted",
                wl.key,
                pods.len(),
                all
            ));
        }
    }
    Ok(units)
}

/// In a queue where only `p` waits, a gang that has not started: whether it fits beside what the
/// pass admitted once every pod of every lower-priority workload (but those the pass admitted
/// pods of) and every terminating pod is gone (from pod states).
fn fits_with_every_candidate_gone(
    s: &Snapshot,
    d: &Decisions,
    q: &QueueSnapshot,
    p: usize,
) -> bool {
    let mut gone = std::collections::HashSet::new();
    let mut admitted: std::collections::HashSet<PodRef> = d.admit.iter().copied().collect();
    for (w, wl) in s.workloads.iter().enumerate() {
        let candidate =
            wl.priority < s.workloads[p].priority && !d.admit.iter().any(|r| r.workload == w);
        for (si, set) in wl.pod_sets.iter().enumerate() {
            for (pi, x) in set.pods.iter().enumerate() {
                if x.terminating || candidate {
                    gone.insert(PodRef {
                        workload: w,
                        pod_set: si,
                        pod: pi,
                    });
                }
            }
        }
    }
    admitted.extend(crate::queue::admission_reference::gang_pods(s, p));
    crate::queue::admission_reference::held(s, &q.name, "cpu", &admitted, &gone)
        <= q.quota.get("cpu")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6000))]

    /// Completeness, in queues where a single gang waits: it preempts (evicts, or waits for
    /// terminating pods) exactly when it would fit with every lower-priority workload and every
    /// terminating pod gone (computed from pod states, not by the planner).
    #[test]
    fn a_lone_waiting_gang_preempts_exactly_when_it_could_fit(s in arb_snapshot_with(true)) {
        let d = decide(&s);
        for q in s.queues.iter().filter(|q| q.preemption.within_queue == WithinQueue::LowerPriority) {
            let waiting: Vec<usize> = (0..s.workloads.len())
                .filter(|w| s.workloads[*w].queue == q.name && d.workloads[*w].pending_pods > 0)
                .collect();
            let [p] = waiting[..] else { continue };
            let wl = &s.workloads[p];
            let started = wl.pod_sets.iter().any(|set| set.pods.iter().any(|x| x.state == PodState::Admitted && !x.terminating));
            let gated = wl.pod_sets.iter().flat_map(|set| &set.pods).filter(|x| x.state == PodState::Gated).count() as u32;
            if started || !wl.namespace_allowed || d.workloads[p].pending_pods < gated {
                continue; // not a lone gang left waiting
            }
            let evicts = d.evict.iter().any(|e| e.preemptor == p);
            let could = fits_with_every_candidate_gone(&s, &d, q, p);
            if !could {
                prop_assert!(!evicts, "{} evicts but could never fit", wl.key);
            } else {
                let preempting = matches!(d.workloads[p].waiting, Some(WaitReason::Preempting { .. }));
                let terminating = s.workloads.iter().filter(|w| w.queue == q.name)
                    .flat_map(|w| w.pod_sets.iter().flat_map(|set| &set.pods)).any(|x| x.terminating);
                prop_assert!(evicts || preempting || terminating, "{} could fit by preemption but does not preempt: {:?}", wl.key, d.workloads[p].waiting);
            }
        }
    }

    /// Every eviction set: one preemptor per queue, of higher priority than every victim, in its
    /// queue; victims admitted, not terminating, never a gang in part; the preemptor not admitted
    /// by the pass; once the victims and the terminating pods are gone the preemptor fits the
    /// quota (`admission_reference::held`, from pod states), and without any one victim it would
    /// not (the set is minimal).
    #[test]
    fn preemption_is_sound_and_minimal(s in arb_snapshot_with(true)) {
        use crate::queue::admission_reference::held;
        use std::collections::HashSet;
        let d = decide(&s);
        let admitted: HashSet<PodRef> = d.admit.iter().copied().collect();
        for q in &s.queues {
            let evictions: Vec<&Eviction> = d.evict.iter().filter(|e| s.workloads[e.preemptor].queue == q.name).collect();
            let Some(first) = evictions.first() else { continue };
            prop_assert_eq!(q.preemption.within_queue, WithinQueue::LowerPriority);
            let p = first.preemptor;
            let mut victims = Vec::new();
            for e in &evictions {
                prop_assert_eq!(e.preemptor, p, "one preemptor per queue");
                let v = e.victim;
                let (wl, x) = (&s.workloads[v.workload], &s.workloads[v.workload].pod_sets[v.pod_set].pods[v.pod]);
                prop_assert_eq!(&wl.queue, &q.name);
                prop_assert!(wl.priority < s.workloads[p].priority, "victim {} of priority {} >= {}", wl.key, wl.priority, s.workloads[p].priority);
                prop_assert!(x.state == PodState::Admitted && !x.terminating);
                prop_assert!(!victims.contains(&v));
                victims.push(v);
            }
            let preempting = matches!(d.workloads[p].waiting, Some(WaitReason::Preempting { .. }));
            prop_assert!(preempting);
            let units = victim_units(&s, &victims).map_err(TestCaseError::fail)?;
            let terminating: HashSet<PodRef> = s.workloads.iter().enumerate().flat_map(|(w, wl)| {
                wl.pod_sets.iter().enumerate().flat_map(move |(si, set)| {
                    set.pods.iter().enumerate().filter(|(_, x)| x.terminating).map(move |(pi, _)| PodRef { workload: w, pod_set: si, pod: pi })
                })
            }).collect();
            let quota = q.quota.get("cpu");
            let fits = |item: &[PodRef], spared: &[PodRef]| {
                let mut with: HashSet<PodRef> = admitted.clone();
                with.extend(item.iter().copied());
                let mut gone: HashSet<PodRef> = terminating.clone();
                gone.extend(victims.iter().copied().filter(|v| !spared.contains(v)));
                held(&s, &q.name, "cpu", &with, &gone) <= quota
            };
            let items = preemptor_items(&s, &d, p);
            prop_assert!(!items.iter().any(|item| item.iter().any(|x| admitted.contains(x))));
            let sound = items.iter().any(|item| fits(item, &[]) && units.iter().all(|u| !fits(item, u)));
            prop_assert!(sound, "no item of {} fits after exactly these victims {:?}", s.workloads[p].key, victims);
        }
    }

    /// The pass after the evictions, with the victims terminating: the same preemptor chooses no
    /// more victims (the room being freed counts; the room promised was held from the items after
    /// it), nor does any item ranked after it. Only an item that has come to rank before it since
    /// (a higher-priority pod that became an item, e.g. of a gang admitted in between, or a gang
    /// member of the preemptor's own workload now elastic) may: a new need. And something still
    /// waits for the victims.
    #[test]
    fn no_second_round_while_victims_terminate(s in arb_snapshot_with(true)) {
        let d = decide(&s);
        let mut next = s.clone();
        for r in &d.admit {
            next.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod].state = PodState::Admitted;
        }
        for e in &d.evict {
            let v = e.victim;
            next.workloads[v.workload].pod_sets[v.pod_set].pods[v.pod].terminating = true;
        }
        let d2 = decide(&next);
        for e in &d.evict {
            let (p, queue) = (e.preemptor, &s.workloads[e.preemptor].queue);
            let in_queue = |w: usize| &s.workloads[w].queue == queue;
            // When the pass also admitted pods of the preemptor's workload, its gang places may
            // have filled: its pods still waiting are elastic now, ranked by their own time, and
            // one of them (a gang member too big for its place) may come first: a new need.
            let reshaped = d.admit.iter().any(|r| r.workload == p);
            for e2 in d2.evict.iter().filter(|e2| in_queue(e2.preemptor)) {
                prop_assert!(e2.preemptor != p || reshaped, "second round for {} in {}", s.workloads[p].key, queue);
                prop_assert!(s.workloads[e2.preemptor].priority >= s.workloads[p].priority);
            }
            if d2.admit.iter().any(|r| in_queue(r.workload)) || d2.evict.iter().any(|e2| in_queue(e2.preemptor)) {
                continue; // items ranked before the preemptor took room first
            }
            let waits = (0..s.workloads.len()).any(|w| {
                in_queue(w) && matches!(d2.workloads[w].waiting, Some(WaitReason::Preempting { .. }))
            });
            prop_assert!(waits, "nothing waits for the victims in {}", queue);
        }
    }

    /// With pods terminating and preemption on, no decision takes a queue over its quota.
    #[test]
    fn preemption_never_exceeds_a_quota(s in arb_snapshot_with(true)) {
        let d = decide(&s);
        for q in &s.queues {
            let before = held_after(&s, &Decisions { admit: vec![], ..d.clone() }, &q.name);
            let after = held_after(&s, &d, &q.name);
            prop_assert!(after <= q.quota.get("cpu").max(before));
        }
    }
}

/// Nothing is preempted, and workload `w` waits for quota.
fn waits_for_quota_without_preempting(d: &Decisions, w: usize) {
    assert!(d.evict.is_empty());
    assert!(matches!(
        d.workloads[w].waiting,
        Some(WaitReason::Quota { .. })
    ));
}
