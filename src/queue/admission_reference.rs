//! Long: the reference model is one straightforward pass read top to bottom, kept whole and
//! independent of the optimised pass it checks (it is the oracle: sharing code would blind it).
//!
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
        flavors: Default::default(),
        domains: Default::default(),
        data_nodes: Default::default(),
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

    let mut cohorts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (q, queue) in snapshot.queues.iter().enumerate() {
        if let Some(cohort) = &queue.cohort {
            cohorts.entry(cohort.name.as_str()).or_default().push(q);
            continue;
        }
        let tally = decide_queue(snapshot, queue, &members[q], &mut decisions);
        decisions.queues.insert(queue.name.clone(), tally);
    }
    for queues in cohorts.values() {
        decide_cohort(snapshot, queues, &members, &mut decisions);
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

/// One queue's pass in the reference: its demand gathered and ordered, its accounts, and where
/// its admission in order stands.
struct RefQueue<'a> {
    queue: &'a QueueSnapshot,
    members: &'a [usize],
    dims: Dimensions,
    usage: Vec<i64>,
    reserved: Vec<i64>,
    workload_used: BTreeMap<usize, Vec<i64>>,
    workload_reserved: BTreeMap<usize, Vec<i64>>,
    items: Vec<Item>,
    unfilled: BTreeMap<(usize, usize), (u32, Vec<i64>)>,
    waiting: BTreeMap<usize, WaitReason>,
    blocker: Option<usize>,
}

fn decide_queue(
    snapshot: &Snapshot,
    queue: &QueueSnapshot,
    members: &[usize],
    decisions: &mut Decisions,
) -> QueueTally {
    let mut q = prepare(snapshot, queue, members);
    for i in 0..q.items.len() {
        if q.behind_blocker(snapshot, i) {
            continue;
        }
        let (credit, reserve) = q.reserve_of(i);
        let item = &q.items[i];
        match first_misfit(
            &queue.name,
            &q.dims,
            &q.usage,
            &q.reserved,
            &item.usage,
            &reserve,
        ) {
            None => q.take(i, credit.is_some(), &reserve, decisions),
            Some(reason) => q.wait(i, reason),
        }
    }
    q.tally(snapshot, decisions)
}

// Long: the reference model stays as the pass was before its rewrite (one straightforward loop),
// so that it remains a faithful yardstick for the property test and the bench; not run in sluice.
fn prepare<'a>(
    snapshot: &Snapshot,
    queue: &'a QueueSnapshot,
    members: &'a [usize],
) -> RefQueue<'a> {
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
        // A workload whose admitted pods are all terminating has stopped: it reserves nothing.
        let started = workload.pod_sets.iter().any(|s| {
            s.pods
                .iter()
                .any(|p| p.state == PodState::Admitted && !p.terminating)
        });
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

    RefQueue {
        queue,
        members,
        dims,
        usage,
        reserved,
        workload_used,
        workload_reserved,
        items,
        unfilled,
        waiting: BTreeMap::new(),
        blocker: None,
    }
}

impl RefQueue<'_> {
    /// StrictFIFO: item `i` waits behind the first item that did not fit.
    fn behind_blocker(&mut self, snapshot: &Snapshot, i: usize) -> bool {
        let Some(first) = self.blocker else {
            return false;
        };
        let queue = self.queue.name.clone();
        self.waiting
            .entry(self.items[i].workload)
            .or_insert_with(|| WaitReason::BehindInStrictFifo {
                queue,
                blocker: snapshot.workloads[first].key.clone(),
            });
        true
    }

    /// Item `i`'s reservation: a pod that takes an unfilled gang member's place releases that
    /// reservation (the credit).
    fn reserve_of(&self, i: usize) -> (Option<Vec<i64>>, Vec<i64>) {
        let item = &self.items[i];
        let credit = item
            .slot
            .and_then(|slot| self.unfilled.get(&slot))
            .filter(|(left, _)| *left > 0)
            .map(|(_, per_pod)| per_pod.iter().map(|v| -v).collect::<Vec<i64>>());
        let mut reserve = item.reserve.clone();
        if let Some(credit) = &credit {
            add_into(&mut reserve, credit);
        }
        (credit, reserve)
    }

    fn take(&mut self, i: usize, credit: bool, reserve: &[i64], decisions: &mut Decisions) {
        let item = &self.items[i];
        if credit
            && let Some(slot) = item.slot
            && let Some((left, _)) = self.unfilled.get_mut(&slot)
        {
            *left -= 1;
        }
        add_into(&mut self.usage, &item.usage);
        add_into(&mut self.reserved, reserve);
        if let Some(u) = self.workload_used.get_mut(&item.workload) {
            add_into(u, &item.usage);
        }
        if let Some(r) = self.workload_reserved.get_mut(&item.workload) {
            add_into(r, reserve);
        }
        decisions.admit.extend(item.pods.iter().copied());
    }

    fn wait(&mut self, i: usize, reason: WaitReason) {
        let workload = self.items[i].workload;
        self.waiting.entry(workload).or_insert(reason);
        if self.queue.strategy == QueueingStrategy::StrictFIFO {
            self.blocker = Some(workload);
        }
    }

    fn tally(&mut self, snapshot: &Snapshot, decisions: &mut Decisions) -> QueueTally {
        // Tallies after the decisions.
        let admitted: std::collections::HashSet<PodRef> = decisions.admit.iter().copied().collect();
        // Positions: the order of each workload's first item, among those with pods still waiting.
        let mut seen = std::collections::BTreeSet::new();
        let mut positions: BTreeMap<usize, u32> = BTreeMap::new();
        for item in &self.items {
            if seen.insert(item.workload) && still_waits(snapshot, item.workload, &admitted) {
                let next = positions.len() as u32 + 1;
                positions.insert(item.workload, next);
            }
        }
        let mut tally = QueueTally {
            usage: self.dims.to_list(&self.usage),
            reserved: self.dims.to_list(&self.reserved),
            ..QueueTally::default()
        };
        for &w in self.members {
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
            wt.used = self
                .dims
                .to_list(self.workload_used.get(&w).map(Vec::as_slice).unwrap_or(&[]));
            wt.reserved = self.dims.to_list(
                self.workload_reserved
                    .get(&w)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]),
            );
            if wt.pending_pods > 0 {
                wt.position = positions.get(&w).copied();
                wt.waiting = self.waiting.remove(&w).or_else(|| {
                    (!workload.namespace_allowed).then(|| WaitReason::NamespaceNotAllowed {
                        queue: self.queue.name.clone(),
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

// ---- cohorts ---------------------------------------------------------------------------------
// The cohort rules stated directly (no pool kept up to date, no limits precomputed): per resource
// a queue's quota names, a queue keeps `quota − lend` (lend: its lendingLimit, at most its quota;
// absent: all of it) and may hold up to quota + borrowingLimit; the pool is what the queues lend,
// and a queue holding `load` takes max(0, load − kept) of it. An item fits the cohort when, per
// resource, the queue holds at most its cap after it, and either at most what it keeps, or the pool
// is not overdrawn and has room for what the item adds to the queue's take. Items that fit their
// own quota go first, queue by queue; then the waiting borrower of least share (share: the largest
// of (held above quota) × 10⁶ ÷ pool, × 1000 ÷ weight in thousandths; weight 0: last), higher
// priority, older, earlier queue. Without preemption or reclaim (compared with those off).

/// (quota, kept, cap) of `resource` in a queue of a cohort.
fn cohort_limits(queue: &QueueSnapshot, resource: &str, quota: i64) -> (i64, i64, i64) {
    let Some(c) = &queue.cohort else {
        return (quota, quota, quota);
    };
    let quota = quota.max(0);
    let lend = c
        .lending_limit
        .0
        .get(resource)
        .map_or(quota, |l| (*l).clamp(0, quota));
    let cap = c
        .borrowing_limit
        .0
        .get(resource)
        .map_or(i64::MAX, |b| quota.saturating_add((*b).max(0)));
    (quota, quota - lend, cap)
}

/// What queue `q` holds of `resource` now (usage + reservations), if its quota names it.
fn held_of(q: &RefQueue, resource: &str) -> Option<(i64, i64, i64, i64)> {
    let d = q.dims.names.iter().position(|n| n == resource)?;
    let quota = q.dims.limits[d]?;
    let (quota, kept, cap) = cohort_limits(q.queue, resource, quota);
    Some((q.usage[d].saturating_add(q.reserved[d]), quota, kept, cap))
}

/// The pool of `resource`: what the queues lend, and what they take of it now.
fn pool_of(qs: &[RefQueue], resource: &str) -> (i64, i64) {
    let (mut lendable, mut taken) = (0i64, 0i64);
    for q in qs {
        if let Some((load, quota, kept, _)) = held_of(q, resource) {
            lendable = lendable.saturating_add(quota - kept);
            taken = taken.saturating_add(load.saturating_sub(kept).max(0));
        }
    }
    (lendable, taken)
}

/// Whether queue `k` may hold `after` (per its dimensions) in its cohort.
fn fits_cohort(qs: &[RefQueue], k: usize, after: &[i64]) -> bool {
    let q = &qs[k];
    q.dims.names.iter().enumerate().all(|(d, resource)| {
        let Some((load, _, kept, cap)) = held_of(q, resource) else {
            return true;
        };
        if after[d] > cap {
            return false;
        }
        if after[d] <= kept {
            return true;
        }
        let (lendable, taken) = pool_of(qs, resource);
        let adds = after[d].saturating_sub(kept).max(0) - load.saturating_sub(kept).max(0);
        taken <= lendable && taken.saturating_add(adds) <= lendable
    })
}

/// Queue `k`'s share if it held `after`.
fn share(qs: &[RefQueue], k: usize, after: &[i64]) -> u128 {
    let q = &qs[k];
    let mut share = 0u128;
    for (d, resource) in q.dims.names.iter().enumerate() {
        let Some((_, quota, _, _)) = held_of(q, resource) else {
            continue;
        };
        let (lendable, _) = pool_of(qs, resource);
        let above = after[d].saturating_sub(quota);
        if lendable > 0 && above > 0 {
            share = share.max(above as u128 * 1_000_000 / lendable as u128);
        }
    }
    let weight = q
        .queue
        .cohort
        .as_ref()
        .map_or(1000, |c| c.weight_milli.max(0));
    if weight == 0 {
        return u128::MAX;
    }
    share * 1000 / weight as u128
}

// Long: the cohort's rules in one straightforward loop, as the reference keeps them.
fn decide_cohort(
    snapshot: &Snapshot,
    queues: &[usize],
    members: &[Vec<usize>],
    decisions: &mut Decisions,
) {
    let mut qs: Vec<RefQueue> = queues
        .iter()
        .map(|&q| prepare(snapshot, &snapshot.queues[q], &members[q]))
        .collect();
    let mut next = vec![0usize; qs.len()];
    loop {
        let mut best: Option<((u128, i32, i64, usize), usize)> = None;
        for k in 0..qs.len() {
            while next[k] < qs[k].items.len() {
                let i = next[k];
                if qs[k].behind_blocker(snapshot, i) {
                    next[k] += 1;
                    continue;
                }
                let (credit, reserve) = qs[k].reserve_of(i);
                let q = &qs[k];
                let item = &q.items[i];
                let mut after = q.usage.clone();
                add_into(&mut after, &q.reserved);
                add_into(&mut after, &item.usage);
                add_into(&mut after, &reserve);
                let nominal = first_misfit(
                    &q.queue.name,
                    &q.dims,
                    &q.usage,
                    &q.reserved,
                    &item.usage,
                    &reserve,
                );
                let in_cohort = fits_cohort(&qs, k, &after);
                match (nominal, in_cohort) {
                    (None, true) => qs[k].take(i, credit.is_some(), &reserve, decisions),
                    (Some(_), true) => {
                        let key = (share(&qs, k, &after), -item.priority, item.queued_at, k);
                        if best.as_ref().is_none_or(|(b, _)| key < *b) {
                            best = Some((key, k));
                        }
                        break;
                    }
                    (Some(reason), false) => qs[k].wait(i, reason),
                    (None, false) => {
                        let reason = WaitReason::QueueNotFound {
                            queue: "the cohort lent its quota".into(),
                        };
                        qs[k].wait(i, reason);
                    }
                }
                next[k] += 1;
            }
        }
        let Some((_, k)) = best else { break };
        // Others took room since it was found: it borrows if it still fits, else it waits.
        let i = next[k];
        let (credit, reserve) = qs[k].reserve_of(i);
        let q = &qs[k];
        let mut after = q.usage.clone();
        add_into(&mut after, &q.reserved);
        add_into(&mut after, &q.items[i].usage);
        add_into(&mut after, &reserve);
        if fits_cohort(&qs, k, &after) {
            qs[k].take(i, credit.is_some(), &reserve, decisions);
        } else {
            let reason = WaitReason::QueueNotFound {
                queue: "the cohort lent its quota".into(),
            };
            qs[k].wait(i, reason);
        }
        next[k] += 1;
    }
    // Borrowed and lent per queue; the borrowing charged to the members reclaim would take first.
    let mut borrowed_total: BTreeMap<String, i128> = BTreeMap::new();
    let mut unused: Vec<BTreeMap<String, i64>> = Vec::new();
    for q in &qs {
        let mut own = BTreeMap::new();
        for resource in &q.dims.names {
            if let Some((load, quota, kept, _)) = held_of(q, resource) {
                *borrowed_total.entry(resource.clone()).or_default() +=
                    i128::from(load.saturating_sub(quota).max(0));
                let within = load.clamp(0, quota);
                own.insert(
                    resource.clone(),
                    ((quota - kept) - within.saturating_sub(kept).max(0)).max(0),
                );
            }
        }
        unused.push(own);
    }
    for (k, q) in qs.iter_mut().enumerate() {
        let mut tally = q.tally(snapshot, decisions);
        let (mut borrowed, mut lent, mut ceiling) = (
            ResourceList::new(),
            ResourceList::new(),
            ResourceList::new(),
        );
        let mut charge_left = vec![0i64; q.dims.names.len()];
        for (d, resource) in q.dims.names.iter().enumerate() {
            let Some((load, quota, kept, _)) = held_of(q, resource) else {
                continue;
            };
            let b = load.saturating_sub(quota).max(0);
            charge_left[d] = b;
            if b != 0 {
                borrowed.add(resource, b);
            }
            ceiling.add(resource, kept);
            let all_unused: i128 = unused
                .iter()
                .filter_map(|u| u.get(resource))
                .map(|v| i128::from(*v))
                .sum();
            let mine = i128::from(unused[k].get(resource).copied().unwrap_or(0));
            if all_unused > 0 {
                let total = borrowed_total
                    .get(resource)
                    .copied()
                    .unwrap_or(0)
                    .min(all_unused);
                let share = i64::try_from(total * mine / all_unused).unwrap_or(i64::MAX);
                if share != 0 {
                    lent.add(resource, share);
                }
            }
        }
        let mut order: Vec<usize> = (0..q.members.len()).collect();
        order.sort_by_key(|&m| {
            let w = &snapshot.workloads[q.members[m]];
            (w.priority, std::cmp::Reverse((w.queued_at, m)))
        });
        if charge_left.iter().any(|b| *b > 0) {
            for m in order {
                let w = q.members[m];
                let empty = Vec::new();
                let used = q.workload_used.get(&w).unwrap_or(&empty);
                let held = q.workload_reserved.get(&w).unwrap_or(&empty);
                let mut charge = vec![0i64; q.dims.names.len()];
                for d in 0..charge.len() {
                    let h = used
                        .get(d)
                        .copied()
                        .unwrap_or(0)
                        .saturating_add(held.get(d).copied().unwrap_or(0));
                    charge[d] = h.clamp(0, charge_left[d].max(0));
                    charge_left[d] -= charge[d];
                }
                decisions.workloads[w].borrowed = q.dims.to_list(&charge);
                if charge_left.iter().all(|l| *l <= 0) {
                    break;
                }
            }
        }
        tally.borrowed = borrowed;
        tally.lent = lent;
        tally.ceiling = Some(ceiling);
        decisions.queues.insert(q.queue.name.clone(), tally);
    }
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
                    started |= !pod.terminating || admitted.contains(&at);
                }
            }
            missing += i64::from(set.min_count.saturating_sub(count)) * set.per_pod.get(resource);
        }
        total += used;
        if started {
            total += missing;
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
