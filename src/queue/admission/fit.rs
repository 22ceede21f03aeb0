//! Fit: whether an item fits the queue's quota beside its usage and reservations (and by how much
//! it overflows when not), taking an item once it fits, and the queue's tally after the pass.

use super::arena::{Dimensions, Item, NONE, add_into};
use super::*;

impl<'a> QueuePass<'a> {
    /// Loads the item's reservation into the vector at `reserve_at`, less the unfilled gang member
    /// whose place it takes (if any). Returns whether it takes such a place (a credit).
    pub(super) fn load_reserve(&mut self, item: &Item) -> bool {
        let credit = (item.slot != NONE)
            .then(|| &self.slots[item.slot as usize])
            .filter(|slot| slot.left > 0 && slot.flavor == item.flavor)
            .map(|slot| slot.per_pod);
        let (width, reserve_at) = (self.width, self.reserve_at as usize);
        let (reserve, rest) = self.arena.values.split_at_mut(reserve_at + width);
        let reserve = &mut reserve[reserve_at..];
        // Item vectors all lie after the three scratch vectors.
        let value = |at: u32| {
            let at = at as usize - (reserve_at + width);
            &rest[at..at + width]
        };
        reserve.fill(0);
        if item.reserve != NONE {
            add_into(reserve, value(item.reserve));
        }
        if let Some(per_pod) = credit {
            for (r, v) in reserve.iter_mut().zip(value(per_pod)) {
                *r = r.saturating_add(-v);
            }
        }
        credit.is_some()
    }

    /// Where the item (its reservation loaded by [`Self::load_reserve`]) overflows `limits` (the
    /// quota's, or those a cohort gives the queue now).
    pub(super) fn misfit(&self, item: &Item, limits: &[Option<i64>]) -> Option<Misfit> {
        let width = self.width;
        first_misfit(
            limits,
            self.arena.slice(self.usage_at, width),
            self.arena.slice(self.reserved_at, width),
            self.arena.slice(item.usage, width),
            self.arena.slice(self.reserve_at, width),
        )
    }

    /// Admits a fitting item: its usage and reservation join the queue's and its member's, the
    /// gang place it fills is taken, its pods are to be ungated.
    pub(super) fn take(&mut self, item: &Item, credit: bool, admit: &mut Vec<PodRef>) {
        if credit {
            self.slots[item.slot as usize].left -= 1;
        }
        let m = item.member as usize;
        let (width, usage_at, reserved_at) = (
            self.width,
            self.usage_at as usize,
            self.reserved_at as usize,
        );
        let (item_usage, reserve_at) = (item.usage as usize, self.reserve_at as usize);
        let values = &mut self.arena.values;
        for d in 0..width {
            let add = values[item_usage + d];
            let reserve = values[reserve_at + d];
            let usage = &mut values[usage_at + d];
            *usage = usage.saturating_add(add);
            let reserved = &mut values[reserved_at + d];
            *reserved = reserved.saturating_add(reserve);
            let used = &mut self.member_used[m * width + d];
            *used = used.saturating_add(add);
            let held = &mut self.member_reserved[m * width + d];
            *held = held.saturating_add(reserve);
        }
        let start = item.pods_start as usize;
        let pods = &self.arena.pods[start..start + item.pods_len as usize];
        admit.extend_from_slice(pods);
        if !self.queue.flavors.is_empty() {
            self.chosen.extend(pods.iter().map(|p| (*p, item.flavor)));
        }
        self.states[m].admitted_now += item.pods_len;
        self.commit_topology(item);
    }

    /// The queue's tally and each member's, after the decisions.
    /// `previous`: the tallies of a pass before (or none), whose equal lists and reasons are taken.
    pub(super) fn tally(
        &self,
        (workloads, previous): (&mut [WorkloadTally], &mut [WorkloadTally]),
        mut waiting: Vec<Option<Waiting>>,
    ) -> QueueTally {
        let width = self.width;
        let mut tally = QueueTally {
            usage: self.dims.to_list(self.arena.slice(self.usage_at, width)),
            reserved: self.dims.to_list(self.arena.slice(self.reserved_at, width)),
            ..QueueTally::default()
        };
        // Positions: members with pods still waiting, in the order of their first item.
        let mut position = vec![0u32; self.members.len()];
        let mut placed = 0u32;
        for item in self.items.iter() {
            let m = item.member as usize;
            let state = self.states[m];
            if position[m] == 0 && state.gated > state.admitted_now {
                placed += 1;
                position[m] = placed;
            }
        }
        for (m, &w) in self.members.iter().enumerate() {
            let workload = &self.snapshot.workloads[w];
            let state = self.states[m];
            let wt = &mut workloads[w];
            let mut old = previous.get_mut(w);
            wt.admitted_pods += state.admitted_before + state.admitted_now;
            wt.pending_pods += state.gated - state.admitted_now;
            let used = &self.member_used[m * width..(m + 1) * width];
            wt.used = reasons::reuse_list(old.as_mut().map(|o| &mut o.used), &self.dims, used);
            let held = &self.member_reserved[m * width..(m + 1) * width];
            let old_held = old.as_mut().map(|o| &mut o.reserved);
            wt.reserved = reasons::reuse_list(old_held, &self.dims, held);
            wt.position = (position[m] > 0).then_some(position[m]);
            if wt.pending_pods > 0 {
                let old = old.and_then(|o| o.waiting.take());
                let now = waiting[m].take().map(|now| self.reason(now, old));
                wt.waiting = now.or_else(|| {
                    (!workload.namespace_allowed).then(|| WaitReason::NamespaceNotAllowed {
                        queue: self.queue.name.clone(),
                    })
                });
                if wt.waiting.is_none() && state.unplaceable {
                    wt.waiting = Some(WaitReason::NoFlavorMatches {
                        queue: self.queue.name.clone(),
                        flavors: self.queue.flavors.iter().map(|f| f.name.clone()).collect(),
                    });
                }
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

/// Two disjoint vectors of `width` values at offsets `a` < `b`.
pub(super) fn split_two(
    values: &mut [i64],
    a: u32,
    b: u32,
    width: usize,
) -> (&mut [i64], &mut [i64]) {
    let (head, tail) = values.split_at_mut(b as usize);
    (
        &mut head[a as usize..a as usize + width],
        &mut tail[..width],
    )
}

pub(super) fn add_scaled(target: &mut [i64], per_pod: &[i64], times: i64) {
    for (t, v) in target.iter_mut().zip(per_pod) {
        *t = t.saturating_add(v.saturating_mul(times));
    }
}

/// Where an item overflows the quota; turned into a [`WaitReason`] only when it is kept.
#[derive(Clone, Copy)]
pub(super) struct Misfit {
    pub(super) dimension: usize,
    pub(super) needed: i64,
    pub(super) after: i64,
    pub(super) used: i64,
    pub(super) reserved: i64,
    pub(super) limit: i64,
}

impl Misfit {
    pub(super) fn reason(&self, queue_name: &str, dims: &Dimensions) -> WaitReason {
        let queue = queue_name.to_string();
        let resource = dims.base_name(self.dimension).to_string();
        if self.needed > self.limit {
            return WaitReason::NeverFits {
                queue,
                resource,
                needed: self.needed,
                quota: self.limit,
            };
        }
        WaitReason::Quota {
            queue,
            resource,
            missing: self.after - self.limit,
            used: self.used,
            reserved: self.reserved,
            quota: self.limit,
        }
    }
}

/// The first limited resource the item would overflow; None when it fits.
pub(super) fn first_misfit(
    limits: &[Option<i64>],
    usage: &[i64],
    reserved: &[i64],
    item_usage: &[i64],
    item_reserve: &[i64],
) -> Option<Misfit> {
    for (d, limit) in limits.iter().enumerate() {
        let Some(limit) = *limit else { continue };
        let needed = item_usage[d].saturating_add(item_reserve[d]);
        let after = usage[d].saturating_add(reserved[d]).saturating_add(needed);
        if after > limit {
            return Some(Misfit {
                dimension: d,
                needed,
                after,
                used: usage[d],
                reserved: reserved[d],
                limit,
            });
        }
    }
    None
}
