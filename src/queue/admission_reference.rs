//! The admission pass as it was before the flat-arena rewrite (commit 24a0e80), kept as the
//! reference: a property test checks that `admission::decide` gives exactly the same decisions as
//! this straightforward version on random snapshots, and `cargo bench --bench admission` measures
//! both side by side. Not used by the controller.

use std::collections::BTreeMap;

use crate::api::QueueingStrategy;
use crate::queue::admission::*;
use crate::resources::ResourceList;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ItemKind {
    Fill = 0,
    Ordered = 1,
}

struct Item {
    kind: ItemKind,
    priority: i32,
    interrupted_count: i32,
    queued_at: i64,
    workload: usize,
    /// Tie-breaker inside a workload: the pod's position (elastic) or 0 (gang).
    pod_name_rank: usize,
    pods: Vec<PodRef>,
    /// Added to usage when admitted (the pods' requests).
    usage: Vec<i64>,
    /// Added to reservations when admitted (gang members not created yet).
    reserve: Vec<i64>,
    /// For a single pod of a started workload: its pod set, whose unfilled reservation (if any is
    /// left when the pod is admitted) the pod takes over.
    slot: Option<(usize, usize)>,
}

/// The queue's resources in a fixed order: those the quota names first (checked), then cpu and
/// memory for the status when the quota does not name them.
struct Dimensions {
    names: Vec<String>,
    limits: Vec<Option<i64>>,
}

impl Dimensions {
    fn new(quota: &ResourceList) -> Self {
        let mut names: Vec<String> = quota.0.keys().cloned().collect();
        let mut limits: Vec<Option<i64>> = quota.0.values().map(|v| Some(*v)).collect();
        for extra in ["cpu", "memory", "pods"] {
            if !quota.0.contains_key(extra) {
                names.push(extra.to_string());
                limits.push(None);
            }
        }
        Dimensions { names, limits }
    }

    fn project(&self, list: &ResourceList) -> Vec<i64> {
        self.names.iter().map(|n| list.get(n)).collect()
    }

    fn to_list(&self, values: &[i64]) -> ResourceList {
        ResourceList(
            self.names
                .iter()
                .zip(values)
                .filter(|(_, v)| **v != 0)
                .map(|(n, v)| (n.clone(), *v))
                .collect(),
        )
    }
}

fn add_into(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_add(*v);
    }
}

/// Decides which gated pods to admit. See the module documentation for the rules.
pub fn decide(snapshot: &Snapshot) -> Decisions {
    let mut decisions = Decisions {
        admit: Vec::new(),
        evict: Vec::new(),
        workloads: vec![WorkloadTally::default(); snapshot.workloads.len()],
        queues: BTreeMap::new(),
    };

    // Group workloads by queue; those whose queue is missing or closed to them just wait.
    let queue_index: BTreeMap<&str, usize> = snapshot
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); snapshot.queues.len()];
    for (w, workload) in snapshot.workloads.iter().enumerate() {
        match queue_index.get(workload.queue.as_str()) {
            Some(&q) => members[q].push(w),
            None => {
                let tally = &mut decisions.workloads[w];
                tally_pods_only(workload, tally);
                if tally.pending_pods > 0 {
                    tally.waiting = Some(WaitReason::QueueNotFound {
                        queue: workload.queue.clone(),
                    });
                }
            }
        }
    }

    for (q, queue) in snapshot.queues.iter().enumerate() {
        let tally = decide_queue(snapshot, queue, &members[q], &mut decisions);
        decisions.queues.insert(queue.name.clone(), tally);
    }
    decisions
}

/// Counts pods and usage of a workload that takes no part in any queue's pass.
fn tally_pods_only(workload: &WorkloadSnapshot, tally: &mut WorkloadTally) {
    for set in &workload.pod_sets {
        for pod in &set.pods {
            match pod.state {
                PodState::Gated => tally.pending_pods += 1,
                PodState::Admitted => {
                    tally.admitted_pods += 1;
                    tally.used.add_all(&pod.requests);
                }
                PodState::Ended => {}
            }
        }
    }
}

// Long: the reference model stays as the pass was before its rewrite (one straightforward loop),
// so that it remains a faithful yardstick for the property test and the bench; not run in sluice.
fn decide_queue(
    snapshot: &Snapshot,
    queue: &QueueSnapshot,
    members: &[usize],
    decisions: &mut Decisions,
) -> QueueTally {
    let dims = Dimensions::new(&queue.quota);
    let width = dims.names.len();
    let mut usage = vec![0i64; width];
    let mut reserved = vec![0i64; width];
    // Per member workload: used and reserved, projected.
    let mut workload_used: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    let mut workload_reserved: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    let mut items: Vec<Item> = Vec::new();
    // Reserved gang members not admitted yet, per (workload, pod set): count and size of one.
    let mut unfilled: BTreeMap<(usize, usize), (u32, Vec<i64>)> = BTreeMap::new();

    for &w in members {
        let workload = &snapshot.workloads[w];
        let mut used = vec![0i64; width];
        let mut held = vec![0i64; width];
        let started = workload
            .pod_sets
            .iter()
            .any(|s| s.pods.iter().any(|p| p.state == PodState::Admitted));
        let mut gated_total = 0u32;

        for (s, set) in workload.pod_sets.iter().enumerate() {
            let per_pod = dims.project(&set.per_pod);
            let mut admitted_in_set = 0u32;
            let mut gated: Vec<usize> = Vec::new();
            for (p, pod) in set.pods.iter().enumerate() {
                match pod.state {
                    PodState::Admitted => {
                        admitted_in_set += 1;
                        add_into(&mut used, &dims.project(&pod.requests));
                    }
                    PodState::Gated => gated.push(p),
                    PodState::Ended => {}
                }
            }
            gated_total += gated.len() as u32;
            gated.sort_by(|a, b| {
                let (pa, pb) = (&set.pods[*a], &set.pods[*b]);
                pa.created_at
                    .cmp(&pb.created_at)
                    .then_with(|| pa.name.cmp(&pb.name))
            });
            if !workload.namespace_allowed {
                continue;
            }
            if started {
                let missing = set.min_count.saturating_sub(admitted_in_set);
                // Reservation for every gang member not admitted yet.
                add_scaled(&mut held, &per_pod, i64::from(missing));
                if missing > 0 {
                    unfilled.insert((w, s), (missing, per_pod.clone()));
                }
                for (rank, &p) in gated.iter().enumerate() {
                    let pod = &set.pods[p];
                    // The first pods up to the reservation go first: they are already paid for.
                    let kind = if (rank as u32) < missing {
                        ItemKind::Fill
                    } else {
                        ItemKind::Ordered
                    };
                    items.push(Item {
                        kind,
                        priority: workload.priority,
                        interrupted_count: workload.interrupted_count,
                        queued_at: pod.created_at,
                        workload: w,
                        pod_name_rank: rank,
                        pods: vec![PodRef {
                            workload: w,
                            pod_set: s,
                            pod: p,
                        }],
                        usage: dims.project(&pod.requests),
                        reserve: vec![0i64; width],
                        slot: Some((w, s)),
                    });
                }
            }
        }

        if workload.namespace_allowed && !started && gated_total > 0 {
            items.push(gang_item(workload, w, &dims));
        }

        add_into(&mut usage, &used);
        add_into(&mut reserved, &held);
        workload_used.insert(w, used);
        workload_reserved.insert(w, held);
    }

    items.sort_by(|a, b| {
        a.kind
            .cmp(&b.kind)
            .then_with(|| b.priority.cmp(&a.priority))
            .then_with(|| b.interrupted_count.cmp(&a.interrupted_count))
            .then_with(|| a.queued_at.cmp(&b.queued_at))
            .then_with(|| {
                snapshot.workloads[a.workload]
                    .key
                    .cmp(&snapshot.workloads[b.workload].key)
            })
            .then_with(|| a.pod_name_rank.cmp(&b.pod_name_rank))
    });

    let mut waiting: BTreeMap<usize, WaitReason> = BTreeMap::new();
    let mut blocker: Option<usize> = None;
    for item in &items {
        if let Some(first) = blocker {
            waiting
                .entry(item.workload)
                .or_insert_with(|| WaitReason::BehindInStrictFifo {
                    queue: queue.name.clone(),
                    blocker: snapshot.workloads[first].key.clone(),
                });
            continue;
        }
        // A pod that takes an unfilled gang member's place releases that reservation.
        let credit = item
            .slot
            .and_then(|slot| unfilled.get(&slot))
            .filter(|(left, _)| *left > 0)
            .map(|(_, per_pod)| per_pod.iter().map(|v| -v).collect::<Vec<i64>>());
        let mut reserve = item.reserve.clone();
        if let Some(credit) = &credit {
            add_into(&mut reserve, credit);
        }
        match first_misfit(&queue.name, &dims, &usage, &reserved, &item.usage, &reserve) {
            None => {
                if credit.is_some()
                    && let Some(slot) = item.slot
                    && let Some((left, _)) = unfilled.get_mut(&slot)
                {
                    *left -= 1;
                }
                add_into(&mut usage, &item.usage);
                add_into(&mut reserved, &reserve);
                if let Some(u) = workload_used.get_mut(&item.workload) {
                    add_into(u, &item.usage);
                }
                if let Some(r) = workload_reserved.get_mut(&item.workload) {
                    add_into(r, &reserve);
                }
                decisions.admit.extend(item.pods.iter().copied());
            }
            Some(reason) => {
                waiting.entry(item.workload).or_insert(reason);
                if queue.strategy == QueueingStrategy::StrictFIFO {
                    blocker = Some(item.workload);
                }
            }
        }
    }

    // Tallies after the decisions.
    let admitted: std::collections::HashSet<PodRef> = decisions.admit.iter().copied().collect();
    // Positions: the order of each workload's first item, among those with pods still waiting.
    let mut first_item: Vec<usize> = Vec::new();
    for item in &items {
        if !first_item.contains(&item.workload) {
            first_item.push(item.workload);
        }
    }
    let mut tally = QueueTally {
        usage: dims.to_list(&usage),
        reserved: dims.to_list(&reserved),
        ..QueueTally::default()
    };
    for &w in members {
        let workload = &snapshot.workloads[w];
        let wt = &mut decisions.workloads[w];
        for (s, set) in workload.pod_sets.iter().enumerate() {
            for (p, pod) in set.pods.iter().enumerate() {
                let now_admitted = pod.state == PodState::Admitted
                    || (pod.state == PodState::Gated
                        && admitted.contains(&PodRef {
                            workload: w,
                            pod_set: s,
                            pod: p,
                        }));
                if now_admitted {
                    wt.admitted_pods += 1;
                } else if pod.state == PodState::Gated {
                    wt.pending_pods += 1;
                }
            }
        }
        wt.used = dims.to_list(workload_used.get(&w).map(Vec::as_slice).unwrap_or(&[]));
        wt.reserved = dims.to_list(workload_reserved.get(&w).map(Vec::as_slice).unwrap_or(&[]));
        if wt.pending_pods > 0 {
            wt.position = first_item.iter().position(|f| *f == w).map(|at| {
                let before = &first_item[..at];
                1 + before
                    .iter()
                    .filter(|b| still_waits(snapshot, **b, &admitted))
                    .count() as u32
            });
            wt.waiting = waiting.remove(&w).or_else(|| {
                (!workload.namespace_allowed).then(|| WaitReason::NamespaceNotAllowed {
                    queue: queue.name.clone(),
                })
            });
            tally.pending_workloads += 1;
        }
        if wt.admitted_pods > 0 || !wt.reserved.is_empty() {
            tally.admitted_workloads += 1;
        }
        tally.pending_pods += wt.pending_pods;
        tally.admitted_pods += wt.admitted_pods;
    }
    tally
}

/// Whether a workload still has a gated pod the pass does not admit.
fn still_waits(
    snapshot: &Snapshot,
    w: usize,
    admitted: &std::collections::HashSet<PodRef>,
) -> bool {
    (snapshot.workloads[w].pod_sets.iter().enumerate()).any(|(s, set)| {
        (set.pods.iter().enumerate()).any(|(p, pod)| {
            pod.state == PodState::Gated
                && !admitted.contains(&PodRef {
                    workload: w,
                    pod_set: s,
                    pod: p,
                })
        })
    })
}

fn add_scaled(target: &mut [i64], per_pod: &[i64], times: i64) {
    for (t, v) in target.iter_mut().zip(per_pod) {
        *t = t.saturating_add(v.saturating_mul(times));
    }
}

/// The minimum gang of a workload that has not started: each set's first gated pods up to its
/// minimum, plus reservations for the members not created yet. A workload whose sets all have a
/// minimum of zero starts with its first gated pod.
fn gang_item(workload: &WorkloadSnapshot, w: usize, dims: &Dimensions) -> Item {
    let width = dims.names.len();
    let mut pods = Vec::new();
    let mut usage = vec![0i64; width];
    let mut reserve = vec![0i64; width];
    let mut earliest: Option<(i64, PodRef)> = None;
    for (s, set) in workload.pod_sets.iter().enumerate() {
        let mut gated: Vec<usize> = set
            .pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.state == PodState::Gated)
            .map(|(i, _)| i)
            .collect();
        gated.sort_by(|a, b| {
            let (pa, pb) = (&set.pods[*a], &set.pods[*b]);
            pa.created_at
                .cmp(&pb.created_at)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        if let Some(&first) = gated.first() {
            let candidate = (
                set.pods[first].created_at,
                PodRef {
                    workload: w,
                    pod_set: s,
                    pod: first,
                },
            );
            if earliest.as_ref().is_none_or(|e| candidate.0 < e.0) {
                earliest = Some(candidate);
            }
        }
        let take = (set.min_count as usize).min(gated.len());
        for &p in &gated[..take] {
            pods.push(PodRef {
                workload: w,
                pod_set: s,
                pod: p,
            });
            add_into(&mut usage, &dims.project(&set.pods[p].requests));
        }
        let missing = set.min_count.saturating_sub(take as u32);
        add_scaled(
            &mut reserve,
            &dims.project(&set.per_pod),
            i64::from(missing),
        );
    }
    if pods.is_empty()
        && let Some((_, pod)) = earliest
    {
        {
            let set = &workload.pod_sets[pod.pod_set];
            add_into(&mut usage, &dims.project(&set.pods[pod.pod].requests));
            pods.push(pod);
        }
    }
    Item {
        kind: ItemKind::Ordered,
        priority: workload.priority,
        interrupted_count: workload.interrupted_count,
        queued_at: workload.queued_at,
        workload: w,
        pod_name_rank: 0,
        pods,
        usage,
        reserve,
        slot: None,
    }
}

/// The first quota resource the item would overflow, as a reason to wait; None when it fits.
fn first_misfit(
    queue_name: &str,
    dims: &Dimensions,
    usage: &[i64],
    reserved: &[i64],
    item_usage: &[i64],
    item_reserve: &[i64],
) -> Option<WaitReason> {
    for (d, limit) in dims.limits.iter().enumerate() {
        let Some(limit) = *limit else { continue };
        let needed = item_usage[d].saturating_add(item_reserve[d]);
        let after = usage[d].saturating_add(reserved[d]).saturating_add(needed);
        if after > limit {
            let queue = queue_name.to_string();
            let resource = dims.names[d].clone();
            if needed > limit {
                return Some(WaitReason::NeverFits {
                    queue,
                    resource,
                    needed,
                    quota: limit,
                });
            }
            return Some(WaitReason::Quota {
                queue,
                resource,
                missing: after - limit,
                used: usage[d],
                reserved: reserved[d],
                quota: limit,
            });
        }
    }
    None
}

// ---- preemption ------------------------------------------------------------------------------
// A yardstick for the preemption decision's property tests: the quota a queue holds, counted
// straight from pod states (no arenas, no increments), and the gang a waiting workload would be
// admitted with.

/// What a queue holds of `resource` (usage + reservations) when the pods in `admitted` are
/// admitted besides those already Admitted, and the pods in `gone` are gone: every admitted pod's
/// requests, plus, for each workload that holds at least one pod, its missing gang members.
pub fn held(
    snapshot: &Snapshot,
    queue: &str,
    resource: &str,
    admitted: &std::collections::HashSet<PodRef>,
    gone: &std::collections::HashSet<PodRef>,
) -> i64 {
    let mut total = 0i64;
    for (w, workload) in snapshot.workloads.iter().enumerate() {
        if workload.queue != queue {
            continue;
        }
        let (mut used, mut missing, mut started) = (0i64, 0i64, false);
        for (s, set) in workload.pod_sets.iter().enumerate() {
            let mut count = 0u32;
            for (p, pod) in set.pods.iter().enumerate() {
                let at = PodRef {
                    workload: w,
                    pod_set: s,
                    pod: p,
                };
                let holds = (pod.state == PodState::Admitted || admitted.contains(&at))
                    && !gone.contains(&at);
                if holds {
                    count += 1;
                    used += pod.requests.get(resource);
                }
            }
            started |= count > 0;
            missing += i64::from(set.min_count.saturating_sub(count)) * set.per_pod.get(resource);
        }
        if started {
            total += used + missing;
        }
    }
    total
}

/// The pods a workload that has not started is admitted with: its gang (each set's oldest gated
/// pods up to the minimum, or its oldest gated pod when every minimum is zero).
pub fn gang_pods(snapshot: &Snapshot, w: usize) -> Vec<PodRef> {
    let dims = Dimensions::new(&ResourceList::new());
    gang_item(&snapshot.workloads[w], w, &dims).pods
}
