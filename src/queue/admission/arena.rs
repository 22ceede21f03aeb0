//! Where a queue's pass keeps its demand: small `Copy` items holding offsets into one flat arena
//! of resource vectors, and the queue's resources in a fixed order, so that building and sorting
//! the demand allocates nothing per item.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ItemKind {
    Fill = 0,
    Ordered = 1,
}

/// Marks an absent offset or slot.
pub(super) const NONE: u32 = u32::MAX;

/// One pending demand item. Small and `Copy`: vectors live in the pass's arenas (`Arena`), items
/// hold offsets into them, so building and sorting items allocates nothing per item.
#[derive(Clone, Copy)]
pub(super) struct Item {
    pub(super) kind: ItemKind,
    pub(super) priority: i32,
    pub(super) interrupted_count: i32,
    pub(super) queued_at: i64,
    /// Tie-breaker inside a workload: the pod's position among the set's gated pods (elastic) or 0
    /// (gang).
    pub(super) pod_rank: u32,
    /// Position of the workload in the queue's members.
    pub(super) member: u32,
    pub(super) pod_set: u32,
    /// The item's pods: `arena.pods[pods_start..pods_start + pods_len]`.
    pub(super) pods_start: u32,
    pub(super) pods_len: u32,
    /// Added to usage when admitted (the pods' requests): `arena.values[usage..usage + width]`.
    pub(super) usage: u32,
    /// Added to reservations when admitted (gang members not created yet), or NONE for nothing.
    pub(super) reserve: u32,
    /// For a single pod of a started workload: the slot of its pod set, whose unfilled reservation
    /// (if any is left when the pod is admitted) the pod takes over; NONE otherwise.
    pub(super) slot: u32,
    /// A flavored queue: the flavors the item's pods may run in (bit f: flavor f), the one to try
    /// first (its pod set's, [`NO_FLAVOR`]: none), and the one its vectors are in now (see
    /// [`QueuePass::in_flavor`]). An unflavored queue: 1, NO_FLAVOR, 0.
    pub(super) allowed: u16,
    pub(super) prefer: u8,
    pub(super) flavor: u8,
    /// Some pod of the item asks for a topology domain (see `topology.rs`).
    pub(super) topology: bool,
}

/// No flavor preferred.
pub(super) const NO_FLAVOR: u8 = u8::MAX;

impl Item {
    /// The rank of the item: kind, priority (high first), interrupted count (high first), time.
    pub(super) fn rank(&self) -> (ItemKind, i32, i32, i64) {
        // High first: `!x` is -x - 1, decreasing in x and defined for every i32.
        (
            self.kind,
            !self.priority,
            !self.interrupted_count,
            self.queued_at,
        )
    }

    /// Order inside one workload, and between workloads whose keys are equal: the position of the
    /// pod, then the order the items were produced in (member, pod set).
    pub(super) fn within(&self) -> (u32, u32, u32) {
        (self.pod_rank, self.member, self.pod_set)
    }
}

/// Gang members reserved by a started workload and not admitted yet, per pod set.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub(super) left: u32,
    /// Size of one member: `arena.values[per_pod..per_pod + width]`.
    pub(super) per_pod: u32,
    /// The flavor the reservation is charged to: only a pod admitted in it takes its place.
    pub(super) flavor: u8,
}

/// Flat storage of one queue's pass.
#[derive(Default)]
pub(super) struct Arena {
    /// Resource vectors of `width` values each.
    pub(super) values: Vec<i64>,
    pub(super) pods: Vec<PodRef>,
}

impl Arena {
    /// Appends a zeroed vector and returns its offset.
    pub(super) fn push_zeroed(&mut self, width: usize) -> u32 {
        let at = self.values.len();
        self.values.resize(at + width, 0);
        to_u32(at)
    }

    pub(super) fn slice(&self, at: u32, width: usize) -> &[i64] {
        let at = at as usize;
        &self.values[at..at + width]
    }

    pub(super) fn slice_mut(&mut self, at: u32, width: usize) -> &mut [i64] {
        let at = at as usize;
        &mut self.values[at..at + width]
    }
}

/// Indexes are far below u32::MAX (a snapshot of 4 billion pods would not fit in memory anyway);
/// saturate rather than wrap should that ever change.
pub(super) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX - 1)
}

/// The queue's resources in a fixed order: those the quota names first (checked), then cpu and
/// memory for the status when the quota does not name them. A flavored queue has one block of
/// the same `block` resources per flavor, in flavor order, named `<flavor>:<resource>`
/// (dimension `f * block + r`); an unflavored queue is one block.
pub(super) struct Dimensions {
    pub(super) names: Vec<String>,
    pub(super) limits: Vec<Option<i64>>,
    /// (resource, index in a block) sorted by resource, to project a resource list in one merge
    /// walk.
    pub(super) by_name: Vec<(String, usize)>,
    /// Resources per flavor block, and the number of blocks (1 without flavors).
    pub(super) block: usize,
    pub(super) flavors: usize,
}

impl Dimensions {
    pub(super) fn new(quota: &ResourceList) -> Self {
        let mut names: Vec<String> = quota.0.keys().cloned().collect();
        let mut limits: Vec<Option<i64>> = quota.0.values().map(|v| Some(*v)).collect();
        for extra in ["cpu", "memory", "pods"] {
            if !quota.0.contains_key(extra) {
                names.push(extra.to_string());
                limits.push(None);
            }
        }
        let by_name = sorted_positions(&names);
        Dimensions {
            block: names.len(),
            names,
            limits,
            by_name,
            flavors: 1,
        }
    }

    /// A queue's dimensions: its quota's, or one block per flavor over every resource any of
    /// its flavors names (a flavor that does not name a resource does not limit it).
    pub(super) fn for_queue(queue: &QueueSnapshot) -> Self {
        if queue.flavors.is_empty() {
            return Dimensions::new(&queue.quota);
        }
        let mut base: Vec<String> = Vec::new();
        for flavor in &queue.flavors {
            for name in flavor.quota.0.keys() {
                if !base.contains(name) {
                    base.push(name.clone());
                }
            }
        }
        base.sort();
        for extra in ["cpu", "memory", "pods"] {
            if !base.iter().any(|b| b == extra) {
                base.push(extra.to_string());
            }
        }
        let (mut names, mut limits) = (Vec::new(), Vec::new());
        for flavor in &queue.flavors {
            for resource in &base {
                names.push(flavored_resource(&flavor.name, resource));
                limits.push(flavor.quota.0.get(resource).copied());
            }
        }
        Dimensions {
            by_name: sorted_positions(&base),
            block: base.len(),
            names,
            limits,
            flavors: queue.flavors.len(),
        }
    }

    pub(super) fn width(&self) -> usize {
        self.names.len()
    }

    /// The resource of a dimension, without its flavor.
    pub(super) fn base_name(&self, d: usize) -> &str {
        let name = &self.names[d];
        split_flavored(name).map_or(name.as_str(), |(_, resource)| resource)
    }

    /// Adds the list's values into flavor `flavor`'s block of `out`.
    pub(super) fn add_projected_in(&self, list: &ResourceList, flavor: usize, out: &mut [i64]) {
        let at = flavor * self.block;
        self.add_projected(list, &mut out[at..]);
    }

    /// The list projected into flavor `flavor`'s block.
    pub(super) fn project_in(&self, list: &ResourceList, flavor: usize) -> Vec<i64> {
        let mut out = vec![0i64; self.width()];
        self.add_projected_in(list, flavor, &mut out);
        out
    }

    /// Adds the list's values for the queue's dimensions into `out` (a merge of two sorted lists:
    /// no lookups, no allocation); in a flavored queue, into the first flavor's block.
    pub(super) fn add_projected(&self, list: &ResourceList, out: &mut [i64]) {
        let mut dims = self.by_name.iter().peekable();
        for (name, value) in &list.0 {
            while let Some((dim_name, d)) = dims.peek() {
                match dim_name.as_str().cmp(name.as_str()) {
                    std::cmp::Ordering::Less => {
                        dims.next();
                    }
                    std::cmp::Ordering::Equal => {
                        out[*d] = out[*d].saturating_add(*value);
                        dims.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if dims.peek().is_none() {
                break;
            }
        }
    }

    /// Whether `list` is [`Self::to_list`] of `values`, without making it.
    pub(super) fn is_list_of(&self, values: &[i64], list: &ResourceList) -> bool {
        let mut nonzero = 0;
        for (name, value) in self.names.iter().zip(values) {
            if *value != 0 {
                nonzero += 1;
                if list.0.get(name) != Some(value) {
                    return false;
                }
            }
        }
        nonzero == list.0.len()
    }

    pub(super) fn to_list(&self, values: &[i64]) -> ResourceList {
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

/// The flavor index an admitted pod is charged to in its queue: the one its `sluice.dev/flavor`
/// names; the first when it names none the queue lists (or the queue has no flavors).
pub(super) fn flavor_index(queue: &QueueSnapshot, pod: &PodSnapshot) -> u8 {
    if queue.flavors.len() <= 1 {
        return 0;
    }
    let Some(name) = pod.flavor.as_deref() else {
        return 0;
    };
    let found = queue.flavors.iter().position(|f| f.name == name);
    found.map_or(0, |f| u8::try_from(f).unwrap_or(0))
}

/// (name, position) sorted by name.
fn sorted_positions(names: &[String]) -> Vec<(String, usize)> {
    let mut by_name: Vec<(String, usize)> = names
        .iter()
        .enumerate()
        .map(|(d, n)| (n.clone(), d))
        .collect();
    by_name.sort();
    by_name
}

pub(super) fn add_into(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_add(*v);
    }
}

pub(super) fn sub_from(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_sub(*v);
    }
}
