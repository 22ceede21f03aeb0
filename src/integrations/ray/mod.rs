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
use serde_json::Value;

use super::{
    Adapter, ApplicationAdapter, DemandError, PodIdentity, add_to_gang, amount, count, label,
    quantity_text, template_requests,
};
use crate::api::{PodSetSpec, QUEUE_LABEL};
use crate::queue::resources::ResourceList;

pub const CLUSTER_LABEL: &str = "ray.io/cluster";
pub const NODE_TYPE_LABEL: &str = "ray.io/node-type";
pub const GROUP_LABEL: &str = "ray.io/group";
/// KubeRay's default resources for the autoscaler sidecar (requests = limits).
const AUTOSCALER_CPU: &str = "500m";
const AUTOSCALER_MEMORY: &str = "512Mi";

pub struct RayClusters;

pub fn workload_name(cluster: &str) -> String {
    format!("raycluster-{cluster}")
}

impl Adapter for RayClusters {
    fn kind(&self) -> &'static str {
        "RayCluster"
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[CLUSTER_LABEL]
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

/// The head's requests, plus the autoscaler sidecar KubeRay adds when in-tree autoscaling is on.
fn head_demand(spec: &Value) -> Result<ResourceList, DemandError> {
    let head_template = spec
        .pointer("/headGroupSpec/template")
        .ok_or_else(|| DemandError::Invalid("spec.headGroupSpec.template is missing".into()))?;
    let mut head = template_requests(head_template, "spec.headGroupSpec.template")?;
    if spec.get("enableInTreeAutoscaling").and_then(Value::as_bool) != Some(true) {
        return Ok(head);
    }
    let mut sidecar = ResourceList::new();
    let requests = spec.pointer("/autoscalerOptions/resources/requests");
    for (name, default) in [("cpu", AUTOSCALER_CPU), ("memory", AUTOSCALER_MEMORY)] {
        let text = requests
            .and_then(|r| r.get(name))
            .and_then(quantity_text)
            .unwrap_or_else(|| default.to_string());
        let field = format!("spec.autoscalerOptions.resources.requests.{name}");
        sidecar.add(name, amount(&text, &field)?);
    }
    head.try_add_all(&sidecar).map_err(|resource| {
        DemandError::Invalid(format!(
            "spec.autoscalerOptions.resources.requests.{resource}: the head's {resource} with the autoscaler's is more than sluice can count"
        ))
    })?;
    Ok(head)
}

/// One worker group's pod set (`path` is the group's field path); adds its gang to `gang`.
fn group_demand(
    group: &Value,
    path: &str,
    gang: &mut ResourceList,
) -> Result<PodSetSpec, DemandError> {
    let name = group
        .get("groupName")
        .and_then(Value::as_str)
        .unwrap_or("workers")
        .to_string();
    let template = group
        .get("template")
        .ok_or_else(|| DemandError::Invalid(format!("{path}.template is missing")))?;
    let requests = template_requests(template, &format!("{path}.template"))?;
    let field = |key: &str| format!("{path}.{key}");
    // replicas is the operator's starting point, not demand; a negative one is still refused.
    count(group, "replicas", &field("replicas"))?;
    let hosts = count(group, "numOfHosts", &field("numOfHosts"))?
        .unwrap_or(1)
        .max(1);
    let min = count(group, "minReplicas", &field("minReplicas"))?.unwrap_or(0);
    let max = count(group, "maxReplicas", &field("maxReplicas"))?;
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
        // Counts beyond i32 only grow: a gang that large never fits any quota.
        min_count: i32::try_from(min_pods).unwrap_or(i32::MAX),
        max_count: Some(i32::try_from(max_pods).unwrap_or(i32::MAX)),
    })
}

impl ApplicationAdapter for RayClusters {
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
        let spec = app
            .data
            .get("spec")
            .ok_or_else(|| DemandError::Invalid("RayCluster has no spec".into()))?;
        let head = head_demand(spec)?;
        let mut gang = head.clone();
        let mut sets = vec![PodSetSpec {
            name: "head".into(),
            requests: head.to_quantities(),
            min_count: 1,
            max_count: Some(1),
        }];
        for (i, group) in spec
            .get("workerGroupSpecs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if group.get("suspend").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            sets.push(group_demand(
                group,
                &format!("spec.workerGroupSpecs[{i}]"),
                &mut gang,
            )?);
        }
        Ok(sets)
    }

    fn pod_template_label_paths(
        &self,
        app: &DynamicObject,
    ) -> Vec<(String, Option<BTreeMap<String, String>>)> {
        let spec = app.data.get("spec");
        let labels_at = |template: Option<&Value>| -> Option<BTreeMap<String, String>> {
            template
                .and_then(|t| t.pointer("/metadata/labels"))
                .and_then(|l| serde_json::from_value(l.clone()).ok())
        };
        let mut paths = vec![(
            "/spec/headGroupSpec/template/metadata".to_string(),
            labels_at(spec.and_then(|s| s.pointer("/headGroupSpec/template"))),
        )];
        for (i, group) in spec
            .and_then(|s| s.get("workerGroupSpecs"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            paths.push((
                format!("/spec/workerGroupSpecs/{i}/template/metadata"),
                labels_at(group.get("template")),
            ));
        }
        paths
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raycluster(autoscaling: bool) -> DynamicObject {
        let container = |cpu: &str, mem: &str| json!({"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": cpu, "memory": mem}}});
        serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
            "spec": {
                "enableInTreeAutoscaling": autoscaling,
                "headGroupSpec": {"template": {"spec": {"containers": [container("2", "4Gi")]}}},
                "workerGroupSpecs": [
                    {"groupName": "cpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 5, "template": {"spec": {"containers": [container("1", "2Gi")]}}},
                    {"groupName": "tpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 2, "numOfHosts": 4, "template": {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": [container("4", "8Gi")]}}},
                ],
            },
        }))
        .expect("raycluster")
    }

    #[test]
    fn demand_is_the_head_and_each_groups_minimum_times_hosts() {
        let sets = RayClusters.demand(&raycluster(false)).expect("demand");
        assert_eq!(sets.len(), 3);
        assert_eq!((sets[0].name.as_str(), sets[0].min_count), ("head", 1));
        assert_eq!(sets[0].requests["cpu"].0, "2");
        assert_eq!(
            (sets[1].name.as_str(), sets[1].min_count, sets[1].max_count),
            ("cpu", 1, Some(5))
        );
        assert_eq!(
            (sets[2].name.as_str(), sets[2].min_count, sets[2].max_count),
            ("tpu", 4, Some(8))
        );
        assert_eq!(sets[2].requests["memory"].0, "8Gi");
    }

    #[test]
    fn in_tree_autoscaling_adds_the_sidecar_to_the_head() {
        let sets = RayClusters.demand(&raycluster(true)).expect("demand");
        assert_eq!(sets[0].requests["cpu"].0, "2500m");
        assert_eq!(sets[0].requests["memory"].0, "4608Mi");
    }

    fn refusal(edit: impl FnOnce(&mut Value)) -> String {
        let mut rc = raycluster(true);
        edit(&mut rc.data["spec"]);
        match RayClusters.demand(&rc) {
            Ok(sets) => panic!("accepted: {sets:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Issue 16, hole 2: RayCluster templates are never validated as pods.
    #[test]
    fn a_negative_worker_cpu_is_refused_naming_the_field() {
        let err = refusal(|spec| {
            spec["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["resources"]["requests"]
                ["cpu"] = json!("-8");
        });
        assert_eq!(
            err,
            r#"spec.workerGroupSpecs[1].template.spec.containers[0].resources.requests.cpu: must not be negative ("-8")"#
        );
        let err = refusal(|spec| {
            spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"] =
                json!({"memory": "-1Gi"});
        });
        assert!(
            err.starts_with(
                "spec.headGroupSpec.template.spec.containers[0].resources.limits.memory"
            ),
            "{err}"
        );
        let err = refusal(|spec| {
            spec["autoscalerOptions"] = json!({"resources": {"requests": {"cpu": "-1"}}});
        });
        assert!(
            err.starts_with("spec.autoscalerOptions.resources.requests.cpu"),
            "{err}"
        );
        let err = refusal(|spec| {
            spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
                ["cpu"] = json!("1e");
        });
        assert!(
            err.contains("workerGroupSpecs[0].template.spec.containers[0].resources.requests.cpu: invalid quantity"),
            "{err}"
        );
    }

    #[test]
    fn negative_replicas_hosts_and_minimums_are_refused_naming_the_field() {
        for key in ["replicas", "minReplicas", "maxReplicas", "numOfHosts"] {
            let err = refusal(|spec| spec["workerGroupSpecs"][0][key] = json!(-1));
            assert_eq!(
                err,
                format!("spec.workerGroupSpecs[0].{key}: must not be negative (-1)")
            );
        }
    }

    #[test]
    fn replicas_times_per_pod_beyond_what_sluice_counts_is_refused() {
        let err = refusal(|spec| {
            spec["workerGroupSpecs"][1]["minReplicas"] = json!(i64::from(i32::MAX));
            spec["workerGroupSpecs"][1]["numOfHosts"] = json!(i64::from(i32::MAX));
        });
        assert!(
            err.starts_with("spec.workerGroupSpecs[1].minReplicas:")
                && err.contains("than sluice can count"),
            "{err}"
        );
        let err = refusal(|spec| {
            spec["workerGroupSpecs"][1]["minReplicas"] = json!(i64::MAX);
            spec["workerGroupSpecs"][1]["numOfHosts"] = json!(2);
        });
        assert!(
            err.starts_with("spec.workerGroupSpecs[1].minReplicas:"),
            "{err}"
        );
    }

    /// Issue 16, hole 5: pod-level resources in a template count as the scheduler counts them.
    #[test]
    fn pod_level_resources_in_a_template_count() {
        let mut rc = raycluster(false);
        rc.data["spec"]["workerGroupSpecs"][0]["template"]["spec"]["resources"] =
            json!({"requests": {"cpu": "8", "memory": "16Gi"}});
        let sets = RayClusters.demand(&rc).expect("demand");
        assert_eq!(sets[1].requests["cpu"].0, "8");
        assert_eq!(sets[1].requests["memory"].0, "16Gi");
    }

    #[test]
    fn pods_are_identified_by_kuberay_labels() {
        let mut pod = Pod::default();
        pod.metadata.labels = Some(BTreeMap::from([
            (CLUSTER_LABEL.to_string(), "rc".to_string()),
            (NODE_TYPE_LABEL.to_string(), "worker".to_string()),
            (GROUP_LABEL.to_string(), "cpu".to_string()),
            (QUEUE_LABEL.to_string(), "q".to_string()),
        ]));
        let id = RayClusters.identify_pod(&pod).expect("identified");
        assert_eq!(
            (id.workload.as_deref(), id.pod_set.as_str()),
            (Some("raycluster-rc"), "cpu")
        );
        pod.metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert(NODE_TYPE_LABEL.into(), "head".into());
        assert_eq!(
            RayClusters.identify_pod(&pod).expect("identified").pod_set,
            "head"
        );
    }

    #[test]
    fn label_paths_cover_head_and_every_group() {
        let paths = RayClusters.pod_template_label_paths(&raycluster(false));
        let names: Vec<&str> = paths.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "/spec/headGroupSpec/template/metadata",
                "/spec/workerGroupSpecs/0/template/metadata",
                "/spec/workerGroupSpecs/1/template/metadata"
            ]
        );
        assert!(paths[2].1.as_ref().is_some_and(|l| l.contains_key("x")));
    }
}
