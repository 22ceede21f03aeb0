//! In-queue preemption: which admitted pods a waiting item takes quota back from. A pure function
//! of projected resource vectors (the admission pass's dimensions), beside the admission function
//! that calls it (`admission/preempt.rs` builds the [`Holder`]s and applies the [`Plan`]); it knows nothing
//! of snapshots, so it imports none of the queue's modules.
//!
//! The rules (issue 18; Kueue's classical preemption is the reference semantics):
//! - room already being freed counts first: pods that are terminating are taken as gone (never
//!   chosen again, so no second round of victims for the same need);
//! - victims come only from workloads of lower priority (equal priority never preempts) that have
//!   no pod admitted by the same pass;
//! - first the elastic pods above a workload's minimum (of a pod set: its admitted pods beyond
//!   `min_count`), lowest priority first, newest first; then whole workloads (every admitted pod:
//!   a gang goes whole, never in part), lowest priority first, newest queued first;
//! - a candidate that frees nothing of what is still missing is passed over; the choice stops as
//!   soon as the item fits;
//! - the set is then made minimal: in reverse order of choice, a victim whose eviction turns out
//!   unnecessary is spared (Kueue's fill-back);
//! - no victims at all unless the item fits once they are gone: after the plan, usage − victims −
//!   terminating + reservations + item ≤ quota for every resource the quota names.
//!
//! Freed room is exact: evicting a workload whole frees its pods and the reservation of its
//! missing gang members; a pod above the minimum frees its requests; a terminating pod frees its
//! requests, less the reservation its workload takes again if it drops below its minimum.

/// An admitted pod (gate removed, not ended) of a holder.
#[derive(Clone, Debug)]
pub struct HeldPod {
    /// Its position in its pod set (the caller's index).
    pub index: usize,
    /// Its requests, projected.
    pub requests: Vec<i64>,
    pub created_at: i64,
    pub terminating: bool,
    /// A PodDisruptionBudget refused its eviction a moment ago: not a victim (nor its workload
    /// whole) for now; another is chosen, or the item waits.
    pub blocked: bool,
}

#[derive(Clone, Debug)]
pub struct HeldSet {
    pub min_count: u32,
    /// One member's size, projected (the reservation of a missing gang member).
    pub per_pod: Vec<i64>,
    /// Pods of the set admitted by the pass so far (not in `pods`).
    pub admitted_now: u32,
    pub pods: Vec<HeldPod>,
}

/// A workload of the queue that holds quota.
#[derive(Clone, Debug)]
pub struct Holder {
    pub priority: i32,
    /// When the workload was queued: newer ones go first among whole victims of a priority.
    pub queued_at: i64,
    /// Whether it may lose pods to this preemptor (lower priority, nothing admitted by the pass).
    pub may_be_victim: bool,
    pub sets: Vec<HeldSet>,
}

/// What the preemptor asks: the queue's load now (usage + reservations, projected), the item's
/// (usage + reservation) and the quota's limits (None: not limited).
pub struct Need<'a> {
    pub limits: &'a [Option<i64>],
    pub load: &'a [i64],
    pub item: &'a [i64],
}

/// A victim: `holders[holder].sets[set].pods[pod]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    pub holder: usize,
    pub set: usize,
    pub pod: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// In order of choice; empty when the terminating pods alone make room.
    pub victims: Vec<Victim>,
    /// The queue's load once the victims and terminating pods are gone and the item is admitted
    /// (within every limit).
    pub after: Vec<i64>,
}

/// Chooses the victims for `need`, or None when the item would not fit even with every candidate
/// gone (then nothing is evicted for it).
pub fn plan(need: &Need, holders: &[Holder]) -> Option<Plan> {
    let mut base: Vec<i64> = need
        .load
        .iter()
        .zip(need.item)
        .map(|(l, i)| l.saturating_add(*i))
        .collect();
    for holder in holders {
        sub_into(&mut base, &terminating_freed(holder));
    }
    if fits(need.limits, &base) {
        return Some(Plan {
            victims: Vec::new(),
            after: base,
        });
    }
    let units = candidates(holders);
    let (chosen, freed) = choose(need.limits, &base, &units)?;
    let (chosen, freed) = spare_the_unneeded(need.limits, &base, &units, chosen, freed);
    sub_into(&mut base, &freed);
    let mut victims = Vec::new();
    for &u in &chosen {
        units[u].victims(holders, &mut victims);
    }
    Some(Plan {
        victims,
        after: base,
    })
}

/// One choice: an elastic pod above its set's minimum, or a whole workload.
struct Unit {
    holder: usize,
    /// The elastic pod (set, position in `pods`), or None for the whole workload.
    pod: Option<(usize, usize)>,
    freed: Vec<i64>,
}

impl Unit {
    fn victims(&self, holders: &[Holder], out: &mut Vec<Victim>) {
        let holder = &holders[self.holder];
        let at = |set: usize, p: usize| Victim {
            holder: self.holder,
            set,
            pod: holder.sets[set].pods[p].index,
        };
        match self.pod {
            Some((set, p)) => out.push(at(set, p)),
            None => {
                for (s, set) in holder.sets.iter().enumerate() {
                    for (p, pod) in set.pods.iter().enumerate() {
                        if !pod.terminating {
                            out.push(at(s, p));
                        }
                    }
                }
            }
        }
    }
}

/// Admitted pods per set: all of them (terminating included, and those admitted by the pass), or
/// only those that stay once the terminating ones are gone.
fn counts(holder: &Holder, with_terminating: bool) -> Vec<u32> {
    holder
        .sets
        .iter()
        .map(|set| {
            let pods = set
                .pods
                .iter()
                .filter(|p| with_terminating || !p.terminating)
                .count();
            set.admitted_now + u32::try_from(pods).unwrap_or(u32::MAX)
        })
        .collect()
}

/// Whether the holder's gang has started: a pod admitted by the pass, or an admitted pod that is
/// not terminating (one whose admitted pods all terminate has stopped and reserves nothing, as the
/// admission pass counts it).
fn started(holder: &Holder) -> bool {
    (holder.sets.iter()).any(|s| s.admitted_now > 0 || s.pods.iter().any(|p| !p.terminating))
}

/// The reservation of a workload with `counts` admitted pods per set: its missing gang members,
/// once it has started (nothing before, nor once it has stopped).
fn reservation(holder: &Holder, counts: &[u32], width: usize) -> Vec<i64> {
    let mut out = vec![0i64; width];
    if !started(holder) || counts.iter().all(|c| *c == 0) {
        return out;
    }
    for (set, count) in holder.sets.iter().zip(counts) {
        let missing = i64::from(set.min_count.saturating_sub(*count));
        for (o, v) in out.iter_mut().zip(&set.per_pod) {
            *o = o.saturating_add(v.saturating_mul(missing));
        }
    }
    out
}

/// What the holder's terminating pods free once gone: their requests, less the reservation the
/// workload takes again for members it drops below its minimum (may be negative).
fn terminating_freed(holder: &Holder) -> Vec<i64> {
    let width = holder.sets.first().map_or(0, |s| s.per_pod.len());
    let mut freed = reservation(holder, &counts(holder, true), width);
    sub_into(
        &mut freed,
        &reservation(holder, &counts(holder, false), width),
    );
    for pod in holder.sets.iter().flat_map(|s| &s.pods) {
        if pod.terminating {
            add_into(&mut freed, &pod.requests);
        }
    }
    freed
}

/// Sort key of an elastic candidate: priority, newest first (the last positions first among pods
/// created in the same millisecond), holder.
type ElasticKey = (i32, std::cmp::Reverse<(i64, usize, usize)>, usize);

/// Sort key of a whole workload: priority, newest queued first, holder.
type WholeKey = (i32, std::cmp::Reverse<i64>, usize);

/// The candidates in the order they are considered: elastic pods above the minimum (lowest
/// priority first, newest first), then whole workloads (lowest priority first, newest queued
/// first).
fn candidates(holders: &[Holder]) -> Vec<Unit> {
    let mut elastic: Vec<(ElasticKey, Unit)> = Vec::new();
    let mut whole: Vec<(WholeKey, Unit)> = Vec::new();
    for (h, holder) in holders.iter().enumerate() {
        if !holder.may_be_victim {
            continue;
        }
        let staying = counts(holder, false);
        if staying.iter().all(|c| *c == 0) {
            continue;
        }
        elastic.extend(elastic_of(holder, h, &staying));
        let live = || {
            holder
                .sets
                .iter()
                .flat_map(|s| &s.pods)
                .filter(|p| !p.terminating)
        };
        if live().any(|p| p.blocked) {
            continue; // a gang goes whole or not at all
        }
        let width = holder.sets[0].per_pod.len();
        let mut all = reservation(holder, &staying, width);
        for pod in holder.sets.iter().flat_map(|s| &s.pods) {
            if !pod.terminating {
                add_into(&mut all, &pod.requests);
            }
        }
        let unit = Unit {
            holder: h,
            pod: None,
            freed: all,
        };
        whole.push((
            (holder.priority, std::cmp::Reverse(holder.queued_at), h),
            unit,
        ));
    }
    elastic.sort_by_key(|(key, _)| *key);
    whole.sort_by_key(|(key, _)| *key);
    let elastic = elastic.into_iter().map(|(_, u)| u);
    elastic.chain(whole.into_iter().map(|(_, u)| u)).collect()
}

/// A holder's pods above its minimum: in each set, the newest live pods beyond `min_count` (of
/// those not blocked). A
/// workload keeps at least one pod (when every minimum is zero, its oldest pod is its gang):
/// losing them all is losing the workload, a whole victim.
fn elastic_of(holder: &Holder, h: usize, staying: &[u32]) -> Vec<(ElasticKey, Unit)> {
    let mut out = Vec::new();
    let mut live_total = 0usize;
    for (s, set) in holder.sets.iter().enumerate() {
        let mut live: Vec<usize> = (0..set.pods.len())
            .filter(|p| !set.pods[*p].terminating)
            .collect();
        live_total += live.len();
        // Which pods are above the minimum is a matter of age: an older one stands in for a
        // blocked one.
        live.retain(|p| !set.pods[*p].blocked);
        live.sort_by_key(|p| std::cmp::Reverse((set.pods[*p].created_at, *p)));
        let above = staying[s].saturating_sub(set.min_count) as usize;
        for &p in live.iter().take(above) {
            let pod = &set.pods[p];
            let unit = Unit {
                holder: h,
                pod: Some((s, p)),
                freed: pod.requests.clone(),
            };
            let newest = std::cmp::Reverse((pod.created_at, s, p));
            out.push(((holder.priority, newest, h), unit));
        }
    }
    if out.len() == live_total {
        // The oldest stays: the largest key.
        if let Some(oldest) = (0..out.len()).max_by_key(|i| out[*i].0) {
            out.remove(oldest);
        }
    }
    out
}

/// Chooses candidates in order until the item fits: each one that frees some of what is still
/// missing. A whole workload takes the place of its elastic pods chosen before it. Returns the
/// chosen units (in order of choice) and what they free, or None if all of them are not enough.
fn choose(limits: &[Option<i64>], base: &[i64], units: &[Unit]) -> Option<(Vec<usize>, Vec<i64>)> {
    let mut freed = vec![0i64; base.len()];
    let mut chosen: Vec<usize> = Vec::new();
    let mut left = base.to_vec();
    for (u, unit) in units.iter().enumerate() {
        let mut gain = unit.freed.clone();
        let absorbed = |c: &usize| unit.pod.is_none() && units[*c].holder == unit.holder;
        for c in chosen.iter().filter(|c| absorbed(c)) {
            sub_into(&mut gain, &units[*c].freed);
        }
        let helps = limits
            .iter()
            .zip(&left)
            .zip(&gain)
            .any(|((limit, l), g)| limit.is_some_and(|limit| *l > limit) && *g > 0);
        if !helps {
            continue;
        }
        chosen.retain(|c| !absorbed(c));
        chosen.push(u);
        add_into(&mut freed, &gain);
        sub_into(&mut left, &gain);
        if fits(limits, &left) {
            return Some((chosen, freed));
        }
    }
    None
}

/// Spares, in reverse order of choice, each chosen victim without which the item still fits.
fn spare_the_unneeded(
    limits: &[Option<i64>],
    base: &[i64],
    units: &[Unit],
    mut chosen: Vec<usize>,
    mut freed: Vec<i64>,
) -> (Vec<usize>, Vec<i64>) {
    for i in (0..chosen.len()).rev() {
        let unit = &units[chosen[i]];
        let mut without = freed.clone();
        sub_into(&mut without, &unit.freed);
        let mut left = base.to_vec();
        sub_into(&mut left, &without);
        if fits(limits, &left) {
            chosen.remove(i);
            freed = without;
        }
    }
    (chosen, freed)
}

fn fits(limits: &[Option<i64>], load: &[i64]) -> bool {
    limits
        .iter()
        .zip(load)
        .all(|(limit, l)| limit.is_none_or(|limit| *l <= limit))
}

fn add_into(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_add(*v);
    }
}

fn sub_into(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_sub(*v);
    }
}
