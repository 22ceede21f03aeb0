//! Cohorts: queues naming the same `spec.cohort` lend each other their unused quota. Still pure:
//! the queues of a cohort are decided together, item by item, over one shared pool.
//!
//! Accounting, per resource a queue's quota names (the cohort's resources are the union):
//! - a queue lends `lend = min(lendingLimit, quota)` (absent: its whole quota); it keeps
//!   `guaranteed = quota − lend` for itself whatever the others do;
//! - the pool is the sum of what the queues lend; a queue with load L (usage + reservations) takes
//!   `max(0, L − guaranteed)` of it. The pool is never overdrawn, so the cohort never holds more
//!   than the sum of its quotas;
//! - an item of a queue fits when, per resource, L + item ≤ min(quota + borrowingLimit,
//!   max(L, guaranteed) + what the pool has free). Above the quota it borrows.
//!
//! Order: each queue goes through its items in its own order (as a queue alone does) until it
//! meets an item that needs borrowing; items that fit the queues' own quotas go first. Among the
//! queues stopped at a borrowing item, the one with the least share once its item is admitted
//! goes first (fair sharing: share = the largest, over resources, of what it uses above its quota
//! divided by what the cohort lends, divided by its weight), then higher priority, then the older
//! item. Then every queue goes on again, until no queue has an item it can borrow for.
//!
//! Reclaim: an item that fits its queue's quota but not the pool (other queues borrowed what this
//! queue lends) may evict pods of workloads of other queues that run on borrowed quota
//! (`spec.preemption.reclaimWithinCohort`: Any, LowerPriority, Never): elastic pods above their
//! workload's minimum first, then whole workloads, lowest priority then newest first; a
//! candidate is taken only while its queue still uses more than its quota in a resource the pool
//! lacks; the set is then made minimal. Pods already terminating count as gone. Once a reclaim is
//! under way the cohort borrows and reclaims nothing more in the pass. At most
//! [`MAX_RECLAIM_ATTEMPTS`] items look for victims per pass.

use super::arena::{Item, ItemKind, add_into, flavor_index, sub_from};
use super::fit::Misfit;
use super::*;

/// At most this many items of a cohort look for victims to reclaim from in one pass.
const MAX_RECLAIM_ATTEMPTS: u32 = 8;

/// A resource of one queue's dimensions in its cohort.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// The cohort resource.
    c: usize,
    quota: i64,
    guaranteed: i64,
    /// The most the queue may hold: quota + borrowing limit (i64::MAX: no limit).
    cap: i64,
}

impl Limits {
    /// What a load takes of the pool.
    fn taken(&self, load: i64) -> i64 {
        load.saturating_sub(self.guaranteed).max(0)
    }

    /// The most the queue may hold now, holding `load` with `free` left in the pool: what it
    /// keeps for itself, or (when the pool is not overdrawn) what it takes of the pool plus what
    /// is free there; within its borrowing limit.
    fn limit(&self, load: i64, free: i64) -> i64 {
        let limit = if free >= 0 {
            load.max(self.guaranteed).saturating_add(free)
        } else {
            // Overdrawn (the pool shrank under what is held): only what the queue keeps.
            self.guaranteed
        };
        self.cap.min(limit)
    }
}

/// One queue of the cohort, as the pool sees it.
struct Member {
    /// Per dimension of the queue's pass; None for those its quota does not name.
    dims: Vec<Option<Limits>>,
    /// Per dimension, what the queue takes of the pool now.
    taken: Vec<i64>,
    weight_milli: i64,
    reclaim: ReclaimPolicy,
}

/// The quota a cohort's queues lend, during a pass.
pub(super) struct Pool {
    name: String,
    /// Per cohort resource: what the queues lend together, and what of it they take.
    lendable: Vec<i64>,
    used: Vec<i64>,
    members: Vec<Member>,
    /// A reclaim is under way: nothing more is borrowed or reclaimed in this pass.
    closed: bool,
    reclaim_attempts: u32,
}

impl Pool {
    fn new(passes: &[QueuePass]) -> Pool {
        let mut names: Vec<String> = Vec::new();
        let mut members = Vec::with_capacity(passes.len());
        let mut name = String::new();
        for pass in passes {
            let Some(cohort) = &pass.queue.cohort else {
                continue;
            };
            name.clone_from(&cohort.name);
            let mut dims = Vec::with_capacity(pass.width);
            for (d, limit) in pass.dims.limits.iter().enumerate() {
                let Some(quota) = *limit else {
                    dims.push(None);
                    continue;
                };
                let resource = &pass.dims.names[d];
                let c = match names.iter().position(|n| n == resource) {
                    Some(c) => c,
                    None => {
                        names.push(resource.clone());
                        names.len() - 1
                    }
                };
                let quota = quota.max(0);
                let lend = cohort
                    .lending_limit
                    .0
                    .get(resource)
                    .map_or(quota, |l| (*l).clamp(0, quota));
                let cap = cohort
                    .borrowing_limit
                    .0
                    .get(resource)
                    .map_or(i64::MAX, |b| quota.saturating_add((*b).max(0)));
                dims.push(Some(Limits {
                    c,
                    quota,
                    guaranteed: quota - lend,
                    cap,
                }));
            }
            members.push(Member {
                taken: vec![0; dims.len()],
                dims,
                weight_milli: cohort.weight_milli.max(0),
                reclaim: cohort.reclaim,
            });
        }
        let mut pool = Pool {
            name,
            lendable: vec![0; names.len()],
            used: vec![0; names.len()],
            members,
            closed: false,
            reclaim_attempts: 0,
        };
        for member in &pool.members {
            for l in member.dims.iter().flatten() {
                pool.lendable[l.c] = pool.lendable[l.c].saturating_add(l.quota - l.guaranteed);
            }
        }
        for (k, pass) in passes.iter().enumerate() {
            pool.update(k, &pass.load());
        }
        pool
    }

    /// Queue `k` holds `load` now.
    fn update(&mut self, k: usize, load: &[i64]) {
        let member = &mut self.members[k];
        for (d, limits) in member.dims.iter().enumerate() {
            let Some(l) = limits else { continue };
            let taken = l.taken(load[d]);
            self.used[l.c] = self.used[l.c].saturating_add(taken - member.taken[d]);
            member.taken[d] = taken;
        }
    }

    /// What the pool takes from the queues with `loads` (per member, per dimension).
    fn used_with(&self, loads: &[Vec<i64>]) -> Vec<i64> {
        let mut used = vec![0i64; self.lendable.len()];
        for (member, load) in self.members.iter().zip(loads) {
            for (d, limits) in member.dims.iter().enumerate() {
                if let Some(l) = limits {
                    used[l.c] = used[l.c].saturating_add(l.taken(load[d]));
                }
            }
        }
        used
    }

    fn fits(&self, used: &[i64]) -> bool {
        used.iter().zip(&self.lendable).all(|(u, l)| u <= l)
    }
}

/// A queue's turn in its cohort: the pool and the queue's place in it.
pub(super) struct Turn<'p> {
    pool: &'p mut Pool,
    k: usize,
    /// The cohort chose this queue's item to borrow.
    pub may_borrow: bool,
    /// Scratch: the limits the cohort gives the queue now, per dimension.
    limits: Vec<Option<i64>>,
}

impl Turn<'_> {
    pub fn closed(&self) -> bool {
        self.pool.closed
    }

    /// Whether an item that fits its quota but not the pool may look for victims.
    pub fn may_reclaim(&self, item: &Item) -> bool {
        !self.pool.closed
            && item.kind == ItemKind::Ordered
            && self.pool.reclaim_attempts < MAX_RECLAIM_ATTEMPTS
            && self.pool.members[self.k].reclaim != ReclaimPolicy::Never
    }

    /// Why an item that does not fit what the cohort gives its queue waits.
    pub fn reason(&self, pass: &QueuePass, misfit: &Misfit) -> WaitReason {
        let member = &self.pool.members[self.k];
        let d = misfit.dimension;
        let queue = pass.queue.name.clone();
        let resource = pass.dims.base_name(d).to_string();
        let Some(l) = member.dims[d] else {
            return misfit.reason(&pass.queue.name, &pass.dims);
        };
        let ceiling = l
            .cap
            .min(l.guaranteed.saturating_add(self.pool.lendable[l.c]));
        if misfit.needed > ceiling {
            return WaitReason::NeverFits {
                queue,
                resource,
                needed: misfit.needed,
                quota: ceiling,
            };
        }
        let load = misfit.used.saturating_add(misfit.reserved);
        let free = if self.pool.closed {
            0
        } else {
            self.pool.lendable[l.c] - self.pool.used[l.c]
        };
        let limit = l.limit(load, free);
        WaitReason::Cohort {
            queue,
            cohort: self.pool.name.clone(),
            resource,
            missing: misfit.after.saturating_sub(limit).max(0),
            lendable: limit.saturating_sub(load).max(0),
            used: load,
            quota: l.quota,
        }
    }
}

impl QueuePass<'_> {
    /// The queue's load now: usage + reservations.
    fn load(&self) -> Vec<i64> {
        let mut load = self.arena.slice(self.usage_at, self.width).to_vec();
        add_into(&mut load, self.arena.slice(self.reserved_at, self.width));
        load
    }

    /// What the item (its reservation loaded) asks: usage + reservation.
    fn need(&self, item: &Item) -> Vec<i64> {
        let mut need = self.arena.slice(item.usage, self.width).to_vec();
        add_into(&mut need, self.arena.slice(self.reserve_at, self.width));
        need
    }

    /// Where the item overflows what the cohort gives the queue now; None when it fits.
    pub(super) fn cohort_check(&self, item: &Item, turn: &mut Turn) -> Option<Misfit> {
        let load = self.load();
        let pool = &*turn.pool;
        let member = &pool.members[turn.k];
        turn.limits.clear();
        turn.limits.extend(
            member
                .dims
                .iter()
                .enumerate()
                .map(|(d, l)| l.map(|l| l.limit(load[d], pool.lendable[l.c] - pool.used[l.c]))),
        );
        self.misfit(item, &turn.limits)
    }

    pub(super) fn take_in_cohort(
        &mut self,
        item: &Item,
        credit: bool,
        admit: &mut Vec<PodRef>,
        turn: &mut Turn,
    ) {
        self.take(item, credit, admit);
        turn.pool.update(turn.k, &self.load());
    }

    /// The pool learns what the queue holds now (after room was held for a preemptor).
    pub(super) fn held_in_cohort(&self, turn: &mut Turn) {
        turn.pool.update(turn.k, &self.load());
    }

    /// The queue's share once the item is admitted: the largest, over resources, of what it
    /// would use above its quota per million of what the cohort lends, per unit of weight.
    pub(super) fn borrow_share(&self, item: &Item, turn: &Turn) -> u128 {
        let mut after = self.load();
        add_into(&mut after, &self.need(item));
        let member = &turn.pool.members[turn.k];
        let mut share = 0u128;
        for (d, limits) in member.dims.iter().enumerate() {
            let Some(l) = limits else { continue };
            let lendable = turn.pool.lendable[l.c];
            let above = after[d].saturating_sub(l.quota);
            if lendable > 0 && above > 0 {
                share = share.max(above as u128 * 1_000_000 / lendable as u128);
            }
        }
        if member.weight_milli == 0 {
            return u128::MAX;
        }
        share * 1000 / member.weight_milli as u128
    }

    /// The queue's load with its terminating pods gone.
    fn load_without_terminating(&self) -> Vec<i64> {
        let mut load = self.load();
        for (m, &w) in self.members.iter().enumerate() {
            if self.states[m].terminating == 0 {
                continue;
            }
            for set in &self.snapshot.workloads[w].pod_sets {
                for pod in &set.pods {
                    if pod.state == PodState::Admitted && pod.terminating {
                        let flavor = usize::from(flavor_index(self.queue, pod));
                        sub_from(&mut load, &self.dims.project_in(&pod.requests, flavor));
                    }
                }
            }
        }
        load
    }

    /// The queue's workloads that could give back borrowed quota to a reclaim by an item of
    /// priority `priority` (`lower_only`: only lower priorities), as units of choice.
    fn reclaim_units(&self, j: usize, priority: Option<i32>, out: &mut Vec<Unit>) {
        for (m, &w) in self.members.iter().enumerate() {
            let state = self.states[m];
            let workload = &self.snapshot.workloads[w];
            if state.admitted_before == 0
                || state.admitted_now > 0
                || priority.is_some_and(|p| workload.priority >= p)
            {
                continue;
            }
            let mut whole = self.member_reserved[m * self.width..(m + 1) * self.width].to_vec();
            let mut pods = Vec::new();
            let mut blocked = false;
            for (s, set) in workload.pod_sets.iter().enumerate() {
                let mut live: Vec<usize> = (set.pods.iter().enumerate())
                    .filter(|(_, p)| p.state == PodState::Admitted && !p.terminating)
                    .map(|(p, _)| p)
                    .collect();
                live.sort_by_key(|p| std::cmp::Reverse((set.pods[*p].created_at, *p)));
                // The newest pods above the set's minimum are the elastic candidates.
                let above = live.len().saturating_sub(set.min_count as usize);
                for (i, &p) in live.iter().enumerate() {
                    let pod = &set.pods[p];
                    let flavor = usize::from(flavor_index(self.queue, pod));
                    let requests = self.dims.project_in(&pod.requests, flavor);
                    add_into(&mut whole, &requests);
                    let at = PodRef {
                        workload: w,
                        pod_set: s,
                        pod: p,
                    };
                    blocked |= pod.eviction_blocked;
                    pods.push(at);
                    if i < above && !pod.eviction_blocked {
                        out.push(Unit {
                            key: (
                                0,
                                workload.priority,
                                std::cmp::Reverse((pod.created_at, w, p)),
                            ),
                            queue: j,
                            freed: requests,
                            pods: vec![at],
                        });
                    }
                }
            }
            if !blocked && !pods.is_empty() {
                out.push(Unit {
                    key: (
                        1,
                        workload.priority,
                        std::cmp::Reverse((workload.queued_at, w, 0)),
                    ),
                    queue: j,
                    freed: whole,
                    pods,
                });
            }
        }
    }
}

/// One choice of a reclaim: an elastic pod above its workload's minimum, or a whole workload.
struct Unit {
    /// Elastic (0) before whole (1), lowest priority first, newest first (creation or queueing
    /// time, then the later workload and pod in the snapshot: timestamps tie within a second).
    key: (u8, i32, std::cmp::Reverse<(i64, usize, usize)>),
    /// The queue (its place in the cohort).
    queue: usize,
    /// What it frees, in the queue's dimensions.
    freed: Vec<i64>,
    pods: Vec<PodRef>,
}

/// Chooses the units to evict so that the pool fits with `loads` (per member, per dimension:
/// terminating pods gone, the preemptor's item added), or None when it cannot. A unit is taken
/// only while its queue uses more than its quota in a resource the pool lacks and it frees some
/// of it; the choice is then made minimal (in reverse, a unit not needed is spared).
fn plan_reclaim(pool: &Pool, loads: &[Vec<i64>], units: &[Unit]) -> Option<Vec<usize>> {
    let mut current = loads.to_vec();
    if pool.fits(&pool.used_with(&current)) {
        return Some(Vec::new());
    }
    let mut chosen = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        let used = pool.used_with(&current);
        let short = |c: usize| used[c] > pool.lendable[c];
        let j = unit.queue;
        let member = &pool.members[j];
        let load = &current[j];
        let useful = member.dims.iter().enumerate().any(|(d, l)| {
            l.is_some_and(|l| {
                short(l.c)
                    && load[d] > l.quota
                    && l.taken(load[d]) > l.taken(load[d].saturating_sub(unit.freed[d]))
            })
        });
        if !useful {
            continue;
        }
        sub_from(&mut current[j], &unit.freed);
        chosen.push(u);
        if pool.fits(&pool.used_with(&current)) {
            break;
        }
    }
    if !pool.fits(&pool.used_with(&current)) {
        return None;
    }
    for i in (0..chosen.len()).rev() {
        let mut trial = loads.to_vec();
        for (n, &u) in chosen.iter().enumerate() {
            if n != i {
                sub_from(&mut trial[units[u].queue], &units[u].freed);
            }
        }
        if pool.fits(&pool.used_with(&trial)) {
            chosen.remove(i);
        }
    }
    Some(chosen)
}

/// Looks for victims for the item of queue `k` that is up (it fits its quota, not the pool).
/// With a plan, its evictions are recorded and the pool is closed for the rest of the pass;
/// returns the item's reason to wait (None: no plan).
fn reclaim(
    passes: &[QueuePass],
    progress: &[Progress],
    k: usize,
    pool: &mut Pool,
    evict: &mut Vec<Eviction>,
) -> Option<WaitReason> {
    pool.reclaim_attempts += 1;
    let pass = &passes[k];
    let item = (progress[k].up).unwrap_or(pass.items[progress[k].next]);
    let preemptor = pass.members[item.member as usize];
    let lower_only = match pool.members[k].reclaim {
        ReclaimPolicy::Never => return None,
        ReclaimPolicy::LowerPriority => Some(item.priority),
        ReclaimPolicy::Any => None,
    };
    let mut loads: Vec<Vec<i64>> = passes
        .iter()
        .map(|p| p.load_without_terminating())
        .collect();
    add_into(&mut loads[k], &pass.need(&item));
    let mut units = Vec::new();
    for (j, other) in passes.iter().enumerate() {
        if j != k {
            other.reclaim_units(j, lower_only, &mut units);
        }
    }
    units.sort_by_key(|u| u.key);
    let chosen = plan_reclaim(pool, &loads, &units)?;
    let mut victims = 0u32;
    for &u in &chosen {
        for &victim in &units[u].pods {
            victims += 1;
            evict.push(Eviction {
                victim,
                preemptor,
                reason: EvictionReason::CohortReclaim,
            });
        }
    }
    let terminating: u32 = (passes.iter().enumerate())
        .filter(|(j, _)| *j != k)
        .flat_map(|(_, p)| p.states.iter().map(|s| s.terminating))
        .sum();
    pool.closed = true;
    Some(WaitReason::Reclaiming {
        queue: pass.queue.name.clone(),
        cohort: pool.name.clone(),
        victims: victims.saturating_add(terminating),
    })
}

/// Decides the queues of one cohort (`queues`: indexes into `snapshot.queues`) together. See the
/// module documentation.
pub(super) fn decide_cohort(
    (snapshot, rooms): (&Snapshot, &topology::SharedRooms),
    (queues, members): (&[usize], &[Vec<usize>]),
    (decisions, previous): (&mut Decisions, &mut [WorkloadTally]),
    scratches: Vec<(&mut Scratch, memo::Gather)>,
) {
    let mut passes: Vec<QueuePass> = (queues.iter().zip(scratches))
        .map(|(&q, (scratch, gather))| {
            let queue = &snapshot.queues[q];
            QueuePass::prepared((snapshot, rooms), queue, &members[q], scratch, gather)
        })
        .collect();
    let mut pool = Pool::new(&passes);
    let first_admit = decisions.admit.len();
    let mut progress: Vec<Progress> = passes.iter().map(|p| p.start(first_admit)).collect();
    admit_together(&mut passes, &mut progress, &mut pool, decisions);
    let mut loads = Vec::with_capacity(passes.len());
    let mut tallies = Vec::with_capacity(passes.len());
    for (pass, progress) in passes.iter_mut().zip(progress) {
        let waiting = pass.finish(progress);
        pass.record_flavors(&mut decisions.flavors);
        pass.record_domains(&mut decisions.domains, &mut decisions.data_nodes);
        tallies.push(pass.tally((&mut decisions.workloads, &mut *previous), waiting));
        loads.push(pass.load());
    }
    let lent = lent(&pool, &loads);
    for (k, (pass, mut tally)) in passes.iter().zip(tallies).enumerate() {
        let member = &pool.members[k];
        let mut borrowed = vec![0i64; pass.width];
        let mut ceiling = ResourceList::new();
        for (d, limits) in member.dims.iter().enumerate() {
            if let Some(l) = limits {
                borrowed[d] = loads[k][d].saturating_sub(l.quota).max(0);
                ceiling.add(&pass.dims.names[d], l.guaranteed);
            }
        }
        pass.charge_borrowed(&borrowed, (&mut decisions.workloads, &mut *previous));
        tally.borrowed = pass.dims.to_list(&borrowed);
        tally.lent = pass.dims.to_list(&lent[k]);
        tally.ceiling = Some(ceiling);
        decisions.queues.insert(pass.queue.name.clone(), tally);
    }
}

/// The admission in order of a cohort's queues: each goes on while its items fit its own quota
/// (or wait); of those stopped at an item that needs borrowing, the least share goes first.
fn admit_together(
    passes: &mut [QueuePass],
    progress: &mut [Progress],
    pool: &mut Pool,
    decisions: &mut Decisions,
) {
    let mut done = vec![false; passes.len()];
    let mut limits = Vec::new();
    loop {
        let mut best: Option<((u128, i32, i64), usize)> = None;
        for k in 0..passes.len() {
            while !done[k] {
                let mut turn = Turn {
                    pool: &mut *pool,
                    k,
                    may_borrow: false,
                    limits: std::mem::take(&mut limits),
                };
                let step = passes[k].step(
                    &mut progress[k],
                    &mut decisions.admit,
                    &mut decisions.evict,
                    Some(&mut turn),
                );
                limits = turn.limits;
                match step {
                    Step::Done => done[k] = true,
                    Step::Went => {}
                    Step::Borrow => {
                        let item = passes[k].items[progress[k].next];
                        let key = (progress[k].borrow_key, !item.priority, item.queued_at);
                        if best.as_ref().is_none_or(|(b, _)| key < *b) {
                            best = Some((key, k));
                        }
                        break;
                    }
                    Step::Reclaim => {
                        let reason = reclaim(passes, progress, k, pool, &mut decisions.evict);
                        let p = &mut progress[k];
                        let item = passes[k].items[p.next];
                        let reason = reason.or_else(|| {
                            let misfit = p.misfit.take()?;
                            let turn = Turn {
                                pool: &mut *pool,
                                k,
                                may_borrow: false,
                                limits: Vec::new(),
                            };
                            Some(turn.reason(&passes[k], &misfit))
                        });
                        if let Some(reason) = reason {
                            passes[k].waits(p, &item, reason);
                        }
                        p.next += 1;
                    }
                }
            }
        }
        let Some((_, k)) = best else { break };
        let mut turn = Turn {
            pool: &mut *pool,
            k,
            may_borrow: true,
            limits: std::mem::take(&mut limits),
        };
        passes[k].step(
            &mut progress[k],
            &mut decisions.admit,
            &mut decisions.evict,
            Some(&mut turn),
        );
        limits = turn.limits;
    }
}

/// Per member, per dimension: what the others use of its unused quota. The cohort's borrowing
/// (per resource, what the queues use above their quotas) is spread over the lenders in
/// proportion to the quota each has unused and lends.
fn lent(pool: &Pool, loads: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let resources = pool.lendable.len();
    let (mut borrowed, mut unused) = (vec![0i128; resources], vec![0i128; resources]);
    let mut spare: Vec<Vec<i64>> = Vec::with_capacity(pool.members.len());
    for (member, load) in pool.members.iter().zip(loads) {
        let mut own = vec![0i64; member.dims.len()];
        for (d, limits) in member.dims.iter().enumerate() {
            let Some(l) = limits else { continue };
            borrowed[l.c] += i128::from(load[d].saturating_sub(l.quota).max(0));
            let within = load[d].clamp(0, l.quota);
            let lend = l.quota - l.guaranteed;
            own[d] = (lend - within.saturating_sub(l.guaranteed).max(0)).max(0);
            unused[l.c] += i128::from(own[d]);
        }
        spare.push(own);
    }
    (pool.members.iter().zip(spare))
        .map(|(member, own)| {
            (member.dims.iter().zip(own))
                .map(|(limits, own)| match limits {
                    Some(l) if unused[l.c] > 0 => {
                        let share = borrowed[l.c].min(unused[l.c]) * i128::from(own) / unused[l.c];
                        i64::try_from(share).unwrap_or(i64::MAX)
                    }
                    _ => 0,
                })
                .collect()
        })
        .collect()
}

impl QueuePass<'_> {
    /// Charges the queue's borrowing (per dimension) to its members: those admission would take
    /// back first (lowest priority, newest) carry it first.
    fn charge_borrowed(
        &self,
        borrowed: &[i64],
        (workloads, previous): (&mut [WorkloadTally], &mut [WorkloadTally]),
    ) {
        if borrowed.iter().all(|b| *b == 0) {
            return;
        }
        let mut order: Vec<usize> = (0..self.members.len()).collect();
        order.sort_by_key(|&m| {
            let w = &self.snapshot.workloads[self.members[m]];
            (
                w.priority,
                std::cmp::Reverse(w.queued_at),
                std::cmp::Reverse(m),
            )
        });
        let mut left = borrowed.to_vec();
        let width = self.width;
        for m in order {
            let mut charge = vec![0i64; width];
            for d in 0..width {
                let held = self.member_used[m * width + d]
                    .saturating_add(self.member_reserved[m * width + d]);
                charge[d] = held.clamp(0, left[d].max(0));
                left[d] -= charge[d];
            }
            let w = self.members[m];
            let old = previous.get_mut(w).map(|t| &mut t.borrowed);
            workloads[w].borrowed = reasons::reuse_list(old, &self.dims, &charge);
            if left.iter().all(|l| *l <= 0) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(quotas: &[(i64, i64)], lendable: i64) -> Pool {
        Pool {
            name: "c".into(),
            lendable: vec![lendable],
            used: vec![0],
            members: quotas
                .iter()
                .map(|&(quota, guaranteed)| Member {
                    dims: vec![Some(Limits {
                        c: 0,
                        quota,
                        guaranteed,
                        cap: i64::MAX,
                    })],
                    taken: vec![0],
                    weight_milli: 1000,
                    reclaim: ReclaimPolicy::Any,
                })
                .collect(),
            closed: false,
            reclaim_attempts: 0,
        }
    }

    fn unit(queue: usize, freed: i64, tag: usize) -> Unit {
        Unit {
            key: (0, 0, std::cmp::Reverse((0, 0, 0))),
            queue,
            freed: vec![freed],
            pods: vec![PodRef {
                workload: tag,
                pod_set: 0,
                pod: 0,
            }],
        }
    }

    #[test]
    fn reclaim_takes_only_from_queues_above_their_quota_and_no_more_than_needed() {
        // Two queues of 4 lending everything. A (0) holds 6: 2 borrowed; B (1) holds 0 and wants 4.
        let pool = pool(&[(4, 0), (4, 0)], 8);
        let loads = vec![vec![6], vec![4]];
        // Candidates: A's pods of 1, 1, 1 (the third would take A below its quota).
        let units = vec![unit(0, 1, 0), unit(0, 1, 1), unit(0, 1, 2)];
        assert_eq!(plan_reclaim(&pool, &loads, &units), Some(vec![0, 1]));
        // Nothing to take when A is within its quota: B can only wait.
        let loads = vec![vec![4], vec![5]];
        assert_eq!(plan_reclaim(&pool, &loads, &units), None);
    }

    #[test]
    fn reclaim_spares_a_victim_a_later_bigger_one_makes_unneeded() {
        let pool = pool(&[(4, 0), (4, 0)], 8);
        let loads = vec![vec![7], vec![4]];
        let units = vec![unit(0, 1, 0), unit(0, 3, 1)];
        assert_eq!(plan_reclaim(&pool, &loads, &units), Some(vec![1]));
    }

    #[test]
    fn what_a_queue_keeps_for_itself_is_never_lent() {
        // A lends 1 of its 4 (keeps 3); B lends all 4. A wants 3 with B holding 5 (borrowing 1).
        let pool = pool(&[(4, 3), (4, 0)], 5);
        let loads = vec![vec![3], vec![5]];
        assert_eq!(pool.used_with(&loads), vec![5]);
        assert!(pool.fits(&pool.used_with(&loads)));
    }
}
