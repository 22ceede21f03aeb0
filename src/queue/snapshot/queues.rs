//! A CapacityQueue as admission reads it: its preemption policy, its cohort membership, its
//! pods-ready timeout, and which namespaces it admits.

use super::*;

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
    let mut borrowing_limit = ResourceList::from_quantities(&spec.borrowing_limit)
        .map_err(|e| format!("spec.borrowingLimit: {e}"))?;
    let mut lending_limit = ResourceList::from_quantities(&spec.lending_limit)
        .map_err(|e| format!("spec.lendingLimit: {e}"))?;
    // A flavored queue lends and borrows per flavor: its limits name flavored resources.
    for (i, flavor) in spec.flavors.iter().enumerate() {
        let limits = [
            (
                &flavor.borrowing_limit,
                &mut borrowing_limit,
                "borrowingLimit",
            ),
            (&flavor.lending_limit, &mut lending_limit, "lendingLimit"),
        ];
        for (quantities, into, field) in limits {
            let read = ResourceList::from_quantities(quantities)
                .map_err(|e| format!("spec.flavors[{i}].{field}: {e}"))?;
            for (resource, value) in read.0 {
                into.0
                    .insert(flavored_resource(&flavor.name, &resource), value);
            }
        }
    }
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

/// Whether a queue (its `rule`; None: not known, which selects nothing out) admits `namespace`.
pub(super) fn admits_namespace(
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

/// What the snapshot needs of a queue besides its [`QueueSnapshot`]: which namespaces it admits
/// and the highest priority it counts.
pub(super) struct QueueRules {
    pub(super) selector: Option<LabelSelector>,
    pub(super) max_priority: Option<i32>,
    pub(super) requeue_limit: Option<i32>,
}

/// The queues whose quota can be read, and each one's namespace selector and priority cap; a
/// queue whose quota cannot is a problem, left out.
pub(super) fn queue_snapshots(
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
            .and_then(|read| Ok((read, flavor_snapshots(&q.spec)?)))
            .and_then(|read| timeout_ms(&q.spec).map(|_| read));
        match read {
            Ok(((quota, cohort), flavors)) => {
                let preemption = q.spec.preemption();
                snapshots.push(QueueSnapshot {
                    name: name.clone(),
                    quota,
                    strategy: q.spec.queueing_strategy,
                    preemption: preemption_policy(&preemption),
                    cohort,
                    flavors,
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

/// A queue's flavors as admission reads them, before their ResourceFlavors are known
/// ([`resolve_flavors`]): names and quotas. An unreadable quota is refused with the field's name.
pub fn flavor_snapshots(spec: &CapacityQueueSpec) -> Result<Vec<Arc<FlavorSnapshot>>, String> {
    if spec.flavors.len() > MAX_FLAVORS {
        return Err(format!(
            "spec.flavors: {} flavors, at most {MAX_FLAVORS}",
            spec.flavors.len()
        ));
    }
    let mut flavors = Vec::with_capacity(spec.flavors.len());
    for (i, flavor) in spec.flavors.iter().enumerate() {
        if flavor.name.contains(':') || spec.flavors[..i].iter().any(|f| f.name == flavor.name) {
            return Err(format!(
                "spec.flavors[{i}].name: {:?} is not a unique ResourceFlavor name",
                flavor.name
            ));
        }
        let quota = ResourceList::from_quantities(&flavor.quota)
            .map_err(|e| format!("spec.flavors[{i}].quota: {e}"))?;
        flavors.push(Arc::new(FlavorSnapshot {
            name: flavor.name.clone(),
            quota,
            node_labels: BTreeMap::new(),
            tolerations: Vec::new(),
            defined: false,
        }));
    }
    Ok(flavors)
}

/// Gives the snapshot's flavors their ResourceFlavors' node labels and tolerations; a flavor
/// whose ResourceFlavor does not exist stays undefined (it admits nothing).
pub fn resolve_flavors(snapshot: &mut Snapshot, resource_flavors: &[Arc<ResourceFlavor>]) {
    for queue in &mut snapshot.queues {
        for flavor in &mut queue.flavors {
            let found = resource_flavors
                .iter()
                .find(|rf| rf.name_any() == flavor.name);
            let resolved = FlavorSnapshot {
                node_labels: found
                    .map(|rf| rf.spec.node_labels.clone())
                    .unwrap_or_default(),
                tolerations: found
                    .map(|rf| rf.spec.tolerations.clone())
                    .unwrap_or_default(),
                defined: found.is_some(),
                ..FlavorSnapshot::clone(flavor)
            };
            *flavor = Arc::new(resolved);
        }
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
