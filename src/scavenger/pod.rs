//! [`WatchedPod`]: a pod as the ScavengerJob controller caches it. That controller watches every
//! non-terminal pod of the cluster (capacity counts them all), so each is decoded straight into
//! what it reads (`queue::pod_cache::decode_pod`: the full pod never exists) and only the facts are
//! kept: its capacity facts, and for a Job's pod what the run judgement reads.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde::{Deserialize, Deserializer};

use super::capacity::PodFacts;
use super::facts::{deleted_while_running, pod_facts, run_pod};
use super::run::RunPod;
use crate::queue::pod_cache::decode_pod;

/// The label the Job controller puts on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// A pod as the ScavengerJob controller caches it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchedPod {
    /// name, namespace, uid, resourceVersion, deletionTimestamp only.
    pub metadata: ObjectMeta,
    /// What the capacity reads.
    pub facts: PodFacts,
    /// A Job's pod: its Job's name and what the run judgement reads of it.
    pub job: Option<Box<(String, RunPod)>>,
    /// `(namespace/job, pod)` when it is a Job's pod being deleted before it ended.
    pub deleted_while_running: Option<(String, String)>,
}

impl WatchedPod {
    /// The cached form of a pod (the same as decoding it from JSON).
    pub fn from_pod(pod: Pod) -> WatchedPod {
        let job = pod
            .labels()
            .get(JOB_NAME_LABEL)
            .map(|job| Box::new((job.clone(), run_pod(&pod))));
        WatchedPod {
            facts: pod_facts(&pod),
            deleted_while_running: deleted_while_running(&pod),
            job,
            metadata: ObjectMeta {
                name: pod.metadata.name,
                namespace: pod.metadata.namespace,
                uid: pod.metadata.uid,
                resource_version: pod.metadata.resource_version,
                deletion_timestamp: pod.metadata.deletion_timestamp,
                ..ObjectMeta::default()
            },
        }
    }
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(WatchedPod::from_pod(decode_pod(deserializer)?))
    }
}

crate::slim_pod_resource!(WatchedPod);

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::{SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS};

    fn scavenger_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                "labels": {SCAVENGER_JOB_LABEL: "x", JOB_NAME_LABEL: "x-run-1"},
                "annotations": {"a": "b"}, "deletionTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "m", "operation": "Update"}]},
            "spec": {"nodeName": "n", "priorityClassName": SCAVENGER_PRIORITY_CLASS,
                "schedulingGates": [{"name": "g"}],
                "initContainers": [{"name": "i", "command": ["x"],
                    "resources": {"requests": {"cpu": "3"}}}],
                "containers": [{"name": "c", "command": ["sleep"], "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running",
                "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "r"}],
                "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]},
        })
    }

    #[test]
    fn a_watched_pod_keeps_every_fact_of_the_full_pod() {
        let full: Pod = serde_json::from_value(scavenger_pod()).expect("pod");
        let watched: WatchedPod = serde_json::from_value(scavenger_pod()).expect("watched pod");
        assert_eq!(watched.facts, pod_facts(&full));
        assert_eq!(watched.facts.requests.get("cpu"), 3000);
        assert!(watched.facts.scavenger);
        assert_eq!(watched.facts.scavenger_job.as_deref(), Some("x"));
        let (job, run) = *watched.job.clone().expect("a Job's pod");
        assert_eq!((job.as_str(), &run), ("x-run-1", &run_pod(&full)));
        assert!(run.disrupted && run.deleting && run.scheduled);
        assert_eq!(run.exit_code, Some(("c".into(), 2)));
        assert_eq!(
            watched.deleted_while_running,
            Some(("ns/x-run-1".into(), "p".into()))
        );
        assert_eq!(watched, WatchedPod::from_pod(full));
        assert!(watched.metadata.labels.is_none() && watched.metadata.annotations.is_none());
    }

    #[test]
    fn a_pod_of_no_job_keeps_no_run() {
        let mut pod = scavenger_pod();
        pod["metadata"]["labels"] = json!({"app": "x"});
        let watched: WatchedPod = serde_json::from_value(pod).expect("watched pod");
        assert!(watched.job.is_none() && watched.deleted_while_running.is_none());
        assert!(!watched.facts.holds_room || watched.facts.requests.get("cpu") == 3000);
    }
}
