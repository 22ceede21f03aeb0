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
        cohort: None,
    }
}

fn pod(name: &str, cpu: i64, state: PodState, created_at: i64) -> PodSnapshot {
    PodSnapshot {
        name: name.into(),
        requests: std::sync::Arc::new(res(cpu)),
        state,
        created_at,
        terminating: false,
        eviction_blocked: false,
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
    let per_pod = pods
        .first()
        .map(|p| ResourceList::clone(&p.requests))
        .unwrap_or_default();
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
    std::sync::Arc::make_mut(&mut gpu_pod.requests).add("nvidia.com/gpu", 8000);
    let s = Snapshot {
        queues: vec![queue("q", 4 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![workload("gpu", "q", 0, 0, 1, vec![gpu_pod])],
    };
    assert_eq!(decide(&s).admit.len(), 1);
}

// ---- properties ------------------------------------------------------------------------------

fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
    arb_snapshot_with(false)
}

/// Random snapshots; with `terminating`, some admitted pods are being deleted, and queues choose
/// their preemption policy at random.
fn arb_snapshot_with(terminating: bool) -> impl Strategy<Value = Snapshot> {
    let states = if terminating { 4u8 } else { 3 };
    let queues = prop::collection::vec((1i64..12, any::<bool>(), any::<bool>()), 1..4);
    let workloads = prop::collection::vec(
        (
            0usize..4, // queue index (may be missing)
            -2i32..3,  // priority
            0i64..50,  // queued_at
            0u32..4,   // min count
            prop::collection::vec((1i64..4, 0u8..states, 0i64..50), 0..6), // pods: cpu, state, created
            0u32..3, // reserved members of a second set
        ),
        0..14,
    );
    (queues, workloads).prop_map(move |(queues, workloads)| {
        let queues: Vec<QueueSnapshot> = queues
            .iter()
            .enumerate()
            .map(|(i, (cpu, strict, never))| {
                let mut q = queue(
                    &format!("q{i}"),
                    cpu * CPU,
                    if *strict {
                        QueueingStrategy::StrictFIFO
                    } else {
                        QueueingStrategy::BestEffortFIFO
                    },
                );
                if terminating && *never {
                    q.preemption.within_queue = WithinQueue::Never;
                }
                q
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
                        let (state, terminating) = match state {
                            0 => (PodState::Gated, false),
                            1 => (PodState::Admitted, false),
                            2 => (PodState::Ended, false),
                            _ => (PodState::Admitted, true),
                        };
                        let mut pod = pod(&format!("w{w}-p{p}"), cpu * CPU, state, created);
                        pod.terminating = terminating;
                        pod
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
    /// decides when nothing is preempted: the same pods in the same order, the same tallies and
    /// the same reasons to wait. With `withinQueue: Never` everywhere, for the whole snapshot;
    /// with the default, for every queue in which nothing is evicted.
    #[test]
    fn matches_the_reference_implementation(s in arb_snapshot()) {
        let mut never = s.clone();
        for q in &mut never.queues {
            q.preemption.within_queue = WithinQueue::Never;
        }
        let fast = decide(&never);
        let reference = super::admission_reference::decide(&never);
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

// ---- preemption ------------------------------------------------------------------------------

fn evicted_names(s: &Snapshot, d: &Decisions) -> Vec<String> {
    d.evict
        .iter()
        .map(|e| {
            let r = e.victim;
            s.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
                .name
                .clone()
        })
        .collect()
}

/// `n` admitted workloads of one pod each (`cpu` cores), priority `priority`, queued at `t..`.
fn admitted_singles(
    prefix: &str,
    n: i64,
    cpu: i64,
    priority: i32,
    t: i64,
) -> Vec<WorkloadSnapshot> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let p = pod(&format!("{name}-p"), cpu * CPU, PodState::Admitted, t + i);
            workload(&name, "q", priority, t + i, 1, vec![p])
        })
        .collect()
}

/// A gang of `n` gated pods of one core each (all of them its minimum).
fn gated_gang(name: &str, n: u32, priority: i32, t: i64) -> WorkloadSnapshot {
    let pods = (0..n)
        .map(|i| pod(&format!("{name}-p{i}"), CPU, PodState::Gated, t))
        .collect();
    workload(name, "q", priority, t, n, pods)
}

fn best_effort(cpu: i64) -> QueueSnapshot {
    queue("q", cpu * CPU, QueueingStrategy::BestEffortFIFO)
}

fn waiting(d: &Decisions, w: usize) -> Option<String> {
    d.workloads[w].waiting.as_ref().map(ToString::to_string)
}

#[test]
fn a_high_priority_gang_evicts_exactly_as_many_low_pods_as_it_needs() {
    let mut workloads = admitted_singles("low", 4, 1, 0, 0);
    workloads.push(gated_gang("high", 2, 10, 10));
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads,
    };
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
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads: vec![
            workload("spark", "q", 0, 0, 1, spark_pods),
            workload("lowest", "q", -5, 9, 1, vec![lowest]),
            gated_gang("high", 2, 10, 10),
        ],
    };
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
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads: vec![
            workload("gang", "q", 0, 0, 3, gang),
            gated_gang("high", 2, 10, 10),
        ],
    };
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
    let s = Snapshot {
        queues: vec![best_effort(2)],
        workloads,
    };
    let d = decide(&s);
    assert!(d.evict.is_empty());
    assert!(matches!(
        d.workloads[2].waiting,
        Some(WaitReason::Quota { .. })
    ));
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
    let mut s = Snapshot {
        queues: vec![best_effort(5)],
        workloads,
    };
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
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads,
    };
    let d = decide(&s);
    assert!(d.evict.is_empty());
    assert!(matches!(
        d.workloads[4].waiting,
        Some(WaitReason::Quota { .. })
    ));
}

#[test]
fn the_victim_set_is_minimal() {
    // Newest first would take "small" (1 core) then "big" (3 cores); "big" alone is enough, so
    // "small" is spared.
    let s = Snapshot {
        queues: vec![best_effort(6)],
        workloads: vec![
            workload(
                "old",
                "q",
                0,
                1,
                1,
                vec![pod("old-p", 2 * CPU, PodState::Admitted, 1)],
            ),
            workload(
                "big",
                "q",
                0,
                4,
                1,
                vec![pod("big-p", 3 * CPU, PodState::Admitted, 4)],
            ),
            workload(
                "small",
                "q",
                0,
                5,
                1,
                vec![pod("small-p", CPU, PodState::Admitted, 5)],
            ),
            gated_gang("high", 3, 10, 10),
        ],
    };
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d), vec!["big-p"]);
}

#[test]
fn a_pod_whose_eviction_a_budget_refused_is_passed_over() {
    let spark_pods = (0..3)
        .map(|i| pod(&format!("spark-e{i}"), CPU, PodState::Admitted, i))
        .collect();
    let mut s = Snapshot {
        queues: vec![best_effort(4)],
        workloads: vec![
            workload("spark", "q", 0, 0, 1, spark_pods),
            workload(
                "gang",
                "q",
                0,
                5,
                1,
                vec![pod("gang-p", CPU, PodState::Admitted, 5)],
            ),
            gated_gang("high", 1, 10, 10),
        ],
    };
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
    assert!(d.evict.is_empty());
    assert!(matches!(
        d.workloads[2].waiting,
        Some(WaitReason::Quota { .. })
    ));
}

#[test]
fn an_elastic_pod_of_a_running_workload_preempts_too() {
    let running = vec![
        pod("ray-head", CPU, PodState::Admitted, 0),
        pod("ray-w1", CPU, PodState::Gated, 5),
    ];
    let mut workloads = admitted_singles("low", 3, 1, 0, 0);
    workloads.push(workload("ray", "q", 10, 0, 1, running));
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads,
    };
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
    let s = Snapshot {
        queues: vec![best_effort(4)],
        workloads: vec![
            workload("spark", "q", 0, 0, 2, spark),
            gated_gang("high", 3, 10, 10),
        ],
    };
    let d = decide(&s);
    assert_eq!(evicted_names(&s, &d).len(), 2);
    assert!(d.admit.is_empty());
}

/// The preemptor's candidate items: its gang if it has not started, else each of its gated pods
/// not admitted by the pass.
fn preemptor_items(s: &Snapshot, d: &Decisions, p: usize) -> Vec<Vec<PodRef>> {
    let wl = &s.workloads[p];
    let started = wl
        .pod_sets
        .iter()
        .any(|set| set.pods.iter().any(|x| x.state == PodState::Admitted));
    if !started {
        return vec![super::admission_reference::gang_pods(s, p)];
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
    admitted.extend(super::admission_reference::gang_pods(s, p));
    super::admission_reference::held(s, &q.name, "cpu", &admitted, &gone) <= q.quota.get("cpu")
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
            let started = wl.pod_sets.iter().any(|set| set.pods.iter().any(|x| x.state == PodState::Admitted));
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
        use super::admission_reference::held;
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

// ---- cohorts ---------------------------------------------------------------------------------

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
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            let p = pod(&format!("{name}-p"), CPU, PodState::Gated, t + i);
            workload(&name, queue, priority, t + i, 1, vec![p])
        })
        .collect()
}

fn in_queue(mut workloads: Vec<WorkloadSnapshot>, queue: &str) -> Vec<WorkloadSnapshot> {
    for w in &mut workloads {
        w.queue = queue.into();
    }
    workloads
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
fn arb_cohort_snapshot() -> impl Strategy<Value = Snapshot> {
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
            super::admission_reference::held(&s, q, "cpu", admitted, &none)
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
        let reference = super::admission_reference::decide(&s);
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
