//! Tests of the admission pass (`queue::admission`): the fixtures and the basic rules here;
//! properties, preemption and cohorts in files of their own.

use proptest::prelude::*;

use super::admission::*;
use crate::api::QueueingStrategy;
use crate::resources::ResourceList;

mod again;
mod cohorts;
mod data;
mod flavors;
mod preemption;
mod properties;
mod topology;

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
        flavors: Vec::new(),
    }
}

fn pod(name: &str, cpu: i64, state: PodState, created_at: i64) -> PodSnapshot {
    PodSnapshot::plain(name, std::sync::Arc::new(res(cpu)), state, created_at)
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
        queue: queue.into(),
        priority,
        queued_at,
        ..one_set_workload(name, "main", per_pod, min, pods)
    }
}

/// The unit tests' workload: `name` in namespace `ns` and queue `q`, of one pod set `set` (each
/// pod asking `per_pod`, `min` of them the gang) holding `pods`; priority 0, queued at 0.
pub(crate) fn one_set_workload(
    name: &str,
    set: &str,
    per_pod: ResourceList,
    min: u32,
    pods: Vec<PodSnapshot>,
) -> WorkloadSnapshot {
    WorkloadSnapshot {
        key: WorkloadKey {
            namespace: "ns".into(),
            name: name.into(),
        },
        queue: "q".into(),
        namespace_allowed: true,
        priority: 0,
        interrupted_count: 0,
        queued_at: 0,
        pod_sets: vec![PodSetSnapshot {
            name: set.into(),
            per_pod,
            min_count: min,
            pods,
        }],
    }
}

/// A workload of one pod (`cpu`, in `state`) of the same name, in queue `q`, queued at `t`.
fn single(name: &str, priority: i32, t: i64, cpu: i64, state: PodState) -> WorkloadSnapshot {
    single_pod(name, name, priority, t, cpu, state)
}

/// A workload `name` of one pod `pod_name` (`cpu`, in `state`), in queue `q`, queued at `t`.
fn single_pod(
    name: &str,
    pod_name: &str,
    priority: i32,
    t: i64,
    cpu: i64,
    state: PodState,
) -> WorkloadSnapshot {
    workload(
        name,
        "q",
        priority,
        t,
        1,
        vec![pod(pod_name, cpu, state, t)],
    )
}

/// The names of the pods `refs` point at.
fn pod_names<'a>(s: &Snapshot, refs: impl Iterator<Item = &'a PodRef>) -> Vec<String> {
    refs.map(|r| {
        s.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
            .name
            .clone()
    })
    .collect()
}

fn admitted_names(s: &Snapshot, d: &Decisions) -> Vec<String> {
    pod_names(s, d.admit.iter())
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
        waiting(&d, 4).as_deref(),
        Some("needs 1 cpu more in queue q: 4/4 cpu used, 0 cpu reserved")
    );
}

#[test]
fn admitted_pods_hold_quota_and_ended_ones_give_it_back() {
    let s = in_best_effort(
        2,
        vec![
            single("a", 0, 0, CPU, PodState::Admitted),
            single("b", 0, 1, CPU, PodState::Ended),
            single("c", 0, 2, CPU, PodState::Gated),
            single("d", 0, 3, CPU, PodState::Gated),
        ],
    );
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
    let s = in_best_effort(2, vec![gang(3)]);
    let d = decide(&s);
    assert!(d.admit.is_empty());
    assert_eq!(
        waiting(&d, 0).as_deref(),
        Some(
            "needs 3 cpu but queue q has a quota of 2 cpu: it cannot be admitted until the quota grows"
        )
    );

    let s = in_best_effort(3, vec![gang(3)]);
    assert_eq!(decide(&s).admit.len(), 3);
}

#[test]
fn a_gang_reserves_quota_for_members_not_created_yet() {
    // A driver with two executors to come: the gang needs 3 cpu; only the driver exists.
    let mut driver = single_pod("spark", "driver", 0, 0, CPU, PodState::Gated);
    driver.pod_sets.push(PodSetSnapshot {
        name: "executor".into(),
        per_pod: res(CPU),
        min_count: 2,
        pods: vec![],
    });
    let other = single("other", 0, 5, CPU, PodState::Gated);
    let s = in_best_effort(3, vec![driver, other]);
    let d = decide(&s);
    assert_eq!(admitted_names(&s, &d), vec!["driver"]);
    assert_eq!(d.queues["q"].reserved.get("cpu"), 2 * CPU);
    assert_eq!(
        waiting(&d, 1).as_deref(),
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
            single("early-low", 0, 0, CPU, PodState::Gated),
            single("late-high", 100, 9, CPU, PodState::Gated),
        ],
    };
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["late-high"]);
}

#[test]
fn interrupted_workloads_go_before_fresh_ones_of_the_same_priority() {
    let mut again = single("again", 0, 9, CPU, PodState::Gated);
    again.interrupted_count = 2;
    let s = Snapshot {
        queues: vec![queue("q", CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![single("fresh", 0, 0, CPU, PodState::Gated), again],
    };
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["again"]);
}

#[test]
fn strict_fifo_stops_at_the_first_misfit_best_effort_goes_on() {
    let build = |strategy| Snapshot {
        queues: vec![queue("q", 4 * CPU, strategy)],
        workloads: vec![
            single("running", 0, 0, 2 * CPU, PodState::Admitted),
            single("big", 0, 1, 3 * CPU, PodState::Gated),
            single("small", 0, 2, CPU, PodState::Gated),
        ],
    };
    let strict = build(QueueingStrategy::StrictFIFO);
    let d = decide(&strict);
    assert!(d.admit.is_empty());
    assert_eq!(
        waiting(&d, 2).as_deref(),
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
    let newcomer = single("new", 0, 5, CPU, PodState::Gated);
    let s = in_best_effort(2, vec![app, newcomer]);
    assert_eq!(admitted_names(&s, &decide(&s)), vec!["new"]);
}

#[test]
fn missing_queue_and_closed_namespace_admit_nothing_and_say_why() {
    let mut closed = single("closed", 0, 0, CPU, PodState::Gated);
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
    let s = in_best_effort(4, vec![workload("gpu", "q", 0, 0, 1, vec![gpu_pod])]);
    assert_eq!(decide(&s).admit.len(), 1);
}

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
                    // Admitted now, or before and not terminating (all terminating: stopped).
                    started |= p.state == PodState::Gated || !p.terminating;
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

/// `s` with in-queue preemption off in every queue: what the reference model decides.
fn without_preemption(s: &Snapshot) -> Snapshot {
    let mut never = s.clone();
    for q in &mut never.queues {
        q.preemption.within_queue = WithinQueue::Never;
    }
    never
}

fn evicted_names(s: &Snapshot, d: &Decisions) -> Vec<String> {
    pod_names(s, d.evict.iter().map(|e| &e.victim))
}

/// `n` admitted workloads of one pod each (`cpu` cores), priority `priority`, queued at `t..`.
fn admitted_singles(
    prefix: &str,
    n: i64,
    cpu: i64,
    priority: i32,
    t: i64,
) -> Vec<WorkloadSnapshot> {
    singles(prefix, n, cpu, priority, t, PodState::Admitted)
}

/// `n` workloads of one pod each (`cpu` cores, in `state`, named `<prefix><i>-p`), priority
/// `priority`, in queue `q`, queued at `t..`.
fn singles(
    prefix: &str,
    n: i64,
    cpu: i64,
    priority: i32,
    t: i64,
    state: PodState,
) -> Vec<WorkloadSnapshot> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}{i}");
            single_pod(
                &name,
                &format!("{name}-p"),
                priority,
                t + i,
                cpu * CPU,
                state,
            )
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

/// `workloads` in the one queue `q` of `cpu` cores, BestEffortFIFO.
fn in_best_effort(cpu: i64, workloads: Vec<WorkloadSnapshot>) -> Snapshot {
    Snapshot {
        queues: vec![best_effort(cpu)],
        workloads,
    }
}

fn waiting(d: &Decisions, w: usize) -> Option<String> {
    d.workloads[w].waiting.as_ref().map(ToString::to_string)
}

fn in_queue(mut workloads: Vec<WorkloadSnapshot>, queue: &str) -> Vec<WorkloadSnapshot> {
    for w in &mut workloads {
        w.queue = queue.into();
    }
    workloads
}
