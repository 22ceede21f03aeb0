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
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::framework::{
    Count, TargetLabels, add_to_gang, amount, label, lenient, pod_count, read_spec, spec_or_default,
};
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::{ApplicationEnd, PodSetSpec, QUEUE_LABEL};
use crate::resources::ResourceList;

pub const APP_SELECTOR_LABEL: &str = "spark-app-selector";
pub const ROLE_LABEL: &str = "spark-role";
pub const OPERATOR_APP_LABEL: &str = "sparkoperator.k8s.io/app-name";
const MIB: i64 = 1024 * 1024;
const MIN_OVERHEAD_MIB: i64 = 384;

/// The fields of a SparkApplication's spec (sparkoperator.k8s.io/v1beta2) sluice reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SparkApplicationSpec {
    /// Scala, Java, Python or R.
    #[serde(rename = "type", deserialize_with = "lenient")]
    language: Option<String>,
    #[serde(deserialize_with = "lenient")]
    memory_overhead_factor: Option<String>,
    #[serde(deserialize_with = "strings")]
    spark_conf: BTreeMap<String, String>,
    #[serde(deserialize_with = "lenient")]
    driver: Option<SparkPod>,
    #[serde(deserialize_with = "lenient")]
    executor: Option<SparkPod>,
    #[serde(deserialize_with = "lenient")]
    dynamic_allocation: Option<DynamicAllocation>,
}

/// `spec.driver` or `spec.executor`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SparkPod {
    #[serde(deserialize_with = "lenient")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "lenient")]
    memory: Option<String>,
    #[serde(deserialize_with = "lenient")]
    memory_overhead: Option<String>,
    #[serde(deserialize_with = "lenient")]
    core_request: Option<String>,
    cores: Count,
    instances: Count,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct DynamicAllocation {
    #[serde(deserialize_with = "lenient")]
    enabled: Option<bool>,
    initial_executors: Count,
    min_executors: Count,
    max_executors: Count,
}

/// The status the operator writes: `status.applicationState.state`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SparkApplicationStatus {
    #[serde(deserialize_with = "lenient")]
    application_state: Option<ApplicationState>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ApplicationState {
    #[serde(deserialize_with = "lenient")]
    state: Option<String>,
}

impl SparkApplicationSpec {
    fn section(&self, role: &str) -> Option<&SparkPod> {
        match role {
            "driver" => self.driver.as_ref(),
            _ => self.executor.as_ref(),
        }
    }

    fn dynamic(&self) -> bool {
        self.dynamic_allocation
            .as_ref()
            .is_some_and(|d| d.enabled == Some(true))
    }
}

/// sparkConf as written: its string entries (Spark reads no other).
fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    let Value::Object(map) = Value::deserialize(d)? else {
        return Ok(BTreeMap::new());
    };
    Ok(map
        .into_iter()
        .filter_map(|(key, value)| match value {
            Value::String(s) => Some((key, s)),
            _ => None,
        })
        .collect())
}

pub struct SparkApplications;

pub fn application_workload_name(app: &str) -> String {
    format!("sparkapplication-{app}")
}

impl Integration for SparkApplications {
    fn kind(&self) -> &'static str {
        "Spark"
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[APP_SELECTOR_LABEL, ROLE_LABEL]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "SparkApplication (`sparkoperator.k8s.io/v1beta2`) and plain spark-submit",
            gang: "the driver and dynamic allocation's minExecutors (else all `instances`); spark-submit: the driver",
            elastic: "executors above the gang (spark-submit: every executor)",
            end: "the operator's `COMPLETED`, `FAILED` or `SUBMISSION_FAILED`; spark-submit: its pods' ends",
        }
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

fn conf<'a>(spec: &'a SparkApplicationSpec, key: &str) -> Option<&'a str> {
    spec.spark_conf.get(key).map(String::as_str)
}

/// The path of a sparkConf entry, for errors.
fn conf_field(key: &str) -> String {
    format!("spec.sparkConf[{key:?}]")
}

/// The memory Spark sizes the driver's or executors' pods with, in bytes, before rounding.
fn pod_memory(
    spec: &SparkApplicationSpec,
    section: Option<&SparkPod>,
    role: &str,
) -> Result<i64, DemandError> {
    let too_large = |what: &str| {
        DemandError::Invalid(format!(
            "spec.{role}: memory with {what} is more than sluice can count"
        ))
    };
    let memory = match section.and_then(|s| s.memory.as_deref()) {
        Some(m) => spark_memory(m, &format!("spec.{role}.memory"))?,
        None => {
            let key = format!("spark.{role}.memory");
            spark_memory(conf(spec, &key).unwrap_or("1g"), &conf_field(&key))?
        }
    };
    let overhead = match section.and_then(|s| s.memory_overhead.as_deref()) {
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
fn overhead_by_factor(
    spec: &SparkApplicationSpec,
    role: &str,
    memory: i64,
) -> Result<i64, DemandError> {
    let role_key = format!("spark.{role}.memoryOverheadFactor");
    let given = [
        (
            spec.memory_overhead_factor.as_deref(),
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
            let non_jvm = matches!(spec.language.as_deref(), Some("Python") | Some("R"));
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
fn pod_cpu(section: Option<&SparkPod>, role: &str) -> Result<i64, DemandError> {
    if let Some(c) = section.and_then(|s| s.core_request.as_deref()) {
        return amount(c, &format!("spec.{role}.coreRequest"));
    }
    let field = format!("spec.{role}.cores");
    let cores = section
        .map_or(Ok(None), |s| s.cores.get(&field))?
        .unwrap_or(1)
        .max(1);
    cores.checked_mul(1000).ok_or_else(|| {
        DemandError::Invalid(format!("{field}: {cores} is more than sluice can count"))
    })
}

/// One pod's requests for the driver or the executors.
fn pod_demand(spec: &SparkApplicationSpec, role: &str) -> Result<ResourceList, DemandError> {
    let section = spec.section(role);
    let total = pod_memory(spec, section, role)?;
    // Spark rounds the pod's memory up to whole MiB; in milli-units.
    let memory = total
        .checked_add(MIB - 1)
        .map(|t| t / MIB * MIB)
        .and_then(|t| t.checked_mul(1000))
        .ok_or_else(|| {
            DemandError::Invalid(format!("spec.{role}: memory is more than sluice can count"))
        })?;
    let mut list = ResourceList::new();
    list.add("cpu", pod_cpu(section, role)?);
    list.add("memory", memory);
    list.add("pods", 1000);
    Ok(list)
}

/// The executors' gang minimum and maximum: instances, or with dynamic allocation min / max.
fn executor_counts(spec: &SparkApplicationSpec) -> Result<(i64, Option<i64>), DemandError> {
    let instances = spec
        .executor
        .as_ref()
        .map_or(Ok(None), |e| e.instances.get("spec.executor.instances"))?;
    let dynamic = match &spec.dynamic_allocation {
        Some(d) if d.enabled == Some(true) => d,
        _ => {
            let n = instances.unwrap_or(1);
            return Ok((n, Some(n)));
        }
    };
    let field = |key: &str| format!("spec.dynamicAllocation.{key}");
    dynamic.initial_executors.get(&field("initialExecutors"))?;
    let min = dynamic
        .min_executors
        .get(&field("minExecutors"))?
        .unwrap_or(0);
    let max = dynamic.max_executors.get(&field("maxExecutors"))?;
    Ok((min, max))
}

impl ApplicationIntegration for SparkApplications {
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
        let spec: SparkApplicationSpec = read_spec(app, "SparkApplication")?;
        let driver = pod_demand(&spec, "driver")?;
        let executor = pod_demand(&spec, "executor")?;
        let (min, max) = executor_counts(&spec)?;
        let min_field = if spec.dynamic() {
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
                min_count: pod_count(min),
                max_count: max.map(pod_count),
            },
        ])
    }

    /// The operator puts spec.driver.labels and spec.executor.labels on the pods it creates.
    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        let spec: SparkApplicationSpec = spec_or_default(app);
        ["driver", "executor"]
            .into_iter()
            .map(|role| LabelTarget {
                path: format!("/spec/{role}"),
                labels: match spec.section(role) {
                    None => TargetLabels::NoObject,
                    Some(pod) => TargetLabels::from(pod.labels.clone()),
                },
            })
            .collect()
    }

    /// The operator's final application states (its `status.applicationState.state`).
    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        let status: SparkApplicationStatus = app
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())?;
        match status.application_state?.state?.as_str() {
            "COMPLETED" => Some(ApplicationEnd::Succeeded),
            "FAILED" | "SUBMISSION_FAILED" => Some(ApplicationEnd::Failed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
