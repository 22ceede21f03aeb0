//! The facts the pure core needs, read from Kubernetes objects. Pure.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;

use super::capacity::{NodeFacts, PodFacts};
use super::run::{JobFacts, RunPod};
use crate::api::{SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS};
use crate::resources::{ResourceList, pod_requests};

/// A node: its allocatable, Ready, and schedulable (not cordoned, no NoSchedule or NoExecute taint).
pub fn node_facts(node: &Node) -> NodeFacts {
    let status = node.status.as_ref();
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| {
            // A node's quantity that does not parse counts as nothing.
            ResourceList(
                a.iter()
                    .filter_map(|(k, q)| {
                        crate::resources::parse_amount(&q.0)
                            .ok()
                            .map(|v| (k.clone(), v))
                    })
                    .collect(),
            )
        })
        .unwrap_or_default();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let tainted = spec.and_then(|s| s.taints.as_ref()).is_some_and(|t| {
        t.iter()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
    });
    NodeFacts {
        allocatable,
        ready,
        schedulable: !cordoned && !tainted,
    }
}

/// Whether a pod is a scavenger pod: created with the scavenger PriorityClass (immutable; the
/// scavenger webhook lets only a ScavengerJob's Job create one).
pub fn is_scavenger(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        == Some(SCAVENGER_PRIORITY_CLASS)
}

/// A pod: its requests, whether it is a scavenger's, whether it holds room.
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let ended = matches!(phase, Some("Succeeded" | "Failed"));
    let bound = spec.and_then(|s| s.node_name.as_ref()).is_some();
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let scavenger = is_scavenger(pod);
    PodFacts {
        // A pod whose requests cannot be counted was refused by the API server: none.
        requests: spec
            .and_then(|s| pod_requests(s).ok())
            .map(crate::queue::pod_cache::shared_requests)
            .unwrap_or_default(),
        scavenger,
        holds_room: !ended && (bound || !gated),
        scavenger_job: scavenger
            .then(|| pod.labels().get(SCAVENGER_JOB_LABEL).cloned())
            .flatten(),
    }
}

/// A pod of a run.
pub fn run_pod(pod: &Pod) -> RunPod {
    let status = pod.status.as_ref();
    let condition = |type_: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
    };
    let exit_code = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| {
            cs.iter().find_map(|c| {
                let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                (code != 0).then(|| (c.name.clone(), code))
            })
        });
    RunPod {
        name: pod.name_any(),
        phase: status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into()),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        disrupted: condition("DisruptionTarget"),
        exit_code,
        scheduled: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some(),
    }
}

/// A run's Job.
pub fn job_facts(job: &Job) -> JobFacts {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let on = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    JobFacts {
        name: job.name_any(),
        created: job
            .creation_timestamp()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
        complete: on("Complete").is_some(),
        failed: on("Failed").map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        }),
        pods_deleted_while_running: Vec::new(),
    }
}

/// `(namespace/job, pod)` when `pod` is a Job's pod being deleted before it ended: the deletion,
/// not the program, ends its run.
pub fn deleted_while_running(pod: &Pod) -> Option<(String, String)> {
    pod.metadata.deletion_timestamp.as_ref()?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let job = pod.labels().get("batch.kubernetes.io/job-name")?;
    let namespace = pod.namespace()?;
    Some((format!("{namespace}/{job}"), pod.name_any()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_job_pod_deleted_before_it_ended_is_deleted_while_running() {
        let pod = |phase: &str, deleting: bool, job: Option<&str>| -> Pod {
            let mut labels = serde_json::Map::new();
            if let Some(job) = job {
                labels.insert("batch.kubernetes.io/job-name".into(), json!(job));
            }
            let mut meta = json!({"name": "p", "namespace": "ns", "labels": labels});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-11-25T10:00:00Z");
            }
            serde_json::from_value(json!({"metadata": meta, "status": {"phase": phase}}))
                .expect("pod")
        };
        assert_eq!(
            deleted_while_running(&pod("Running", true, Some("sj-run-1"))),
            Some(("ns/sj-run-1".into(), "p".into()))
        );
        assert_eq!(
            deleted_while_running(&pod("Running", false, Some("j"))),
            None
        );
        assert_eq!(deleted_while_running(&pod("Failed", true, Some("j"))), None);
        assert_eq!(
            deleted_while_running(&pod("Succeeded", true, Some("j"))),
            None
        );
        assert_eq!(deleted_while_running(&pod("Running", true, None)), None);
    }

    #[test]
    fn a_forged_label_without_the_priority_class_is_ordinary_work() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {SCAVENGER_JOB_LABEL: "x"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "2"}}}]},
        }))
        .expect("pod");
        let f = pod_facts(&pod);
        assert!(!f.scavenger);
        assert!(f.holds_room);
        assert_eq!(f.requests.get("cpu"), 2000);
    }

    #[test]
    fn gated_pods_hold_nothing_and_ungated_pending_ones_do() {
        let gated: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"schedulingGates": [{"name": "sluice.dev/admission"}],
                     "containers": [{"name": "c"}]},
        }))
        .expect("pod");
        assert!(!pod_facts(&gated).holds_room);
        let pending: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }))
        .expect("pod");
        assert!(pod_facts(&pending).holds_room);
    }

    #[test]
    fn tainted_cordoned_or_unready_nodes_are_told() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4", "memory": "bad"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node");
        let f = node_facts(&node);
        assert!(f.ready && !f.schedulable);
        assert_eq!(f.allocatable.get("cpu"), 4000);
        assert_eq!(f.allocatable.get("memory"), 0);
    }

    #[test]
    fn a_run_pod_tells_its_exit_code_and_disruption() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"}, "spec": {"containers": [{"name": "work"}]},
            "status": {"phase": "Failed",
                "conditions": [{"type": "DisruptionTarget", "status": "True"}],
                "containerStatuses": [{"name": "work", "image": "i", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {"terminated": {"exitCode": 143}}}]},
        }))
        .expect("pod");
        let r = run_pod(&pod);
        assert!(r.disrupted);
        assert_eq!(r.exit_code, Some(("work".into(), 143)));
    }
}
