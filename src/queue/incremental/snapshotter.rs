//! The snapshot's layer: the governed pods grouped by workload, built again only for the
//! workloads whose pods, DynamicWorkload or in-flight pods changed, and assembled in the order
//! the full pass decides in.

use super::decider::{dirty_pods, dirty_pods_between};
use super::*;

/// A governed pod as kept between passes.
pub(super) struct Kept {
    pub(super) pod: Arc<CachedPod>,
    pub(super) facts: Arc<PodFacts>,
}

/// The snapshot layer over the [`Decider`]: see the module documentation.
#[derive(Default)]
pub struct Snapshotter {
    pub(super) queues: Vec<Arc<CapacityQueue>>,
    pub(super) flavors: Vec<Arc<crate::api::ResourceFlavor>>,
    pub(super) namespaces: Vec<Arc<PartialObjectMeta<Namespace>>>,
    pub(super) in_flight: InFlight,
    /// Per workload, its pods by (name, uid).
    pub(super) pods: HashMap<WorkloadKey, BTreeMap<(String, String), Kept>>,
    /// Per pod uid, where it is kept.
    pub(super) by_uid: HashMap<String, (WorkloadKey, String)>,
    pub(super) dwls: HashMap<WorkloadKey, Arc<DynamicWorkload>>,
    /// Uids of pods a PodDisruptionBudget protects from eviction now.
    pub(super) eviction_blocked: HashSet<String>,
    /// podsReadyTimeout rules per queue, and the requeues sent whose status is not seen yet.
    pub(super) requeue_rules: HashMap<String, (i64, Option<i32>)>,
    pub(super) pending_requeues: HashMap<WorkloadKey, Preemption>,
    /// Room admission at creation holds per queue, taken off the queues' quotas.
    pub(super) holds: HashMap<String, ResourceList>,
    /// Workloads to build again at the next pass.
    pub(super) dirty: BTreeSet<WorkloadKey>,
    /// Everything is built again at the next pass (queues' rules or namespaces changed, restart).
    pub(super) all_dirty: bool,
    /// Per workload, the keys of its parts in other queues (admitted pods labelled for another
    /// queue, `snapshot::stray_part_key`) placed by the last build: a build without one removes it.
    pub(super) parts: HashMap<WorkloadKey, Vec<WorkloadKey>>,
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

    /// The ResourceFlavors: a change builds every workload again (the queues' flavors pin with
    /// them).
    pub fn set_flavors(&mut self, flavors: Vec<Arc<crate::api::ResourceFlavor>>) {
        let specs = |fs: &[Arc<crate::api::ResourceFlavor>]| -> Vec<(String, crate::api::ResourceFlavorSpec)> {
            fs.iter().map(|f| (f.name_any(), f.spec.clone())).collect()
        };
        if specs(&self.flavors) != specs(&flavors) {
            self.all_dirty = true;
        }
        self.flavors = flavors;
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

    /// The pods whose ungate is in flight (they count as admitted, where the pass pinned them):
    /// the workloads of the pods that entered, left or changed are built again.
    pub fn set_in_flight(&mut self, in_flight: InFlight) {
        dirty_pods(
            &self.by_uid,
            &mut self.dirty,
            self.in_flight.changed(&in_flight),
        );
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
    pub(super) fn forget_stale_parts(&mut self, keys: &[WorkloadKey], seen: &HashSet<WorkloadKey>) {
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
        snapshot::resolve_flavors(&mut built.snapshot, &self.flavors);
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
        let mut part = Part::of(built);
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
