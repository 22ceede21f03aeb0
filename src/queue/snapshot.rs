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
    QueuePreemption, ReclaimWithinCohort, WithinQueuePreemption,
};
use crate::duration::parse_duration;
use crate::integrations::Adapters;
use crate::queue::admission::{
    CohortMembership, PodSetSnapshot, PodSnapshot, PodState, PreemptionPolicy, QueueSnapshot,
    ReclaimPolicy, Snapshot, WithinQueue, WorkloadKey, WorkloadSnapshot,
};
use crate::queue::pod_cache::CachedPod;
use crate::resources::ResourceList;

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

pub fn millis(ts: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    ts.map(|t| t.0.as_millisecond()).unwrap_or(0)
}

/// The state of a governed pod for admission.
pub fn pod_state(pod: &CachedPod, in_flight: &HashSet<String>) -> PodState {
    if matches!(pod.phase(), Some("Succeeded") | Some("Failed")) {
        return PodState::Ended;
    }
    if is_gated(pod) {
        if in_flight.contains(pod.metadata.uid.as_deref().unwrap_or_default()) {
            return PodState::Admitted;
        }
        // A gated pod on its way out will never run: it holds nothing and waits for nothing.
        if pod.metadata.deletion_timestamp.is_some() {
            return PodState::Ended;
        }
        return PodState::Gated;
    }
    PodState::Admitted
}

/// Whether an admitted pod is on its way out (it has a deletionTimestamp): it still holds its
/// quota until it is gone or ended, but its room is already being freed.
pub fn is_terminating(pod: &CachedPod, state: PodState) -> bool {
    state == PodState::Admitted && pod.metadata.deletion_timestamp.is_some()
}

/// A queue's preemption settings as the admission function reads them (absent: the defaults).
pub fn preemption_policy(preemption: &QueuePreemption) -> PreemptionPolicy {
    PreemptionPolicy {
        within_queue: match preemption.within_queue {
            WithinQueuePreemption::Never => WithinQueue::Never,
            WithinQueuePreemption::LowerPriority => WithinQueue::LowerPriority,
        },
    }
}

/// A queue's cohort settings as the admission function reads them; None when it names no cohort.
/// A limit or weight that cannot be read is refused with the field's name.
pub fn cohort_membership(spec: &CapacityQueueSpec) -> Result<Option<CohortMembership>, String> {
    let Some(name) = &spec.cohort else {
        return Ok(None);
    };
    let borrowing_limit = ResourceList::from_quantities(&spec.borrowing_limit)
        .map_err(|e| format!("spec.borrowingLimit: {e}"))?;
    let lending_limit = ResourceList::from_quantities(&spec.lending_limit)
        .map_err(|e| format!("spec.lendingLimit: {e}"))?;
    let weight = spec.fair_sharing.as_ref().and_then(|f| f.weight.as_ref());
    let weight_milli = match weight {
        None => 1000,
        Some(q) => crate::resources::parse_amount(&q.0)
            .map_err(|e| format!("spec.fairSharing.weight: {e}"))?,
    };
    Ok(Some(CohortMembership {
        name: name.clone(),
        borrowing_limit,
        lending_limit,
        reclaim: match spec.preemption().reclaim_within_cohort {
            ReclaimWithinCohort::Never => ReclaimPolicy::Never,
            ReclaimWithinCohort::LowerPriority => ReclaimPolicy::LowerPriority,
            ReclaimWithinCohort::Any => ReclaimPolicy::Any,
        },
        weight_milli,
    }))
}

/// Whether a cached pod is behind sluice's gate.
pub fn is_gated(pod: &CachedPod) -> bool {
    pod.admission_gate.is_some()
}

/// Whether a pod as the API server sends it is behind sluice's gate.
pub fn pod_is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.name == ADMISSION_GATE))
}

/// Whether a label selector matches a set of labels (matchLabels and matchExpressions).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    if let Some(required) = &selector.match_labels
        && required.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    for expr in selector.match_expressions.iter().flatten() {
        let value = labels.get(&expr.key);
        let values = expr.values.as_deref().unwrap_or_default();
        let ok = match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
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
    in_flight: &HashSet<String>,
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
    in_flight: &HashSet<String>,
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

/// The queue a workload is charged to. Every pod counts in the queue its own (immutable) label
/// names, so a workload's queue is its pods' queue, never one that another object says: the queue
/// of its admitted pods (the earliest first), else its ledger's queue if a pod of it carries that
/// queue (or it has no pods), else its earliest pod's; ended pods do not count. The ledger's `spec.queueName` is what a
/// user may write (an application's label, a forged or edited ledger); it never moves pods.
fn owning_queue(
    dwl: Option<&Arc<DynamicWorkload>>,
    group: &Group,
    in_flight: &HashSet<String>,
) -> String {
    // Ended pods hold nothing: an orphaned, finished pod of another queue decides nothing.
    let pods = || {
        group
            .sets
            .values()
            .flat_map(|(_, pods)| pods.iter())
            .filter(|(pod, _)| pod_state(pod, in_flight) != PodState::Ended)
    };
    let earliest = |(_, a): &&FactfulPod, (_, b): &&FactfulPod| {
        (a.created_at, &a.name).cmp(&(b.created_at, &b.name))
    };
    if let Some((_, fact)) = pods()
        .filter(|(pod, _)| pod_state(pod, in_flight) == PodState::Admitted)
        .min_by(earliest)
    {
        return fact.queue.clone();
    }
    if let Some(d) = dwl
        && (pods().next().is_none() || pods().any(|(_, f)| f.queue == d.spec.queue_name))
    {
        return d.spec.queue_name.clone();
    }
    match pods().min_by(earliest) {
        Some((_, fact)) => fact.queue.clone(),
        None => dwl.map_or_else(|| group.queue.clone(), |d| d.spec.queue_name.clone()),
    }
}

/// Takes the pods of a workload that its own label puts in another queue than the workload's
/// (`queue`) out of its pod sets: a workload's pods all run in one queue. A gated one is never
/// admitted (counted as left behind, and said in `problems`). An admitted one (a race between a
/// pass and admission at creation, or a pod admitted before this rule) still counts in the queue
/// its own label names: returned, per queue, to be added as a part of the workload in that queue
/// ([`stray_part_key`]). Returns how many were left behind, and the admitted strays.
fn leave_strays_behind(
    key: &WorkloadKey,
    queue: &str,
    group: &mut Group,
    in_flight: &HashSet<String>,
    problems: &mut Vec<String>,
) -> (u32, BTreeMap<String, Group>) {
    let mut left = 0u32;
    let mut parts: BTreeMap<String, Group> = BTreeMap::new();
    for (set_name, (_, pods)) in group.sets.iter_mut() {
        if pods.iter().all(|(_, fact)| fact.queue == queue) {
            continue;
        }
        for (pod, fact) in std::mem::take(pods) {
            if fact.queue == queue {
                pods.push((pod, fact));
                continue;
            }
            let state = pod_state(&pod, in_flight);
            if state == PodState::Ended {
                continue;
            }
            let admitted = state == PodState::Admitted;
            problems.push(format!(
                "pod {}/{} is labelled {QUEUE_LABEL}={:?} but its workload {key} is in queue {queue:?}: {}",
                key.namespace,
                fact.name,
                fact.queue,
                if admitted {
                    "it was admitted (a race with admission at creation, or before this rule) and counts in its own queue"
                } else {
                    "a workload's pods all run in one queue, so it is never admitted"
                },
            ));
            if !admitted {
                left += 1;
                continue;
            }
            let part = parts.entry(fact.queue.clone()).or_insert_with(|| Group {
                queue: fact.queue.clone(),
                priority: i32::MIN,
                earliest: i64::MAX,
                sets: BTreeMap::new(),
            });
            part.priority = part.priority.max(fact.priority);
            part.earliest = part.earliest.min(fact.created_at);
            // Admitted already: nothing is reserved for the part's set.
            let (_, set) = part
                .sets
                .entry(set_name.clone())
                .or_insert_with(|| (Some(0), Vec::new()));
            set.push((pod, fact));
        }
    }
    (left, parts)
}

/// Admitted pods labelled for other queues than their workload's: each queue's part, its key and
/// whether that queue admits the namespace.
fn keyed_parts(
    key: &WorkloadKey,
    parts: BTreeMap<String, Group>,
    rules: &HashMap<String, QueueRules>,
    namespace_labels: &HashMap<String, BTreeMap<String, String>>,
) -> Vec<(WorkloadKey, String, bool, Group)> {
    parts
        .into_iter()
        .map(|(part_queue, part)| {
            let allowed =
                admits_namespace(rules.get(&part_queue), namespace_labels, &key.namespace);
            (stray_part_key(key, &part_queue), part_queue, allowed, part)
        })
        .collect()
}

/// Whether a queue (its `rule`; None: not known, which selects nothing out) admits `namespace`.
fn admits_namespace(
    rule: Option<&QueueRules>,
    namespace_labels: &HashMap<String, BTreeMap<String, String>>,
    namespace: &str,
) -> bool {
    rule.and_then(|r| r.selector.as_ref())
        .is_none_or(|selector| {
            namespace_labels
                .get(namespace)
                .is_some_and(|labels| selector_matches(selector, labels))
        })
}

/// The key of the part of workload `key` whose admitted pods are labelled for `queue`, another
/// queue than the workload's: a name no DynamicWorkload can have (it holds a `/`), so no ledger or
/// status is ever written for it.
pub fn stray_part_key(key: &WorkloadKey, queue: &str) -> WorkloadKey {
    WorkloadKey {
        namespace: key.namespace.clone(),
        name: format!("{}/{queue}", key.name),
    }
}

/// Whether `key` is a part of a workload made by [`stray_part_key`], and of which workload.
pub fn stray_part_of(key: &WorkloadKey) -> Option<WorkloadKey> {
    let (name, _) = key.name.split_once('/')?;
    Some(WorkloadKey {
        namespace: key.namespace.clone(),
        name: name.to_string(),
    })
}

/// What the snapshot needs of a queue besides its [`QueueSnapshot`]: which namespaces it admits
/// and the highest priority it counts.
struct QueueRules {
    selector: Option<LabelSelector>,
    max_priority: Option<i32>,
    requeue_limit: Option<i32>,
}

/// The queues whose quota can be read, and each one's namespace selector and priority cap; a
/// queue whose quota cannot is a problem, left out.
fn queue_snapshots(
    queues: &[Arc<CapacityQueue>],
    problems: &mut Vec<String>,
) -> (Vec<QueueSnapshot>, HashMap<String, QueueRules>) {
    let mut snapshots = Vec::with_capacity(queues.len());
    let mut rules = HashMap::new();
    for q in queues {
        let name = q.name_any();
        let read = ResourceList::from_quantities(&q.spec.quota)
            .map_err(|e| e.to_string())
            .and_then(|quota| Ok((quota, cohort_membership(&q.spec)?)))
            .and_then(|read| timeout_ms(&q.spec).map(|_| read));
        match read {
            Ok((quota, cohort)) => {
                let preemption = q.spec.preemption();
                snapshots.push(QueueSnapshot {
                    name: name.clone(),
                    quota,
                    strategy: q.spec.queueing_strategy,
                    preemption: preemption_policy(&preemption),
                    cohort,
                });
                rules.insert(
                    name,
                    QueueRules {
                        selector: q.spec.namespace_selector.clone(),
                        max_priority: preemption.max_priority,
                        requeue_limit: q.spec.requeue_limit,
                    },
                );
            }
            Err(e) => problems.push(format!("CapacityQueue {name}: {e}")),
        }
    }
    (snapshots, rules)
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
    in_flight: &HashSet<String>,
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
    in_flight: &HashSet<String>,
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

/// The last workload added, if its queue's podsReadyTimeout sent it back: it queues from then (the
/// back of its priority level); sent back more than the queue's requeueLimit, it is Failed and its
/// gated pods are left out of the pass.
fn requeued(built: &mut Built, dwl: Option<&Arc<DynamicWorkload>>, limit: Option<i32>) {
    let status = dwl.and_then(|d| d.status.as_ref());
    let since = status
        .and_then(|s| s.requeued_at.as_deref())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond());
    let Some(workload) = built.snapshot.workloads.last_mut() else {
        return;
    };
    if let Some(since) = since {
        workload.queued_at = workload.queued_at.max(since);
    }
    if exhausted(dwl.map(|d| d.as_ref()), limit) {
        let w = built.snapshot.workloads.len() - 1;
        leave_gated_behind(built, w);
    }
}

/// Takes the room held for pods admitted at creation (not in the pod cache yet) off each queue's
/// quota, so that the pass never gives it twice.
pub fn subtract_holds(snapshot: &mut Snapshot, holds: &HashMap<String, ResourceList>) {
    for queue in &mut snapshot.queues {
        if let Some(held) = holds.get(&queue.name) {
            for (name, limit) in queue.quota.0.iter_mut() {
                *limit = limit.saturating_sub(held.get(name));
            }
        }
    }
}

/// Marks the pods a PodDisruptionBudget protects (`blocked`, by uid): the pass chooses other
/// victims, or none.
pub fn mark_eviction_blocked(built: &mut Built, blocked: &HashSet<String>) {
    if blocked.is_empty() {
        return;
    }
    for (workload, objects) in built.snapshot.workloads.iter_mut().zip(&built.pods) {
        for (set, objects) in workload.pod_sets.iter_mut().zip(objects) {
            for (pod, object) in set.pods.iter_mut().zip(objects) {
                pod.eviction_blocked = object
                    .metadata
                    .uid
                    .as_deref()
                    .is_some_and(|uid| blocked.contains(uid));
            }
        }
    }
}

/// Takes workload `w`'s gated pods out of the pass (they are never admitted; counted as left
/// behind): a workload that is Failed.
pub fn leave_gated_behind(built: &mut Built, w: usize) {
    let (Some(workload), Some(pods)) = (built.snapshot.workloads.get_mut(w), built.pods.get_mut(w))
    else {
        return;
    };
    let mut dropped = 0u32;
    for (set, objects) in workload.pod_sets.iter_mut().zip(pods.iter_mut()) {
        let snaps = std::mem::take(&mut set.pods);
        let kept = std::mem::take(objects);
        let (snaps, kept) = drop_gated_if(true, snaps, kept, &mut dropped);
        set.pods = snaps;
        *objects = kept;
    }
    if let Some(left) = built.left_behind.get_mut(w) {
        *left += dropped;
    }
}

/// A queue's timeout, in milliseconds; None when it sets none. An unreadable one is refused with
/// the field's name (the queue is then left out of the pass, as for an unreadable quota).
pub fn timeout_ms(spec: &CapacityQueueSpec) -> Result<Option<i64>, String> {
    let Some(text) = &spec.pods_ready_timeout else {
        return Ok(None);
    };
    if text.chars().filter(char::is_ascii_digit).count() > 12 {
        return Err(format!(
            "spec.podsReadyTimeout: {text:?} is too long a duration"
        ));
    }
    let timeout = parse_duration(text).map_err(|e| format!("spec.podsReadyTimeout: {e}"))?;
    if timeout.is_zero() {
        return Err("spec.podsReadyTimeout: must be more than 0 (absent: no timeout)".into());
    }
    Ok(Some(i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX)))
}

/// Whether a workload was sent back more often than its queue allows: it is Failed.
pub fn exhausted(dwl: Option<&DynamicWorkload>, limit: Option<i32>) -> bool {
    let count = dwl
        .and_then(|d| d.status.as_ref())
        .map_or(0, |s| s.requeue_count);
    limit.is_some_and(|limit| count > limit)
}

/// With `drop`, keeps only the pods that are not gated and counts the others in `dropped`.
fn drop_gated_if(
    drop: bool,
    snaps: Vec<PodSnapshot>,
    kept: Vec<Arc<CachedPod>>,
    dropped: &mut u32,
) -> (Vec<PodSnapshot>, Vec<Arc<CachedPod>>) {
    if !drop {
        return (snaps, kept);
    }
    let (mut out_snaps, mut out_kept) = (Vec::new(), Vec::new());
    for (snap, pod) in snaps.into_iter().zip(kept) {
        if snap.state == PodState::Gated {
            *dropped += 1;
        } else {
            out_snaps.push(snap);
            out_kept.push(pod);
        }
    }
    (out_snaps, out_kept)
}

fn snapshot_pods(
    pods: &[FactfulPod],
    in_flight: &HashSet<String>,
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
        snaps.push(PodSnapshot {
            name: fact.name.clone(),
            requests,
            state,
            created_at: fact.created_at,
            terminating: is_terminating(pod, state),
            eviction_blocked: false,
        });
        kept.push(pod.clone());
    }
    (snaps, kept)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::queue::admission::decide;

    fn pod(name: &str, role: &str, gated: bool, phase: &str) -> Arc<CachedPod> {
        decoded(pod_json(name, role, gated, phase))
    }

    fn decoded(pod: serde_json::Value) -> Arc<CachedPod> {
        Arc::new(serde_json::from_value(pod).expect("pod"))
    }

    fn pod_json(name: &str, role: &str, gated: bool, phase: &str) -> serde_json::Value {
        let gates = if gated {
            json!([{"name": ADMISSION_GATE}])
        } else {
            json!([])
        };
        json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": "2026-11-23T00:00:00Z",
                    "labels": {"sluice.dev/queue": "q", "spark-app-selector": "spark-1", "spark-role": role, "sparkoperator.k8s.io/app-name": "etl"}},
                "spec": {"schedulingGates": gates, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
                "status": {"phase": phase},
        })
    }

    fn workload(ended: Option<&str>) -> Arc<DynamicWorkload> {
        let mut spec = json!({"queueName": "q", "podSets": [
            {"name": "driver", "requests": {"cpu": "1"}, "minCount": 1},
            {"name": "executor", "requests": {"cpu": "1"}, "minCount": 2},
        ]});
        if let Some(end) = ended {
            spec["applicationEnded"] = json!(end);
        }
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
                "metadata": {"name": "sparkapplication-etl", "namespace": "ns"}, "spec": spec}),
            )
            .expect("dwl"),
        )
    }

    fn queue() -> Arc<CapacityQueue> {
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "q"}, "spec": {"quota": {"cpu": "10"}}}),
            )
            .expect("queue"),
        )
    }

    #[test]
    fn an_ended_application_reserves_nothing_and_its_gated_pods_stay_gated() {
        let pods = vec![
            pod("driver", "driver", false, "Running"),
            pod("exec-1", "executor", true, "Pending"),
        ];
        let running = build(&[queue()], &[workload(None)], &pods, &[], &HashSet::new());
        let decisions = decide(&running.snapshot);
        assert_eq!(
            decisions.admit.len(),
            1,
            "the executor fills its reserved place"
        );
        assert_eq!(
            decisions.workloads[0].reserved.get("cpu"),
            1000,
            "one executor not created yet"
        );

        let ended = build(
            &[queue()],
            &[workload(Some("Succeeded"))],
            &pods,
            &[],
            &HashSet::new(),
        );
        assert_eq!(ended.left_behind, vec![1]);
        let decisions = decide(&ended.snapshot);
        assert!(
            decisions.admit.is_empty(),
            "nothing of an ended application is admitted"
        );
        assert_eq!(
            decisions.workloads[0].reserved.get("cpu"),
            0,
            "and nothing reserved"
        );
        assert_eq!(
            decisions.workloads[0].used.get("cpu"),
            1000,
            "the driver still counts while it runs"
        );
    }

    #[test]
    fn a_recorded_workload_takes_its_pods_priority_when_higher() {
        let mut driver = pod_json("driver", "driver", true, "Pending");
        driver["spec"]["priority"] = json!(100);
        let built = build(
            &[queue()],
            &[workload(None)],
            &[decoded(driver)],
            &[],
            &HashSet::new(),
        );
        assert_eq!(built.snapshot.workloads[0].priority, 100);
        let built = build(&[queue()], &[workload(None)], &[], &[], &HashSet::new());
        assert_eq!(
            built.snapshot.workloads[0].priority, 0,
            "no pods yet: the ledger's own"
        );
    }

    fn queue_with(spec: serde_json::Value) -> Arc<CapacityQueue> {
        Arc::new(
            serde_json::from_value(
                json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "q"}, "spec": spec}),
            )
            .expect("queue"),
        )
    }

    #[test]
    fn a_queue_snapshot_carries_its_cohort_and_refuses_unreadable_limits_by_field() {
        let read = |spec: serde_json::Value| {
            let q = queue_with(spec);
            cohort_membership(&q.spec)
        };
        assert_eq!(read(serde_json::json!({"quota": {"cpu": "4"}})), Ok(None));
        let c = read(serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team",
            "borrowingLimit": {"cpu": "2"}, "lendingLimit": {"cpu": "1"},
            "fairSharing": {"weight": "0.5"}, "preemption": {"reclaimWithinCohort": "Never"}}))
        .expect("readable")
        .expect("in a cohort");
        assert_eq!(
            (
                c.name.as_str(),
                c.borrowing_limit.get("cpu"),
                c.lending_limit.get("cpu")
            ),
            ("team", 2000, 1000)
        );
        assert_eq!((c.weight_milli, c.reclaim), (500, ReclaimPolicy::Never));
        let defaults = read(serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team"}))
            .expect("readable")
            .expect("in a cohort");
        assert_eq!(
            (defaults.weight_milli, defaults.reclaim),
            (1000, ReclaimPolicy::Any)
        );
        for (field, spec) in [
            (
                "spec.borrowingLimit",
                serde_json::json!({"borrowingLimit": {"cpu": "-1"}}),
            ),
            (
                "spec.lendingLimit",
                serde_json::json!({"lendingLimit": {"cpu": "lots"}}),
            ),
            (
                "spec.fairSharing.weight",
                serde_json::json!({"fairSharing": {"weight": "-2"}}),
            ),
        ] {
            let mut full = serde_json::json!({"quota": {"cpu": "4"}, "cohort": "team"});
            if let (Some(full), Some(spec)) = (full.as_object_mut(), spec.as_object()) {
                full.extend(spec.clone());
            }
            let err = read(full).expect_err("refused");
            assert!(err.starts_with(field), "{err}");
        }
    }

    #[test]
    fn a_queue_snapshot_carries_its_preemption_policy_lower_priority_by_default() {
        let within = |queue: Arc<CapacityQueue>| {
            build(&[queue], &[], &[], &[], &HashSet::new())
                .snapshot
                .queues[0]
                .preemption
                .within_queue
        };
        assert_eq!(within(queue()), WithinQueue::LowerPriority, "no field");
        assert_eq!(
            within(queue_with(
                json!({"quota": {"cpu": "10"}, "preemption": {"maxPriority": 5}})
            )),
            WithinQueue::LowerPriority
        );
        assert_eq!(
            within(queue_with(
                json!({"quota": {"cpu": "10"}, "preemption": {"withinQueue": "Never"}})
            )),
            WithinQueue::Never
        );
    }

    #[test]
    fn an_admitted_pod_being_deleted_still_counts_and_is_marked_terminating() {
        let deleting = |mut pod: serde_json::Value| {
            pod["metadata"]["deletionTimestamp"] = json!("2026-11-23T00:01:00Z");
            decoded(pod)
        };
        let pods = vec![
            pod("driver", "driver", false, "Running"),
            deleting(pod_json("exec-1", "executor", false, "Running")),
            deleting(pod_json("exec-2", "executor", true, "Pending")),
        ];
        let built = build(&[queue()], &[workload(None)], &pods, &[], &HashSet::new());
        let seen: Vec<(&str, PodState, bool)> = built.snapshot.workloads[0]
            .pod_sets
            .iter()
            .flat_map(|s| &s.pods)
            .map(|p| (p.name.as_str(), p.state, p.terminating))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("driver", PodState::Admitted, false),
                ("exec-1", PodState::Admitted, true),
                ("exec-2", PodState::Ended, false),
            ],
            "an admitted pod on its way out holds its quota until it is gone; a gated one held none"
        );
        let decisions = decide(&built.snapshot);
        assert_eq!(decisions.workloads[0].used.get("cpu"), 2000);
    }

    #[test]
    fn no_workload_counts_above_its_queues_max_priority() {
        let mut driver = pod_json("driver", "driver", false, "Running");
        driver["spec"]["priority"] = json!(1_000_000);
        let pods = [decoded(driver)];
        let priority = |queue: Arc<CapacityQueue>| {
            build(&[queue], &[workload(None)], &pods, &[], &HashSet::new())
                .snapshot
                .workloads[0]
                .priority
        };
        assert_eq!(priority(queue()), 1_000_000, "no cap");
        assert_eq!(
            priority(queue_with(
                json!({"quota": {"cpu": "10"}, "preemption": {"maxPriority": 100}})
            )),
            100,
            "a pod created before the cap was set counts as the cap"
        );
    }

    #[test]
    fn each_pod_version_is_read_once_when_decoded() {
        let adapters = Adapters::default();
        let mut memo = PodMemo;
        let driver = pod("d", "driver", false, "Running");
        let executor = pod("e", "executor", true, "Pending");
        let first = memo.refresh(&adapters, &[driver.clone(), executor.clone()]);
        let fact = |facts: &[Option<Arc<PodFacts>>], i: usize| facts[i].clone().expect("governed");
        assert_eq!(fact(&first, 1).pod_set, "executor");
        assert_eq!(
            fact(&first, 1).requests.as_ref().map(|r| r.get("cpu")),
            Ok(1000)
        );
        // The same pods: the very same facts, not read again.
        let second = memo.refresh(&adapters, &[driver.clone(), executor.clone()]);
        assert!(Arc::ptr_eq(&fact(&first, 0), &fact(&second, 0)));
        assert!(Arc::ptr_eq(&fact(&first, 1), &fact(&second, 1)));
        // A new version of a pod is a new decode: read again.
        let mut bigger = pod_json("e", "executor", true, "Pending");
        bigger["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("3");
        let third = memo.refresh(&adapters, &[decoded(bigger)]);
        assert_eq!(
            fact(&third, 0).requests.as_ref().map(|r| r.get("cpu")),
            Ok(3000)
        );
    }

    #[test]
    fn a_snapshot_from_remembered_facts_is_the_snapshot_from_the_pods() {
        let adapters = Adapters::default();
        let pods = vec![
            pod("d", "driver", false, "Running"),
            pod("e1", "executor", true, "Pending"),
            pod("e2", "executor", false, "Succeeded"),
        ];
        let queues = vec![queue()];
        let workloads = vec![workload(None)];
        let fresh = build(&queues, &workloads, &pods, &[], &HashSet::new());
        let facts = PodMemo.refresh(&adapters, &pods);
        let remembered = build_from_facts(&queues, &workloads, &pods, &facts, &[], &HashSet::new());
        assert_eq!(
            format!("{:?}", fresh.snapshot),
            format!("{:?}", remembered.snapshot)
        );
        assert_eq!(fresh.snapshot.workloads.len(), 1);
        assert_eq!(
            fresh.snapshot.workloads[0]
                .pod_sets
                .iter()
                .map(|s| s.pods.len())
                .sum::<usize>(),
            3
        );
    }
}
