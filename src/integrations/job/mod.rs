//! batch/v1 Jobs, run by the Job controller of kube-controller-manager.
//!
//! A Job labelled `sluice.dev/queue` (or given its namespace's default queue by the application
//! webhook) is one DynamicWorkload, `job-<name>`, with one pod set `main`. At submission the
//! webhook writes the Job's gang into its pod template as the annotation `sluice.dev/job-gang`:
//! `parallelism` (default 1), or `completions` if fewer, or fewer still when the Job is annotated
//! `sluice.dev/min-count`. A running Job's template cannot change, so the gang never grows after
//! submission: raising `parallelism` later adds elastic pods (queued one by one), lowering it
//! shrinks the ledger (`minCount` and `maxCount` follow `parallelism`, and the completions still
//! to do). The annotation is also how a Job's pods are told apart: pods carrying
//! `batch.kubernetes.io/job-name` and it; a pod of an unlabelled Job whose template alone carries
//! the queue label stays a plain pod, as before.
//!
//! A suspended Job has no pods, so it holds and reserves nothing until it is resumed. A Job whose
//! `Complete`, `Failed`, `SuccessCriteriaMet` or `FailureTarget` condition is true has ended.
//!
//! Left alone: Jobs of a ScavengerJob (label `sluice.dev/scavenger-job`: another part of sluice
//! governs them) and a RayJob's submitter Job (the RayJob's ledger counts its pod).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;
use serde_json::{Value, json};

use super::framework::{
    Count, PodTemplate, add_to_gang, controller_of, escape, label, lenient, pod_count,
    queue_label_patch, read_spec, spec_or_default,
};
use super::ray::RAY_JOB_LABEL;
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::{ApplicationEnd, MIN_COUNT_ANNOTATION, PodSetSpec, QUEUE_LABEL};
use crate::resources::ResourceList;

/// The label the Job controller puts on every pod of a Job (from the template the API server
/// defaults).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// In a governed Job's pod template (so on its pods): the gang fixed at submission.
pub use crate::api::JOB_GANG_ANNOTATION;
/// On the Jobs a ScavengerJob creates (and their pods): src/scavenger/ governs them, not the gate.
pub use crate::api::SCAVENGER_JOB_LABEL;
/// The pod set of a Job's pods.
pub const POD_SET: &str = "main";

/// The fields of a Job's spec (batch/v1) sluice reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct JobSpec {
    parallelism: Count,
    completions: Count,
    #[serde(deserialize_with = "lenient")]
    template: Option<PodTemplate>,
}

/// The fields of a Job's status sluice reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobStatus {
    succeeded: Count,
    #[serde(deserialize_with = "lenient")]
    conditions: Option<Vec<JobCondition>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobCondition {
    #[serde(rename = "type", deserialize_with = "lenient")]
    kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    status: Option<String>,
}

pub struct Jobs;

pub fn workload_name(job: &str) -> String {
    format!("job-{job}")
}

/// A Job's gang and the most pods it runs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobCounts {
    pub gang: i64,
    pub max: i64,
}

/// The pure arithmetic: at most `parallelism` pods (default 1) run at once, and no more than the
/// completions still to do (`completions` − `succeeded`; a Job without `completions` is a work
/// queue: `parallelism`). The gang is that, or `declared` (fixed at submission) if fewer.
pub fn job_counts(
    parallelism: Option<i64>,
    completions: Option<i64>,
    succeeded: i64,
    declared: Option<i64>,
) -> JobCounts {
    let parallelism = parallelism.unwrap_or(1);
    let max = match completions {
        Some(c) => parallelism.min(c.saturating_sub(succeeded.max(0)).max(0)),
        None => parallelism,
    };
    JobCounts {
        gang: declared.map_or(max, |d| d.min(max)),
        max,
    }
}

/// A whole number ≥ 0 written in an annotation, or Err naming `field`.
fn annotated_count(text: &str, field: &str) -> Result<i64, DemandError> {
    text.trim().parse::<u32>().map(i64::from).map_err(|_| {
        DemandError::Invalid(format!(
            "{field}: {text:?} is not a whole number of pods (0 to 4294967295)"
        ))
    })
}

fn annotation<'a>(map: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    map?.get(key).map(String::as_str)
}

fn template_annotations(spec: &JobSpec) -> Option<&BTreeMap<String, String>> {
    spec.template
        .as_ref()?
        .metadata
        .as_ref()?
        .annotations
        .as_ref()
}

fn template_labels(spec: &JobSpec) -> Option<&BTreeMap<String, String>> {
    spec.template.as_ref()?.metadata.as_ref()?.labels.as_ref()
}

/// The gang to write into the template at submission: the Job's, or its `sluice.dev/min-count`
/// if fewer. None when the counts are not valid (the API server and the validator refuse them).
fn gang_at_submission(app: &DynamicObject, spec: &JobSpec) -> Option<i64> {
    let parallelism = spec.parallelism.get("spec.parallelism").ok()?;
    let completions = spec.completions.get("spec.completions").ok()?;
    let asked = match annotation(app.metadata.annotations.as_ref(), MIN_COUNT_ANNOTATION) {
        Some(text) => Some(annotated_count(text, "").ok()?),
        None => None,
    };
    Some(job_counts(parallelism, completions, 0, asked).gang)
}

/// The patch operation that writes the gang into the template's annotations (after the queue
/// label's operations, which create `metadata` when it is absent).
fn gang_annotation_op(spec: &JobSpec, gang: i64) -> Value {
    let value = gang.to_string();
    if template_annotations(spec).is_some() {
        json!({"op": "add", "path": format!("/spec/template/metadata/annotations/{}", escape(JOB_GANG_ANNOTATION)), "value": value})
    } else {
        json!({"op": "add", "path": "/spec/template/metadata/annotations", "value": {JOB_GANG_ANNOTATION: value}})
    }
}

/// Refuses what the validator must: counts and annotations that are not numbers, a template that
/// claims a RayJob's label (its pods would be counted in that RayJob's ledger).
fn declared_gang(app: &DynamicObject, spec: &JobSpec) -> Result<Option<i64>, DemandError> {
    if let Some(text) = annotation(app.metadata.annotations.as_ref(), MIN_COUNT_ANNOTATION) {
        annotated_count(
            text,
            &format!("metadata.annotations[{MIN_COUNT_ANNOTATION:?}]"),
        )?;
    }
    if let Some(claimed) = template_labels(spec).and_then(|l| l.get(RAY_JOB_LABEL)) {
        return Err(DemandError::Invalid(format!(
            "spec.template.metadata.labels[{RAY_JOB_LABEL:?}]: {claimed:?} names a RayJob; only a RayJob's own submitter Job may carry it"
        )));
    }
    annotation(template_annotations(spec), JOB_GANG_ANNOTATION)
        .map(|text| {
            annotated_count(
                text,
                &format!("spec.template.metadata.annotations[{JOB_GANG_ANNOTATION:?}]"),
            )
        })
        .transpose()
}

impl Integration for Jobs {
    fn kind(&self) -> &'static str {
        "Job"
    }

    /// A Job is given its namespace's default queue by the application webhook, which writes
    /// the queue into its template: its pods never need the default themselves.
    fn follows_namespace_default(&self) -> bool {
        false
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[JOB_NAME_LABEL]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "Job (`batch/v1`, the Job controller)",
            gang: "`parallelism` pods, or `completions` if fewer, or `sluice.dev/min-count` if fewer still: fixed at submission",
            elastic: "pods above the gang when `parallelism` is raised (lowering it shrinks the ledger)",
            end: "its `Complete` or `Failed` condition; suspended, it holds nothing",
        }
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        if label(pod, SCAVENGER_JOB_LABEL).is_some() {
            return None;
        }
        let job = label(pod, JOB_NAME_LABEL)?;
        annotation(pod.metadata.annotations.as_ref(), JOB_GANG_ANNOTATION)?;
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        Some(PodIdentity {
            queue,
            workload: Some(workload_name(job)),
            pod_set: POD_SET.into(),
            min_count: None,
            recorded: true,
        })
    }
}

impl ApplicationIntegration for Jobs {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("batch", "v1", "Job"), "jobs")
    }

    fn workload_name(&self, app: &str) -> String {
        workload_name(app)
    }

    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let spec: JobSpec = read_spec(app, "Job")?;
        let declared = declared_gang(app, &spec)?;
        let parallelism = spec.parallelism.get("spec.parallelism")?;
        let completions = spec.completions.get("spec.completions")?;
        let status: JobStatus = app
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default();
        let succeeded = status.succeeded.get("status.succeeded")?.unwrap_or(0);
        let counts = job_counts(parallelism, completions, succeeded, declared);
        let template = spec.template.clone().unwrap_or_default();
        let requests = template.requests("spec.template")?;
        let field = if declared.is_some_and(|d| d < counts.max) {
            format!("spec.template.metadata.annotations[{JOB_GANG_ANNOTATION:?}]")
        } else {
            "spec.parallelism".to_string()
        };
        add_to_gang(&mut ResourceList::new(), &requests, counts.gang, &field)?;
        Ok(vec![PodSetSpec {
            name: POD_SET.into(),
            requests: requests.to_quantities(),
            min_count: pod_count(counts.gang),
            max_count: Some(pod_count(counts.max)),
        }])
    }

    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        let spec: JobSpec = spec_or_default(app);
        vec![PodTemplate::label_target(
            spec.template.as_ref(),
            "/spec/template",
        )]
    }

    /// The queue label, and the gang written into the template once (at submission, or when a
    /// suspended Job that never ran is labelled: the only times its template may change).
    fn pods_patch(&self, app: &DynamicObject, queue: &str) -> Vec<Value> {
        let spec: JobSpec = spec_or_default(app);
        let mut ops = queue_label_patch(&self.label_targets(app), queue);
        if annotation(template_annotations(&spec), JOB_GANG_ANNOTATION).is_none()
            && let Some(gang) = gang_at_submission(app, &spec)
        {
            ops.push(gang_annotation_op(&spec, gang));
        }
        ops
    }

    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        let status: JobStatus = app
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())?;
        status.conditions?.iter().find_map(|c| {
            if c.status.as_deref() != Some("True") {
                return None;
            }
            match c.kind.as_deref()? {
                "Complete" | "SuccessCriteriaMet" => Some(ApplicationEnd::Succeeded),
                "Failed" | "FailureTarget" => Some(ApplicationEnd::Failed),
                _ => None,
            }
        })
    }

    fn built_in(&self) -> bool {
        true
    }

    /// A ScavengerJob's Jobs (another part of sluice governs them) and a RayJob's submitter
    /// (counted in the RayJob's ledger).
    fn left_alone(&self, app: &DynamicObject) -> bool {
        let scavenger = app
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(SCAVENGER_JOB_LABEL));
        scavenger || controller_of(&app.metadata, "ray.io", "RayJob").is_some()
    }
}

#[cfg(test)]
mod tests;
