//! What a queue could ever give one workload: its quota, plus what its cohort could lend it (up to
//! its borrowing limit). A demand above that can never be admitted, so the webhooks refuse it at
//! submit with the numbers, instead of letting it wait forever (and, in a StrictFIFO queue, block
//! everything behind it). Pure: read from the CapacityQueues only.

use std::sync::Arc;

use kube::ResourceExt;

use crate::api::CapacityQueue;
use crate::queue::snapshot::cohort_membership;
use crate::resources::{ResourceList, describe_quantity};

/// The most of each resource its quota names that `queue` could hold at once: its quota, plus, in
/// a cohort, what the other queues of the cohort lend (each its quota, or its lending limit),
/// capped by the queue's borrowing limit. Err: a quota or limit that cannot be read.
pub fn ceiling(
    queue: &CapacityQueue,
    queues: &[Arc<CapacityQueue>],
) -> Result<ResourceList, String> {
    let quota =
        ResourceList::from_quantities(&queue.spec.quota).map_err(|e| format!("spec.quota: {e}"))?;
    let Some(membership) = cohort_membership(&queue.spec)? else {
        return Ok(quota);
    };
    let name = queue.name_any();
    let mut lent = ResourceList::new();
    for other in queues {
        if other.name_any() == name || other.spec.cohort.as_deref() != Some(&membership.name) {
            continue;
        }
        // An unreadable neighbour lends nothing here (the controller reports it).
        let (Ok(their_quota), Ok(Some(theirs))) = (
            ResourceList::from_quantities(&other.spec.quota),
            cohort_membership(&other.spec),
        ) else {
            continue;
        };
        for (resource, amount) in &their_quota.0 {
            let lends = match theirs.lending_limit.0.get(resource) {
                Some(limit) => (*limit).min(*amount),
                None => *amount,
            };
            lent.0
                .entry(resource.clone())
                .and_modify(|v| *v = v.saturating_add(lends))
                .or_insert(lends);
        }
    }
    let mut most = ResourceList::new();
    for (resource, own) in &quota.0 {
        let borrowable = match membership.borrowing_limit.0.get(resource) {
            Some(limit) => (*limit).min(lent.get(resource)),
            None => lent.get(resource),
        };
        most.0
            .insert(resource.clone(), own.saturating_add(borrowable.max(0)));
    }
    Ok(most)
}

/// The first resource of `most` that `need` exceeds: (resource, needed, most), for a message.
pub fn exceeded(need: &ResourceList, most: &ResourceList) -> Option<(String, i64, i64)> {
    most.0.iter().find_map(|(resource, limit)| {
        let needed = need.get(resource);
        (needed > *limit).then(|| (resource.clone(), needed, *limit))
    })
}

/// "needs N cpu but CapacityQueue Q has a quota of M cpu" (and, in a cohort, "and can borrow at
/// most B cpu more from cohort C"), for a message.
pub fn describe_exceeded(
    queue: &CapacityQueue,
    (resource, needed, most): &(String, i64, i64),
) -> String {
    let quota = ResourceList::from_quantities(&queue.spec.quota)
        .map(|q| q.get(resource))
        .unwrap_or(0);
    let borrow = match &queue.spec.cohort {
        Some(cohort) => format!(
            " and can borrow at most {} {resource} more from cohort {cohort:?}",
            describe_quantity(resource, most.saturating_sub(quota).max(0)),
        ),
        None => String::new(),
    };
    format!(
        "needs {} {resource} but CapacityQueue {} has a quota of {} {resource}{borrow}",
        describe_quantity(resource, *needed),
        queue.name_any(),
        describe_quantity(resource, quota),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queue(name: &str, spec: serde_json::Value) -> Arc<CapacityQueue> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": name}, "spec": spec,
            }))
            .expect("queue"),
        )
    }

    fn cpu(list: &ResourceList) -> i64 {
        list.get("cpu")
    }

    #[test]
    fn a_queue_alone_can_give_its_quota() {
        let q = queue("a", json!({"quota": {"cpu": "4"}}));
        assert_eq!(
            cpu(&ceiling(&q, std::slice::from_ref(&q)).expect("readable")),
            4000
        );
    }

    #[test]
    fn a_queue_of_a_cohort_can_give_what_the_others_lend_up_to_its_borrowing_limit() {
        let a = queue("a", json!({"quota": {"cpu": "4"}, "cohort": "c"}));
        let b = queue(
            "b",
            json!({"quota": {"cpu": "4"}, "cohort": "c", "lendingLimit": {"cpu": "3"}}),
        );
        let other = queue("x", json!({"quota": {"cpu": "100"}, "cohort": "elsewhere"}));
        let all = [a.clone(), b.clone(), other];
        assert_eq!(
            cpu(&ceiling(&a, &all).expect("readable")),
            7000,
            "4 own + 3 lent"
        );
        let capped = queue(
            "a",
            json!({"quota": {"cpu": "4"}, "cohort": "c", "borrowingLimit": {"cpu": "1"}}),
        );
        assert_eq!(cpu(&ceiling(&capped, &all).expect("readable")), 5000);
    }

    #[test]
    fn exceeded_names_the_resource_and_both_numbers() {
        let mut need = ResourceList::new();
        need.0.insert("cpu".into(), 9000);
        let q = queue("a", json!({"quota": {"cpu": "4"}}));
        let most = ceiling(&q, std::slice::from_ref(&q)).expect("readable");
        let over = exceeded(&need, &most).expect("over");
        assert_eq!(over, ("cpu".to_string(), 9000, 4000));
        let text = describe_exceeded(&q, &over);
        assert!(
            text.contains("needs 9 cpu") && text.contains("a quota of 4 cpu"),
            "{text}"
        );
    }
}
