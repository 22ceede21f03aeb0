//! Spark: SparkApplication objects (sparkoperator.k8s.io/v1beta2) and the pods Spark creates, whether
//! through the operator or a plain spark-submit.
//!
//! Pods are told by Spark's own labels: `spark-app-selector` (the application id) and `spark-role`
//! (driver / executor). A pod of a SparkApplication also carries the operator's
//! `sparkoperator.k8s.io/app-name`; its workload is `sparkapplication-<name>`. A pod of a plain
//! spark-submit has no object behind it: its workload is `spark-<app id>`, recorded from the first pod.
//!
//! Demand, computed as Spark computes pod requests: memory + overhead, where overhead is the given
//! memoryOverhead or max(factor × memory, 384 MiB), factor 0.1 for JVM jobs and 0.4 for Python / R
//! unless set; off-heap memory and PySpark memory (from sparkConf) when set; cpu = coreRequest, else
//! cores (default 1). Executors: instances, or with dynamic allocation min / initial / max. The gang is
//! the driver plus the minimum executors; executors above it are elastic.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::{Adapter, ApplicationAdapter, DemandError, PodIdentity, label};
use crate::api::{ApplicationEnd, PodSetSpec, QUEUE_LABEL};
use crate::queue::resources::{ResourceList, parse_quantity};

pub const APP_SELECTOR_LABEL: &str = "spark-app-selector";
pub const ROLE_LABEL: &str = "spark-role";
pub const OPERATOR_APP_LABEL: &str = "sparkoperator.k8s.io/app-name";
const MIB: i64 = 1024 * 1024;
const MIN_OVERHEAD_MIB: i64 = 384;

pub struct SparkApplications;

pub fn application_workload_name(app: &str) -> String {
    format!("sparkapplication-{app}")
}

impl Adapter for SparkApplications {
    fn kind(&self) -> &'static str {
        "Spark"
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[APP_SELECTOR_LABEL, ROLE_LABEL]
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        let app_id = label(pod, APP_SELECTOR_LABEL)?;
        let role = label(pod, ROLE_LABEL)?;
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        let (workload, recorded) = match label(pod, OPERATOR_APP_LABEL) {
            Some(app) => (application_workload_name(app), true),
            None => (format!("spark-{app_id}"), false),
        };
        let pod_set = if role == "driver" {
            "driver"
        } else {
            "executor"
        };
        // A plain spark-submit declares nothing: its driver is a gang of one, executors are elastic.
        let min_count = (!recorded).then_some(if role == "driver" { 1 } else { 0 });
        Some(PodIdentity {
            queue,
            workload: Some(workload),
            pod_set: pod_set.to_string(),
            min_count,
            recorded,
        })
    }
}

/// Spark's size strings ("4g", "512m", "1024k", "2t", plain bytes) in bytes.
pub fn spark_memory(text: &str) -> Result<i64, DemandError> {
    let t = text.trim().to_ascii_lowercase();
    let bad = || {
        DemandError::Invalid(format!(
            "{text:?} is not a Spark memory size such as 4g or 512m"
        ))
    };
    let (number, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: i64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

fn conf<'a>(spec: &'a Value, key: &str) -> Option<&'a str> {
    spec.get("sparkConf")
        .and_then(|c| c.get(key))
        .and_then(Value::as_str)
}

/// One pod's requests for the driver or the executors.
fn pod_demand(spec: &Value, role: &str) -> Result<ResourceList, DemandError> {
    let section = spec.get(role).cloned().unwrap_or(Value::Null);
    let memory = match section.get("memory").and_then(Value::as_str) {
        Some(m) => spark_memory(m)?,
        None => spark_memory(conf(spec, &format!("spark.{role}.memory")).unwrap_or("1g"))?,
    };
    let non_jvm = matches!(
        spec.get("type").and_then(Value::as_str),
        Some("Python") | Some("R")
    );
    let factor = spec
        .get("memoryOverheadFactor")
        .and_then(Value::as_str)
        .or_else(|| conf(spec, &format!("spark.{role}.memoryOverheadFactor")))
        .or_else(|| conf(spec, "spark.kubernetes.memoryOverheadFactor"))
        .and_then(|f| f.parse::<f64>().ok())
        .unwrap_or(if non_jvm { 0.4 } else { 0.1 });
    let overhead = match section
        .get("memoryOverhead")
        .and_then(Value::as_str)
        .or_else(|| conf(spec, &format!("spark.{role}.memoryOverhead")))
    {
        Some(o) => spark_memory(o)?,
        None => ((memory as f64 * factor) as i64).max(MIN_OVERHEAD_MIB * MIB),
    };
    let mut total = memory + overhead;
    if role == "executor" {
        if conf(spec, "spark.memory.offHeap.enabled") == Some("true") {
            total += spark_memory(conf(spec, "spark.memory.offHeap.size").unwrap_or("0"))?;
        }
        if let Some(py) = conf(spec, "spark.executor.pyspark.memory") {
            total += spark_memory(py)?;
        }
    }
    let cpu = match section.get("coreRequest").and_then(Value::as_str) {
        Some(c) => parse_quantity(c)
            .map_err(|e| DemandError::Invalid(format!("{role}.coreRequest: {e}")))?,
        None => {
            section
                .get("cores")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                .max(1)
                * 1000
        }
    };
    let mut list = ResourceList::new();
    list.add("cpu", cpu);
    // Spark rounds the pod's memory to whole MiB.
    list.add("memory", (total + MIB - 1) / MIB * MIB * 1000);
    list.add("pods", 1000);
    Ok(list)
}

impl ApplicationAdapter for SparkApplications {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
            "sparkapplications",
        )
    }

    fn workload_name(&self, app: &str) -> String {
        application_workload_name(app)
    }

    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let spec = app
            .data
            .get("spec")
            .ok_or_else(|| DemandError::Invalid("SparkApplication has no spec".into()))?;
        let driver = pod_demand(spec, "driver")?;
        let executor = pod_demand(spec, "executor")?;
        let dynamic = spec.get("dynamicAllocation");
        let enabled = dynamic
            .and_then(|d| d.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let (min, max) = if enabled {
            let d = dynamic.unwrap_or(&Value::Null);
            let min = d.get("minExecutors").and_then(Value::as_i64).unwrap_or(0);
            let max = d.get("maxExecutors").and_then(Value::as_i64);
            (min, max)
        } else {
            let n = spec
                .pointer("/executor/instances")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            (n, Some(n))
        };
        Ok(vec![
            PodSetSpec {
                name: "driver".into(),
                requests: driver.to_quantities(),
                min_count: 1,
                max_count: Some(1),
            },
            PodSetSpec {
                name: "executor".into(),
                requests: executor.to_quantities(),
                min_count: i32::try_from(min.max(0)).unwrap_or(i32::MAX),
                max_count: max.map(|m| i32::try_from(m.max(0)).unwrap_or(i32::MAX)),
            },
        ])
    }

    fn pod_template_label_paths(
        &self,
        app: &DynamicObject,
    ) -> Vec<(String, Option<BTreeMap<String, String>>)> {
        // The operator puts spec.driver.labels and spec.executor.labels on the pods it creates.
        let labels_at = |role: &str| -> Option<BTreeMap<String, String>> {
            app.data
                .pointer(&format!("/spec/{role}/labels"))
                .and_then(|l| serde_json::from_value(l.clone()).ok())
        };
        ["driver", "executor"]
            .iter()
            .map(|role| (format!("/spec/{role}"), labels_at(role)))
            .collect()
    }

    /// The operator's final application states (its `status.applicationState.state`).
    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        match app
            .data
            .pointer("/status/applicationState/state")
            .and_then(Value::as_str)?
        {
            "COMPLETED" => Some(ApplicationEnd::Succeeded),
            "FAILED" | "SUBMISSION_FAILED" => Some(ApplicationEnd::Failed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn app(spec: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "etl", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": spec}))
        .expect("app")
    }

    fn memory_mib(set: &PodSetSpec) -> i64 {
        parse_quantity(&set.requests["memory"].0).expect("memory") / 1000 / MIB
    }

    #[test]
    fn memory_overhead_follows_sparks_rule() {
        // JVM: max(0.1 × 1g, 384m) = 384m; 8g: 0.1 × 8g = 819.2m.
        let sets = SparkApplications.demand(&app(json!({"type": "Scala", "driver": {"cores": 1, "memory": "1g"}, "executor": {"cores": 2, "memory": "8g", "instances": 3}}))).expect("demand");
        assert_eq!(memory_mib(&sets[0]), 1024 + 384);
        assert_eq!(memory_mib(&sets[1]), 8192 + 820);
        assert_eq!(sets[1].requests["cpu"].0, "2");
        assert_eq!((sets[1].min_count, sets[1].max_count), (3, Some(3)));
        // Python: factor 0.4.
        let sets = SparkApplications
            .demand(&app(
                json!({"type": "Python", "driver": {"memory": "2g"}, "executor": {"memory": "2g"}}),
            ))
            .expect("demand");
        assert_eq!(memory_mib(&sets[1]), 2048 + 820);
        // Explicit overhead and factor win.
        let sets = SparkApplications.demand(&app(json!({"memoryOverheadFactor": "0.2", "driver": {"memory": "4g", "memoryOverhead": "1g"}, "executor": {"memory": "4g"}}))).expect("demand");
        assert_eq!(memory_mib(&sets[0]), 4096 + 1024);
        assert_eq!(memory_mib(&sets[1]), 4096 + 820);
    }

    #[test]
    fn off_heap_pyspark_memory_and_core_request_count() {
        let sets = SparkApplications.demand(&app(json!({
            "sparkConf": {"spark.memory.offHeap.enabled": "true", "spark.memory.offHeap.size": "1g", "spark.executor.pyspark.memory": "512m"},
            "driver": {"memory": "1g"}, "executor": {"memory": "1g", "coreRequest": "500m"},
        })))
        .expect("demand");
        assert_eq!(memory_mib(&sets[1]), 1024 + 384 + 1024 + 512);
        assert_eq!(sets[1].requests["cpu"].0, "500m");
    }

    #[test]
    fn dynamic_allocation_sets_the_gang_to_the_minimum() {
        let sets = SparkApplications.demand(&app(json!({"driver": {}, "executor": {"instances": 2},
            "dynamicAllocation": {"enabled": true, "initialExecutors": 2, "minExecutors": 1, "maxExecutors": 10}}))).expect("demand");
        assert_eq!((sets[0].name.as_str(), sets[0].min_count), ("driver", 1));
        assert_eq!((sets[1].min_count, sets[1].max_count), (1, Some(10)));
    }

    #[test]
    fn pods_are_identified_by_sparks_labels() {
        let mut pod = Pod::default();
        let labels = |extra: &[(&str, &str)]| {
            let mut m: BTreeMap<String, String> = [
                (APP_SELECTOR_LABEL, "spark-0a1b"),
                (ROLE_LABEL, "executor"),
                (QUEUE_LABEL, "q"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            m.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            m
        };
        pod.metadata.labels = Some(labels(&[]));
        let id = SparkApplications
            .identify_pod(&pod)
            .expect("spark-submit pod");
        assert_eq!(
            (
                id.workload.as_deref(),
                id.pod_set.as_str(),
                id.recorded,
                id.min_count
            ),
            (Some("spark-spark-0a1b"), "executor", false, Some(0))
        );
        pod.metadata.labels = Some(labels(&[(OPERATOR_APP_LABEL, "etl")]));
        let id = SparkApplications.identify_pod(&pod).expect("operator pod");
        assert_eq!(
            (id.workload.as_deref(), id.recorded),
            (Some("sparkapplication-etl"), true)
        );
    }

    #[test]
    fn spark_sizes() {
        assert_eq!(spark_memory("4g").ok(), Some(4 << 30));
        assert_eq!(spark_memory("512m").ok(), Some(512 << 20));
        assert_eq!(spark_memory("1024").ok(), Some(1024));
        assert!(spark_memory("4x").is_err());
    }

    #[test]
    fn an_application_has_ended_when_the_operator_says_so() {
        let mut a = app(json!({"type": "Scala"}));
        assert_eq!(SparkApplications.ended(&a), None);
        for (state, end) in [
            ("RUNNING", None),
            ("COMPLETED", Some(ApplicationEnd::Succeeded)),
            ("FAILED", Some(ApplicationEnd::Failed)),
            ("SUBMISSION_FAILED", Some(ApplicationEnd::Failed)),
        ] {
            a.data["status"] = json!({"applicationState": {"state": state}});
            assert_eq!(SparkApplications.ended(&a), end, "{state}");
        }
    }
}
