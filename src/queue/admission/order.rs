//! Admission in order: the demand sorted (fills, then priority, interrupted count, time, names),
//! then admitted item by item with the queue's strategy (StrictFIFO stops at the first item that
//! does not fit, BestEffortFIFO goes on), the items that do not fit kept waiting with a reason.

use super::arena::{Item, sub_from};
use super::cohort;
use super::fit::Misfit;
use super::flavor::Chosen;
use super::*;

impl<'a> QueuePass<'a> {
    /// Puts the demand items into admission order (see [`sort_items`]).
    pub(super) fn order_demand(&mut self) {
        sort_items(self.items, self.snapshot, self.members);
    }

    /// Admits the ordered items one by one while they fit. BestEffortFIFO goes on past an item
    /// that does not fit; StrictFIFO keeps everything after it waiting. An item that does not fit
    /// may preempt (see [`Self::try_preemption`]): from then on the room it is promised is held
    /// and the workloads losing pods admit nothing more in this pass. Returns, per member, the
    /// first reason it was kept waiting.
    pub(super) fn admit_in_order(
        &mut self,
        admit: &mut Vec<PodRef>,
        evict: &mut Vec<Eviction>,
    ) -> Vec<Option<Waiting>> {
        let mut progress = self.start(admit.len());
        while self.step(&mut progress, admit, evict, None) != Step::Done {}
        self.finish(progress)
    }

    /// The state of the admission in order before its first item.
    pub(super) fn start(&self, first_admit: usize) -> Progress {
        Progress {
            next: 0,
            first_admit,
            waiting: vec![None; self.members.len()],
            blocker: None,
            in_force: None,
            attempts: 0,
            floor: self.floor(),
            borrow_key: 0,
            misfit: None,
            up: None,
        }
    }

    /// Considers the next item in order: admits it, or keeps it waiting (and may plan a
    /// preemption for it). In a cohort (`turn`), an item that needs borrowed quota or that would
    /// reclaim lent quota stays up and the cohort decides ([`Step::Borrow`], [`Step::Reclaim`]).
    pub(super) fn step(
        &mut self,
        p: &mut Progress,
        admit: &mut Vec<PodRef>,
        evict: &mut Vec<Eviction>,
        turn: Option<&mut cohort::Turn>,
    ) -> Step {
        let Some(&item) = self.items.get(p.next) else {
            return Step::Done;
        };
        let m = item.member as usize;
        if let Some(first) = p.blocker {
            if p.waiting[m].is_none() {
                p.waiting[m] = Some(Waiting::Behind(first));
            }
            p.next += 1;
            return Step::Went;
        }
        let frozen = p.in_force.as_ref().is_some_and(|f| f.frozen[m]);
        let mut turn = turn;
        let Chosen {
            item,
            credit,
            misfit,
            check,
            reason: flavor_reason,
        } = self.choose_flavor(&item, turn.as_deref_mut());
        let may_take = misfit.is_none() || (turn.is_some() && check.is_none());
        if !frozen && may_take && self.waits_for_domain(p, &item, flavor_reason.as_ref()) {
            p.next += 1;
            return Step::Went;
        }
        let Some(turn) = turn else {
            match misfit {
                None if !frozen => self.take(&item, credit, admit),
                None => {}
                Some(misfit) => self.keep_waiting(p, &item, &misfit, flavor_reason, admit, evict),
            }
            p.next += 1;
            return Step::Went;
        };
        match (misfit, check) {
            (None, None) if !frozen => self.take_in_cohort(&item, credit, admit, turn),
            (Some(_), None) if !frozen && !turn.closed() => {
                if !turn.may_borrow {
                    p.borrow_key = self.borrow_share(&item, turn);
                    return Step::Borrow;
                }
                self.take_in_cohort(&item, credit, admit, turn);
            }
            (None, Some(over)) if !frozen && turn.may_reclaim(&item) => {
                p.misfit = Some(over);
                p.up = Some(item);
                return Step::Reclaim;
            }
            (None, None) | (Some(_), None) if frozen => {}
            (nominal, over) => {
                let over = over.or(nominal);
                if let Some(over) = over {
                    let reason = flavor_reason.unwrap_or_else(|| turn.reason(self, &over));
                    match nominal {
                        Some(nominal) => {
                            self.keep_waiting(p, &item, &nominal, Some(reason), admit, evict);
                            // Room held for an in-queue preemptor is the queue's in the pool too.
                            self.held_in_cohort(turn);
                        }
                        None => self.waits(p, &item, reason),
                    }
                }
            }
        }
        p.next += 1;
        Step::Went
    }

    /// Records why an item that does not fit waits, lets it look for victims in its queue, and
    /// in StrictFIFO makes it the blocker. `reason`: the cohort's reason, instead of the quota's.
    pub(super) fn keep_waiting(
        &mut self,
        p: &mut Progress,
        item: &Item,
        misfit: &Misfit,
        reason: Option<WaitReason>,
        admit: &[PodRef],
        evict: &mut Vec<Eviction>,
    ) {
        let m = item.member as usize;
        if p.waiting[m].is_none() {
            p.waiting[m] = Some(reason.map_or(Waiting::Misfit(*misfit), Waiting::Reason));
        }
        if p.in_force.is_none() && self.may_preempt(item, misfit, p.attempts, p.floor) {
            p.attempts += 1;
            p.in_force = self.try_preemption(item, &admit[p.first_admit..], evict);
            if let Some(reason) = p.in_force.as_mut().and_then(|f| f.reason.take()) {
                p.waiting[m] = Some(Waiting::Reason(reason));
            }
        }
        if self.queue.strategy == QueueingStrategy::StrictFIFO {
            p.blocker = Some(self.members[m]);
        }
    }

    /// Records why an item waits (when its member has no reason yet) and, in StrictFIFO, makes it
    /// the blocker.
    pub(super) fn waits(&self, p: &mut Progress, item: &Item, reason: WaitReason) {
        let m = item.member as usize;
        if p.waiting[m].is_none() {
            p.waiting[m] = Some(Waiting::Reason(reason));
        }
        if self.queue.strategy == QueueingStrategy::StrictFIFO {
            p.blocker = Some(self.members[m]);
        }
    }

    /// Ends the admission in order: the room held for a preemptor is released. Returns, per
    /// member, the first reason it was kept waiting.
    pub(super) fn finish(&mut self, progress: Progress) -> Vec<Option<Waiting>> {
        if let Some(in_force) = progress.in_force {
            let reserved_at = self.reserved_at;
            sub_from(
                self.arena.slice_mut(reserved_at, self.width),
                &in_force.hold,
            );
        }
        progress.waiting
    }
}

/// The admission order [`sort_items`] sorts into, as one comparison: rank, then (between
/// workloads) the workload key, then the position ([`Item::within`]). A strict total order: no two
/// items of a pass compare equal (member, pod set and pod rank tell them apart).
pub(super) fn item_order(
    a: &Item,
    b: &Item,
    snapshot: &Snapshot,
    members: &[usize],
) -> std::cmp::Ordering {
    let key = |item: &Item| &snapshot.workloads[members[item.member as usize]].key;
    a.rank()
        .cmp(&b.rank())
        .then_with(|| {
            if a.member == b.member {
                std::cmp::Ordering::Equal
            } else {
                key(a).cmp(key(b))
            }
        })
        .then_with(|| a.within().cmp(&b.within()))
}

/// Sorts the items into admission order: rank, then workload key, then position. Integers first
/// (one unstable sort on a key that is unique per item); workload keys are compared as strings only
/// inside runs of equal rank that hold more than one workload, which are rare unless many items
/// were queued in the same millisecond.
pub(super) fn sort_items(items: &mut [Item], snapshot: &Snapshot, members: &[usize]) {
    items.sort_unstable_by_key(|item| (item.rank(), item.member, item.pod_rank, item.pod_set));
    let key = |item: &Item| &snapshot.workloads[members[item.member as usize]].key;
    let mut start = 0;
    while start < items.len() {
        let rank = items[start].rank();
        let mut end = start + 1;
        let mut several = false;
        while end < items.len() && items[end].rank() == rank {
            several |= items[end].member != items[start].member;
            end += 1;
        }
        if several {
            items[start..end].sort_unstable_by(|a, b| {
                key(a).cmp(key(b)).then_with(|| a.within().cmp(&b.within()))
            });
        }
        start = end;
    }
}
