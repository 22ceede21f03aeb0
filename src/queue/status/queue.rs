//! A CapacityQueue's status after a pass: its usage, reservations and pending demand from the
//! pass's tally, and the one-line summary of its usage.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::api::FlavorStatus;

/// The status a CapacityQueue should have after this pass: its tally, or (no tally: its quota
/// could not be read, so the pass skipped it) inactive. `old`: the newest status known.
pub fn queue_status(
    tally: Option<&QueueTally>,
    old: Option<&CapacityQueueStatus>,
    generation: Option<i64>,
    now: &str,
) -> CapacityQueueStatus {
    let previous = old.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Active"));
    match tally {
        Some(t) => CapacityQueueStatus {
            usage: t.usage.to_quantities(),
            reserved: t.reserved.to_quantities(),
            pending_workloads: t.pending_workloads as i32,
            admitted_workloads: t.admitted_workloads as i32,
            pending_pods: t.pending_pods as i32,
            admitted_pods: t.admitted_pods as i32,
            borrowed: t.borrowed.to_quantities(),
            lent: t.lent.to_quantities(),
            conditions: vec![Condition::updated(
                previous,
                "Active",
                ConditionStatus::True,
                "QuotaValid",
                "the queue admits pods".into(),
                now,
            )],
            observed_generation: generation,
            usage_summary: String::new(),
            flavors: flavor_statuses(t),
        },
        None => CapacityQueueStatus {
            conditions: vec![Condition::updated(
                previous,
                "Active",
                ConditionStatus::False,
                "InvalidQuota",
                "spec.quota (or spec.borrowingLimit, spec.lendingLimit, spec.fairSharing.weight) holds a quantity sluice cannot read: nothing is admitted".into(),
                now,
            )],
            observed_generation: generation,
            ..CapacityQueueStatus::default()
        },
    }
}

/// A flavored queue's holdings per flavor, read from its tally's flavored resources
/// (`<flavor>:<resource>`), in the order the flavors first appear (the queue's order).
fn flavor_statuses(t: &QueueTally) -> Vec<FlavorStatus> {
    use crate::queue::admission::split_flavored;
    let mut flavors: Vec<FlavorStatus> = Vec::new();
    let lists = [(&t.usage, false), (&t.reserved, true)];
    for (list, reserved) in lists {
        for (name, value) in &list.0 {
            let Some((flavor, resource)) = split_flavored(name) else {
                continue;
            };
            let at = match flavors.iter().position(|f| f.name == flavor) {
                Some(at) => at,
                None => {
                    flavors.push(FlavorStatus {
                        name: flavor.to_string(),
                        ..FlavorStatus::default()
                    });
                    flavors.len() - 1
                }
            };
            let into = if reserved {
                &mut flavors[at].reserved
            } else {
                &mut flavors[at].usage
            };
            into.insert(
                resource.to_string(),
                Quantity(crate::resources::format_quantity(resource, *value)),
            );
        }
    }
    flavors
}

/// The quota `Used/Quota` reads: `spec.quota`, or for a queue with flavors each flavor's quota
/// under its flavored names (`<flavor>:<resource>`, as the status's usage names them).
pub fn summary_quota(spec: &crate::api::CapacityQueueSpec) -> BTreeMap<String, Quantity> {
    if spec.flavors.is_empty() {
        return spec.quota.clone();
    }
    let mut quota = BTreeMap::new();
    for flavor in &spec.flavors {
        for (resource, value) in &flavor.quota {
            let name = crate::queue::admission::flavored_resource(&flavor.name, resource);
            quota.insert(name, value.clone());
        }
    }
    quota
}

/// `kubectl get cq`'s `Used/Quota`: per resource the quota names, what is used and reserved
/// (from the status's quantities) over the quota, e.g. `cpu=3/4 memory=1Gi/8Gi`.
pub fn usage_summary(
    quota: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
    status: &CapacityQueueStatus,
) -> String {
    use crate::resources::{ResourceList, format_quantity};
    let held = |m: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >| { ResourceList::from_quantities(m).unwrap_or_default() };
    let (usage, reserved) = (held(&status.usage), held(&status.reserved));
    quota
        .iter()
        .map(|(name, q)| {
            let used = usage.get(name).saturating_add(reserved.get(name));
            format!("{name}={}/{}", format_quantity(name, used), q.0)
        })
        .collect::<Vec<_>>()
        .join(" ")
}
