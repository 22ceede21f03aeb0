//! Ray: RayCluster objects (ray.io/v1) and the pods KubeRay creates from them.
//!
//! Pods are told by `ray.io/cluster`, `ray.io/node-type` (head / worker) and `ray.io/group`. The
//! workload is `raycluster-<name>`; its pod sets are `head` and one per worker group. Demand: the
//! head (plus the autoscaler sidecar when in-tree autoscaling is on) and, per worker group,
//! minReplicas × numOfHosts pods in the gang, up to maxReplicas × numOfHosts in all. Workers the
//! autoscaler adds above the minimum are elastic.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::framework::{
    Count, PodTemplate, TargetLabels, add_to_gang, amount, controller_of, label, lenient,
    pod_count, pointer_to_field, read_spec, spec_or_default,
};
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::{PodSetSpec, QUEUE_LABEL};
use crate::resources::ResourceList;

pub const CLUSTER_LABEL: &str = "ray.io/cluster";
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";
pub const GROUP_LABEL: &str = "ray.io/group";
/// On the pods of a RayJob's cluster and submitter: the RayJob's name (put into its templates by
/// sluice's application webhook).
pub const RAY_JOB_LABEL: &str = "sluice.dev/ray-job";
/// KubeRay's default resources for the autoscaler sidecar (requests = limits).
const AUTOSCALER_CPU: &str = "500m";
const AUTOSCALER_MEMORY: &str = "512Mi";

/// The fields of a RayCluster's spec (ray.io/v1) sluice reads (a RayJob's `spec.rayClusterSpec`
/// too).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(super) struct RayClusterSpec {
    #[serde(deserialize_with = "lenient")]
    pub(super) head_group_spec: Option<HeadGroupSpec>,
    #[serde(deserialize_with = "lenient")]
    enable_in_tree_autoscaling: Option<bool>,
    #[serde(deserialize_with = "lenient")]
    autoscaler_options: Option<AutoscalerOptions>,
    #[serde(deserialize_with = "lenient")]
    pub(super) worker_group_specs: Option<Vec<WorkerGroupSpec>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct HeadGroupSpec {
    #[serde(deserialize_with = "lenient")]
    pub(super) template: Option<PodTemplate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AutoscalerOptions {
    #[serde(deserialize_with = "lenient")]
    resources: Option<AutoscalerResources>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AutoscalerResources {
    #[serde(deserialize_with = "quantities")]
    requests: BTreeMap<String, String>,
}

/// A resource list as written: quantities are strings or numbers (Kubernetes reads both); other
/// entries read as absent.
fn quantities<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let Value::Object(map) = Value::deserialize(d)? else {
        return Ok(BTreeMap::new());
    };
    Ok(map
        .into_iter()
        .filter_map(|(name, value)| match value {
            Value::String(s) => Some((name, s)),
            Value::Number(n) => Some((name, n.to_string())),
            _ => None,
        })
        .collect())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(super) struct WorkerGroupSpec {
    #[serde(deserialize_with = "lenient")]
    pub(super) group_name: Option<String>,
    #[serde(deserialize_with = "lenient")]
    suspend: Option<bool>,
    replicas: Count,
    min_replicas: Count,
    max_replicas: Count,
    num_of_hosts: Count,
    #[serde(deserialize_with = "lenient")]
    template: Option<PodTemplate>,
}

pub struct RayClusters;

pub fn workload_name(cluster: &str) -> String {
    format!("raycluster-{cluster}")
}

impl Integration for RayClusters {
    fn kind(&self) -> &'static str {
        "RayCluster"
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[CLUSTER_LABEL]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "RayCluster (`ray.io/v1`, KubeRay)",
            gang: "the head (with the autoscaler sidecar) and each worker group's minReplicas × numOfHosts",
            elastic: "workers above the minimum (autoscaler, higher `replicas`), up to maxReplicas × numOfHosts",
            end: "its deletion (the DynamicWorkload is owned by it)",
        }
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        let cluster = label(pod, CLUSTER_LABEL)?;
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        let pod_set = match label(pod, NODE_TYPE_LABEL) {
            Some("head") => "head".to_string(),
            _ => label(pod, GROUP_LABEL).unwrap_or("workers").to_string(),
        };
        Some(PodIdentity {
            queue,
            workload: Some(workload_name(cluster)),
            pod_set,
            min_count: None,
            recorded: true,
        })
    }
}

/// The head's requests, plus the autoscaler sidecar KubeRay adds when in-tree autoscaling is on
/// (`at` is the cluster spec's path: `spec`, or a RayJob's `spec.rayClusterSpec`).
fn head_demand(spec: &RayClusterSpec, at: &str) -> Result<ResourceList, DemandError> {
    let head_template = spec
        .head_group_spec
        .as_ref()
        .and_then(|h| h.template.as_ref())
        .ok_or_else(|| DemandError::Invalid(format!("{at}.headGroupSpec.template is missing")))?;
    let mut head = head_template.requests(&format!("{at}.headGroupSpec.template"))?;
    if spec.enable_in_tree_autoscaling != Some(true) {
        return Ok(head);
    }
    let requests = spec
        .autoscaler_options
        .as_ref()
        .and_then(|o| o.resources.as_ref())
        .map(|r| &r.requests);
    let mut sidecar = ResourceList::new();
    for (name, default) in [("cpu", AUTOSCALER_CPU), ("memory", AUTOSCALER_MEMORY)] {
        let text = requests
            .and_then(|r| r.get(name))
            .map_or(default, String::as_str);
        let field = format!("{at}.autoscalerOptions.resources.requests.{name}");
        sidecar.add(name, amount(text, &field)?);
    }
    head.try_add_all(&sidecar).map_err(|resource| {
        DemandError::Invalid(format!(
            "{at}.autoscalerOptions.resources.requests.{resource}: the head's {resource} with the autoscaler's is more than sluice can count"
        ))
    })?;
    Ok(head)
}

/// One worker group's pod set (`path` is the group's field path); adds its gang to `gang`.
fn group_demand(
    group: &WorkerGroupSpec,
    path: &str,
    gang: &mut ResourceList,
) -> Result<PodSetSpec, DemandError> {
    let name = group.group_name.clone().unwrap_or_else(|| "workers".into());
    let template = group
        .template
        .as_ref()
        .ok_or_else(|| DemandError::Invalid(format!("{path}.template is missing")))?;
    let requests = template.requests(&format!("{path}.template"))?;
    let field = |key: &str| format!("{path}.{key}");
    // replicas is the operator's starting point, not demand; a negative one is still refused.
    group.replicas.get(&field("replicas"))?;
    let hosts = group
        .num_of_hosts
        .get(&field("numOfHosts"))?
        .unwrap_or(1)
        .max(1);
    let min = group.min_replicas.get(&field("minReplicas"))?.unwrap_or(0);
    let max = group.max_replicas.get(&field("maxReplicas"))?;
    let min_pods = min.checked_mul(hosts).ok_or_else(|| {
        DemandError::Invalid(format!(
            "{}: {min} replicas of {hosts} hosts are more pods than sluice can count",
            field("minReplicas")
        ))
    })?;
    add_to_gang(gang, &requests, min_pods, &field("minReplicas"))?;
    let max_pods = max.map_or(i64::from(i32::MAX), |m| m.saturating_mul(hosts));
    Ok(PodSetSpec {
        name,
        requests: requests.to_quantities(),
        min_count: pod_count(min_pods),
        max_count: Some(pod_count(max_pods)),
    })
}

impl ApplicationIntegration for RayClusters {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
            "rayclusters",
        )
    }

    fn workload_name(&self, app: &str) -> String {
        workload_name(app)
    }

    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let spec: RayClusterSpec = read_spec(app, "RayCluster")?;
        if let Some(job) = claimed_job(app, &spec, "spec") {
            return Err(job);
        }
        cluster_demand(&spec, "spec", &ResourceList::new())
    }

    /// The head's and every worker group's pod template.
    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        let spec: RayClusterSpec = spec_or_default(app);
        cluster_label_targets(&spec, "/spec")
    }

    /// A RayJob's cluster is counted in the RayJob's DynamicWorkload (its pods carry the RayJob's
    /// label, which the RayJob integration reads first).
    fn records_workload(&self, app: &DynamicObject) -> bool {
        controller_of(&app.metadata, "ray.io", "RayJob").is_none()
    }
}

/// Refuses a RayCluster whose pod templates claim a RayJob's label without being that RayJob's
/// cluster: its pods would be counted in another application's ledger.
fn claimed_job(app: &DynamicObject, spec: &RayClusterSpec, at: &str) -> Option<DemandError> {
    let owner = controller_of(&app.metadata, "ray.io", "RayJob");
    cluster_label_targets(spec, &format!("/{}", at.replace('.', "/")))
        .into_iter()
        .find_map(|target| {
            let TargetLabels::Labels(labels) = &target.labels else {
                return None;
            };
            let claimed = labels.get(RAY_JOB_LABEL)?;
            (owner != Some(claimed.as_str())).then(|| {
                DemandError::Invalid(format!(
                    "{}.labels[{RAY_JOB_LABEL:?}]: {claimed:?} names a RayJob this RayCluster does not belong to (only the cluster a RayJob creates carries it)",
                    pointer_to_field(&target.path)
                ))
            })
        })
}

/// The pod sets of a RayCluster spec at `at` (`spec`, or a RayJob's `spec.rayClusterSpec`): the
/// head, with `head_extra` (a RayJob's sidecar submitter), then each worker group that is not
/// suspended. Worker group names must be distinct and must not be `head`.
pub(super) fn cluster_demand(
    spec: &RayClusterSpec,
    at: &str,
    head_extra: &ResourceList,
) -> Result<Vec<PodSetSpec>, DemandError> {
    let mut head = head_demand(spec, at)?;
    head.try_add_all(head_extra).map_err(|resource| {
        DemandError::Invalid(format!(
            "{at}.headGroupSpec.template: the head's {resource} with the submitter's is more than sluice can count"
        ))
    })?;
    let mut gang = head.clone();
    let mut sets = vec![PodSetSpec {
        name: "head".into(),
        requests: head.to_quantities(),
        min_count: 1,
        max_count: Some(1),
    }];
    for (i, group) in spec.worker_group_specs.iter().flatten().enumerate() {
        if group.suspend == Some(true) {
            continue;
        }
        let path = format!("{at}.workerGroupSpecs[{i}]");
        let set = group_demand(group, &path, &mut gang)?;
        if sets.iter().any(|s| s.name == set.name) {
            return Err(DemandError::Invalid(format!(
                "{path}.groupName: {:?} is taken (by the head or another worker group)",
                set.name
            )));
        }
        sets.push(set);
    }
    Ok(sets)
}

/// The head's and every worker group's pod template of the cluster spec at JSON pointer `at`.
pub(super) fn cluster_label_targets(spec: &RayClusterSpec, at: &str) -> Vec<LabelTarget> {
    let head = spec
        .head_group_spec
        .as_ref()
        .and_then(|h| h.template.as_ref());
    let mut targets = vec![PodTemplate::label_target(
        head,
        &format!("{at}/headGroupSpec/template"),
    )];
    for (i, group) in spec.worker_group_specs.iter().flatten().enumerate() {
        targets.push(PodTemplate::label_target(
            group.template.as_ref(),
            &format!("{at}/workerGroupSpecs/{i}/template"),
        ));
    }
    targets
}

#[cfg(test)]
pub(crate) mod tests;
