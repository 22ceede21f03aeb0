//! TaskClusters (sluice.dev/v1alpha1): sluice's own pool of Task workers. Worker pods carry
//! `sluice.dev/task-cluster: <name>`; the workload is `taskcluster-<name>` with one pod set
//! `workers`: `minWorkers` in the gang, up to `maxWorkers`; workers above the minimum are elastic.

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;

use super::framework::{
    Count, PodTemplate, add_to_gang, label, lenient, pod_count, read_spec, spec_or_default,
};
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::{PodSetSpec, QUEUE_LABEL, TASK_CLUSTER_LABEL};
use crate::resources::ResourceList;

/// The fields of a TaskCluster's spec the gate reads (read leniently, like a foreign kind's: the
/// demand errors name the field, as for the other integrations).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TaskClusterSpec {
    min_workers: Count,
    max_workers: Count,
    #[serde(deserialize_with = "lenient")]
    template: Option<PodTemplate>,
}

pub struct TaskClusters;

pub fn workload_name(cluster: &str) -> String {
    format!("taskcluster-{cluster}")
}

impl Integration for TaskClusters {
    fn kind(&self) -> &'static str {
        "TaskCluster"
    }

    /// sluice's own controller creates the workers, always with the TaskCluster's queue label.
    fn follows_namespace_default(&self) -> bool {
        false
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[TASK_CLUSTER_LABEL]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "TaskCluster (`sluice.dev/v1alpha1`)",
            gang: "`minWorkers` workers",
            elastic: "workers above `minWorkers`, up to `maxWorkers`",
            end: "its deletion (the DynamicWorkload is owned by it)",
        }
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        let cluster = label(pod, TASK_CLUSTER_LABEL)?;
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        Some(PodIdentity {
            queue,
            workload: Some(workload_name(cluster)),
            pod_set: "workers".into(),
            min_count: None,
            recorded: true,
        })
    }
}

impl ApplicationIntegration for TaskClusters {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("sluice.dev", "v1alpha1", "TaskCluster"),
            "taskclusters",
        )
    }

    fn workload_name(&self, app: &str) -> String {
        workload_name(app)
    }

    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let spec: TaskClusterSpec = read_spec(app, "TaskCluster")?;
        let min = spec.min_workers.get("spec.minWorkers")?.unwrap_or(1);
        let max = spec
            .max_workers
            .get("spec.maxWorkers")?
            .unwrap_or(min)
            .max(min);
        let template = spec.template.unwrap_or_default();
        let requests = template.requests("spec.template")?;
        add_to_gang(&mut ResourceList::new(), &requests, min, "spec.minWorkers")?;
        Ok(vec![PodSetSpec {
            name: "workers".into(),
            requests: requests.to_quantities(),
            min_count: pod_count(min),
            max_count: Some(pod_count(max)),
        }])
    }

    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        let spec: TaskClusterSpec = spec_or_default(app);
        vec![PodTemplate::label_target(
            spec.template.as_ref(),
            "/spec/template",
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cluster(spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
            "metadata": {"name": "counter", "namespace": "ns"},
            "spec": spec,
        }))
        .expect("task cluster")
    }

    /// Issue 16, hole 2: TaskCluster templates are never validated as pods.
    #[test]
    fn a_negative_worker_count_or_request_is_refused_naming_the_field() {
        let template = |cpu: &str| json!({"spec": {"containers": [{"name": "w", "resources": {"requests": {"cpu": cpu}}}]}});
        let err = TaskClusters
            .demand(&cluster(
                json!({"minWorkers": -2, "template": template("1")}),
            ))
            .expect_err("negative minimum");
        assert_eq!(
            err.to_string(),
            "spec.minWorkers: must not be negative (-2)"
        );
        let err = TaskClusters
            .demand(&cluster(
                json!({"maxWorkers": -2, "template": template("1")}),
            ))
            .expect_err("negative maximum");
        assert!(err.to_string().starts_with("spec.maxWorkers"), "{err}");
        let err = TaskClusters
            .demand(&cluster(json!({"template": template("-1")})))
            .expect_err("negative cpu");
        assert!(
            err.to_string()
                .starts_with("spec.template.spec.containers[0].resources.requests.cpu"),
            "{err}"
        );
        let err = TaskClusters
            .demand(&cluster(json!({"minWorkers": i64::from(i32::MAX), "template": template("9223372036854775m")})))
            .expect_err("overflowing gang");
        assert!(err.to_string().starts_with("spec.minWorkers: "), "{err}");
    }

    #[test]
    fn workers_are_one_workload_with_the_minimum_as_gang() {
        let tc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
            "metadata": {"name": "counter", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
            "spec": {"minWorkers": 2, "maxWorkers": 5, "template": {"spec": {"containers": [
                {"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}]}}},
        }))
        .unwrap();
        let sets = TaskClusters.demand(&tc).unwrap();
        assert_eq!(sets[0].min_count, 2);
        assert_eq!(sets[0].max_count, Some(5));
        assert_eq!(sets[0].requests["cpu"].0, "500m");
        let mut pod = Pod::default();
        pod.metadata.labels = Some(
            [
                (TASK_CLUSTER_LABEL.to_string(), "counter".to_string()),
                (QUEUE_LABEL.to_string(), "q".to_string()),
            ]
            .into(),
        );
        let id = TaskClusters.identify_pod(&pod).unwrap();
        assert_eq!(id.workload.as_deref(), Some("taskcluster-counter"));
        assert!(id.recorded);
    }
}
