//! The decisions' layer: per group (a queue alone, or a cohort) the group's snapshot and the
//! decisions of its last pass, decided again only when its workloads or queues changed.

use super::*;

/// The decision layer: per group, its workloads and its last decisions. See the module
/// documentation.
#[derive(Default)]
pub struct Decider {
    pub(super) queues: Vec<QueueSnapshot>,
    /// The group of each queue that exists.
    pub(super) group_of: HashMap<String, Group>,
    pub(super) parts: HashMap<Group, Part>,
    /// The group each workload is in.
    pub(super) placed: HashMap<WorkloadKey, Group>,
    pub(super) dirty: HashSet<Group>,
    /// The groups the last pass decided (the others' decisions were reused).
    pub(super) decided: HashSet<Group>,
    /// While the workloads are lent ([`Decider::lend`]): each group's share of them, in order.
    pub(super) lent: Option<Vec<(Group, usize)>>,
    /// The whole's vectors as [`Decider::give_back`] emptied them, for the next lend to fill:
    /// at 100k workloads they are tens of MB, which allocated afresh each pass cost page faults
    /// and growth copies.
    spare: Option<Spare>,
}

/// Empty vectors of a whole given back (see `Decider::spare`).
struct Spare {
    workloads: Vec<WorkloadSnapshot>,
    pods: Vec<Vec<Vec<Arc<CachedPod>>>>,
    dwls: Vec<Option<Arc<DynamicWorkload>>>,
    left_behind: Vec<u32>,
    tallies: Vec<crate::queue::admission::WorkloadTally>,
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
    pub(super) fn group_for(&self, queue: &str) -> Group {
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
                part.decide();
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
    pub(super) fn ordered(&self) -> Vec<&Part> {
        self.ordered_groups()
            .into_iter()
            .map(|(_, part)| part)
            .collect()
    }

    /// [`Decider::ordered`], each part with its group.
    pub(super) fn ordered_groups(&self) -> Vec<(Group, &Part)> {
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
        let total: usize = (self.parts.values())
            .map(|p| p.built.snapshot.workloads.len())
            .sum();
        let mut built = empty_built(&self.queues, 0);
        let mut decisions = Decisions::default();
        if let Some(spare) = self.spare.take() {
            built.snapshot.workloads = spare.workloads;
            built.pods = spare.pods;
            built.workloads = spare.dwls;
            built.left_behind = spare.left_behind;
            decisions.workloads = spare.tallies;
        }
        built.snapshot.workloads.reserve(total);
        built.pods.reserve(total);
        built.workloads.reserve(total);
        built.left_behind.reserve(total);
        decisions.workloads.reserve(total);
        let mut shares = Vec::with_capacity(order.len());
        for group in order {
            let Some(part) = self.parts.get_mut(&group) else {
                continue;
            };
            let offset = built.snapshot.workloads.len();
            let (b, d) = (&mut part.built, &mut part.decisions);
            shares.push((group, b.snapshot.workloads.len()));
            built.snapshot.workloads.append(&mut b.snapshot.workloads);
            built.pods.append(&mut b.pods);
            built.workloads.append(&mut b.workloads);
            built.left_behind.append(&mut b.left_behind);
            decisions.workloads.append(&mut d.workloads);
            extend_shifted(&mut decisions, d, offset);
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
            // Moved into the group's own vectors, which kept their room when lent.
            let at = built.snapshot.workloads.len() - count;
            let b = &mut part.built;
            refill(&mut b.snapshot.workloads, &mut built.snapshot.workloads, at);
            refill(&mut b.pods, &mut built.pods, at);
            refill(&mut b.workloads, &mut built.workloads, at);
            refill(&mut b.left_behind, &mut built.left_behind, at);
            refill(&mut part.decisions.workloads, &mut decisions.workloads, at);
        }
        self.spare = Some(Spare {
            workloads: built.snapshot.workloads,
            pods: built.pods,
            dwls: built.workloads,
            left_behind: built.left_behind,
            tallies: decisions.workloads,
        });
        true
    }

    /// The workloads were lent and never given back: forget every group, for the caller to put
    /// every workload again.
    pub(super) fn forget_lent(&mut self) {
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
        let mut built = empty_built(&self.queues, total);
        let mut decisions = Decisions {
            workloads: Vec::with_capacity(total),
            ..Decisions::default()
        };
        for part in parts {
            let offset = built.snapshot.workloads.len();
            let (b, d) = (&part.built, &part.decisions);
            built
                .snapshot
                .workloads
                .extend(b.snapshot.workloads.iter().cloned());
            built.pods.extend(b.pods.iter().cloned());
            built.workloads.extend(b.workloads.iter().cloned());
            built.left_behind.extend(b.left_behind.iter().copied());
            decisions.workloads.extend(d.workloads.iter().cloned());
            extend_shifted(&mut decisions, d, offset);
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
pub(super) fn dirty_pods_between(
    by_uid: &HashMap<String, (WorkloadKey, String)>,
    dirty: &mut BTreeSet<WorkloadKey>,
    old: &HashSet<String>,
    new: &HashSet<String>,
) {
    dirty_pods(by_uid, dirty, old.symmetric_difference(new));
}

/// Marks dirty the workloads of the pods `uids` names.
pub(super) fn dirty_pods<'u>(
    by_uid: &HashMap<String, (WorkloadKey, String)>,
    dirty: &mut BTreeSet<WorkloadKey>,
    uids: impl Iterator<Item = &'u String>,
) {
    for uid in uids {
        if let Some((key, _)) = by_uid.get(uid) {
            dirty.insert(key.clone());
        }
    }
}

/// `to` holds `from[at..]` (moved), in their order.
fn refill<T>(to: &mut Vec<T>, from: &mut Vec<T>, at: usize) {
    to.clear();
    to.extend(from.drain(at..));
}

/// An empty whole for the groups' parts, room for `capacity` workloads.
fn empty_built(queues: &[QueueSnapshot], capacity: usize) -> Built {
    Built {
        snapshot: Snapshot {
            queues: queues.to_vec(),
            workloads: Vec::with_capacity(capacity),
        },
        pods: Vec::with_capacity(capacity),
        workloads: Vec::with_capacity(capacity),
        problems: Vec::new(),
        left_behind: Vec::with_capacity(capacity),
    }
}

/// A group's admissions, flavors, evictions and queue decisions added to the whole's, their
/// workload indices moved by `offset` (where the group's workloads start in the whole).
fn extend_shifted(whole: &mut Decisions, group: &Decisions, offset: usize) {
    let moved = |r: &PodRef| PodRef {
        workload: r.workload + offset,
        ..*r
    };
    whole.admit.extend(group.admit.iter().map(moved));
    (whole.flavors).extend(group.flavors.iter().map(|(r, f)| (moved(r), Arc::clone(f))));
    whole.evict.extend(group.evict.iter().map(|e| Eviction {
        victim: moved(&e.victim),
        preemptor: e.preemptor + offset,
        reason: e.reason,
    }));
    whole
        .queues
        .extend(group.queues.iter().map(|(k, v)| (k.clone(), v.clone())));
}
