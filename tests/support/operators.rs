//! The objects of the operators sluice governs (KubeRay, the Spark operator), as the end-to-end
//! tests create them: DynamicObjects of the CRDs the local cluster installs.

use kube::Api;
use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use sluice::api::DynamicWorkload;

use super::TestEnv;

/// The image of the Ray pods (kwok runs none of them; the real node has it built locally).
pub const RAY_IMAGE: &str = "rayproject/ray:2.41.0";

/// `group/version` `kind` (plural `plural`) in the test's namespace.
pub fn dynamic_api(
    env: &TestEnv,
    (group, version, kind): (&str, &str, &str),
    plural: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(env.client.clone(), &env.namespace, &resource)
}

pub fn rayclusters(env: &TestEnv) -> Api<DynamicObject> {
    dynamic_api(env, ("ray.io", "v1", "RayCluster"), "rayclusters")
}

pub fn spark_applications(env: &TestEnv) -> Api<DynamicObject> {
    dynamic_api(
        env,
        ("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
        "sparkapplications",
    )
}

/// The spec of a SparkPi SparkApplication in the Spark operator's image (Spark 4.0.4), driver and
/// executors of 1 core and 512m, with the fields of `driver` and `executor` added to theirs.
pub fn spark_pi(driver: Value, executor: Value) -> Value {
    let mut spec = json!({
        "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.4",
        "image": "docker.io/apache/spark:4.0.4",
        "mainClass": "org.apache.spark.examples.SparkPi",
        "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
        "driver": {"cores": 1, "memory": "512m"},
        "executor": {"cores": 1, "memory": "512m"},
    });
    for (role, extra) in [("driver", driver), ("executor", executor)] {
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            spec[role][k] = v;
        }
    }
    spec
}

/// The SparkApplication `name` with `spec`, in `queue` (labelled), or unlabelled without one.
pub fn spark_application(name: &str, queue: Option<&str>, spec: Value) -> DynamicObject {
    let mut metadata = json!({"name": name});
    if let Some(queue) = queue {
        metadata["labels"] = json!({"sluice.dev/queue": queue});
    }
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": metadata, "spec": spec,
    }))
    .expect("SparkApplication")
}

/// A Ray container asking for `cpu` and `memory`, its limits equal to its requests.
pub fn ray_container(name: &str, cpu: &str, memory: &str) -> Value {
    json!({"name": name, "image": RAY_IMAGE,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}})
}

/// A RayCluster's spec: the head and one worker group `workers` of `[replicas, minReplicas,
/// maxReplicas]`, each pod the one container `container(name)` names (`ray-head`, `ray-worker`),
/// with the fields of `pod` added to both pod specs.
pub fn raycluster_spec(workers: [i64; 3], container: impl Fn(&str) -> Value, pod: Value) -> Value {
    let template = |name: &str| {
        let mut spec = pod.clone();
        spec["containers"] = json!([container(name)]);
        json!({"spec": spec})
    };
    let [replicas, min, max] = workers;
    json!({
        "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": replicas, "minReplicas": min,
            "maxReplicas": max, "rayStartParams": {}, "template": template("ray-worker")}],
    })
}

/// The RayCluster `name` with `spec`, in `queue` (labelled), or ungoverned without one.
pub fn raycluster(name: &str, queue: Option<&str>, spec: Value) -> DynamicObject {
    let mut metadata = json!({"name": name});
    if let Some(queue) = queue {
        metadata["labels"] = json!({"sluice.dev/queue": queue});
    }
    serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata, "spec": spec,
    }))
    .expect("raycluster")
}

/// A DynamicWorkload's pod sets as (name, minimum count).
pub fn pod_set_minimums(workload: &DynamicWorkload) -> Vec<(String, i32)> {
    workload
        .spec
        .pod_sets
        .iter()
        .map(|s| (s.name.clone(), s.min_count))
        .collect()
}
