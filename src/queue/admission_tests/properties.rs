//! Properties of the pass over random snapshots: it decides what the reference model decides,
//! never takes a queue over its quota, admits gangs whole and keeps priority order.

use super::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The optimised pass decides exactly what the straightforward one (`admission_reference`)
    /// decides when nothing is preempted: the same pods in the same order, the same tallies and
    /// the same reasons to wait. With `withinQueue: Never` everywhere, for the whole snapshot;
    /// with the default, for every queue in which nothing is evicted.
    #[test]
    fn matches_the_reference_implementation(s in arb_snapshot()) {
        let never = without_preemption(&s);
        let fast = decide(&never);
        let reference = crate::queue::admission_reference::decide(&never);
        prop_assert_eq!(&fast.admit, &reference.admit);
        prop_assert_eq!(&fast.workloads, &reference.workloads);
        prop_assert_eq!(&fast.queues, &reference.queues);
        prop_assert!(fast.evict.is_empty());
        let fast = decide(&s);
        for q in &s.queues {
            let mine = |w: usize| s.workloads[w].queue == q.name;
            if fast.evict.iter().any(|e| mine(e.preemptor)) {
                continue;
            }
            let of_queue = |d: &Decisions| -> Vec<PodRef> {
                d.admit.iter().copied().filter(|r| mine(r.workload)).collect()
            };
            prop_assert_eq!(of_queue(&fast), of_queue(&reference));
            for w in (0..s.workloads.len()).filter(|w| mine(*w)) {
                prop_assert_eq!(&fast.workloads[w], &reference.workloads[w]);
            }
            prop_assert_eq!(&fast.queues[&q.name], &reference.queues[&q.name]);
        }
    }

    /// No decision takes a queue over its quota, unless the queue was already over it before the
    /// pass and the decision admits nothing (pods admitted earlier are never taken back here).
    #[test]
    fn never_exceeds_a_quota(s in arb_snapshot()) {
        let d = decide(&s);
        for q in &s.queues {
            let before = held_after(&s, &Decisions { admit: vec![], ..d.clone() }, &q.name);
            let after = held_after(&s, &d, &q.name);
            let quota = q.quota.get("cpu");
            prop_assert!(after <= quota.max(before), "queue {} holds {} > quota {} (before {})", q.name, after, quota, before);
            prop_assert_eq!(d.queues[&q.name].usage.get("cpu") + d.queues[&q.name].reserved.get("cpu"), after);
        }
    }

    /// Only gated pods of existing, open queues are admitted, each at most once, and a gang whose
    /// workload has not started is admitted whole (all its pods up to each minimum) or not at all.
    #[test]
    fn admits_only_gated_pods_once_and_gangs_whole(s in arb_snapshot()) {
        let d = decide(&s);
        let mut seen = std::collections::HashSet::new();
        for r in &d.admit {
            prop_assert!(seen.insert(*r));
            let wl = &s.workloads[r.workload];
            prop_assert_eq!(wl.pod_sets[r.pod_set].pods[r.pod].state, PodState::Gated);
            prop_assert!(s.queues.iter().any(|q| q.name == wl.queue));
        }
        for (w, wl) in s.workloads.iter().enumerate() {
            let started = wl.pod_sets.iter().any(|set| set.pods.iter().any(|p| p.state == PodState::Admitted));
            if started { continue; }
            let n = d.admit.iter().filter(|r| r.workload == w).count();
            let gated = wl.pod_sets[0].pods.iter().filter(|p| p.state == PodState::Gated).count();
            let gang = (wl.pod_sets[0].min_count as usize).min(gated).max(usize::from(gated > 0));
            prop_assert!(n == 0 || n == gang, "workload {} admitted {} of gang {}", w, n, gang);
        }
    }

    /// Order: an item that fits is never left waiting behind a lower-ranked item that was admitted,
    /// in a BestEffortFIFO queue of single pods: if a higher-priority single pod waits, every
    /// admitted lower-priority pod must have been cheaper than what was left.
    #[test]
    fn respects_priority_order(s in arb_snapshot()) {
        let d = decide(&s);
        for q in s.queues.iter().filter(|q| q.strategy == QueueingStrategy::StrictFIFO) {
            // In StrictFIFO nothing is admitted from a workload ranked below one that waits
            // for quota (fills excepted, which are already paid for).
            let waiting: Vec<usize> = s.workloads.iter().enumerate()
                .filter(|(w, wl)| wl.queue == q.name && matches!(d.workloads[*w].waiting, Some(WaitReason::Quota{..}) | Some(WaitReason::NeverFits{..})))
                .map(|(w, _)| w).collect();
            for &blocked in &waiting {
                let b = &s.workloads[blocked];
                let b_started = b.pod_sets.iter().any(|set| set.pods.iter().any(|p| p.state == PodState::Admitted));
                if b_started { continue; }
                for r in &d.admit {
                    let a = &s.workloads[r.workload];
                    if a.queue != q.name || r.workload == blocked { continue; }
                    let a_started = a.pod_sets.iter().any(|set| set.pods.iter().any(|p| p.state == PodState::Admitted));
                    if a_started { continue; }
                    let ranked_below = (a.priority, -a.queued_at) < (b.priority, -b.queued_at);
                    prop_assert!(!ranked_below, "strict queue {} admitted {} ranked below waiting {}", q.name, a.key, b.key);
                }
            }
        }
    }
}
