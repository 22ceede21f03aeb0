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
}

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
pub(super) struct Slot {
    pub(super) left: u32,
    /// Size of one member: `arena.values[per_pod..per_pod + width]`.
    pub(super) per_pod: u32,
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
/// memory for the status when the quota does not name them.
pub(super) struct Dimensions {
    pub(super) names: Vec<String>,
    pub(super) limits: Vec<Option<i64>>,
    /// (name, dimension) sorted by name, to project a resource list in one merge walk.
    pub(super) by_name: Vec<(String, usize)>,
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
        let mut by_name: Vec<(String, usize)> = names
            .iter()
            .enumerate()
            .map(|(d, n)| (n.clone(), d))
            .collect();
        by_name.sort();
        Dimensions {
            names,
            limits,
            by_name,
        }
    }

    pub(super) fn width(&self) -> usize {
        self.names.len()
    }

    /// Adds the list's values for the queue's dimensions into `out` (a merge of two sorted lists:
    /// no lookups, no allocation).
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

    pub(super) fn project(&self, list: &ResourceList) -> Vec<i64> {
        let mut out = vec![0i64; self.width()];
        self.add_projected(list, &mut out);
        out
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
