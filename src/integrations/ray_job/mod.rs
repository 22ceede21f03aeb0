//! RayJobs (ray.io/v1, KubeRay): a Ray cluster made for one job, and the submitter pod that runs
//! `ray job submit` against it.
//!
//! One DynamicWorkload, `rayjob-<name>`, counts both: the cluster's pod sets (from
//! `spec.rayClusterSpec`, sized as a RayCluster's: the head, each worker group's minReplicas ×
//! numOfHosts in the gang) and, in `K8sJobMode` (the default), a `submitter` pod set of one, in
//! the gang too: the cluster never starts without room for the pod that submits its job. In
//! `SidecarMode` the submitter is a container of the head, counted in the head's size; `HTTPMode`
//! and `InteractiveMode` have no submitter pod. With `clusterSelector` the RayJob uses a cluster
//! that exists (counted in that cluster's ledger): its own demand is the submitter alone.
//!
//! The application webhook writes the queue label and `sluice.dev/ray-job: <name>` into every pod
//! template of the RayJob, the submitter's included (KubeRay's default submitter template, made
//! explicit when the RayJob has none). KubeRay copies the RayJob's labels and cluster spec into
//! the RayCluster it creates, owned by the RayJob: that RayCluster gets no DynamicWorkload of its
//! own (the RayCluster integration's `records_workload`), and its pods, which carry
//! `sluice.dev/ray-job`, are this integration's (registered before the RayCluster and Job ones).
//!
//! Ends: `status.jobDeploymentStatus` `Complete` or `Failed`; then it reserves nothing more, and
//! with `shutdownAfterJobFinishes` KubeRay deletes the cluster, whose pods give their quota back.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;
use serde_json::{Value, json};

use super::classifier::is_label_value;
use super::framework::{PodTemplate, label, labels_patch, lenient, read_spec, spec_or_default};
use super::job::JOB_NAME_LABEL;
use super::ray::{
    CLUSTER_LABEL, GROUP_LABEL, NODE_TYPE_LABEL, RAY_JOB_LABEL, RayClusterSpec, cluster_demand,
    cluster_label_targets,
};
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::{ApplicationEnd, PodSetSpec, QUEUE_LABEL};
use crate::resources::ResourceList;

/// KubeRay's default submitter container (`GetDefaultSubmitterContainer`, v1.6).
const SUBMITTER_CONTAINER: &str = "ray-job-submitter";
const SUBMITTER_CPU: &str = "500m";
const SUBMITTER_MEMORY: &str = "200Mi";
/// More worker groups than this is refused: each is a pod set of the ledger, and no real cluster
/// needs that many.
pub const MAX_WORKER_GROUPS: usize = 64;
/// The submitter's pod set.
pub const SUBMITTER: &str = "submitter";

/// The fields of a RayJob's spec (ray.io/v1) sluice reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RayJobSpec {
    #[serde(deserialize_with = "lenient")]
    ray_cluster_spec: Option<RayClusterSpec>,
    #[serde(deserialize_with = "lenient")]
    cluster_selector: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "lenient")]
    submission_mode: Option<String>,
    #[serde(deserialize_with = "lenient")]
    submitter_pod_template: Option<PodTemplate>,
}

impl RayJobSpec {
    fn mode(&self) -> &str {
        self.submission_mode.as_deref().unwrap_or("K8sJobMode")
    }

    /// Whether KubeRay creates a cluster of the RayJob's own.
    fn own_cluster(&self) -> bool {
        self.cluster_selector
            .as_ref()
            .is_none_or(BTreeMap::is_empty)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct RayJobStatus {
    #[serde(deserialize_with = "lenient")]
    job_deployment_status: Option<String>,
}

pub struct RayJobs;

pub fn workload_name(job: &str) -> String {
    format!("rayjob-{job}")
}

/// KubeRay's default submitter's requests (also the sidecar's, in `SidecarMode`).
fn default_submitter() -> ResourceList {
    let mut list = ResourceList::new();
    for (name, text) in [("cpu", SUBMITTER_CPU), ("memory", SUBMITTER_MEMORY)] {
        if let Ok(amount) = crate::resources::parse_amount(text) {
            list.add(name, amount);
        }
    }
    list
}

/// The submitter's pod set in `K8sJobMode`: its template's requests, or KubeRay's default.
fn submitter_set(spec: &RayJobSpec) -> Result<PodSetSpec, DemandError> {
    let requests = match &spec.submitter_pod_template {
        Some(template) => template.requests("spec.submitterPodTemplate")?,
        None => default_submitter(),
    };
    Ok(PodSetSpec {
        name: SUBMITTER.into(),
        requests: requests.to_quantities(),
        min_count: 1,
        max_count: Some(1),
    })
}

/// The cluster's pod sets, refusing a huge spec and a worker group named like the submitter.
fn own_cluster_sets(spec: &RayJobSpec) -> Result<Vec<PodSetSpec>, DemandError> {
    let at = "spec.rayClusterSpec";
    let cluster = spec.ray_cluster_spec.as_ref().ok_or_else(|| {
        DemandError::Invalid(format!(
            "{at} is missing (and no clusterSelector names a cluster)"
        ))
    })?;
    let groups = cluster.worker_group_specs.as_deref().unwrap_or_default();
    if groups.len() > MAX_WORKER_GROUPS {
        return Err(DemandError::Invalid(format!(
            "{at}.workerGroupSpecs: {} worker groups; sluice counts at most {MAX_WORKER_GROUPS}",
            groups.len()
        )));
    }
    if let Some(i) = groups
        .iter()
        .position(|g| g.group_name.as_deref() == Some(SUBMITTER))
    {
        return Err(DemandError::Invalid(format!(
            "{at}.workerGroupSpecs[{i}].groupName: {SUBMITTER:?} is the submitter's pod set in sluice's ledger: name the group otherwise"
        )));
    }
    let sidecar = if spec.mode() == "SidecarMode" {
        default_submitter()
    } else {
        ResourceList::new()
    };
    cluster_demand(cluster, at, &sidecar)
}

/// Where the RayJob's labels go: its cluster's templates and, in `K8sJobMode`, the submitter's.
fn targets(spec: &RayJobSpec) -> Vec<LabelTarget> {
    let mut targets = Vec::new();
    if spec.own_cluster()
        && let Some(cluster) = &spec.ray_cluster_spec
    {
        targets = cluster_label_targets(cluster, "/spec/rayClusterSpec");
    }
    if spec.mode() == "K8sJobMode" && spec.submitter_pod_template.is_some() {
        targets.push(PodTemplate::label_target(
            spec.submitter_pod_template.as_ref(),
            "/spec/submitterPodTemplate",
        ));
    }
    targets
}

/// KubeRay's default submitter template made explicit (so it can carry labels): the container
/// KubeRay would make, with the head's image (KubeRay fills in the command). None when the head
/// has no image to copy (the RayJob is refused by KubeRay or the validator).
fn explicit_submitter(spec: &RayJobSpec, labels: &BTreeMap<String, String>) -> Option<Value> {
    let head = spec
        .ray_cluster_spec
        .as_ref()?
        .head_group_spec
        .as_ref()?
        .template
        .as_ref()?;
    let image = head.first_container_image()?;
    Some(json!({
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": SUBMITTER_CONTAINER,
                "image": image,
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"cpu": SUBMITTER_CPU, "memory": SUBMITTER_MEMORY},
                },
            }],
        },
    }))
}

impl Integration for RayJobs {
    fn kind(&self) -> &'static str {
        "RayJob"
    }

    /// The webhook writes the queue into every template of the RayJob: its pods never need
    /// their namespace's default themselves.
    fn follows_namespace_default(&self) -> bool {
        false
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[RAY_JOB_LABEL]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "RayJob (`ray.io/v1`, KubeRay)",
            gang: "its cluster's gang (the head, each worker group's minReplicas × numOfHosts) and the submitter pod (`K8sJobMode`)",
            elastic: "its cluster's workers above the minimum, up to maxReplicas × numOfHosts",
            end: "`jobDeploymentStatus` `Complete` or `Failed` (with `shutdownAfterJobFinishes` KubeRay then deletes the cluster)",
        }
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        let job = label(pod, RAY_JOB_LABEL)?;
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        let pod_set = if label(pod, CLUSTER_LABEL).is_some() {
            match label(pod, NODE_TYPE_LABEL) {
                Some("head") => "head".to_string(),
                _ => label(pod, GROUP_LABEL).unwrap_or("workers").to_string(),
            }
        } else if label(pod, JOB_NAME_LABEL).is_some() {
            SUBMITTER.to_string()
        } else {
            return None;
        };
        Some(PodIdentity {
            queue,
            workload: Some(workload_name(job)),
            pod_set,
            min_count: None,
            recorded: true,
        })
    }
}

impl ApplicationIntegration for RayJobs {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("ray.io", "v1", "RayJob"),
            "rayjobs",
        )
    }

    fn workload_name(&self, app: &str) -> String {
        workload_name(app)
    }

    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let name = app.metadata.name.as_deref().unwrap_or_default();
        if name.is_empty() || !is_label_value(name) {
            return Err(DemandError::Invalid(format!(
                "metadata.name: {name:?}: sluice labels a RayJob's pods with its name, so it must be a label value (1 to 63 letters, digits, '-', '_', '.'; generateName is not supported)"
            )));
        }
        let spec: RayJobSpec = read_spec(app, "RayJob")?;
        let mut sets = if spec.own_cluster() {
            own_cluster_sets(&spec)?
        } else {
            Vec::new()
        };
        if spec.mode() == "K8sJobMode" {
            sets.push(submitter_set(&spec)?);
        }
        Ok(sets)
    }

    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        targets(&spec_or_default(app))
    }

    /// The queue label and the RayJob's name into every template; in `K8sJobMode` without a
    /// submitter template, KubeRay's default one made explicit, with both labels.
    fn pods_patch(&self, app: &DynamicObject, queue: &str) -> Vec<Value> {
        let spec: RayJobSpec = spec_or_default(app);
        let name = app.metadata.name.clone().unwrap_or_default();
        let mut labels = vec![(QUEUE_LABEL, queue)];
        if is_label_value(&name) && !name.is_empty() {
            labels.push((RAY_JOB_LABEL, name.as_str()));
        }
        let mut ops = labels_patch(&targets(&spec), &labels);
        if spec.mode() == "K8sJobMode" && spec.submitter_pod_template.is_none() {
            let map = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            if let Some(template) = explicit_submitter(&spec, &map) {
                ops.push(
                    json!({"op": "add", "path": "/spec/submitterPodTemplate", "value": template}),
                );
            }
        }
        ops
    }

    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        let status: RayJobStatus = app
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())?;
        match status.job_deployment_status?.as_str() {
            "Complete" => Some(ApplicationEnd::Succeeded),
            "Failed" | "ValidationFailed" => Some(ApplicationEnd::Failed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
