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

use super::{Adapter, ApplicationAdapter, DemandError, PodIdentity, label};
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

fn int(value: &Value, key: &str) -> Option<i64> {
    value.get(key).and_then(Value::as_i64)
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
        let head_template = spec
            .pointer("/headGroupSpec/template")
            .ok_or_else(|| DemandError::Invalid("spec.headGroupSpec.template is missing".into()))?;
        let mut head = super::template_requests(head_template, "headGroupSpec")?;
        if spec.get("enableInTreeAutoscaling").and_then(Value::as_bool) == Some(true) {
            let mut sidecar = ResourceList::new();
            let resources = spec.pointer("/autoscalerOptions/resources/requests");
            for (name, default) in [("cpu", AUTOSCALER_CPU), ("memory", AUTOSCALER_MEMORY)] {
                let text = resources
                    .and_then(|r| r.get(name))
                    .and_then(Value::as_str)
                    .unwrap_or(default);
                let value = crate::queue::resources::parse_quantity(text)
                    .map_err(|e| DemandError::Invalid(format!("autoscalerOptions: {e}")))?;
                sidecar.add(name, value);
            }
            head.add_all(&sidecar);
        }
        let mut sets = vec![PodSetSpec {
            name: "head".into(),
            requests: head.to_quantities(),
            min_count: 1,
            max_count: Some(1),
        }];
        for group in spec
            .get("workerGroupSpecs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = group
                .get("groupName")
                .and_then(Value::as_str)
                .unwrap_or("workers")
                .to_string();
            if group.get("suspend").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            let template = group.get("template").ok_or_else(|| {
                DemandError::Invalid(format!("workerGroupSpecs {name}: template is missing"))
            })?;
            let requests = super::template_requests(template, &format!("workerGroupSpecs {name}"))?;
            let hosts = int(group, "numOfHosts").unwrap_or(1).max(1);
            let min = int(group, "minReplicas").unwrap_or(0).max(0);
            let max = int(group, "maxReplicas").unwrap_or(i64::from(i32::MAX) / hosts);
            sets.push(PodSetSpec {
                name,
                requests: requests.to_quantities(),
                min_count: i32::try_from(min * hosts).unwrap_or(i32::MAX),
                max_count: Some(i32::try_from(max.saturating_mul(hosts)).unwrap_or(i32::MAX)),
            });
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
