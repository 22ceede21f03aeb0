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
    Decisions, Eviction, PodRef, QueueSnapshot, Snapshot, WorkloadKey, WorkloadSnapshot, decide,
};
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built, PodFacts};
use crate::queue::status::Preemption;
use crate::resources::ResourceList;

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
}

impl Part {
    fn new(queues: Vec<QueueSnapshot>) -> Part {
        Part {
            built: Built {
                snapshot: Snapshot {
                    queues,
                    workloads: Vec::new(),
                },
                pods: Vec::new(),
                workloads: Vec::new(),
                problems: Vec::new(),
                left_behind: Vec::new(),
            },
            decisions: Decisions::default(),
        }
    }

    fn position(&self, key: &WorkloadKey) -> Result<usize, usize> {
        (self.built.snapshot.workloads).binary_search_by(|w| w.key.cmp(key))
    }

    fn put(&mut self, entry: Entry) {
        let at = self.position(&entry.snapshot.key);
        let built = &mut self.built;
        match at {
            Ok(i) => {
                built.snapshot.workloads[i] = entry.snapshot;
                built.pods[i] = entry.pods;
                built.workloads[i] = entry.dwl;
                built.left_behind[i] = entry.left_behind;
            }
            Err(i) => {
                built.snapshot.workloads.insert(i, entry.snapshot);
                built.pods.insert(i, entry.pods);
                built.workloads.insert(i, entry.dwl);
                built.left_behind.insert(i, entry.left_behind);
            }
        }
    }

    fn take(&mut self, key: &WorkloadKey) -> Option<Entry> {
        let i = self.position(key).ok()?;
        let built = &mut self.built;
        Some(Entry {
            snapshot: built.snapshot.workloads.remove(i),
            pods: built.pods.remove(i),
            dwl: built.workloads.remove(i),
            left_behind: built.left_behind.remove(i),
        })
    }

    fn drain(&mut self) -> impl Iterator<Item = Entry> + '_ {
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

/// The decision layer: per group, its workloads and its last decisions. See the module
/// documentation.
#[derive(Default)]
pub struct Decider {
    queues: Vec<QueueSnapshot>,
    /// The group of each queue that exists.
    group_of: HashMap<String, Group>,
    parts: HashMap<Group, Part>,
    /// The group each workload is in.
    placed: HashMap<WorkloadKey, Group>,
    dirty: HashSet<Group>,
    /// The groups the last pass decided (the others' decisions were reused).
    decided: HashSet<Group>,
    /// While the workloads are lent ([`Decider::lend`]): each group's share of them, in order.
    lent: Option<Vec<(Group, usize)>>,
}

/// What one [`Decider::pass`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Groups decided again.
    pub decided: usize,
    /// Groups whose last decisions were reused.
    pub reused: usize,
    /// Workloads built again (by [`Snapshotter::pass`]).
    pub built: usize,
}

impl Decider {
    fn group_for(&self, queue: &str) -> Group {
        self.group_of
            .get(queue)
            .cloned()
            .unwrap_or_else(|| Group::Queue(queue.to_string()))
    }

    /// The queues (their quotas already less what admission at creation holds). A queue whose
    /// settings changed has its group decided again; a queue added or removed, or one that
    /// changed cohort, regroups every workload.
    pub fn set_queues(&mut self, queues: Vec<QueueSnapshot>) {
        let shape = |qs: &[QueueSnapshot]| -> Vec<(String, Option<String>)> {
            qs.iter()
                .map(|q| (q.name.clone(), q.cohort.as_ref().map(|c| c.name.clone())))
                .collect()
        };
        if !self.parts.is_empty() && shape(&self.queues) == shape(&queues) {
            for (old, new) in self.queues.iter().zip(&queues) {
                if old == new {
                    continue;
                }
                let group = self.group_for(&new.name);
                if let Some(part) = self.parts.get_mut(&group)
                    && let Some(q) =
                        (part.built.snapshot.queues.iter_mut()).find(|q| q.name == new.name)
                {
                    *q = new.clone();
                }
                self.dirty.insert(group);
            }
            self.queues = queues;
            return;
        }
        // Regroup everything (rare: queues created, deleted or moved between cohorts).
        let mut entries: Vec<Entry> = Vec::new();
        for part in self.parts.values_mut() {
            entries.extend(part.drain());
        }
        self.parts.clear();
        self.placed.clear();
        self.dirty.clear();
        self.group_of = queues
            .iter()
            .map(|q| {
                let group = match &q.cohort {
                    Some(c) => Group::Cohort(c.name.clone()),
                    None => Group::Queue(q.name.clone()),
                };
                (q.name.clone(), group)
            })
            .collect();
        for q in &queues {
            let group = self.group_for(&q.name);
            let part = self
                .parts
                .entry(group.clone())
                .or_insert_with(|| Part::new(Vec::new()));
            // In the order of `queues`, as the full pass lists a cohort's queues.
            part.built.snapshot.queues.push(q.clone());
            self.dirty.insert(group);
        }
        self.queues = queues;
        for entry in entries {
            self.put(entry);
        }
    }

    /// Adds or replaces a workload; its group (and its former group) are decided again.
    pub fn put(&mut self, entry: Entry) {
        let key = entry.snapshot.key.clone();
        let group = self.group_for(&entry.snapshot.queue);
        if let Some(old) = self.placed.get(&key).cloned()
            && old != group
        {
            self.remove(&key);
        }
        let part = self
            .parts
            .entry(group.clone())
            .or_insert_with(|| Part::new(Vec::new()));
        part.put(entry);
        self.placed.insert(key, group.clone());
        self.dirty.insert(group);
    }

    /// Removes a workload (gone: no pods and no DynamicWorkload).
    pub fn remove(&mut self, key: &WorkloadKey) {
        let Some(group) = self.placed.remove(key) else {
            return;
        };
        let Some(part) = self.parts.get_mut(&group) else {
            return;
        };
        part.take(key);
        // A group of a queue that does not exist goes with its last workload.
        if part.built.snapshot.queues.is_empty() && part.built.snapshot.workloads.is_empty() {
            self.parts.remove(&group);
            self.dirty.remove(&group);
        } else {
            self.dirty.insert(group);
        }
    }

    /// Decides the groups that changed since the last pass; the others keep their decisions.
    pub fn pass(&mut self) -> PassStats {
        let mut stats = PassStats::default();
        self.decided.clear();
        for group in self.dirty.drain() {
            if let Some(part) = self.parts.get_mut(&group) {
                part.decisions = decide(&part.built.snapshot);
                stats.decided += 1;
                self.decided.insert(group);
            }
        }
        stats.reused = self.parts.len() - stats.decided;
        stats
    }

    /// Decides every group again, as a restart does.
    pub fn full_pass(&mut self) -> PassStats {
        self.dirty.extend(self.parts.keys().cloned());
        self.pass()
    }

    /// The groups in the order [`decide`] admits in: queues outside cohorts in their order, then
    /// cohorts by name, then the groups of queues that do not exist (which admit nothing).
    fn ordered(&self) -> Vec<&Part> {
        self.ordered_groups()
            .into_iter()
            .map(|(_, part)| part)
            .collect()
    }

    /// [`Decider::ordered`], each part with its group.
    fn ordered_groups(&self) -> Vec<(Group, &Part)> {
        let mut order: Vec<Group> = Vec::new();
        let mut cohorts = BTreeSet::new();
        for q in &self.queues {
            match &q.cohort {
                None => order.push(Group::Queue(q.name.clone())),
                Some(c) => {
                    cohorts.insert(Group::Cohort(c.name.clone()));
                }
            }
        }
        order.extend(cohorts);
        let known: HashSet<&Group> = order.iter().collect();
        let mut missing: Vec<&Group> = self.parts.keys().filter(|g| !known.contains(g)).collect();
        missing.sort();
        let missing: Vec<Group> = missing.into_iter().cloned().collect();
        order.extend(missing);
        (order.into_iter())
            .filter_map(|g| self.parts.get(&g).map(|part| (g, part)))
            .collect()
    }

    /// The whole, as [`Decider::assemble`] puts it together, but moved out of the groups rather than
    /// copied (a copy of every workload's snapshot cost four fifths of a pass after one change at
    /// 10k workloads × 100k pods): for a pass to act on, then [`Decider::give_back`]. The groups
    /// keep their own admit and evict lists and queue tallies (small); until the workloads are
    /// given back the groups have none, and a pass that finds them still lent starts over.
    pub fn lend(&mut self) -> (Built, Decisions) {
        let order: Vec<Group> = (self.ordered_groups().into_iter())
            .map(|(group, _)| group)
            .collect();
        let mut built = Built {
            snapshot: Snapshot {
                queues: self.queues.clone(),
                workloads: Vec::new(),
            },
            pods: Vec::new(),
            workloads: Vec::new(),
            problems: Vec::new(),
            left_behind: Vec::new(),
        };
        let mut decisions = Decisions::default();
        let mut shares = Vec::with_capacity(order.len());
        for group in order {
            let Some(part) = self.parts.get_mut(&group) else {
                continue;
            };
            let offset = built.snapshot.workloads.len();
            let moved = |r: &PodRef| PodRef {
                workload: r.workload + offset,
                ..*r
            };
            let (b, d) = (&mut part.built, &mut part.decisions);
            shares.push((group, b.snapshot.workloads.len()));
            built.snapshot.workloads.append(&mut b.snapshot.workloads);
            built.pods.append(&mut b.pods);
            built.workloads.append(&mut b.workloads);
            built.left_behind.append(&mut b.left_behind);
            decisions.workloads.append(&mut d.workloads);
            decisions.admit.extend(d.admit.iter().map(moved));
            decisions.evict.extend(d.evict.iter().map(|e| Eviction {
                victim: moved(&e.victim),
                preemptor: e.preemptor + offset,
                reason: e.reason,
            }));
            decisions
                .queues
                .extend(d.queues.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        self.lent = Some(shares);
        (built, decisions)
    }

    /// Takes back what [`Decider::lend`] lent (whatever the pass added to the lent decisions is
    /// dropped: each group keeps its own). False when it does not fit what was lent: the caller
    /// must then build and decide everything again.
    pub fn give_back(&mut self, mut built: Built, mut decisions: Decisions) -> bool {
        let Some(shares) = self.lent.take() else {
            return false;
        };
        let total: usize = shares.iter().map(|(_, n)| n).sum();
        let fits = [
            built.snapshot.workloads.len(),
            built.pods.len(),
            built.workloads.len(),
            built.left_behind.len(),
            decisions.workloads.len(),
        ]
        .iter()
        .all(|len| *len == total);
        if !fits {
            return false;
        }
        // From the last group back, each takes its tail.
        for (group, count) in shares.into_iter().rev() {
            let Some(part) = self.parts.get_mut(&group) else {
                return false;
            };
            let at = built.snapshot.workloads.len() - count;
            let b = &mut part.built;
            b.snapshot.workloads = built.snapshot.workloads.split_off(at);
            b.pods = built.pods.split_off(at);
            b.workloads = built.workloads.split_off(at);
            b.left_behind = built.left_behind.split_off(at);
            part.decisions.workloads = decisions.workloads.split_off(at);
        }
        true
    }

    /// The workloads were lent and never given back: forget every group, for the caller to put
    /// every workload again.
    fn forget_lent(&mut self) {
        if self.lent.take().is_some() {
            self.parts.clear();
            self.placed.clear();
            self.dirty.clear();
            self.decided.clear();
            self.queues.clear();
            self.group_of.clear();
        }
    }

    /// Per workload, in the order of [`Decider::assemble`]: whether the last pass decided its group
    /// (else the group's decisions, and so what its workloads' statuses say, were reused).
    pub fn decided_mask(&self) -> Vec<bool> {
        let mut mask = Vec::new();
        for (group, part) in self.ordered_groups() {
            let fresh = self.decided.contains(&group);
            mask.extend(std::iter::repeat_n(
                fresh,
                part.built.snapshot.workloads.len(),
            ));
        }
        mask
    }

    /// The whole snapshot and its decisions, put together from the groups' (for the controller's
    /// consumers that read every workload, and for the property test). Workloads are in group
    /// order, then key order.
    pub fn assemble(&self) -> (Built, Decisions) {
        let parts = self.ordered();
        let total: usize = parts.iter().map(|p| p.built.snapshot.workloads.len()).sum();
        let mut built = Built {
            snapshot: Snapshot {
                queues: self.queues.clone(),
                workloads: Vec::with_capacity(total),
            },
            pods: Vec::with_capacity(total),
            workloads: Vec::with_capacity(total),
            problems: Vec::new(),
            left_behind: Vec::with_capacity(total),
        };
        let mut decisions = Decisions {
            workloads: Vec::with_capacity(total),
            ..Decisions::default()
        };
        for part in parts {
            let offset = built.snapshot.workloads.len();
            let moved = |r: &PodRef| PodRef {
                workload: r.workload + offset,
                ..*r
            };
            let (b, d) = (&part.built, &part.decisions);
            built
                .snapshot
                .workloads
                .extend(b.snapshot.workloads.iter().cloned());
            built.pods.extend(b.pods.iter().cloned());
            built.workloads.extend(b.workloads.iter().cloned());
            built.left_behind.extend(b.left_behind.iter().copied());
            decisions.admit.extend(d.admit.iter().map(moved));
            decisions.evict.extend(d.evict.iter().map(|e| Eviction {
                victim: moved(&e.victim),
                preemptor: e.preemptor + offset,
                reason: e.reason,
            }));
            decisions.workloads.extend(d.workloads.iter().cloned());
            decisions
                .queues
                .extend(d.queues.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        (built, decisions)
    }

    /// The pods the last pass admits, each with its workload's snapshot and object list, without
    /// putting the whole together: what the ungates need.
    pub fn admitted(&self) -> impl Iterator<Item = (&WorkloadSnapshot, &Arc<CachedPod>, PodRef)> {
        self.ordered().into_iter().flat_map(|part| {
            part.decisions.admit.iter().map(move |r| {
                (
                    &part.built.snapshot.workloads[r.workload],
                    &part.built.pods[r.workload][r.pod_set][r.pod],
                    *r,
                )
            })
        })
    }
}

/// Marks to build again the workloads of the pods (by uid, as `by_uid` places them) in one of
/// `old` and `new` but not the other: a set of pods the build reads (in flight, protected) changed.
fn dirty_pods_between(
    by_uid: &HashMap<String, (WorkloadKey, String)>,
    dirty: &mut BTreeSet<WorkloadKey>,
    old: &HashSet<String>,
    new: &HashSet<String>,
) {
    for uid in old.symmetric_difference(new) {
        if let Some((key, _)) = by_uid.get(uid) {
            dirty.insert(key.clone());
        }
    }
}

/// A governed pod as kept between passes.
struct Kept {
    pod: Arc<CachedPod>,
    facts: Arc<PodFacts>,
}

/// The snapshot layer over the [`Decider`]: see the module documentation.
#[derive(Default)]
pub struct Snapshotter {
    queues: Vec<Arc<CapacityQueue>>,
    namespaces: Vec<Arc<PartialObjectMeta<Namespace>>>,
    in_flight: HashSet<String>,
    /// Per workload, its pods by (name, uid).
    pods: HashMap<WorkloadKey, BTreeMap<(String, String), Kept>>,
    /// Per pod uid, where it is kept.
    by_uid: HashMap<String, (WorkloadKey, String)>,
    dwls: HashMap<WorkloadKey, Arc<DynamicWorkload>>,
    /// Uids of pods a PodDisruptionBudget protects from eviction now.
    eviction_blocked: HashSet<String>,
    /// podsReadyTimeout rules per queue, and the requeues sent whose status is not seen yet.
    requeue_rules: HashMap<String, (i64, Option<i32>)>,
    pending_requeues: HashMap<WorkloadKey, Preemption>,
    /// Room admission at creation holds per queue, taken off the queues' quotas.
    holds: HashMap<String, ResourceList>,
    /// Workloads to build again at the next pass.
    dirty: BTreeSet<WorkloadKey>,
    /// Everything is built again at the next pass (queues' rules or namespaces changed, restart).
    all_dirty: bool,
    /// Per workload, the keys of its parts in other queues (admitted pods labelled for another
    /// queue, `snapshot::stray_part_key`) placed by the last build: a build without one removes it.
    parts: HashMap<WorkloadKey, Vec<WorkloadKey>>,
    pub decider: Decider,
}

impl Snapshotter {
    /// A pod added or changed (a pod no integration governs is the same as gone). A pod without
    /// uid cannot be followed and is left out.
    pub fn put_pod(&mut self, pod: Arc<CachedPod>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        self.remove_pod(&uid);
        let Some(facts) = pod.facts.clone() else {
            return;
        };
        let key = facts.key.clone();
        let name = facts.name.clone();
        self.dirty.insert(key.clone());
        self.by_uid.insert(uid.clone(), (key.clone(), name.clone()));
        (self.pods.entry(key).or_default()).insert((name, uid), Kept { pod, facts });
    }

    /// A pod gone.
    pub fn remove_pod(&mut self, uid: &str) {
        let Some((key, name)) = self.by_uid.remove(uid) else {
            return;
        };
        if let Some(pods) = self.pods.get_mut(&key) {
            pods.remove(&(name, uid.to_string()));
            if pods.is_empty() {
                self.pods.remove(&key);
            }
        }
        self.dirty.insert(key);
    }

    /// A DynamicWorkload added or changed.
    pub fn put_workload(&mut self, dwl: Arc<DynamicWorkload>) {
        let key = WorkloadKey {
            namespace: dwl.namespace().unwrap_or_default(),
            name: dwl.name_any(),
        };
        self.dirty.insert(key.clone());
        self.dwls.insert(key, dwl);
    }

    /// A DynamicWorkload gone.
    pub fn remove_workload(&mut self, key: &WorkloadKey) {
        if self.dwls.remove(key).is_some() {
            self.dirty.insert(key.clone());
        }
    }

    /// The CapacityQueues. A change of what a workload's build reads (its spec) builds every
    /// workload again; the quotas reach the [`Decider`] at the next pass.
    pub fn set_queues(&mut self, queues: Vec<Arc<CapacityQueue>>) {
        let specs = |qs: &[Arc<CapacityQueue>]| -> Vec<(String, crate::api::CapacityQueueSpec)> {
            qs.iter().map(|q| (q.name_any(), q.spec.clone())).collect()
        };
        if specs(&self.queues) != specs(&queues) {
            self.all_dirty = true;
        }
        self.queues = queues;
    }

    /// The namespaces (their labels decide which queues admit them): a change builds every
    /// workload again.
    pub fn set_namespaces(&mut self, namespaces: Vec<Arc<PartialObjectMeta<Namespace>>>) {
        // Compared in place, not copied: this runs every pass, over every namespace.
        let same = self.namespaces.len() == namespaces.len()
            && (self.namespaces.iter().zip(&namespaces)).all(|(old, new)| {
                Arc::ptr_eq(old, new)
                    || (old.metadata.name == new.metadata.name && old.labels() == new.labels())
            });
        if !same {
            self.all_dirty = true;
        }
        self.namespaces = namespaces;
    }

    /// The uids of pods whose ungate is in flight (they count as admitted): the workloads of the
    /// pods that entered or left the set are built again.
    pub fn set_in_flight(&mut self, in_flight: HashSet<String>) {
        dirty_pods_between(&self.by_uid, &mut self.dirty, &self.in_flight, &in_flight);
        self.in_flight = in_flight;
    }

    /// Every governed pod, as a (re)list shows them: what was kept and is not among them is gone.
    pub fn replace_pods(&mut self, pods: &[Arc<CachedPod>]) {
        self.pods.clear();
        self.by_uid.clear();
        for pod in pods {
            self.put_pod(pod.clone());
        }
        self.all_dirty = true;
    }

    /// What the pod store changed since the last pass, with its state read in the same view
    /// ([`crate::watch_store::Store::state_and_changes`]).
    pub fn apply_pod_changes(
        &mut self,
        state: &[Arc<CachedPod>],
        changes: crate::watch_store::Changes<CachedPod>,
    ) {
        if changes.relisted {
            self.replace_pods(state);
            return;
        }
        for (uid, pod) in changes.objects {
            match pod {
                Some(pod) => self.put_pod(pod),
                None => self.remove_pod(&uid),
            }
        }
    }

    /// Every DynamicWorkload, as a (re)list shows them.
    pub fn replace_workloads(&mut self, dwls: &[Arc<DynamicWorkload>]) {
        self.dwls.clear();
        for dwl in dwls {
            self.put_workload(dwl.clone());
        }
        self.all_dirty = true;
    }

    /// The uids of pods a PodDisruptionBudget protects: the workloads of the pods that entered or
    /// left the set are built again (their pods marked, `PodSnapshot::eviction_blocked`).
    pub fn set_eviction_blocked(&mut self, blocked: HashSet<String>) {
        dirty_pods_between(
            &self.by_uid,
            &mut self.dirty,
            &self.eviction_blocked,
            &blocked,
        );
        self.eviction_blocked = blocked;
    }

    /// The podsReadyTimeout rules of the queues and the requeues sent whose status the watch does
    /// not show yet ([`ready::apply_pending_requeues`]): the workloads whose pending requeue
    /// changed are built again.
    pub fn set_pending_requeues(
        &mut self,
        rules: HashMap<String, (i64, Option<i32>)>,
        pending: HashMap<WorkloadKey, Preemption>,
    ) {
        if rules != self.requeue_rules {
            self.all_dirty = true;
        }
        let changed = |a: &HashMap<WorkloadKey, Preemption>,
                       b: &HashMap<WorkloadKey, Preemption>|
         -> Vec<WorkloadKey> {
            (a.iter())
                .filter(|(key, p)| b.get(*key) != Some(*p))
                .map(|(key, _)| key.clone())
                .collect()
        };
        self.dirty.extend(changed(&pending, &self.pending_requeues));
        self.dirty.extend(changed(&self.pending_requeues, &pending));
        self.requeue_rules = rules;
        self.pending_requeues = pending;
    }

    /// The room admission at creation holds per queue: taken off the queues' quotas at the next
    /// pass (a queue whose holds changed has its group decided again).
    pub fn set_holds(&mut self, holds: HashMap<String, ResourceList>) {
        self.holds = holds;
    }

    /// Builds everything again at the next pass (a restart, or when in doubt).
    pub fn invalidate(&mut self) {
        self.all_dirty = true;
    }

    /// The whole snapshot and its decisions, moved out for a pass to act on ([`Decider::lend`]);
    /// give them back with [`Snapshotter::give_back`] before the next pass, or that pass builds
    /// and decides everything again.
    pub fn lend(&mut self) -> (Built, Decisions) {
        self.decider.lend()
    }

    /// Takes back what [`Snapshotter::lend`] lent; if it does not fit, the next pass builds and
    /// decides everything again.
    pub fn give_back(&mut self, built: Built, decisions: Decisions) {
        if !self.decider.give_back(built, decisions) {
            self.decider.lent = Some(Vec::new());
        }
    }

    /// The parts in other queues that the workloads built again (`keys`) no longer have (`seen`:
    /// every key the build made) are removed.
    fn forget_stale_parts(&mut self, keys: &[WorkloadKey], seen: &HashSet<WorkloadKey>) {
        let mut now: HashMap<WorkloadKey, Vec<WorkloadKey>> = HashMap::new();
        for key in seen {
            if let Some(parent) = snapshot::stray_part_of(key) {
                now.entry(parent).or_default().push(key.clone());
            }
        }
        if now.is_empty() && self.parts.is_empty() {
            return;
        }
        for key in keys {
            let before = self.parts.remove(key).unwrap_or_default();
            let after = now.remove(key).unwrap_or_default();
            for gone in before.iter().filter(|k| !after.contains(k)) {
                self.decider.remove(gone);
            }
            if !after.is_empty() {
                self.parts.insert(key.clone(), after);
            }
        }
    }

    /// Builds the workloads that changed, then decides the groups that changed. Returns the
    /// problems of the objects built (for logs) and what was done.
    pub fn pass(&mut self) -> (Vec<String>, PassStats) {
        if self.decider.lent.is_some() {
            // The workloads were not given back: start over from the pods and ledgers kept.
            self.decider.forget_lent();
            self.all_dirty = true;
        }
        let keys: Vec<WorkloadKey> = if self.all_dirty {
            self.dirty.clear();
            let mut all: BTreeSet<WorkloadKey> = self.pods.keys().cloned().collect();
            all.extend(self.dwls.keys().cloned());
            all.extend(self.decider.placed.keys().cloned());
            all.into_iter().collect()
        } else {
            std::mem::take(&mut self.dirty).into_iter().collect()
        };
        let rebuilt = self.all_dirty;
        self.all_dirty = false;
        let mut pods = Vec::new();
        let mut facts = Vec::new();
        let mut dwls = Vec::new();
        for key in &keys {
            for kept in self.pods.get(key).into_iter().flat_map(|p| p.values()) {
                pods.push(kept.pod.clone());
                facts.push(Some(kept.facts.clone()));
            }
            if let Some(dwl) = self.dwls.get(key) {
                dwls.push(dwl.clone());
            }
        }
        let mut built = snapshot::build_from_facts(
            &self.queues,
            &dwls,
            &pods,
            &facts,
            &self.namespaces,
            &self.in_flight,
        );
        // What the controller's full pass does after its build, to the workloads built here.
        snapshot::subtract_holds(&mut built.snapshot, &self.holds);
        snapshot::mark_eviction_blocked(&mut built, &self.eviction_blocked);
        if !self.requeue_rules.is_empty() {
            ready::apply_pending_requeues(&mut built, &self.requeue_rules, &self.pending_requeues);
        }
        let problems = std::mem::take(&mut built.problems);
        let queues = std::mem::take(&mut built.snapshot.queues);
        self.decider.set_queues(queues);
        let mut seen: HashSet<WorkloadKey> = HashSet::with_capacity(keys.len());
        let count = built.snapshot.workloads.len();
        let mut part = Part {
            built,
            decisions: Decisions::default(),
        };
        let entries: Vec<Entry> = part.drain().collect();
        for entry in entries {
            seen.insert(entry.snapshot.key.clone());
            self.decider.put(entry);
        }
        for key in keys.iter().filter(|k| !seen.contains(*k)) {
            self.decider.remove(key);
        }
        self.forget_stale_parts(&keys, &seen);
        let mut stats = if rebuilt {
            self.decider.full_pass()
        } else {
            self.decider.pass()
        };
        stats.built = count;
        (problems, stats)
    }
}
