//! Incremental admission passes: a pass after a few changes costs in proportion to what changed.
//!
//! Two layers, each a cache of a pure function, never a decision of its own:
//! - [`Snapshotter`] keeps the governed pods grouped by workload (by their [`PodFacts`]) and builds
//!   again, with [`snapshot::build_from_facts`] over that subset, only the workloads whose pods,
//!   DynamicWorkload or in-flight pods changed since the last pass. A change of the queues' rules
//!   (namespace selector, priority cap, requeue limit) or of the namespaces builds every workload
//!   again: the full path, also the one of a restart.
//! - [`Decider`] keeps, per *group* (a queue alone, or every queue of a cohort: those are decided
//!   together), the group's workloads as a snapshot of their own and the decisions of its last
//!   pass; only the groups whose workloads or queues changed are decided again ([`decide`] over
//!   the group's snapshot), the others' decisions are reused.
//!
//! The seam is exact: [`decide`] decides each queue outside cohorts, and each cohort, from its own
//! workloads and queues only, so a group's decisions over its own snapshot are its part of the
//! decisions over the whole. Inside a group the workloads are ordered by key, as the full build
//! orders them; pods inside a workload by name (and uid). [`Snapshotter::assemble`] puts the parts
//! back together in the order [`decide`] admits in (queues outside cohorts in their order, then
//! cohorts by name); the property test `incremental_tests` checks that the result is the full
//! pass's over the same cluster after random changes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::queue::admission::{
    Decisions, Eviction, Memo, PodRef, QueueSnapshot, Snapshot, WorkloadKey, WorkloadSnapshot,
    decide_again,
};
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built, InFlight, PodFacts};
use crate::queue::status::Preemption;
use crate::resources::ResourceList;

mod decider;
mod snapshotter;

pub use decider::{Decider, PassStats};
pub use snapshotter::Snapshotter;

/// Where a workload is decided: its queue alone (also a queue that does not exist), or its
/// queue's cohort.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Group {
    Queue(String),
    Cohort(String),
}

/// One workload as built: its snapshot and what acting on it needs.
pub struct Entry {
    pub snapshot: WorkloadSnapshot,
    /// The pod objects, indexed like the snapshot's pod sets and pods.
    pub pods: Vec<Vec<Arc<CachedPod>>>,
    pub dwl: Option<Arc<DynamicWorkload>>,
    pub left_behind: u32,
}

/// One group: its queues and workloads (sorted by key) as a [`Built`] of their own, and the
/// decisions of its last pass (indexes into that `Built`).
struct Part {
    built: Built,
    decisions: Decisions,
    /// What its last pass kept for the next ([`decide_again`]), the workloads replaced in place
    /// since (by index), and whether any was added or removed since (then every index may have
    /// moved).
    memo: Memo,
    replaced: Vec<usize>,
    reshaped: bool,
}

impl Part {
    fn new(queues: Vec<QueueSnapshot>) -> Part {
        Part::of(Built {
            snapshot: Snapshot {
                queues,
                workloads: Vec::new(),
            },
            pods: Vec::new(),
            workloads: Vec::new(),
            problems: Vec::new(),
            left_behind: Vec::new(),
        })
    }

    fn of(built: Built) -> Part {
        Part {
            built,
            decisions: Decisions::default(),
            memo: Memo::default(),
            replaced: Vec::new(),
            reshaped: true,
        }
    }

    /// Decides the group again, over what its last pass kept.
    fn decide(&mut self) {
        let replaced = (!self.reshaped).then_some(self.replaced.as_slice());
        let previous = std::mem::take(&mut self.decisions.workloads);
        let snapshot = &self.built.snapshot;
        self.decisions = decide_again(snapshot, &mut self.memo, replaced, previous);
        self.replaced.clear();
        self.reshaped = false;
    }

    fn position(&self, key: &WorkloadKey) -> Result<usize, usize> {
        (self.built.snapshot.workloads).binary_search_by(|w| w.key.cmp(key))
    }

    fn put(&mut self, entry: Entry) {
        let at = self.position(&entry.snapshot.key);
        let built = &mut self.built;
        match at {
            Ok(i) => {
                self.replaced.push(i);
                built.snapshot.workloads[i] = entry.snapshot;
                built.pods[i] = entry.pods;
                built.workloads[i] = entry.dwl;
                built.left_behind[i] = entry.left_behind;
            }
            Err(i) => {
                self.reshaped = true;
                built.snapshot.workloads.insert(i, entry.snapshot);
                built.pods.insert(i, entry.pods);
                built.workloads.insert(i, entry.dwl);
                built.left_behind.insert(i, entry.left_behind);
            }
        }
    }

    fn take(&mut self, key: &WorkloadKey) -> Option<Entry> {
        let i = self.position(key).ok()?;
        self.reshaped = true;
        let built = &mut self.built;
        Some(Entry {
            snapshot: built.snapshot.workloads.remove(i),
            pods: built.pods.remove(i),
            dwl: built.workloads.remove(i),
            left_behind: built.left_behind.remove(i),
        })
    }

    fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.reshaped = true;
        let built = &mut self.built;
        let snapshots = std::mem::take(&mut built.snapshot.workloads);
        let pods = std::mem::take(&mut built.pods);
        let dwls = std::mem::take(&mut built.workloads);
        let left = std::mem::take(&mut built.left_behind);
        (snapshots.into_iter().zip(pods).zip(dwls).zip(left)).map(
            |(((snapshot, pods), dwl), left_behind)| Entry {
                snapshot,
                pods,
                dwl,
                left_behind,
            },
        )
    }
}
