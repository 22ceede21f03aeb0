//! Passes over the same workloads again (`decide_again`, `admission/memo.rs`): after random
//! changes of workloads in place (another workload's pods, priority, queue, gang put in its
//! place), the pass that gathers again only what changed decides exactly what `decide` decides
//! over the same snapshot: the same pods admitted and evicted in the same order, the same
//! tallies, reasons, flavors and domains.

use super::cohorts::arb_cohort_snapshot;
use super::flavors::arb_flavored;
use super::*;

fn same(again: &Decisions, full: &Decisions) -> Result<(), TestCaseError> {
    prop_assert_eq!(&again.admit, &full.admit);
    prop_assert_eq!(&again.evict, &full.evict);
    prop_assert_eq!(&again.workloads, &full.workloads);
    prop_assert_eq!(&again.queues, &full.queues);
    prop_assert_eq!(&again.flavors, &full.flavors);
    prop_assert_eq!(&again.domains, &full.domains);
    prop_assert_eq!(&again.data_nodes, &full.data_nodes);
    Ok(())
}

/// `decide_again` given the tallies of the pass before (whose equal lists and reasons it takes),
/// against `decide`.
fn check(
    s: &Snapshot,
    memo: &mut Memo,
    changed: Option<&[usize]>,
    tallies: &mut Vec<WorkloadTally>,
) -> Result<(), TestCaseError> {
    let again = decide_again(s, memo, changed, std::mem::take(tallies));
    same(&again, &decide(s))?;
    *tallies = again.workloads;
    Ok(())
}

/// One change: the workload at `at` replaced by `other`'s at `from` (keeping its key or not);
/// `twice`: the change is reported twice.
type Change = (prop::sample::Index, prop::sample::Index, bool, bool);

fn changes() -> impl Strategy<Value = Vec<Change>> {
    prop::collection::vec(
        (
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            any::<bool>(),
            any::<bool>(),
        ),
        1..12,
    )
}

/// Decides `base` with a memo, then again after each change, each time against `decide`.
fn replay(base: Snapshot, other: &Snapshot, steps: Vec<Change>) -> Result<(), TestCaseError> {
    let mut s = base;
    let mut memo = Memo::default();
    let mut tallies = Vec::new();
    check(&s, &mut memo, None, &mut tallies)?;
    // Nothing changed: the same again.
    check(&s, &mut memo, Some(&[]), &mut tallies)?;
    for (at, from, keep_key, twice) in steps {
        if s.workloads.is_empty() || other.workloads.is_empty() {
            break;
        }
        let w = at.index(s.workloads.len());
        let mut replacement = other.workloads[from.index(other.workloads.len())].clone();
        if keep_key {
            replacement.key = s.workloads[w].key.clone();
        }
        s.workloads[w] = replacement;
        let changed = if twice { vec![w, w] } else { vec![w] };
        check(&s, &mut memo, Some(&changed), &mut tallies)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn decides_again_what_a_full_pass_decides(
        base in arb_snapshot_with(true),
        other in arb_snapshot_with(true),
        steps in changes(),
    ) {
        replay(base, &other, steps)?;
    }

    #[test]
    fn decides_again_what_a_full_pass_decides_in_cohorts(
        base in arb_cohort_snapshot(),
        other in arb_cohort_snapshot(),
        steps in changes(),
    ) {
        replay(base, &other, steps)?;
    }

    #[test]
    fn decides_again_what_a_full_pass_decides_with_flavors(
        base in arb_flavored(),
        other in arb_flavored(),
        steps in changes(),
    ) {
        replay(base, &other, steps)?;
    }
}

/// Many members, one changed at a time: the path that merges the changed member's items into
/// the kept ones (the random snapshots above are small, so a change there is often a quarter of
/// a queue's members, which gathers everything again).
#[test]
fn one_change_among_many_members_decides_what_a_full_pass_decides() {
    let mut s = Snapshot {
        queues: vec![
            queue("q0", 20 * CPU, QueueingStrategy::StrictFIFO),
            queue("q1", 20 * CPU, QueueingStrategy::BestEffortFIFO),
        ],
        workloads: Vec::new(),
    };
    for w in 0..200i64 {
        let state = if w % 3 == 0 {
            PodState::Admitted
        } else {
            PodState::Gated
        };
        let pods = (0..(w % 4))
            .map(|p| {
                pod(
                    &format!("w{w}-p{p}"),
                    (1 + (w + p) % 3) * CPU,
                    state,
                    (w * 7 + p) % 50,
                )
            })
            .collect();
        let q = format!("q{}", w % 2);
        let min = (w % 3) as u32;
        s.workloads.push(workload(
            &format!("w{w:03}"),
            &q,
            (w % 3) as i32,
            w % 40,
            min,
            pods,
        ));
    }
    let mut memo = Memo::default();
    let mut last = decide_again(&s, &mut memo, None, Vec::new());
    assert_eq!(last.admit, decide(&s).admit);
    for step in 0..60usize {
        let w = (step * 37) % s.workloads.len();
        let set = &mut s.workloads[w].pod_sets[0];
        match step % 4 {
            // An admitted pod ends, a gated pod comes, the priority changes, a pod is admitted.
            0 => set
                .pods
                .iter_mut()
                .take(1)
                .for_each(|p| p.state = PodState::Ended),
            1 => set
                .pods
                .push(pod(&format!("n{step}"), CPU, PodState::Gated, step as i64)),
            2 => s.workloads[w].priority = (step % 5) as i32 - 2,
            _ => set
                .pods
                .iter_mut()
                .take(1)
                .for_each(|p| p.state = PodState::Admitted),
        }
        last = decide_again(
            &s,
            &mut memo,
            Some(&[w]),
            std::mem::take(&mut last.workloads),
        );
        let full = decide(&s);
        assert_eq!(last.admit, full.admit, "step {step}");
        assert_eq!(last.workloads, full.workloads, "step {step}");
        assert_eq!(last.queues, full.queues, "step {step}");
    }
}
