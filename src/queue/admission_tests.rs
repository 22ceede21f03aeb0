use proptest::prelude::*;

use super::admission::*;
use crate::api::QueueingStrategy;
use crate::resources::ResourceList;

const CPU: i64 = 1000;

fn res(cpu: i64) -> ResourceList {
    let mut r = ResourceList::new();
    r.add("cpu", cpu);
    r.add("pods", 1000);
    r
}

fn queue(name: &str, cpu: i64, strategy: QueueingStrategy) -> QueueSnapshot {
    let mut quota = ResourceList::new();
    quota.add("cpu", cpu);
    QueueSnapshot {
        name: name.into(),
        quota,
        strategy,
        preemption: PreemptionPolicy::default(),
    }
}

fn pod(name: &str, cpu: i64, state: PodState, created_at: i64) -> PodSnapshot {
    PodSnapshot {
        name: name.into(),
        requests: res(cpu),
        state,
        created_at,
        terminating: false,
    }
}

fn workload(
    name: &str,
    queue: &str,
    priority: i32,
    queued_at: i64,
    min: u32,
    pods: Vec<PodSnapshot>,
) -> WorkloadSnapshot {
    let per_pod = pods.first().map(|p| p.requests.clone()).unwrap_or_default();
    WorkloadSnapshot {
        key: WorkloadKey {
            namespace: "ns".into(),
            name: name.into(),
        },
        queue: queue.into(),
        namespace_allowed: true,
        priority,
        interrupted_count: 0,
        queued_at,
        pod_sets: vec![PodSetSnapshot {
            name: "main".into(),
            per_pod,
            min_count: min,
            pods,
        }],
    }
}

fn admitted_names(s: &Snapshot, d: &Decisions) -> Vec<String> {
    d.admit
        .iter()
        .map(|r| {
            s.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
                .name
                .clone()
        })
        .collect()
}

#[test]
fn admits_single_pods_up_to_the_quota() {
    let s = Snapshot {
        queues: vec![queue("q", 4 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: (0..10)
            .map(|i| {
                workload(
                    &format!("w{i}"),
                    "q",
                    0,
                    i,
                    1,
                    vec![pod(&format!("p{i}"), CPU, PodState::Gated, i)],
                )
            })
            .collect(),
    };
    let d = decide(&s);
    assert_eq!(admitted_names(&s, &d), vec!["p0", "p1", "p2", "p3"]);
    let t = &d.queues["q"];
    assert_eq!(t.usage.get("cpu"), 4 * CPU);
    assert_eq!(
        (
            t.pending_pods,
            t.admitted_pods,
            t.pending_workloads,
            t.admitted_workloads
        ),
        (6, 4, 6, 4)
    );
    assert_eq!(
        d.workloads[4]
            .waiting
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("needs 1 cpu more in queue q: 4/4 cpu used, 0 cpu reserved")
    );
}

#[test]
fn admitted_pods_hold_quota_and_ended_ones_give_it_back() {
    let s = Snapshot {
        queues: vec![queue("q", 2 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![
            workload(
                "a",
                "q",
                0,
                0,
                1,
                vec![pod("a", CPU, PodState::Admitted, 0)],
            ),
            workload("b", "q", 0, 1, 1, vec![pod("b", CPU, PodState::Ended, 1)]),
            workload("c", "q", 0, 2, 1, vec![pod("c", CPU, PodState::Gated, 2)]),
            workload("d", "q", 0, 3, 1, vec![pod("d", CPU, PodState::Gated, 3)]),
        ],
    };
    let d = decide(&s);
    assert_eq!(admitted_names(&s, &d), vec!["c"]);
}

#[test]
fn a_gang_is_admitted_whole_or_not_at_all() {
    let gang = |n: u32| {
        workload(
            "g",
            "q",
            0,
            0,
            3,
            (0..n)
                .map(|i| pod(&format!("g{i}"), CPU, PodState::Gated, 0))
                .collect(),
        )
    };
    let s = Snapshot {
        queues: vec![queue("q", 2 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![gang(3)],
    };
    let d = decide(&s);
    assert!(d.admit.is_empty());
    assert_eq!(
        d.workloads[0]
            .waiting
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(
            "needs 3 cpu but queue q has a quota of 2 cpu: it cannot be admitted until the quota grows"
        )
    );

    let s = Snapshot {
        queues: vec![queue("q", 3 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![gang(3)],
    };
    assert_eq!(decide(&s).admit.len(), 3);
}

#[test]
fn a_gang_reserves_quota_for_members_not_created_yet() {
    // A driver with two executors to come: the gang needs 3 cpu; only the driver exists.
    let mut driver = workload(
        "spark",
        "q",
        0,
        0,
        1,
        vec![pod("driver", CPU, PodState::Gated, 0)],
    );
    driver.pod_sets.push(PodSetSnapshot {
        name: "executor".into(),
        per_pod: res(CPU),
        min_count: 2,
        pods: vec![],
    });
    let other = workload(
        "other",
        "q",
        0,
        5,
        1,
        vec![pod("other", CPU, PodState::Gated, 5)],
    );
    let s = Snapshot {
        queues: vec![queue("q", 3 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![driver, other],
    };
    let d = decide(&s);
    assert_eq!(admitted_names(&s, &d), vec!["driver"]);
    assert_eq!(d.queues["q"].reserved.get("cpu"), 2 * CPU);
    assert_eq!(
        d.workloads[1]
            .waiting
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("needs 1 cpu more in queue q: 1/3 cpu used, 2 cpu reserved")
    );

    // Next pass: the driver runs and creates its executors: they fill the reservation.
    let mut s2 = s.clone();
    s2.workloads[0].pod_sets[0].pods[0].state = PodState::Admitted;
    s2.workloads[0].pod_sets[1].pods = vec![
        pod("exec-1", CPU, PodState::Gated, 10),
        pod("exec-2", CPU, PodState::Gated, 11),
        pod("exec-3", CPU, PodState::Gated, 12),
    ];
    let d2 = decide(&s2);
    assert_eq!(admitted_names(&s2, &d2), vec!["exec-1", "exec-2"]);
    assert_eq!(d2.queues["q"].reserved.get("cpu"), 0);
    assert_eq!(d2.queues["q"].usage.get("cpu"), 3 * CPU);
}

#[test]
fn higher_priority_goes_first_then_the_earlier() {
    let s = Snapshot {
        queues: vec![queue("q", CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![
            workload(
                "early-low",
                "q",
                0,
                0,
                1,
                vec![pod("early-low", CPU, PodState::Gated, 0)],
            ),
            workload(
                "late-high",
                "q",
                100,
                9,
                1,
                vec![pod("late-high", CPU, PodState::Gated, 9)],
            ),
        ],
    };
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["late-high"]);
}

#[test]
fn interrupted_workloads_go_before_fresh_ones_of_the_same_priority() {
    let mut again = workload(
        "again",
        "q",
        0,
        9,
        1,
        vec![pod("again", CPU, PodState::Gated, 9)],
    );
    again.interrupted_count = 2;
    let s = Snapshot {
        queues: vec![queue("q", CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![
            workload(
                "fresh",
                "q",
                0,
                0,
                1,
                vec![pod("fresh", CPU, PodState::Gated, 0)],
            ),
            again,
        ],
    };
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["again"]);
}

#[test]
fn strict_fifo_stops_at_the_first_misfit_best_effort_goes_on() {
    let build = |strategy| Snapshot {
        queues: vec![queue("q", 4 * CPU, strategy)],
        workloads: vec![
            workload(
                "running",
                "q",
                0,
                0,
                1,
                vec![pod("running", 2 * CPU, PodState::Admitted, 0)],
            ),
            workload(
                "big",
                "q",
                0,
                1,
                1,
                vec![pod("big", 3 * CPU, PodState::Gated, 1)],
            ),
            workload(
                "small",
                "q",
                0,
                2,
                1,
                vec![pod("small", CPU, PodState::Gated, 2)],
            ),
        ],
    };
    let strict = build(QueueingStrategy::StrictFIFO);
    let d = decide(&strict);
    assert!(d.admit.is_empty());
    assert_eq!(
        d.workloads[2]
            .waiting
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("waits behind ns/big in StrictFIFO queue q")
    );

    let best = build(QueueingStrategy::BestEffortFIFO);
    assert_eq!(admitted_names(&best, &decide(&best)), vec!["small"]);
}

#[test]
fn elastic_pods_of_a_running_workload_queue_by_their_own_time() {
    // A running app's new pod (created at 10) does not pass a newcomer queued at 5.
    let app = workload(
        "app",
        "q",
        0,
        0,
        1,
        vec![
            pod("app-0", CPU, PodState::Admitted, 0),
            pod("app-1", CPU, PodState::Gated, 10),
        ],
    );
    let newcomer = workload(
        "new",
        "q",
        0,
        5,
        1,
        vec![pod("new", CPU, PodState::Gated, 5)],
    );
    let s = Snapshot {
        queues: vec![queue("q", 2 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![app, newcomer],
    };
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["new"]);
}

#[test]
fn missing_queue_and_closed_namespace_admit_nothing_and_say_why() {
    let mut closed = workload(
        "closed",
        "q",
        0,
        0,
        1,
        vec![pod("closed", CPU, PodState::Gated, 0)],
    );
    closed.namespace_allowed = false;
    let s = Snapshot {
        queues: vec![queue("q", 4 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![
            workload(
                "lost",
                "nowhere",
                0,
                0,
                1,
                vec![pod("lost", CPU, PodState::Gated, 0)],
            ),
            closed,
        ],
    };
    let d = decide(&s);
    assert!(d.admit.is_empty());
    assert!(matches!(
        d.workloads[0].waiting,
        Some(WaitReason::QueueNotFound { .. })
    ));
    assert!(matches!(
        d.workloads[1].waiting,
        Some(WaitReason::NamespaceNotAllowed { .. })
    ));
}

#[test]
fn resources_the_quota_does_not_name_are_not_limited() {
    let mut gpu_pod = pod("gpu", CPU, PodState::Gated, 0);
    gpu_pod.requests.add("nvidia.com/gpu", 8000);
    let s = Snapshot {
        queues: vec![queue("q", 4 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![workload("gpu", "q", 0, 0, 1, vec![gpu_pod])],
    };
    assert_eq!(decide(&s).admit.len(), 1);
}

// ---- properties ------------------------------------------------------------------------------

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    let queues = prop::collection::vec((1i64..12, any::<bool>()), 1..4);
    let workloads = prop::collection::vec(
        (
            0usize..4,                                                // queue index (may be missing)
            -2i32..3,                                                 // priority
            0i64..50,                                                 // queued_at
            0u32..4,                                                  // min count
            prop::collection::vec((1i64..4, 0u8..3, 0i64..50), 0..6), // pods: cpu, state, created
            0u32..3, // reserved members of a second set
        ),
        0..14,
    );
    (queues, workloads).prop_map(|(queues, workloads)| {
        let queues: Vec<QueueSnapshot> = queues
            .iter()
            .enumerate()
            .map(|(i, (cpu, strict))| {
                queue(
                    &format!("q{i}"),
                    cpu * CPU,
                    if *strict {
                        QueueingStrategy::StrictFIFO
                    } else {
                        QueueingStrategy::BestEffortFIFO
                    },
                )
            })
            .collect();
        let workloads = workloads
            .into_iter()
            .enumerate()
            .map(|(w, (q, priority, queued_at, min, pods, extra))| {
                let pods = pods
                    .into_iter()
                    .enumerate()
                    .map(|(p, (cpu, state, created))| {
                        let state = match state {
                            0 => PodState::Gated,
                            1 => PodState::Admitted,
                            _ => PodState::Ended,
                        };
                        pod(&format!("w{w}-p{p}"), cpu * CPU, state, created)
                    })
                    .collect();
                let mut wl = workload(
                    &format!("w{w}"),
                    &format!("q{q}"),
                    priority,
                    queued_at,
                    min,
                    pods,
                );
                wl.pod_sets[0].per_pod = res(CPU);
                wl.pod_sets.push(PodSetSnapshot {
                    name: "later".into(),
                    per_pod: res(CPU),
                    min_count: extra,
                    pods: vec![],
                });
                wl
            })
            .collect();
        Snapshot { queues, workloads }
    })
}

/// Usage + reservations of a queue computed independently from the decisions.
fn held_after(s: &Snapshot, d: &Decisions, queue: &str) -> i64 {
    let admitted: std::collections::HashSet<PodRef> = d.admit.iter().copied().collect();
    let mut total = 0;
    for (w, wl) in s
        .workloads
        .iter()
        .enumerate()
        .filter(|(_, wl)| wl.queue == queue)
    {
        let mut started = false;
        let mut per_set = Vec::new();
        for (si, set) in wl.pod_sets.iter().enumerate() {
            let mut n = 0u32;
            for (pi, p) in set.pods.iter().enumerate() {
                let now = p.state == PodState::Admitted
                    || (p.state == PodState::Gated
                        && admitted.contains(&PodRef {
                            workload: w,
                            pod_set: si,
                            pod: pi,
                        }));
                if now {
                    n += 1;
                    total += p.requests.get("cpu");
                    started = true;
                }
            }
            per_set.push((set.min_count.saturating_sub(n), set.per_pod.get("cpu")));
        }
        if started {
            total += per_set.iter().map(|(m, c)| i64::from(*m) * c).sum::<i64>();
        }
    }
    total
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The optimised pass decides exactly what the straightforward one (`admission_reference`)
    /// decides: the same pods in the same order, the same tallies and the same reasons to wait.
    #[test]
    fn matches_the_reference_implementation(s in arb_snapshot()) {
        let fast = decide(&s);
        let reference = super::admission_reference::decide(&s);
        prop_assert_eq!(&fast.admit, &reference.admit);
        prop_assert_eq!(&fast.workloads, &reference.workloads);
        prop_assert_eq!(&fast.queues, &reference.queues);
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
