//! Gathering a queue's demand, member by member: what each workload holds, the reservations of
//! its started gangs, and one item per gang of a workload that has not started, per fill and
//! per elastic pod.

use super::arena::{Item, ItemKind, NO_FLAVOR, NONE, add_into, flavor_index, to_u32};
use super::fit::{add_scaled, split_two};
use super::*;

/// A pass's buffers: the queue's dimensions, the arena, the items, the reserved places and the
/// gated pods of the set being gathered.
pub(super) type Buffers<'a> = (
    Dimensions,
    &'a mut Arena,
    &'a mut Vec<Item>,
    &'a mut Vec<Slot>,
    &'a mut Vec<usize>,
);

impl<'a> QueuePass<'a> {
    /// A queue's pass before its gather, its buffers emptied.
    pub(super) fn new(
        ctx: (&'a Snapshot, &'a topology::SharedRooms<'a>),
        queue: &'a QueueSnapshot,
        members: &'a [usize],
        buffers: Buffers<'a>,
    ) -> Self {
        buffers.1.values.clear();
        buffers.1.pods.clear();
        buffers.2.clear();
        buffers.3.clear();
        let width = buffers.0.width();
        let n = members.len();
        QueuePass::resumed(
            ctx,
            queue,
            members,
            buffers,
            (
                vec![MemberState::default(); n],
                vec![0i64; n * width],
                vec![0i64; n * width],
            ),
        )
    }

    /// A queue's pass over buffers as a gather left them (`memo.rs`), with the members' counts
    /// and holdings: the arena starts with the three scratch vectors, zeroed on an empty arena.
    pub(super) fn resumed(
        (snapshot, rooms): (&'a Snapshot, &'a topology::SharedRooms<'a>),
        queue: &'a QueueSnapshot,
        members: &'a [usize],
        (dims, arena, items, slots, gated): Buffers<'a>,
        (states, member_used, member_reserved): (Vec<MemberState>, Vec<i64>, Vec<i64>),
    ) -> Self {
        let width = dims.width();
        let item_width = width * dims.flavors;
        if arena.values.is_empty() {
            for _ in 0..3 {
                arena.push_zeroed(width);
            }
        }
        let (usage_at, reserved_at, reserve_at) = (0, to_u32(width), to_u32(2 * width));
        QueuePass {
            snapshot,
            queue,
            members,
            dims,
            width,
            item_width,
            arena,
            items,
            slots,
            gated,
            states,
            member_used,
            member_reserved,
            usage_at,
            reserved_at,
            reserve_at,
            chosen: Vec::new(),
            rooms,
            planned: None,
            placeable: None,
            domains: Vec::new(),
            data_pins: Vec::new(),
        }
    }

    /// Gathers one member's demand: counts its admitted and gated pods; for a workload that has
    /// started (an admitted pod not terminating), reserves its missing gang members and queues
    /// each gated pod; for one that has not, queues its minimum gang as one item. What it holds joins the queue's usage and reservations.
    pub(super) fn gather_member(&mut self, m: usize) {
        let snapshot = self.snapshot;
        let w = self.members[m];
        let workload = &snapshot.workloads[w];
        let first_admitted = (workload.pod_sets.iter())
            .flat_map(|s| s.pods.iter())
            .find(|p| p.state == PodState::Admitted);
        let started = workload.has_started();
        let workload_flavor = first_admitted.map_or(NO_FLAVOR, |p| self.flavor_of(p));
        let mut gang = Gang {
            start: to_u32(self.arena.pods.len()),
            usage: NONE,
            reserve: NONE,
            earliest: None,
            allowed: self.all_flavors(),
            topology: false,
        };
        for (s, set) in workload.pod_sets.iter().enumerate() {
            let (admitted_in_set, set_flavor) = self.count_set(m, set);
            if !workload.namespace_allowed {
                continue;
            }
            sort_gated(self.gated, set, started);
            if started {
                let flavor = if set_flavor == NO_FLAVOR {
                    workload_flavor
                } else {
                    set_flavor
                };
                self.queue_started_set(m, w, s, admitted_in_set, flavor);
            } else {
                self.add_set_to_gang(&mut gang, w, s);
            }
        }
        if workload.namespace_allowed && !started && self.states[m].gated > 0 && gang.usage != NONE
        {
            if gang.allowed == 0 {
                self.states[m].unplaceable = true;
                self.arena.pods.truncate(gang.start as usize);
            } else {
                self.push_gang(m, w, gang);
            }
        }
        let width = self.width;
        let (usage, reserved) = split_two(
            &mut self.arena.values,
            self.usage_at,
            self.reserved_at,
            width,
        );
        add_into(usage, &self.member_used[m * width..(m + 1) * width]);
        add_into(reserved, &self.member_reserved[m * width..(m + 1) * width]);
    }

    /// Counts a pod set's pods: the admitted ones into the member's usage (in their flavors), the
    /// gated ones into `gated`. Returns how many are admitted and the flavor of the first one
    /// ([`NO_FLAVOR`]: none).
    pub(super) fn count_set(&mut self, m: usize, set: &PodSetSnapshot) -> (u32, u8) {
        let width = self.width;
        let queue = self.queue;
        let used = &mut self.member_used[m * width..(m + 1) * width];
        self.gated.clear();
        let (mut admitted, mut terminating) = (0u32, 0u32);
        let mut set_flavor = NO_FLAVOR;
        for (p, pod) in set.pods.iter().enumerate() {
            match pod.state {
                PodState::Admitted => {
                    admitted += 1;
                    terminating += u32::from(pod.terminating);
                    let flavor = flavor_index(queue, pod);
                    if set_flavor == NO_FLAVOR {
                        set_flavor = flavor;
                    }
                    self.dims
                        .add_projected_in(&pod.requests, usize::from(flavor), used);
                }
                PodState::Gated => self.gated.push(p),
                PodState::Ended => {}
            }
        }
        let state = &mut self.states[m];
        state.gated += to_u32(self.gated.len());
        state.admitted_before += admitted;
        state.terminating += terminating;
        (admitted, set_flavor)
    }

    /// A pod set of a started workload: quota reserved for its gang members not admitted yet (a
    /// slot), and one item per gated pod, oldest first. The first ones up to the reservation fill
    /// it (already paid for, they go first); the others are elastic.
    /// `flavor`: the set's (its first admitted pod's, else its workload's); its reservation is
    /// charged there and its pods try it first.
    pub(super) fn queue_started_set(
        &mut self,
        m: usize,
        w: usize,
        s: usize,
        admitted_in_set: u32,
        flavor: u8,
    ) {
        let snapshot = self.snapshot;
        let workload = &snapshot.workloads[w];
        let set = &workload.pod_sets[s];
        let width = self.width;
        let missing = set.min_count.saturating_sub(admitted_in_set);
        let mut slot = NONE;
        let slot_flavor = if flavor == NO_FLAVOR { 0 } else { flavor };
        if missing > 0 {
            let per_pod = self.arena.push_zeroed(width);
            self.dims.add_projected_in(
                &set.per_pod,
                usize::from(slot_flavor),
                self.arena.slice_mut(per_pod, width),
            );
            let held = &mut self.member_reserved[m * width..(m + 1) * width];
            add_scaled(held, self.arena.slice(per_pod, width), i64::from(missing));
            slot = to_u32(self.slots.len());
            self.slots.push(Slot {
                left: missing,
                per_pod,
                flavor: slot_flavor,
            });
        }
        for rank in 0..self.gated.len() {
            let p = self.gated[rank];
            let pod = &set.pods[p];
            let allowed = self.allowed_for(pod);
            if allowed == 0 {
                self.states[m].unplaceable = true;
                continue;
            }
            let usage = self.arena.push_zeroed(self.item_width);
            self.dims
                .add_projected(&pod.requests, self.arena.slice_mut(usage, width));
            self.spread(usage);
            let pods_start = to_u32(self.arena.pods.len());
            self.arena.pods.push(PodRef {
                workload: w,
                pod_set: s,
                pod: p,
            });
            let kind = if (rank as u32) < missing {
                ItemKind::Fill
            } else {
                ItemKind::Ordered
            };
            self.items.push(Item {
                kind,
                priority: workload.priority,
                interrupted_count: workload.interrupted_count,
                queued_at: pod.created_at,
                pod_rank: to_u32(rank),
                member: to_u32(m),
                pod_set: to_u32(s),
                pods_start,
                pods_len: 1,
                usage,
                reserve: NONE,
                slot,
                allowed,
                prefer: flavor,
                flavor: 0,
                topology: asks_topology(pod),
            });
        }
    }

    /// A pod set of a workload that has not started, into its gang: the set's first gated pods up
    /// to its minimum, plus a reservation for the members not created yet.
    pub(super) fn add_set_to_gang(&mut self, gang: &mut Gang, w: usize, s: usize) {
        let set = &self.snapshot.workloads[w].pod_sets[s];
        let width = self.width;
        if gang.usage == NONE {
            gang.usage = self.arena.push_zeroed(self.item_width);
            gang.reserve = self.arena.push_zeroed(self.item_width);
        }
        let at = |p: usize| PodRef {
            workload: w,
            pod_set: s,
            pod: p,
        };
        if let Some(&first) = self.gated.first() {
            let candidate = (set.pods[first].created_at, at(first));
            if gang.earliest.as_ref().is_none_or(|e| candidate.0 < e.0) {
                gang.earliest = Some(candidate);
            }
        }
        let take = (set.min_count as usize).min(self.gated.len());
        for &p in &self.gated[..take] {
            gang.allowed &= self.allowed_for(&set.pods[p]);
            gang.topology |= asks_topology(&set.pods[p]);
            self.arena.pods.push(at(p));
            self.dims.add_projected(
                &set.pods[p].requests,
                self.arena.slice_mut(gang.usage, width),
            );
        }
        let missing = set.min_count.saturating_sub(take as u32);
        if missing > 0 {
            // The member's size in a vector of its own, scaled into the gang's reservation, then
            // dropped: the arena ends with the gang's vectors again.
            let per_pod = self.arena.push_zeroed(width);
            self.dims
                .add_projected(&set.per_pod, self.arena.slice_mut(per_pod, width));
            let (head, tail) = self.arena.values.split_at_mut(per_pod as usize);
            add_scaled(
                &mut head[gang.reserve as usize..gang.reserve as usize + width],
                &tail[..width],
                i64::from(missing),
            );
            self.arena.values.truncate(per_pod as usize);
        }
    }

    /// Queues the gang of a member that has not started as one item. A workload whose sets all
    /// have a minimum of zero starts with its oldest gated pod.
    pub(super) fn push_gang(&mut self, m: usize, w: usize, mut gang: Gang) {
        let workload = &self.snapshot.workloads[w];
        let mut pods_len = to_u32(self.arena.pods.len()) - gang.start;
        if pods_len == 0
            && let Some((_, pod)) = gang.earliest
        {
            let set = &workload.pod_sets[pod.pod_set];
            self.dims.add_projected(
                &set.pods[pod.pod].requests,
                self.arena.slice_mut(gang.usage, self.width),
            );
            gang.allowed &= self.allowed_for(&set.pods[pod.pod]);
            gang.topology |= asks_topology(&set.pods[pod.pod]);
            self.arena.pods.push(pod);
            pods_len = 1;
        }
        if gang.allowed == 0 {
            self.states[m].unplaceable = true;
            self.arena.pods.truncate(gang.start as usize);
            return;
        }
        self.spread(gang.usage);
        self.spread(gang.reserve);
        self.items.push(Item {
            kind: ItemKind::Ordered,
            priority: workload.priority,
            interrupted_count: workload.interrupted_count,
            queued_at: workload.queued_at,
            pod_rank: 0,
            member: to_u32(m),
            pod_set: 0,
            pods_start: gang.start,
            pods_len,
            usage: gang.usage,
            reserve: gang.reserve,
            slot: NONE,
            allowed: gang.allowed,
            prefer: NO_FLAVOR,
            flavor: 0,
            topology: gang.topology,
        });
    }
}

/// Whether the pod asks for a topology domain.
fn asks_topology(pod: &PodSnapshot) -> bool {
    pod.topology.as_ref().is_some_and(|t| t.asks())
}

/// Sorts a pod set's gated pods (positions in `gated`) oldest first. Of a workload that has not
/// started only the gang's pods (its minimum, at least one) matter: those are selected first, and
/// only they are sorted.
pub(super) fn sort_gated(gated: &mut Vec<usize>, set: &PodSetSnapshot, started: bool) {
    let by_age = |a: &usize, b: &usize| {
        let (pa, pb) = (&set.pods[*a], &set.pods[*b]);
        pa.created_at
            .cmp(&pb.created_at)
            .then_with(|| pa.name.cmp(&pb.name))
            .then_with(|| a.cmp(b))
    };
    if !started {
        let needed = (set.min_count as usize).max(1);
        if needed < gated.len() {
            gated.select_nth_unstable_by(needed, by_age);
            gated.truncate(needed);
        }
    }
    gated.sort_unstable_by(by_age);
}
