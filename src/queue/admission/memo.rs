//! Passes over the same workloads again ([`decide_again`]): what each queue's pass gathered (its
//! demand items in admission order, the arena of their vectors, each member's counts and
//! holdings, the reserved gang places) is kept as gathered, before admission changes any of it,
//! and the next pass gathers again only the members whose workloads changed. Admission in order
//! and the tallies still run over the whole queue: a change anywhere may change every decision
//! after it.
//!
//! Exact, not approximate: a member's gather reads only its own workload, its queue and its
//! place among the queue's members, so a member whose workload did not change gathers the same
//! as last time; the queue's usage and reservations are summed again over every member in
//! member order, as a full gather sums them; the items of the members gathered again are merged
//! into the kept ones in the order [`order::sort_items`] puts them in (a strict total order:
//! rank, workload key, position in the workload). Only offsets into the arena differ from a
//! full gather's, and nothing reads those but through the items. The property test
//! `admission_tests::again` compares it with [`decide`] after random changes.

use super::arena::{Item, add_into};
use super::fit::split_two;
use super::order::{item_order, sort_items};
use super::*;

/// What a pass over a group of queues keeps for the next pass over the same workloads. See the
/// module documentation.
#[derive(Default)]
pub struct Memo {
    valid: bool,
    /// The queues it was kept for.
    queues: Vec<QueueSnapshot>,
    /// Per queue its members (indexes into the workloads); per workload, its queue and its place
    /// among that queue's members (None: its queue does not exist).
    members: Vec<Vec<usize>>,
    place: Vec<Option<(usize, usize)>>,
    /// Per queue, what its pass gathered.
    scratches: Vec<Scratch>,
}

/// How one queue's pass gathers its demand.
#[derive(Clone, Copy)]
pub(super) enum Gather<'c> {
    /// Every member, nothing kept.
    All,
    /// Every member, kept for the next pass.
    Keep,
    /// Only these members (sorted, no repeats) again, over what the last pass kept; every member
    /// when nothing fitting was kept.
    Changed(&'c [usize]),
}

/// A queue's gather as gathered, before admission changed it (see the module documentation).
#[derive(Default)]
pub(super) struct Kept {
    valid: bool,
    /// The members and the width of the vectors it was gathered for.
    members: usize,
    width: usize,
    states: Vec<MemberState>,
    used: Vec<i64>,
    reserved: Vec<i64>,
    slots: Vec<Slot>,
    /// The arena's values and pods after the last full gather: a member gathered again appends
    /// its vectors and leaves the old ones unread, so past twice these the next pass gathers all
    /// again (the arena's size stays within twice what it holds).
    base: (usize, usize),
}

impl Kept {
    /// Whether the members `changed` can be gathered again over what is kept.
    fn fits(&self, members: usize, width: usize, arena: &Arena, changed: &[usize]) -> bool {
        self.valid
            && self.members == members
            && self.width == width
            && changed.len().saturating_mul(4) <= members
            && changed.last().is_none_or(|m| *m < members)
            && arena.values.len() <= 2 * self.base.0 + 4096
            && arena.pods.len() <= 2 * self.base.1 + 1024
            && self.slots.len() <= 2 * members + 1024
    }
}

/// Decides as [`decide`] does (no nodes' room), keeping in `memo` what makes the next call over
/// the same workloads cheaper. `changed`: the workloads replaced (by index) since the call that
/// kept `memo`, every other workload and the number of workloads being the same as then; None
/// when anything may have changed (a workload added or removed, another snapshot). `previous`:
/// the workloads' tallies of the last pass (or none): where a new tally's lists or reason are
/// equal to the old one's, the old ones are taken instead of made again (no strings copied per
/// waiting workload); they never change what is decided.
pub fn decide_again(
    snapshot: &Snapshot,
    memo: &mut Memo,
    changed: Option<&[usize]>,
    previous: Vec<WorkloadTally>,
) -> Decisions {
    let queue_index: HashMap<&str, usize> = (snapshot.queues.iter().enumerate())
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let queue_of = |w: usize| {
        queue_index
            .get(snapshot.workloads[w].queue.as_str())
            .copied()
    };
    let same = memo.valid
        && memo.place.len() == snapshot.workloads.len()
        && memo.queues == snapshot.queues;
    let mut per_queue: Vec<Option<Vec<usize>>> = vec![None; snapshot.queues.len()];
    let mut kept = false;
    if let Some(changed) = changed.filter(|_| same) {
        kept = true;
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); snapshot.queues.len()];
        for &w in changed {
            // A workload that moved to another queue changes the members: gather all again.
            let place = memo.place.get(w).copied().flatten();
            match (place, w < snapshot.workloads.len()) {
                (Some((q, m)), true) if queue_of(w) == Some(q) => members[q].push(m),
                (None, true) if queue_of(w).is_none() => {}
                _ => kept = false,
            }
        }
        for (q, mut m) in members.into_iter().enumerate() {
            m.sort_unstable();
            m.dedup();
            per_queue[q] = Some(m);
        }
    }
    if !kept {
        per_queue.iter_mut().for_each(|c| *c = None);
        memo.members = vec![Vec::new(); snapshot.queues.len()];
        memo.place = vec![None; snapshot.workloads.len()];
        for w in 0..snapshot.workloads.len() {
            if let Some(q) = queue_of(w) {
                memo.place[w] = Some((q, memo.members[q].len()));
                memo.members[q].push(w);
            }
        }
        memo.queues = snapshot.queues.clone();
        memo.scratches
            .resize_with(snapshot.queues.len(), Scratch::default);
        for scratch in &mut memo.scratches {
            scratch.kept.valid = false;
        }
    }
    memo.valid = false;
    let orphans = (0..snapshot.workloads.len()).filter(|w| memo.place[*w].is_none());
    let decisions = decide_gathered(
        snapshot,
        None,
        &memo.members,
        orphans,
        Gathering::Kept(&mut memo.scratches, &per_queue),
        previous,
    );
    memo.valid = true;
    decisions
}

impl<'a> QueuePass<'a> {
    /// A queue's pass with its demand gathered and in admission order, as `gather` says.
    pub(super) fn prepared(
        ctx: (&'a Snapshot, &'a topology::SharedRooms<'a>),
        queue: &'a QueueSnapshot,
        members: &'a [usize],
        scratch: &'a mut Scratch,
        gather: Gather<'_>,
    ) -> Self {
        let Scratch {
            arena,
            items,
            slots,
            gated,
            kept,
        } = scratch;
        let dims = Dimensions::for_queue(queue);
        let width = dims.width();
        let again = match gather {
            Gather::Changed(c) if kept.fits(members.len(), width, arena, c) => Some(c),
            _ => None,
        };
        if gather.keeps() {
            kept.valid = false;
        }
        let Some(changed) = again else {
            let mut pass = QueuePass::new(ctx, queue, members, (dims, arena, items, slots, gated));
            for m in 0..members.len() {
                pass.gather_member(m);
            }
            pass.order_demand();
            if gather.keeps() {
                kept.base = (pass.arena.values.len(), pass.arena.pods.len());
                kept.members = members.len();
                kept.width = width;
                pass.keep(kept);
            }
            return pass;
        };
        // What was kept, as gathered: the arena and the items as they are (admission changes only
        // the arena's three scratch vectors, summed or zeroed again below), the rest moved in.
        std::mem::swap(slots, &mut kept.slots);
        let mut pass = QueuePass::resumed(
            ctx,
            queue,
            members,
            (dims, arena, items, slots, gated),
            (
                std::mem::take(&mut kept.states),
                std::mem::take(&mut kept.used),
                std::mem::take(&mut kept.reserved),
            ),
        );
        pass.regather(changed);
        pass.keep(kept);
        pass
    }

    /// Keeps the pass's gather, as gathered, for the next pass.
    fn keep(&self, kept: &mut Kept) {
        kept.states.clone_from(&self.states);
        kept.used.clone_from(&self.member_used);
        kept.reserved.clone_from(&self.member_reserved);
        kept.slots.clone_from(self.slots);
        kept.valid = true;
    }

    /// Gathers the members `changed` again: their counts and holdings from zero, their old items
    /// out, their new ones merged in admission order; the queue's usage and reservations summed
    /// again.
    fn regather(&mut self, changed: &[usize]) {
        let width = self.width;
        for &m in changed {
            self.states[m] = MemberState::default();
            self.member_used[m * width..(m + 1) * width].fill(0);
            self.member_reserved[m * width..(m + 1) * width].fill(0);
        }
        let mut items = std::mem::take(self.items);
        items.retain(|item| changed.binary_search(&(item.member as usize)).is_err());
        for &m in changed {
            self.gather_member(m);
        }
        sort_items(self.items, self.snapshot, self.members);
        let fresh = std::mem::replace(self.items, items);
        merge_items(self.items, fresh, self.snapshot, self.members);
        let (usage, reserved) = split_two(
            &mut self.arena.values,
            self.usage_at,
            self.reserved_at,
            width,
        );
        usage.fill(0);
        reserved.fill(0);
        for m in 0..self.members.len() {
            add_into(usage, &self.member_used[m * width..(m + 1) * width]);
            add_into(reserved, &self.member_reserved[m * width..(m + 1) * width]);
        }
        self.arena.slice_mut(self.reserve_at, width).fill(0);
    }
}

impl Gather<'_> {
    fn keeps(self) -> bool {
        !matches!(self, Gather::All)
    }
}

/// Merges `fresh` (in admission order) into `items` (in admission order). A few are placed by
/// binary search; many are sorted in with the rest.
fn merge_items(items: &mut Vec<Item>, fresh: Vec<Item>, snapshot: &Snapshot, members: &[usize]) {
    if fresh.len() > 8 {
        items.extend(fresh);
        sort_items(items, snapshot, members);
        return;
    }
    let mut from = 0;
    for item in fresh {
        let order = |other: &Item| item_order(other, &item, snapshot, members);
        let at = from + items[from..].partition_point(|o| order(o) == std::cmp::Ordering::Less);
        items.insert(at, item);
        from = at + 1;
    }
}
