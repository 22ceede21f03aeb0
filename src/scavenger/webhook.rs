//! The ScavengerJob webhooks, pure and synchronous (no API call: mounts and queues come from
//! watches):
//!
//! - `/validate-scavengerjobs` refuses a ScavengerJob whose spec is invalid (quantities, requests
//!   not equal to limits, a duration that is not one), whose mounts name a PersistentVolumeClaim,
//!   ConfigMap or Secret that does not exist, or whose queue does not exist; each refusal names
//!   the field.
//! - `/validate-scavenger-workloads` keeps the scavenger marks sluice's own: only sluice may create
//!   a Job carrying the label `sluice.dev/scavenger-job` or the scavenger PriorityClass, and only
//!   the Job controller may create a pod carrying them, for a Job of a ScavengerJob (its
//!   controller owner). A user who labels their own pod or Job as a scavenger's, sets the
//!   PriorityClass, or forges an ownerReference is refused with a message.

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;
use sluice_webhooks::{judged, written_object};

use super::mounts::Mounts;
use crate::api::{CapacityQueue, SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS, ScavengerJobSpec};

/// The users the Job controller acts as: its own ServiceAccount when kube-controller-manager runs
/// with `--use-service-account-credentials` (kubeadm and most distributions), else the
/// controller manager's identity.
pub const JOB_CONTROLLER_USERS: [&str; 2] = [
    "system:serviceaccount:kube-system:job-controller",
    "system:kube-controller-manager",
];

/// `/validate-scavengerjobs`.
pub struct ValidateScavengerJobs {
    pub mounts: Mounts,
    /// None: queues are not checked (unit tests).
    pub queues: Option<Store<CapacityQueue>>,
}

impl ValidateScavengerJobs {
    /// The refusal of `object` in `namespace`, if any. Pure given the caches.
    pub fn judge(&self, namespace: &str, object: &DynamicObject) -> Result<(), String> {
        let spec_value = object.data.get("spec").cloned().unwrap_or(Value::Null);
        let spec: ScavengerJobSpec = serde_json::from_value(spec_value)
            .map_err(|e| format!("spec: {e} (see kubectl explain scavengerjob.spec)"))?;
        super::spec::check(&spec)?;
        super::spec::check_mounts(&spec, namespace, &|kind, name| {
            self.mounts.exists(kind, namespace, name)
        })
        .map_err(|e| {
            // sluice judges from a watch of the names: one created a moment ago may not be in it.
            format!("{e} (if it was created a moment ago, retry in a second)")
        })?;
        if let (Some(queue), Some(queues)) = (&spec.queue_name, &self.queues) {
            match queues.get(&ObjectRef::new(queue)) {
                None => {
                    return Err(format!(
                        "spec.queueName: CapacityQueue {queue:?} does not exist"
                    ));
                }
                Some(q) if q.spec.scavenger_quota.is_none() => {
                    return Err(format!(
                        "spec.queueName: CapacityQueue {queue:?} has no spec.scavengerQuota, so its ScavengerJobs could never start"
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

impl sluice_webhooks::ApplicationHandler for ValidateScavengerJobs {
    fn name(&self) -> &'static str {
        "validate_scavengerjobs"
    }

    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let Some(object) = written_object(request) else {
            return response;
        };
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let verdict = self.judge(namespace, object);
        judged(
            response,
            verdict.map_err(|message| format!("sluice: ScavengerJob refused: {message}")),
        )
    }
}

/// `/validate-scavenger-workloads`: pods and Jobs that carry the scavenger marks.
pub struct ValidateScavengerWorkloads {
    /// sluice's own identity: the only creator of scavenger Jobs.
    pub controller_user: String,
    /// Who may create scavenger pods (the Job controller).
    pub job_controller_users: Vec<String>,
}

/// The string at `path` in `object`, when there is one.
fn text(object: &Value, path: &[&str]) -> Option<String> {
    let mut v = object;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str().map(str::to_string)
}

/// The scavenger marks of a pod or Job: (its label, its pod template's label, its PriorityClass).
fn marks(kind: &str, object: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let own = text(object, &["metadata", "labels", SCAVENGER_JOB_LABEL]);
    match kind {
        "Job" => (
            own,
            text(
                object,
                &[
                    "spec",
                    "template",
                    "metadata",
                    "labels",
                    SCAVENGER_JOB_LABEL,
                ],
            ),
            text(object, &["spec", "template", "spec", "priorityClassName"]),
        ),
        _ => (
            own.clone(),
            own,
            text(object, &["spec", "priorityClassName"]),
        ),
    }
}

fn marked(marks: &(Option<String>, Option<String>, Option<String>)) -> bool {
    marks.0.is_some() || marks.1.is_some() || marks.2.as_deref() == Some(SCAVENGER_PRIORITY_CLASS)
}

impl ValidateScavengerWorkloads {
    /// The refusal, if any, of `user` creating or changing `object` (a Pod or a Job) from `old`.
    pub fn judge(
        &self,
        user: &str,
        kind: &str,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), String> {
        let new_marks = marks(kind, object);
        let old_marks = old.map(|o| marks(kind, o));
        let is_marked = marked(&new_marks) || old_marks.as_ref().is_some_and(marked);
        if !is_marked || user == self.controller_user {
            return Ok(());
        }
        if let Some(before) = old_marks {
            // An update: nobody but sluice changes the marks; other edits pass.
            if before == new_marks {
                return Ok(());
            }
            return Err(format!(
                "sluice: the label {SCAVENGER_JOB_LABEL:?} and the PriorityClass {SCAVENGER_PRIORITY_CLASS:?} of a {kind} belong to sluice's ScavengerJobs; only sluice ({}) may change them",
                self.controller_user
            ));
        }
        match kind {
            "Job" => Err(format!(
                "sluice: only sluice ({}) creates Jobs labelled {SCAVENGER_JOB_LABEL:?} or with the PriorityClass {SCAVENGER_PRIORITY_CLASS:?}: submit a ScavengerJob instead (kubectl explain scavengerjob)",
                self.controller_user
            )),
            _ => self.judge_pod_creation(user, object, &new_marks),
        }
    }

    fn judge_pod_creation(
        &self,
        user: &str,
        pod: &Value,
        marks: &(Option<String>, Option<String>, Option<String>),
    ) -> Result<(), String> {
        let refuse = |why: &str| {
            Err(format!(
                "sluice: a pod labelled {SCAVENGER_JOB_LABEL:?} or with the PriorityClass {SCAVENGER_PRIORITY_CLASS:?} is created only by the Job controller for the Job of a ScavengerJob; refused: {why}. Submit a ScavengerJob instead"
            ))
        };
        if !self.job_controller_users.iter().any(|u| u == user) {
            return refuse(&format!("it is created by {user:?}"));
        }
        let Some(name) = marks.0.as_deref() else {
            return refuse("it lacks the label");
        };
        if marks.2.as_deref() != Some(SCAVENGER_PRIORITY_CLASS) {
            return refuse("it lacks the scavenger PriorityClass");
        }
        let owner = pod
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .and_then(|refs| {
                refs.iter()
                    .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            });
        let Some(owner) = owner else {
            return refuse("it has no controller owner");
        };
        let is_job = owner.get("kind").and_then(Value::as_str) == Some("Job")
            && owner.get("apiVersion").and_then(Value::as_str) == Some("batch/v1");
        let owner_name = owner.get("name").and_then(Value::as_str).unwrap_or("");
        // sluice names a run's Job <name>-run-<n> (`job::job_name`, the name cut to fit).
        let prefix: String = name.chars().take(40).collect();
        if !is_job
            || !owner_name.starts_with(prefix.trim_end_matches('-'))
            || !owner_name.contains("-run-")
        {
            return refuse(&format!(
                "its controller owner is not the Job of ScavengerJob {name:?}"
            ));
        }
        Ok(())
    }
}

impl sluice_webhooks::ApplicationHandler for ValidateScavengerWorkloads {
    fn name(&self) -> &'static str {
        "validate_scavenger_workloads"
    }

    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let Some(object) = written_object(request) else {
            return response;
        };
        let to_value = |o: &DynamicObject| serde_json::to_value(o).unwrap_or(Value::Null);
        let user = request.user_info.username.as_deref().unwrap_or("");
        let kind = request.kind.kind.as_str();
        let old = request.old_object.as_ref().map(to_value);
        judged(
            response,
            self.judge(user, kind, &to_value(object), old.as_ref()),
        )
    }
}

#[cfg(test)]
mod tests;
