//! Builds the admission snapshot from what the cluster holds: CapacityQueues, DynamicWorkloads,
//! governed pods and namespaces. The cluster is the source of truth: nothing here is remembered
//! between passes but the pods whose ungating is in flight (`in_flight`), so that a pod admitted a
//! moment ago and not yet seen without its gate is never counted as waiting, and what each pod
//! version says about itself ([`PodMemo`]: a cache of a pure function of the pod, never a decision).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;

use crate::api::{
    ADMISSION_GATE, CapacityQueue, CapacityQueueSpec, DynamicWorkload, QUEUE_LABEL,
    QueuePreemption, ReclaimWithinCohort, ResourceFlavor, WithinQueuePreemption,
};
use crate::duration::parse_duration;
use crate::integrations::Adapters;
use crate::queue::admission::{
    CohortMembership, FlavorSnapshot, MAX_FLAVORS, PodSetSnapshot, PodSnapshot, PodState,
    PreemptionPolicy, QueueSnapshot, ReclaimPolicy, Snapshot, WithinQueue, WorkloadKey,
    WorkloadSnapshot, flavored_resource,
};
use crate::queue::pod_cache::CachedPod;
use crate::resources::ResourceList;

mod adjust;
mod pods;
mod queues;
mod strays;

use adjust::{drop_gated_if, requeued};
pub use adjust::{exhausted, leave_gated_behind, mark_eviction_blocked, subtract_holds};
pub use pods::{InFlight, Pins, is_gated, is_terminating, millis, pod_is_gated, pod_state};
use queues::{admits_namespace, queue_snapshots};
pub use queues::{
    cohort_membership, flavor_snapshots, preemption_policy, resolve_flavors, selector_matches,
    timeout_ms,
};
use strays::{keyed_parts, leave_strays_behind, owning_queue};
pub use strays::{stray_part_key, stray_part_of};

/// The snapshot plus what is needed to act on its decisions.
pub struct Built {
    pub snapshot: Snapshot,
    /// Indexed like `snapshot.workloads`: the pods of each pod set, in snapshot order.
    pub pods: Vec<Vec<Vec<Arc<CachedPod>>>>,
    /// Indexed like `snapshot.workloads`: the DynamicWorkload when it exists.
    pub workloads: Vec<Option<Arc<DynamicWorkload>>>,
    /// Problems with single objects (a bad quantity...), for logs and events; they never stop a pass.
    pub problems: Vec<String>,
    /// Indexed like `snapshot.workloads`: gated pods of an application that has ended, kept out
    /// of the pass (they are never admitted).
    pub left_behind: Vec<u32>,
}

#[derive(Default)]
struct Group {
    queue: String,
    priority: i32,
    earliest: i64,
    sets: BTreeMap<String, (Option<u32>, Vec<FactfulPod>)>,
}

/// A pod with what it says about itself.
type FactfulPod = (Arc<CachedPod>, Arc<PodFacts>);

pub use crate::queue::pod_cache::PodFacts;

/// Each cached pod's [`PodFacts`], for a pass. The facts are read when a pod version is decoded
/// into the cache (with the registry of every integration, whatever `adapters` a caller holds:
/// identification does not depend on namespaces' defaults), so nothing is remembered here.
#[derive(Default)]
pub struct PodMemo;

impl PodMemo {
    /// The facts of each of `pods`, in the same order (None: not governed).
    pub fn refresh(
        &mut self,
        _adapters: &Adapters,
        pods: &[Arc<CachedPod>],
    ) -> Vec<Option<Arc<PodFacts>>> {
        facts_of(pods)
    }
}

/// The facts of each of `pods`, in the same order (None: not governed).
pub fn facts_of(pods: &[Arc<CachedPod>]) -> Vec<Option<Arc<PodFacts>>> {
    pods.iter().map(|pod| pod.facts.clone()).collect()
}

/// Builds the snapshot. Pods are grouped into workloads by the adapters; a workload's shape comes
/// from its DynamicWorkload when there is one and from its pods otherwise.
pub fn build(
    queues: &[Arc<CapacityQueue>],
    workloads: &[Arc<DynamicWorkload>],
    pods: &[Arc<CachedPod>],
    namespaces: &[Arc<PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>],
    in_flight: &InFlight,
) -> Built {
    let facts = facts_of(pods);
    build_from_facts(queues, workloads, pods, &facts, namespaces, in_flight)
}

/// As [`build`], with each pod's facts already read (`facts[i]` of `pods[i]`, see [`PodMemo`]).
pub fn build_from_facts(
    queues: &[Arc<CapacityQueue>],
    workloads: &[Arc<DynamicWorkload>],
    pods: &[Arc<CachedPod>],
    facts: &[Option<Arc<PodFacts>>],
    namespaces: &[Arc<PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>],
    in_flight: &InFlight,
) -> Built {
    let mut problems = Vec::new();
    let (queue_snapshots, rules) = queue_snapshots(queues, &mut problems);
    let namespace_labels: HashMap<String, BTreeMap<String, String>> = namespaces
        .iter()
        .map(|ns| (ns.name_any(), ns.labels().clone()))
        .collect();
    let mut groups = group_pods(pods, facts);
    let by_key: HashMap<WorkloadKey, &Arc<DynamicWorkload>> = workloads
        .iter()
        .map(|w| {
            let key = WorkloadKey {
                namespace: w.namespace().unwrap_or_default(),
                name: w.name_any(),
            };
            (key, w)
        })
        .collect();
    let mut built = Built {
        snapshot: Snapshot {
            queues: queue_snapshots,
            workloads: Vec::with_capacity(groups.len()),
        },
        pods: Vec::with_capacity(groups.len()),
        workloads: Vec::with_capacity(groups.len()),
        problems,
        left_behind: Vec::with_capacity(groups.len()),
    };
    // Workloads recorded from an application but without pods yet still count (for status).
    let mut keys: Vec<WorkloadKey> = groups.keys().cloned().collect();
    for key in by_key.keys() {
        if !groups.contains_key(key) {
            keys.push(key.clone());
        }
    }
    for key in keys {
        let dwl = by_key.get(&key).copied();
        let mut group = groups.remove(&key).unwrap_or_default();
        let queue = owning_queue(dwl, &group, in_flight);
        let (strays, parts) =
            leave_strays_behind(&key, &queue, &mut group, in_flight, &mut built.problems);
        let rule = rules.get(&queue);
        let namespace_allowed = admits_namespace(rule, &namespace_labels, &key.namespace);
        let max_priority = rule.and_then(|r| r.max_priority);
        let parts = keyed_parts(&key, parts, &rules, &namespace_labels);
        add_workload(
            &mut built,
            key,
            queue,
            namespace_allowed,
            dwl,
            group,
            in_flight,
        );
        // No workload counts above its queue's cap (a pod created before the cap was set, a
        // ledger's priority): it can neither overtake nor preempt with more than the cap.
        if let (Some(cap), Some(workload)) = (max_priority, built.snapshot.workloads.last_mut()) {
            workload.priority = workload.priority.min(cap);
        }
        if let Some(left) = built.left_behind.last_mut() {
            *left += strays;
        }
        requeued(&mut built, dwl, rule.and_then(|r| r.requeue_limit));
        for (part_key, part_queue, allowed, part) in parts {
            add_workload(
                &mut built, part_key, part_queue, allowed, None, part, in_flight,
            );
        }
    }
    built
}

/// Groups the governed pods by workload, then pod set: each workload's queue (its first pod's),
/// highest priority and earliest creation, each set's minimum (its earliest pod's annotation) and
/// pods.
fn group_pods(
    pods: &[Arc<CachedPod>],
    facts: &[Option<Arc<PodFacts>>],
) -> BTreeMap<WorkloadKey, Group> {
    let mut groups: BTreeMap<WorkloadKey, Group> = BTreeMap::new();
    for (pod, fact) in pods.iter().zip(facts) {
        let Some(fact) = fact else {
            continue;
        };
        // Keys and set names are cloned once per workload and set, not once per pod.
        if !groups.contains_key(&fact.key) {
            let group = Group {
                queue: fact.queue.clone(),
                priority: i32::MIN,
                earliest: i64::MAX,
                ..Group::default()
            };
            groups.insert(fact.key.clone(), group);
        }
        let Some(group) = groups.get_mut(&fact.key) else {
            continue;
        };
        group.priority = group.priority.max(fact.priority);
        group.earliest = group.earliest.min(fact.created_at);
        if !group.sets.contains_key(&fact.pod_set) {
            group.sets.insert(fact.pod_set.clone(), (None, Vec::new()));
        }
        let Some(set) = group.sets.get_mut(&fact.pod_set) else {
            continue;
        };
        set.1.push((pod.clone(), fact.clone()));
    }
    // A set's minimum is what its earliest pod said: a pod joining later cannot grow the gang (a
    // larger minimum would reserve places no fit check ever saw).
    for group in groups.values_mut() {
        for (min_count, pods) in group.sets.values_mut() {
            *min_count = pods
                .iter()
                .filter(|(_, f)| f.min_count.is_some())
                .min_by(|(_, a), (_, b)| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)))
                .and_then(|(_, f)| f.min_count);
        }
    }
    groups
}

/// Adds one workload to `built`: what its DynamicWorkload (`dwl`, if recorded) and its pods
/// (`group`) say together.
fn add_workload(
    built: &mut Built,
    key: WorkloadKey,
    queue: String,
    namespace_allowed: bool,
    dwl: Option<&Arc<DynamicWorkload>>,
    group: Group,
    in_flight: &InFlight,
) {
    // The pods' own priority (from their priorityClassName) counts for recorded applications
    // too: the ledger's priority is a floor, since operators copy priority classes into pods.
    let pods_priority = (group.priority != i32::MIN).then_some(group.priority);
    let priority = match (dwl.map(|d| d.spec.priority), pods_priority) {
        (Some(recorded), Some(pods)) => recorded.max(pods),
        (Some(recorded), None) => recorded,
        (None, pods) => pods.unwrap_or(0),
    };
    let queued_at = dwl
        .map(|d| millis(d.metadata.creation_timestamp.as_ref()))
        .filter(|t| *t > 0)
        .map(|t| t.min(group.earliest))
        .unwrap_or(group.earliest);
    let sets = pod_sets(&key, dwl, group.sets, in_flight, &mut built.problems);
    built.snapshot.workloads.push(WorkloadSnapshot {
        key,
        queue,
        namespace_allowed,
        priority,
        interrupted_count: dwl
            .and_then(|d| d.status.as_ref())
            .map(|s| s.interrupted_count)
            .unwrap_or(0),
        queued_at: if queued_at == i64::MAX { 0 } else { queued_at },
        pod_sets: sets.snapshots,
    });
    built.pods.push(sets.pods);
    built.workloads.push(dwl.cloned());
    built.left_behind.push(sets.left_behind);
}

/// A workload's pod sets, as the snapshot and the pass's actions see them.
struct PodSets {
    snapshots: Vec<PodSetSnapshot>,
    /// The pod objects, indexed like `snapshots[s].pods`.
    pods: Vec<Vec<Arc<CachedPod>>>,
    /// Gated pods of an ended application, kept out.
    left_behind: u32,
}

/// The pod sets the DynamicWorkload declares (its size per pod and minimum), then any others the
/// pods show (sized by their oldest pod, minimum from the annotation). An application that has
/// ended reserves nothing, and its pods still behind the gate stay there (its driver or operator
/// cleans them up).
fn pod_sets(
    key: &WorkloadKey,
    dwl: Option<&Arc<DynamicWorkload>>,
    mut remaining: BTreeMap<String, (Option<u32>, Vec<FactfulPod>)>,
    in_flight: &InFlight,
    problems: &mut Vec<String>,
) -> PodSets {
    let ended = dwl.is_some_and(|d| d.spec.application_ended.is_some());
    let mut sets = PodSets {
        snapshots: Vec::new(),
        pods: Vec::new(),
        left_behind: 0,
    };
    let declared = dwl.map(|d| d.spec.pod_sets.as_slice()).unwrap_or_default();
    for spec in declared {
        let (_, pods) = remaining.remove(&spec.name).unwrap_or_default();
        let per_pod = ResourceList::from_quantities(&spec.requests).unwrap_or_else(|e| {
            problems.push(format!("DynamicWorkload {key} pod set {}: {e}", spec.name));
            ResourceList::new()
        });
        let min_count = if ended {
            0
        } else {
            u32::try_from(spec.min_count).unwrap_or(0)
        };
        let (snaps, kept) = snapshot_pods(&pods, in_flight, problems);
        let (snaps, kept) = drop_gated_if(ended, snaps, kept, &mut sets.left_behind);
        sets.snapshots.push(PodSetSnapshot {
            name: spec.name.clone(),
            per_pod,
            min_count,
            pods: snaps,
        });
        sets.pods.push(kept);
    }
    for (name, (min_count, pods)) in remaining {
        let (snaps, kept) = snapshot_pods(&pods, in_flight, problems);
        let (snaps, kept) = drop_gated_if(ended, snaps, kept, &mut sets.left_behind);
        let min_count = if ended { Some(0) } else { min_count };
        let per_pod = snaps
            .iter()
            .min_by_key(|p| p.created_at)
            .map(|p| ResourceList::clone(&p.requests))
            .unwrap_or_default();
        sets.snapshots.push(PodSetSnapshot {
            name,
            per_pod,
            min_count: min_count.unwrap_or(1),
            pods: snaps,
        });
        sets.pods.push(kept);
    }
    sets
}

fn snapshot_pods(
    pods: &[FactfulPod],
    in_flight: &InFlight,
    problems: &mut Vec<String>,
) -> (Vec<PodSnapshot>, Vec<Arc<CachedPod>>) {
    let mut snaps = Vec::with_capacity(pods.len());
    let mut kept = Vec::with_capacity(pods.len());
    for (pod, fact) in pods {
        let requests = match &fact.requests {
            Ok(r) => Arc::clone(r),
            Err(e) => {
                // The API server validated these quantities, so this is a parser gap: say so, and
                // keep the pod out of the pass rather than guess its size.
                problems.push(e.clone());
                continue;
            }
        };
        let state = pod_state(pod, in_flight);
        // A pod in flight is still gated and unpinned in the cache: its pins are the pass's.
        let pins = (is_gated(pod) && state == PodState::Admitted)
            .then(|| in_flight.pins(pod.metadata.uid.as_deref().unwrap_or_default()))
            .flatten();
        let flavor = match pins {
            Some(pins) => pins.flavor.clone(),
            None => (state == PodState::Admitted)
                .then(|| fact.flavor.clone())
                .flatten(),
        };
        let topology = match pins {
            Some(pins) => in_flight_topology(fact, pins),
            None => pod_topology(fact, state),
        };
        snaps.push(PodSnapshot {
            name: fact.name.clone(),
            requests,
            state,
            created_at: fact.created_at,
            terminating: is_terminating(pod, state),
            eviction_blocked: false,
            flavor,
            placement: fact.placement.clone(),
            topology,
        });
        kept.push(pod.clone());
    }
    (snaps, kept)
}

/// The topology part of a pod in flight: its asks, and the domain and data nodes the pass pinned
/// it to (not bound yet: its room is held on its domain's nodes).
fn in_flight_topology(
    fact: &PodFacts,
    pins: &Pins,
) -> Option<Arc<crate::queue::admission::PodTopology>> {
    let asked = fact.topology.as_deref();
    let pinned = pins.domain.is_some() || pins.data_nodes.is_some();
    if asked.is_none() && !pinned {
        return None;
    }
    Some(Arc::new(crate::queue::admission::PodTopology {
        ask: asked.and_then(|t| t.ask.clone()),
        domain: pins.domain.as_deref().map(String::from),
        bound: false,
        data: asked.and_then(|t| t.data.clone()),
        data_nodes: pins.data_nodes.clone(),
    }))
}

/// A pod's topology part for the pass: the domain and data nodes only of an admitted pod (as its
/// flavor).
fn pod_topology(
    fact: &PodFacts,
    state: PodState,
) -> Option<Arc<crate::queue::admission::PodTopology>> {
    let topology = fact.topology.as_ref()?;
    let pinned = topology.domain.is_some() || topology.data_nodes.is_some();
    if state == PodState::Admitted || !pinned {
        return Some(Arc::clone(topology));
    }
    if !topology.asks() {
        return None;
    }
    Some(Arc::new(crate::queue::admission::PodTopology {
        ask: topology.ask.clone(),
        domain: None,
        bound: topology.bound,
        data: topology.data.clone(),
        data_nodes: None,
    }))
}

#[cfg(test)]
mod tests;
