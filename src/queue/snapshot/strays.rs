//! Strays: pods of a workload whose queue is not the workload's (a pod labelled for another
//! queue), kept out of the workload's accounting as parts of their own, keyed by queue.

use super::pods::pod_state;
use super::queues::{QueueRules, admits_namespace};
use super::*;

/// The queue a workload is charged to. Every pod counts in the queue its own (immutable) label
/// names, so a workload's queue is its pods' queue, never one that another object says: the queue
/// of its admitted pods (the earliest first), else its ledger's queue if a pod of it carries that
/// queue (or it has no pods), else its earliest pod's; ended pods do not count. The ledger's `spec.queueName` is what a
/// user may write (an application's label, a forged or edited ledger); it never moves pods.
pub(super) fn owning_queue(
    dwl: Option<&Arc<DynamicWorkload>>,
    group: &Group,
    in_flight: &InFlight,
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
pub(super) fn leave_strays_behind(
    key: &WorkloadKey,
    queue: &str,
    group: &mut Group,
    in_flight: &InFlight,
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
pub(super) fn keyed_parts(
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
