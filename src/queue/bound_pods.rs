//! [`BoundPod`]: a pod sluice does not govern (no `sluice.dev/queue` label) that is bound to a node
//! and has not ended. Topology-aware gangs and data locality take its requests off its node's room:
//! a rack full of other tenants' pods (DaemonSets, services, another scheduler's batch) has no room
//! for a gang, however little sluice itself admitted there, and a gang pinned to it would wait
//! unschedulable until podsReadyTimeout. The queue controller watches these pods with the
//! selectors below (the governed pods are in its own pod cache, `pod_cache.rs`, which reads their
//! requests the same way) and keeps of each only its node and requests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::queue::pod_cache::{decode_pod, shared_requests};
use crate::resources::{ResourceList, pod_requests};

/// The label selector of the pods sluice does not govern: those without its queue label.
pub const UNGOVERNED: &str = "!sluice.dev/queue";

/// The field selector of the pods that hold room on a node: bound, and neither Succeeded nor Failed.
pub const BOUND_NOT_ENDED: &str = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed";

/// An ungoverned pod bound to a node, as the queue controller caches it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BoundPod {
    /// name, namespace, uid and resourceVersion only.
    pub metadata: ObjectMeta,
    /// `spec.nodeName`.
    pub node: Option<Box<str>>,
    /// Its requests as the scheduler counts them (equal lists are one shared copy); None when they
    /// cannot be read (the API server refuses such a pod, so none is bound).
    pub requests: Option<Arc<ResourceList>>,
}

impl BoundPod {
    /// The cached form of a pod (the same as decoding it from JSON).
    pub fn from_pod(pod: Pod) -> BoundPod {
        let spec = pod.spec.as_ref();
        BoundPod {
            node: spec.and_then(|s| s.node_name.as_deref()).map(Box::from),
            requests: spec.and_then(|s| pod_requests(s).ok()).map(shared_requests),
            metadata: ObjectMeta {
                name: pod.metadata.name,
                namespace: pod.metadata.namespace,
                uid: pod.metadata.uid,
                resource_version: pod.metadata.resource_version,
                ..ObjectMeta::default()
            },
        }
    }

    /// Its node and requests, when it has both.
    pub fn holds(&self) -> Option<(&str, &ResourceList)> {
        Some((self.node.as_deref()?, self.requests.as_deref()?))
    }
}

impl<'de> Deserialize<'de> for BoundPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(BoundPod::from_pod(decode_pod(deserializer)?))
    }
}

crate::slim_pod_resource!(BoundPod);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::QUEUE_LABEL;

    #[test]
    fn the_selector_is_the_complement_of_the_governed_pods_watch() {
        assert_eq!(UNGOVERNED, format!("!{QUEUE_LABEL}"));
    }

    #[test]
    fn a_bound_pod_keeps_its_node_and_requests_as_the_scheduler_counts_them() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                "labels": {"app": "x"}, "annotations": {"a": "b"},
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"nodeName": "n1",
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
                "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "d", "resources": {"requests": {"cpu": "500m"}}}],
                "overhead": {"cpu": "100m"}},
            "status": {"phase": "Running"},
        });
        let full: Pod = serde_json::from_value(pod.clone()).expect("pod");
        let bound: BoundPod = serde_json::from_value(pod).expect("bound pod");
        assert_eq!(bound, BoundPod::from_pod(full));
        let (node, requests) = bound.holds().expect("bound with requests");
        assert_eq!(node, "n1");
        // max(init 3, containers 1.5) + overhead 0.1
        assert_eq!(requests.get("cpu"), 3100);
        assert_eq!(requests.get("memory"), (1 << 30) * 1000); // in milli-units, as every quantity
        assert!(bound.metadata.labels.is_none() && bound.metadata.annotations.is_none());
    }

    #[test]
    fn an_unbound_pod_or_one_with_unreadable_requests_holds_nothing() {
        let unbound: BoundPod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"containers": []}}))
        .expect("pod");
        assert_eq!(unbound.holds(), None);
        let bad: BoundPod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}))
        .expect("pod");
        assert_eq!(bad.holds(), None);
    }
}
