//! The batch/v1 Job of one run of a ScavengerJob: owned by it, its pods Guaranteed, of the
//! scavenger PriorityClass, `backoffLimit: 0`, all pods created together. Pure.

use k8s_openapi::api::batch::v1::Job;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::spec::{MountKind, mount_source};
use crate::api::{SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS, ScavengerJob};

/// The name of run `run` (1, 2, ...) of the ScavengerJob `name`: deterministic, so a create
/// repeated after a crash finds the Job that exists instead of making a second one.
pub fn job_name(name: &str, run: usize) -> String {
    let suffix = format!("-run-{run}");
    // Job names are at most 63 characters (they become a pod label); the pods add 6 or more.
    let keep = 52usize.saturating_sub(suffix.len());
    let base: String = name.chars().take(keep).collect();
    format!("{}{suffix}", base.trim_end_matches('-'))
}

fn volumes(sj: &ScavengerJob) -> Result<(Vec<Value>, Vec<Value>), String> {
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    for (i, mount) in sj.spec.mounts.iter().enumerate() {
        let (kind, name) = mount_source(mount, i)?;
        let volume = format!("mount-{i}");
        volumes.push(match kind {
            MountKind::PersistentVolumeClaim => {
                json!({"name": volume, "persistentVolumeClaim": {"claimName": name}})
            }
            MountKind::ConfigMap => json!({"name": volume, "configMap": {"name": name}}),
            MountKind::Secret => json!({"name": volume, "secret": {"secretName": name}}),
        });
        mounts.push(
            json!({"name": volume, "mountPath": mount.mount_path, "readOnly": mount.read_only}),
        );
    }
    Ok((volumes, mounts))
}

/// The Job of run `run` of `sj`. Err when the ScavengerJob cannot be turned into one (it was
/// stored before the webhook judged it).
pub fn job(sj: &ScavengerJob, run: usize) -> Result<Job, String> {
    let name = sj.name_any();
    let uid = sj.uid().ok_or("the ScavengerJob has no uid yet")?;
    let (volumes, mounts) = volumes(sj)?;
    let resources =
        json!({"requests": sj.spec.resources.requests, "limits": sj.spec.resources.limits});
    let mut container = json!({
        "name": "work",
        "image": sj.spec.image,
        "resources": resources,
        "volumeMounts": mounts,
        "env": [
            {"name": "SCAVENGER_JOB", "value": name},
            {"name": "SCAVENGER_RUN", "value": run.to_string()},
            {"name": "SCAVENGER_INTERRUPTED_COUNT",
             "value": sj.status.as_ref().map(|s| s.interrupted_count).unwrap_or(0).to_string()},
        ],
    });
    if !sj.spec.command.is_empty() {
        container["command"] = json!(sj.spec.command);
    }
    if let Some(user) = sj.spec.run_as_user {
        container["securityContext"] = json!({"runAsUser": user});
    }
    let pods = sj.spec.parallelism.max(1);
    let labels = json!({ SCAVENGER_JOB_LABEL: name });
    let value = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(&name, run),
            "namespace": sj.namespace(),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": ScavengerJob::api_version(&()), "kind": ScavengerJob::kind(&()),
                "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            // An evicted or preempted pod is an interruption sluice handles (it removes the whole
            // Job); a container exiting with a code other than 0 fails the Job at once.
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
            ]},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": SCAVENGER_PRIORITY_CLASS,
                    "preemptionPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": volumes,
                    "nodeSelector": sj.spec.node_selector,
                    "tolerations": sj.spec.tolerations,
                },
            },
        },
    });
    serde_json::from_value(value).map_err(|e| format!("building the Job: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{QUEUE_LABEL, ScavengerJobSpec};
    use crate::resources::pod_requests;

    fn sj() -> ScavengerJob {
        let spec: ScavengerJobSpec = serde_json::from_value(json!({
            "image": "busybox", "command": ["sh", "-c", "sleep 1"], "parallelism": 3,
            "runAsUser": 1000, "queueName": "team", "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "mounts": [{"persistentVolumeClaim": "data", "mountPath": "/data"},
                       {"configMap": "cfg", "mountPath": "/cfg", "readOnly": true}],
        }))
        .expect("spec");
        let mut sj = ScavengerJob::new("counter", spec);
        sj.metadata.namespace = Some("team-a".into());
        sj.metadata.uid = Some("uid-1".into());
        sj
    }

    #[test]
    fn the_job_is_owned_guaranteed_low_priority_and_all_or_nothing() {
        let job = job(&sj(), 2).expect("job");
        assert_eq!(job.metadata.name.as_deref(), Some("counter-run-2"));
        let owner = &job.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("ScavengerJob", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        let spec = job.spec.as_ref().expect("spec");
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!((spec.parallelism, spec.completions), (Some(3), Some(3)));
        let labels = job.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels.get(SCAVENGER_JOB_LABEL).map(String::as_str),
            Some("counter")
        );
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref());
        assert_eq!(
            pod_labels
                .and_then(|l| l.get(SCAVENGER_JOB_LABEL))
                .map(String::as_str),
            Some("counter")
        );
        // Never governed by the queue gate as ordinary work.
        assert!(!labels.contains_key(QUEUE_LABEL));
        assert!(!pod_labels.is_some_and(|l| l.contains_key(QUEUE_LABEL)));
        let pod = spec.template.spec.as_ref().expect("pod spec");
        assert_eq!(
            pod.priority_class_name.as_deref(),
            Some(SCAVENGER_PRIORITY_CLASS)
        );
        assert_eq!(pod.preemption_policy.as_deref(), Some("Never"));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let c = &pod.containers[0];
        let r = c.resources.as_ref().expect("resources");
        assert_eq!(r.requests, r.limits);
        assert_eq!(pod_requests(pod).expect("requests").get("cpu"), 1000);
        assert_eq!(
            c.security_context.as_ref().and_then(|s| s.run_as_user),
            Some(1000)
        );
        assert_eq!(pod.volumes.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            pod.node_selector
                .as_ref()
                .and_then(|n| n.get("disk"))
                .map(String::as_str),
            Some("ssd")
        );
        assert_eq!(pod.tolerations.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            c.volume_mounts.as_ref().map(|m| m[1].read_only),
            Some(Some(true))
        );
    }

    #[test]
    fn job_names_stay_short_and_valid_for_long_names() {
        let long = "a".repeat(253);
        let name = job_name(&long, 12345);
        assert!(name.len() <= 52, "{name}");
        assert!(name.ends_with("-run-12345"));
        assert_eq!(job_name("x-", 1), "x-run-1");
    }
}
