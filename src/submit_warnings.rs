//! Warnings at submit: what `kubectl apply` prints (`Warning: ...`) when an application that is
//! let in will wait. A pure function of the application's minimum gang and the CapacityQueue as
//! the validating webhook's cache holds it (its spec and the status the controller last wrote): no
//! API call on the webhook's path. The figures are those of the queue's last status, and the
//! warnings say so; they never refuse anything (the refusals are `ValidateApplications::check`'s).
//!
//! The same for a governed pod created behind the gate ([`for_pod`]): kubectl, the Spark driver
//! and the KubeRay operator log them.
//!
//! The API server drops warnings over 256 characters and kubectl prints each on a line: each
//! warning is one short sentence, at most [`WARNING_CHARS`] characters.

use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionResponse;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::CapacityQueue;
use crate::integrations::{ApplicationIntegration, PodIdentity};
use crate::resources::{ResourceList, describe_quantity, pod_requests};

/// The warnings for `app`, created into `queue_name`, from the webhook's cache of queues. An
/// application whose demand cannot be counted gets none (the refusal says why).
pub fn for_application(
    adapter: &dyn ApplicationIntegration,
    app: &DynamicObject,
    queue_name: &str,
    queues: &Store<CapacityQueue>,
) -> Vec<String> {
    let Some(queue) = queues.get(&ObjectRef::new(queue_name)) else {
        return Vec::new();
    };
    let Ok(sets) = adapter.demand(app) else {
        return Vec::new();
    };
    let mut gang = ResourceList::new();
    for set in &sets {
        let Ok(per_pod) = ResourceList::from_quantities(&set.requests) else {
            return Vec::new();
        };
        if gang
            .try_add_scaled(&per_pod, i64::from(set.min_count.max(0)))
            .is_err()
        {
            return Vec::new();
        }
    }
    warnings(queue_name, &queue, &gang)
}

/// The warnings for a governed pod created behind the gate into the queue its `identity` names:
/// that queue as the webhook's cache holds it (None: not there), whether it admits `namespace`
/// (its namespaceSelector, judged by the caller), or too full for the pod's gang (its minimum
/// count times its requests).
pub fn for_pod(
    namespace: &str,
    pod: &Pod,
    identity: &PodIdentity,
    queue: Option<&CapacityQueue>,
    admits_namespace: bool,
) -> Vec<String> {
    let queue_name = identity.queue.as_str();
    let Some(queue) = queue else {
        return vec![cut(&format!(
            "sluice: CapacityQueue {queue_name} does not exist: this pod waits behind its gate until it does (kubectl get capacityqueues lists those there are)"
        ))];
    };
    if !admits_namespace {
        return vec![cut(&format!(
            "sluice: CapacityQueue {queue_name} does not admit namespace {namespace} (its namespaceSelector): this pod waits until it does; use a queue that admits {namespace}"
        ))];
    }
    let Some(Ok(per_pod)) = pod.spec.as_ref().map(pod_requests) else {
        return Vec::new();
    };
    let mut gang = ResourceList::new();
    let count = i64::from(identity.min_count.unwrap_or(1).max(1));
    if gang.try_add_scaled(&per_pod, count).is_err() {
        return Vec::new();
    }
    warnings(queue_name, queue, &gang)
}

/// `response` with `warnings` (none: as it was).
pub fn attach(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// The longest warning (the API server truncates at 256 characters, a little less is kept for
/// safety with multibyte characters).
pub const WARNING_CHARS: usize = 250;

/// Why an application submitted to `queue` with minimum gang `gang` will wait, if it will.
pub fn warnings(queue_name: &str, queue: &CapacityQueue, gang: &ResourceList) -> Vec<String> {
    let mut out = Vec::new();
    let status = queue.status.clone().unwrap_or_default();
    if status.pending_workloads > 0 {
        out.push(format!(
            "sluice: {} workload(s) already wait in CapacityQueue {queue_name}; this one queues behind those of its priority or higher",
            status.pending_workloads
        ));
    }
    let (Ok(quota), Ok(usage), Ok(reserved)) = (
        ResourceList::from_quantities(&queue.spec.quota),
        ResourceList::from_quantities(&status.usage),
        ResourceList::from_quantities(&status.reserved),
    ) else {
        return out.into_iter().map(|w| cut(&w)).collect();
    };
    let borrowing_limit =
        ResourceList::from_quantities(&queue.spec.borrowing_limit).unwrap_or_default();
    for (resource, limit) in &quota.0 {
        let needed = gang.get(resource);
        if needed == 0 || needed > *limit {
            // Nothing asked, or refused already (larger than the queue).
            continue;
        }
        let held = usage.get(resource).saturating_add(reserved.get(resource));
        let free = (limit - held).max(0);
        if needed <= free {
            continue;
        }
        let d = |v: i64| describe_quantity(resource, v);
        let warning = match &queue.spec.cohort {
            None => format!(
                "sluice: CapacityQueue {queue_name} is full for this: its gang needs {} {resource}, {} of {} free; it waits for running work to end",
                d(needed),
                d(free),
                d(*limit)
            ),
            Some(cohort) => match borrowing_limit.0.get(resource) {
                Some(most) if held.saturating_add(needed) > limit.saturating_add(*most) => format!(
                    "sluice: its gang needs {} {resource}, above what CapacityQueue {queue_name} may borrow from cohort {cohort} ({} over its quota of {}); it waits for the queue's own work to end",
                    d(needed),
                    d(*most),
                    d(*limit)
                ),
                _ => format!(
                    "sluice: its gang needs {} {resource}, {} free in CapacityQueue {queue_name}: it must borrow from cohort {cohort}, and waits if the cohort has none unused",
                    d(needed),
                    d(free)
                ),
            },
        };
        out.push(warning);
    }
    out.into_iter().map(|w| cut(&w)).collect()
}

/// At most [`WARNING_CHARS`] characters, no control character.
fn cut(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(WARNING_CHARS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queue(spec: serde_json::Value, status: serde_json::Value) -> CapacityQueue {
        serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "q"}, "spec": spec, "status": status,
        }))
        .expect("queue")
    }

    fn cpu(cores: i64) -> ResourceList {
        let mut l = ResourceList::new();
        l.add("cpu", cores * 1000);
        l
    }

    #[test]
    fn an_application_that_fits_an_idle_queue_gets_no_warning() {
        let q = queue(
            json!({"quota": {"cpu": "4"}}),
            json!({"usage": {"cpu": "1"}}),
        );
        assert!(warnings("q", &q, &cpu(3)).is_empty());
    }

    #[test]
    fn a_full_queue_warns_with_the_figures() {
        let q = queue(
            json!({"quota": {"cpu": "4"}}),
            json!({"usage": {"cpu": "3"}, "reserved": {"cpu": "500m"}}),
        );
        let w = warnings("q", &q, &cpu(2));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("CapacityQueue q is full"), "{}", w[0]);
        assert!(w[0].contains("needs 2 cpu, 0.5 of 4 free"), "{}", w[0]);
    }

    #[test]
    fn waiting_workloads_are_counted_even_when_there_is_room() {
        let q = queue(
            json!({"quota": {"cpu": "4"}}),
            json!({"pendingWorkloads": 3}),
        );
        let w = warnings("q", &q, &cpu(1));
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("3 workload(s) already wait"));
    }

    #[test]
    fn a_cohort_queue_warns_of_borrowing_and_of_its_borrowing_limit() {
        let spec =
            json!({"quota": {"cpu": "4"}, "cohort": "research", "borrowingLimit": {"cpu": "2"}});
        let q = queue(spec.clone(), json!({"usage": {"cpu": "3"}}));
        let w = warnings("q", &q, &cpu(2));
        assert!(w[0].contains("must borrow from cohort research"), "{w:?}");
        let q = queue(spec, json!({"usage": {"cpu": "4"}}));
        let w = warnings("q", &q, &cpu(3));
        assert!(
            w[0].contains("above what CapacityQueue q may borrow"),
            "{w:?}"
        );
    }

    #[test]
    fn a_gang_larger_than_the_queue_is_left_to_the_refusal() {
        let q = queue(json!({"quota": {"cpu": "4"}}), json!({}));
        assert!(warnings("q", &q, &cpu(5)).is_empty());
    }

    #[test]
    fn warnings_stay_within_what_the_api_server_keeps() {
        let long = "q".repeat(300);
        let q = queue(
            json!({"quota": {"cpu": "1"}}),
            json!({"usage": {"cpu": "1"}, "pendingWorkloads": 1}),
        );
        for w in warnings(&long, &q, &cpu(1)) {
            assert!(w.chars().count() <= WARNING_CHARS);
        }
    }

    fn identity(queue: &str, min_count: Option<u32>) -> PodIdentity {
        PodIdentity {
            queue: queue.into(),
            workload: None,
            pod_set: "main".into(),
            min_count,
            recorded: false,
        }
    }

    fn one_cpu_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .expect("pod")
    }

    #[test]
    fn a_gated_pod_is_told_its_queue_is_unknown_or_does_not_admit_its_namespace() {
        let q = queue(json!({"quota": {"cpu": "4"}}), json!({}));
        let w = for_pod("ns", &one_cpu_pod(), &identity("nope", None), None, true);
        assert!(w[0].contains("CapacityQueue nope does not exist"), "{w:?}");
        let w = for_pod("ns", &one_cpu_pod(), &identity("q", None), Some(&q), false);
        assert!(w[0].contains("does not admit namespace ns"), "{w:?}");
        assert!(for_pod("ns", &one_cpu_pod(), &identity("q", None), Some(&q), true).is_empty());
    }

    #[test]
    fn a_gated_pod_is_judged_by_its_whole_gang() {
        let q = queue(
            json!({"quota": {"cpu": "4"}}),
            json!({"usage": {"cpu": "2"}}),
        );
        let alone = for_pod("ns", &one_cpu_pod(), &identity("q", None), Some(&q), true);
        assert!(alone.is_empty(), "{alone:?}");
        let gang = for_pod(
            "ns",
            &one_cpu_pod(),
            &identity("q", Some(3)),
            Some(&q),
            true,
        );
        assert!(gang[0].contains("needs 3 cpu, 2 of 4 free"), "{gang:?}");
    }
}
