use serde_json::json;

use super::*;
use crate::integrations::testing::{assert_holds, patched};
use crate::integrations::{TargetLabels, queue_label_patch};

fn raycluster(autoscaling: bool) -> DynamicObject {
    let container = |cpu: &str, mem: &str| json!({"name": "ray", "image": "rayproject/ray", "resources": {"requests": {"cpu": cpu, "memory": mem}}});
    let spec = json!({
        "enableInTreeAutoscaling": autoscaling,
        "headGroupSpec": {"template": {"spec": {"containers": [container("2", "4Gi")]}}},
        "workerGroupSpecs": [
            {"groupName": "cpu", "replicas": 2, "minReplicas": 1, "maxReplicas": 5, "template": {"spec": {"containers": [container("1", "2Gi")]}}},
            {"groupName": "tpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 2, "numOfHosts": 4, "template": {"metadata": {"labels": {"x": "y"}}, "spec": {"containers": [container("4", "8Gi")]}}},
        ],
    });
    crate::integrations::testing::application("ray.io/v1", "RayCluster", "rc", spec)
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
        err.starts_with("spec.headGroupSpec.template.spec.containers[0].resources.limits.memory"),
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
fn label_targets_cover_head_and_every_group() {
    let targets = RayClusters.label_targets(&raycluster(false));
    let names: Vec<&str> = targets.iter().map(|t| t.path.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "/spec/headGroupSpec/template/metadata",
            "/spec/workerGroupSpecs/0/template/metadata",
            "/spec/workerGroupSpecs/1/template/metadata"
        ]
    );
    assert!(matches!(&targets[2].labels, TargetLabels::Labels(l) if l.contains_key("x")));
    assert_eq!(targets[0].labels, TargetLabels::NoObject);
}

/// A RayCluster with a head template with or without metadata, a worker template with empty
/// metadata.
pub(crate) fn labelled_rc(with_metadata: bool) -> DynamicObject {
    let mut head = json!({"spec": {"containers": [{"name": "h", "image": "ray", "resources": {"requests": {"cpu": "2"}}}]}});
    if with_metadata {
        head["metadata"] = json!({"labels": {"app": "x"}});
    }
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
        "spec": {
            "headGroupSpec": {"template": head},
            "workerGroupSpecs": [{"groupName": "w", "minReplicas": 3, "maxReplicas": 5, "template": {"metadata": {}, "spec": {"containers": [{"name": "w", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}}],
        },
    }))
    .expect("rc")
}

#[test]
fn copies_the_queue_label_into_every_template() {
    for with_metadata in [false, true] {
        let app = labelled_rc(with_metadata);
        let ops = queue_label_patch(&RayClusters.label_targets(&app), "q");
        assert_eq!(ops.len(), 2);
        let doc = patched(&app, ops);
        assert_holds(
            &doc,
            &[
                (
                    "/spec/headGroupSpec/template/metadata/labels/sluice.dev~1queue",
                    json!("q"),
                ),
                (
                    "/spec/workerGroupSpecs/0/template/metadata/labels/sluice.dev~1queue",
                    json!("q"),
                ),
            ],
        );
        let patched: DynamicObject = serde_json::from_value(doc).expect("obj");
        assert!(
            queue_label_patch(&RayClusters.label_targets(&patched), "q").is_empty(),
            "idempotent"
        );
    }
}
