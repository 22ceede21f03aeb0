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

use super::{
    Adapter, ApplicationAdapter, DemandError, PodIdentity, add_to_gang, amount, count, label,
};
use crate::api::{ApplicationEnd, PodSetSpec, QUEUE_LABEL};
use crate::queue::resources::ResourceList;

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

/// Spark's size strings ("4g", "512m", "1024k", "2t", plain bytes: its `byteStringAsBytes`) in
/// bytes; `field` names the field in errors.
pub fn spark_memory(text: &str, field: &str) -> Result<i64, DemandError> {
    let t = text.trim().to_ascii_lowercase();
    let invalid = |why: &str| DemandError::Invalid(format!("{field}: {text:?} {why}"));
    if t.starts_with('-') {
        return Err(invalid("must not be negative"));
    }
    let (number, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let bad = || invalid("is not a Spark memory size such as 4g or 512m");
    let n: i64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| invalid("is more than sluice can count"))
}

fn conf<'a>(spec: &'a Value, key: &str) -> Option<&'a str> {
    spec.get("sparkConf")
        .and_then(|c| c.get(key))
        .and_then(Value::as_str)
}

/// The path of a sparkConf entry, for errors.
fn conf_field(key: &str) -> String {
    format!("spec.sparkConf[{key:?}]")
}

/// The memory Spark sizes the driver's or executors' pods with, in bytes, before rounding.
fn pod_memory(spec: &Value, section: &Value, role: &str) -> Result<i64, DemandError> {
    let too_large = |what: &str| {
        DemandError::Invalid(format!(
            "spec.{role}: memory with {what} is more than sluice can count"
        ))
    };
    let memory = match section.get("memory").and_then(Value::as_str) {
        Some(m) => spark_memory(m, &format!("spec.{role}.memory"))?,
        None => {
            let key = format!("spark.{role}.memory");
            spark_memory(conf(spec, &key).unwrap_or("1g"), &conf_field(&key))?
        }
    };
    let overhead = match section.get("memoryOverhead").and_then(Value::as_str) {
        Some(o) => spark_memory(o, &format!("spec.{role}.memoryOverhead"))?,
        None => match conf(spec, &format!("spark.{role}.memoryOverhead")) {
            Some(o) => spark_memory(o, &conf_field(&format!("spark.{role}.memoryOverhead")))?,
            None => overhead_by_factor(spec, role, memory)?,
        },
    };
    let mut total = memory
        .checked_add(overhead)
        .ok_or_else(|| too_large("overhead"))?;
    if role == "executor" {
        if conf(spec, "spark.memory.offHeap.enabled") == Some("true") {
            let key = "spark.memory.offHeap.size";
            let off_heap = spark_memory(conf(spec, key).unwrap_or("0"), &conf_field(key))?;
            total = total.checked_add(off_heap).ok_or_else(|| too_large(key))?;
        }
        let key = "spark.executor.pyspark.memory";
        if let Some(py) = conf(spec, key) {
            let py = spark_memory(py, &conf_field(key))?;
            total = total.checked_add(py).ok_or_else(|| too_large(key))?;
        }
    }
    Ok(total)
}

/// Spark's default overhead: max(factor × memory, 384 MiB), the factor 0.1 for JVM jobs and 0.4
/// for Python / R unless set. Spark refuses a factor that is not a positive number.
fn overhead_by_factor(spec: &Value, role: &str, memory: i64) -> Result<i64, DemandError> {
    let role_key = format!("spark.{role}.memoryOverheadFactor");
    let given = [
        (
            spec.get("memoryOverheadFactor").and_then(Value::as_str),
            "spec.memoryOverheadFactor".to_string(),
        ),
        (conf(spec, &role_key), conf_field(&role_key)),
        (
            conf(spec, "spark.kubernetes.memoryOverheadFactor"),
            conf_field("spark.kubernetes.memoryOverheadFactor"),
        ),
    ]
    .into_iter()
    .find_map(|(text, field)| text.map(|t| (t, field)));
    let factor = match given {
        Some((text, field)) => match text.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => f,
            _ => {
                return Err(DemandError::Invalid(format!(
                    "{field}: {text:?} is not a positive number"
                )));
            }
        },
        None => {
            let non_jvm = matches!(
                spec.get("type").and_then(Value::as_str),
                Some("Python") | Some("R")
            );
            if non_jvm { 0.4 } else { 0.1 }
        }
    };
    let by_factor = memory as f64 * factor;
    if by_factor >= i64::MAX as f64 {
        return Err(DemandError::Invalid(format!(
            "spec.{role}: memory × memoryOverheadFactor is more than sluice can count"
        )));
    }
    Ok((by_factor as i64).max(MIN_OVERHEAD_MIB * MIB))
}

/// The cpu of one pod, in milli-cpu: coreRequest, else cores (default 1).
fn pod_cpu(section: &Value, role: &str) -> Result<i64, DemandError> {
    if let Some(c) = section.get("coreRequest").and_then(Value::as_str) {
        return amount(c, &format!("spec.{role}.coreRequest"));
    }
    let field = format!("spec.{role}.cores");
    let cores = count(section, "cores", &field)?.unwrap_or(1).max(1);
    cores.checked_mul(1000).ok_or_else(|| {
        DemandError::Invalid(format!("{field}: {cores} is more than sluice can count"))
    })
}

/// One pod's requests for the driver or the executors.
fn pod_demand(spec: &Value, role: &str) -> Result<ResourceList, DemandError> {
    let section = spec.get(role).cloned().unwrap_or(Value::Null);
    let total = pod_memory(spec, &section, role)?;
    // Spark rounds the pod's memory up to whole MiB; in milli-units.
    let memory = total
        .checked_add(MIB - 1)
        .map(|t| t / MIB * MIB)
        .and_then(|t| t.checked_mul(1000))
        .ok_or_else(|| {
            DemandError::Invalid(format!("spec.{role}: memory is more than sluice can count"))
        })?;
    let mut list = ResourceList::new();
    list.add("cpu", pod_cpu(&section, role)?);
    list.add("memory", memory);
    list.add("pods", 1000);
    Ok(list)
}

/// The executors' gang minimum and maximum: instances, or with dynamic allocation min / max.
fn executor_counts(spec: &Value) -> Result<(i64, Option<i64>), DemandError> {
    let dynamic = spec.get("dynamicAllocation").unwrap_or(&Value::Null);
    let instances = count(
        spec.get("executor").unwrap_or(&Value::Null),
        "instances",
        "spec.executor.instances",
    )?;
    if dynamic.get("enabled").and_then(Value::as_bool) != Some(true) {
        let n = instances.unwrap_or(1);
        return Ok((n, Some(n)));
    }
    let field = |key: &str| format!("spec.dynamicAllocation.{key}");
    count(dynamic, "initialExecutors", &field("initialExecutors"))?;
    let min = count(dynamic, "minExecutors", &field("minExecutors"))?.unwrap_or(0);
    let max = count(dynamic, "maxExecutors", &field("maxExecutors"))?;
    Ok((min, max))
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
        let (min, max) = executor_counts(spec)?;
        let min_field = if spec.pointer("/dynamicAllocation/enabled") == Some(&Value::Bool(true)) {
            "spec.dynamicAllocation.minExecutors"
        } else {
            "spec.executor.instances"
        };
        add_to_gang(&mut driver.clone(), &executor, min, min_field)?;
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
                // Counts beyond i32 only grow: a gang that large never fits any quota.
                min_count: i32::try_from(min).unwrap_or(i32::MAX),
                max_count: max.map(|m| i32::try_from(m).unwrap_or(i32::MAX)),
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
    use crate::queue::resources::parse_quantity;

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

    fn refusal(spec: Value) -> String {
        match SparkApplications.demand(&app(spec)) {
            Ok(sets) => panic!("accepted: {sets:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Issue 16, hole 2: SparkApplications are never validated as pods.
    #[test]
    fn a_negative_executor_memory_is_refused_naming_the_field() {
        let err = refusal(json!({"driver": {}, "executor": {"memory": "-4g"}}));
        assert!(
            err.starts_with("spec.executor.memory: \"-4g\" must not be negative"),
            "{err}"
        );
        let err = refusal(json!({"sparkConf": {"spark.driver.memory": "-1g"}}));
        assert!(
            err.starts_with(r#"spec.sparkConf["spark.driver.memory"]"#),
            "{err}"
        );
        let err = refusal(json!({"executor": {"memory": "1g", "memoryOverhead": "-512m"}}));
        assert!(err.starts_with("spec.executor.memoryOverhead"), "{err}");
    }

    #[test]
    fn negative_executor_counts_and_cores_are_refused_naming_the_field() {
        let err = refusal(json!({"executor": {"instances": -3}}));
        assert_eq!(err, "spec.executor.instances: must not be negative (-3)");
        let err = refusal(json!({"dynamicAllocation": {"enabled": true, "minExecutors": -1}}));
        assert!(
            err.starts_with("spec.dynamicAllocation.minExecutors"),
            "{err}"
        );
        let err = refusal(json!({"dynamicAllocation": {"enabled": true, "maxExecutors": -1}}));
        assert!(
            err.starts_with("spec.dynamicAllocation.maxExecutors"),
            "{err}"
        );
        let err = refusal(json!({"executor": {"cores": -2}}));
        assert!(err.starts_with("spec.executor.cores"), "{err}");
        let err = refusal(json!({"executor": {"coreRequest": "-500m"}}));
        assert!(
            err.starts_with(
                "spec.executor.coreRequest: invalid quantity \"-500m\": must not be negative"
            ),
            "{err}"
        );
        let err = refusal(json!({"executor": {"coreRequest": "0e2000000000x"}}));
        assert!(err.starts_with("spec.executor.coreRequest"), "{err}");
    }

    #[test]
    fn executors_times_memory_beyond_what_sluice_counts_are_refused() {
        // 1 TiB is 1.1e15 milli-bytes: 10,000 of them overflow an i64.
        let err = refusal(json!({"executor": {"memory": "1t", "instances": 10000}}));
        assert!(
            err.starts_with("spec.executor.instances: 10000 pods need more memory"),
            "{err}"
        );
        let err = refusal(json!({"executor": {"memory": "8000000t"}}));
        assert!(err.contains("more than sluice can count"), "{err}");
        let err = refusal(json!({"memoryOverheadFactor": "1e300", "executor": {"memory": "1g"}}));
        assert!(err.contains("more than sluice can count"), "{err}");
        let err = refusal(json!({"memoryOverheadFactor": "-0.5"}));
        assert!(err.starts_with("spec.memoryOverheadFactor"), "{err}");
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
        assert_eq!(spark_memory("4g", "f").ok(), Some(4 << 30));
        assert_eq!(spark_memory("512m", "f").ok(), Some(512 << 20));
        assert_eq!(spark_memory("1024", "f").ok(), Some(1024));
        assert!(spark_memory("4x", "f").is_err());
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
