//! Flavors: a flavored queue has a quota per flavor (a ResourceFlavor: node labels and
//! tolerations), tried in order. Each item (a gang, or one pod of a started workload) is admitted
//! whole in one flavor: its vectors are kept once per flavor, each in its flavor's block of the
//! queue's dimensions ([`Dimensions::for_queue`]), so that trying a flavor is moving two offsets
//! and the rest of the pass (fit, cohorts, preemption) reads the item as it reads any other.
//!
//! Choice, per item: the flavors its pods' own node constraints allow, its pod set's flavor
//! first (a started workload's pods stay beside their set), then the queue's order. The first
//! flavor where it fits without borrowing wins; else, in a cohort, the first where it fits by
//! borrowing (lent quota may be reclaimed, so a flavor of its own goes first); else the first
//! where it fits its own quota but the cohort lent it out (a reclaim); else it waits on the
//! first flavor (which may preempt), with why each flavor did not fit. A gang that asks for one
//! topology domain or for its data's nodes fits a flavor only where that flavor's nodes also have
//! the room it asks for: a flavor whose nodes cannot hold it is passed over like a full one.

use super::arena::{Item, NO_FLAVOR, flavor_index, to_u32};
use super::cohort::Turn;
use super::fit::Misfit;
use super::*;

/// The outcome of choosing an item's flavor: the item in it (its reservation loaded), whether it
/// takes a reserved gang place, where it overflows the quota and (in a cohort) what the cohort
/// gives, and, when no flavor fits, why per flavor.
pub(super) struct Chosen {
    pub(super) item: Item,
    pub(super) credit: bool,
    pub(super) misfit: Option<Misfit>,
    pub(super) check: Option<Misfit>,
    pub(super) reason: Option<WaitReason>,
}

impl QueuePass<'_> {
    /// Every flavor of the queue (1 without flavors).
    pub(super) fn all_flavors(&self) -> u16 {
        if self.queue.flavors.is_empty() {
            return 1;
        }
        let mut usable = 0u16;
        for (f, flavor) in self.queue.flavors.iter().take(MAX_FLAVORS).enumerate() {
            if flavor.defined {
                usable |= 1 << f;
            }
        }
        usable
    }

    /// The flavors a pod's own node constraints allow.
    pub(super) fn allowed_for(&self, pod: &PodSnapshot) -> u16 {
        if self.queue.flavors.is_empty() {
            return 1;
        }
        let Some(placement) = pod.placement.as_deref() else {
            return self.all_flavors();
        };
        let mut allowed = 0u16;
        for (f, flavor) in self.queue.flavors.iter().take(MAX_FLAVORS).enumerate() {
            if flavor.defined && placement.allows(&flavor.node_labels) {
                allowed |= 1 << f;
            }
        }
        allowed
    }

    /// The flavor an admitted pod is charged to.
    pub(super) fn flavor_of(&self, pod: &PodSnapshot) -> u8 {
        flavor_index(self.queue, pod)
    }

    /// The flavor of a set's first admitted pod (the first flavor when none is admitted).
    pub(super) fn set_flavor(&self, set: &PodSetSnapshot) -> usize {
        (set.pods.iter())
            .find(|p| p.state == PodState::Admitted)
            .map_or(0, |p| usize::from(self.flavor_of(p)))
    }

    /// Copies an item vector's first block (as gathered) into every other flavor's vector, each
    /// in its own block (see the module documentation).
    pub(super) fn spread(&mut self, at: u32) {
        if self.dims.flavors <= 1 {
            return;
        }
        let (width, block, at) = (self.width, self.dims.block, at as usize);
        for f in 1..self.dims.flavors {
            for r in 0..block {
                self.arena.values[at + f * width + f * block + r] = self.arena.values[at + r];
            }
        }
    }

    /// The item with its vectors in flavor `f`.
    pub(super) fn in_flavor(&self, item: &Item, f: u8) -> Item {
        let offset = to_u32(usize::from(f) * self.width);
        let mut moved = *item;
        moved.usage += offset;
        if moved.reserve != arena::NONE {
            moved.reserve += offset;
        }
        moved.flavor = f;
        moved
    }

    /// The flavors to try for the item, in order: its set's first, then the queue's order.
    fn flavor_order(&self, item: &Item) -> impl Iterator<Item = u8> + use<> {
        let (allowed, prefer) = (item.allowed, item.prefer);
        let n = u8::try_from(self.dims.flavors.min(MAX_FLAVORS)).unwrap_or(0);
        let first =
            (prefer != NO_FLAVOR && prefer < n && allowed & (1 << prefer) != 0).then_some(prefer);
        first
            .into_iter()
            .chain((0..n).filter(move |&f| Some(f) != first && allowed & (1u16 << f) != 0))
    }

    /// Chooses the item's flavor (see the module documentation); an unflavored queue's item as
    /// it is.
    pub(super) fn choose_flavor(&mut self, item: &Item, mut turn: Option<&mut Turn>) -> Chosen {
        self.placeable = None;
        if self.queue.flavors.is_empty() {
            return self.judge(item, turn, None);
        }
        // Class: 0 fits, 1 fits by borrowing, 2 fits its own quota lent out, 3 fits the quota
        // but its flavor's nodes have no room where it asks to run, 4 does not fit.
        let mut best: Option<(u8, Item)> = None;
        let mut tried = Vec::new();
        for f in self.flavor_order(item) {
            let candidate = self.in_flavor(item, f);
            let judged = self.judge(&candidate, turn.as_deref_mut(), None);
            let class = match (judged.misfit, judged.check, turn.is_some()) {
                (None, None, _) => 0,
                (Some(_), None, true) => 1,
                (None, Some(_), true) => 2,
                _ => 4,
            };
            // A gang asking for one domain (or for its data's nodes) that its flavor's nodes
            // cannot hold would only wait there: the next flavor whose nodes can is taken instead.
            let no_room = (class < 4)
                .then(|| self.plan_topology(&candidate).err())
                .flatten();
            let class = if no_room.is_some() { 3 } else { class };
            if class == 0 {
                self.placeable = Some((candidate.pods_start, candidate.flavor));
                return judged;
            }
            let flavor = || self.queue.flavors[usize::from(f)].name.clone();
            if let Some(why) = no_room {
                tried.push((flavor(), why));
            } else if let Some(over) = judged.check.or(judged.misfit) {
                let why = match turn.as_deref() {
                    Some(turn) if judged.check.is_some() => turn.reason(self, &over),
                    _ => over.reason(&self.queue.name, &self.dims),
                };
                tried.push((flavor(), why));
            }
            if best.as_ref().is_none_or(|(c, _)| class < *c) {
                best = Some((class, candidate));
            }
        }
        let reason = WaitReason::NoFlavorFits {
            queue: self.queue.name.clone(),
            tried,
        };
        let chosen = best.map_or(*item, |(_, candidate)| candidate);
        self.judge(&chosen, turn, Some(reason))
    }

    /// The item as it stands: its reservation loaded, its misfits.
    fn judge(
        &mut self,
        item: &Item,
        turn: Option<&mut Turn>,
        reason: Option<WaitReason>,
    ) -> Chosen {
        let credit = self.load_reserve(item);
        let misfit = self.misfit(item, &self.dims.limits);
        let check = turn.and_then(|turn| self.cohort_check(item, turn));
        Chosen {
            item: *item,
            credit,
            misfit,
            check,
            reason,
        }
    }

    /// Hands the flavors the pass admitted pods in to the decisions.
    pub(super) fn record_flavors(&mut self, flavors: &mut HashMap<PodRef, Arc<FlavorSnapshot>>) {
        for (pod, f) in self.chosen.drain(..) {
            if let Some(flavor) = self.queue.flavors.get(usize::from(f)) {
                flavors.insert(pod, Arc::clone(flavor));
            }
        }
    }
}
