//! One adapter per kind of application. An adapter knows how to tell which workload and pod set a
//! pod belongs to. Adding a kind of application is one new file here and one line in [`all`].

mod plain;
pub mod ray;
pub mod spark;
pub mod task_cluster;

pub use plain::PlainPods;
pub use ray::RayClusters;
pub use spark::SparkApplications;
pub use task_cluster::TaskClusters;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject};

use crate::api::{
    ApplicationEnd, MIN_COUNT_ANNOTATION, POD_SET_LABEL, PodSetSpec, QUEUE_LABEL, WORKLOAD_LABEL,
};
use crate::namespaces::{DefaultQueue, Namespaces, unseen_namespace_message};
use crate::queue::resources::ResourceList;

/// Where a governed pod belongs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodIdentity {
    /// The CapacityQueue the pod is admitted against.
    pub queue: String,
    /// The DynamicWorkload name, when it can be told from the pod as submitted (a pod created with
    /// generateName has no name yet when the webhook sees it; the controller then uses its name).
    pub workload: Option<String>,
    /// The pod set within the workload.
    pub pod_set: String,
    /// The minimum gang of the pod's set, when the pod says.
    pub min_count: Option<u32>,
    /// The pod belongs to an application object (RayCluster...): its DynamicWorkload comes from the
    /// recorder, and until it exists the pod waits (its gang is not known from pods alone).
    pub recorded: bool,
}

/// Tells a kind of application's pods apart.
pub trait Adapter: Send + Sync + 'static {
    /// A short name for logs and metrics.
    fn kind(&self) -> &'static str;
    /// Where the pod belongs, or None when it is not this adapter's kind of pod.
    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity>;
    /// Whether this kind's pods without a queue label go to their namespace's default queue
    /// (Spark's and Ray's pods do; a plain pod is governed only when it asks to be).
    fn follows_namespace_default(&self) -> bool {
        true
    }
    /// Labels every pod of this kind carries (all of them), before sluice's: the webhook
    /// configuration sends unlabelled pods to sluice only when they carry a kind's marker labels
    /// and their namespace has a default queue.
    fn pod_marker_labels(&self) -> &'static [&'static str];
}

/// An application's declared demand could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    #[error("{0}")]
    Invalid(String),
}

/// A kind of application with an object of its own (RayCluster, SparkApplication...): sluice records
/// one DynamicWorkload per object, from the demand the object declares.
pub trait ApplicationAdapter: Adapter {
    /// The custom resource.
    fn api_resource(&self) -> ApiResource;
    /// The DynamicWorkload name of the application called `app` (the same its pods map to).
    fn workload_name(&self, app: &str) -> String;
    /// The pod sets the application declares: per-pod requests, gang minimum, maximum.
    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError>;
    /// JSON pointers to the objects holding the `labels` the operator puts on its pods (a pod
    /// template's metadata, a SparkApplication's driver / executor), with those labels now: the
    /// application webhook copies the queue label into each, so the operator's pods are governed.
    fn pod_template_label_paths(
        &self,
        app: &DynamicObject,
    ) -> Vec<(String, Option<BTreeMap<String, String>>)>;
    /// Whether the application has ended, as its object's status says (None while it runs, or for
    /// kinds that never end on their own).
    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        let _ = app;
        None
    }
}

/// Every kind of application with an object of its own.
pub fn applications() -> Vec<Arc<dyn ApplicationAdapter>> {
    vec![
        Arc::new(RayClusters),
        Arc::new(SparkApplications),
        Arc::new(TaskClusters),
    ]
}

/// A CEL expression on `object` that holds for a pod of a kind that follows its namespace's
/// default queue (for the webhook configuration's matchConditions).
pub fn default_queue_pod_condition() -> String {
    let kinds: Vec<String> = all()
        .iter()
        .filter(|a| a.follows_namespace_default() && !a.pod_marker_labels().is_empty())
        .map(|a| {
            let all: Vec<String> = a
                .pod_marker_labels()
                .iter()
                .map(|l| format!("'{l}' in object.metadata.labels"))
                .collect();
            format!("({})", all.join(" && "))
        })
        .collect();
    format!("has(object.metadata.labels) && ({})", kinds.join(" || "))
}

/// Every adapter, most specific first: the first that recognises a pod wins.
pub fn all() -> Vec<Arc<dyn Adapter>> {
    vec![
        Arc::new(RayClusters),
        Arc::new(SparkApplications),
        Arc::new(TaskClusters),
        Arc::new(PlainPods),
    ]
}

/// The adapters as one: the identity of a pod by the first adapter that knows it. With a namespace
/// cache, the webhook also gives Spark's and Ray's pods their namespace's default queue.
#[derive(Clone)]
pub struct Adapters {
    adapters: Vec<Arc<dyn Adapter>>,
    namespaces: Namespaces,
}

impl Default for Adapters {
    fn default() -> Self {
        Adapters {
            adapters: all(),
            namespaces: Namespaces::none(),
        }
    }
}

impl Adapters {
    /// Every adapter, with namespaces' default queues from `namespaces`.
    pub fn with_namespaces(namespaces: Namespaces) -> Self {
        Adapters {
            adapters: all(),
            namespaces,
        }
    }

    pub fn identify(&self, pod: &Pod) -> Option<PodIdentity> {
        self.adapters.iter().find_map(|a| a.identify_pod(pod))
    }

    /// The identity `pod` would have in `queue`, by the adapters that follow a namespace default.
    fn identify_in_default(&self, pod: &Pod, queue: &str) -> Option<PodIdentity> {
        let mut labelled = pod.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(QUEUE_LABEL.to_string(), queue.to_string());
        self.adapters
            .iter()
            .filter(|a| a.follows_namespace_default())
            .find_map(|a| a.identify_pod(&labelled))
    }
}

fn identity_labels(identity: PodIdentity) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(QUEUE_LABEL.to_string(), identity.queue);
    // A pod's own name may be too long for a label value; the controller falls back to it.
    if let Some(workload) = identity.workload.filter(|w| is_label_value(w)) {
        labels.insert(WORKLOAD_LABEL.to_string(), workload);
    }
    labels.insert(POD_SET_LABEL.to_string(), identity.pod_set);
    labels
}

impl sluice_webhooks::PodClassifier for Adapters {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        self.identify(pod).map(identity_labels)
    }

    fn classify_in(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        if label(pod, QUEUE_LABEL).is_some() {
            return Ok(self.classify(pod));
        }
        match self.namespaces.default_queue(namespace) {
            DefaultQueue::Queue(queue) => {
                Ok(self.identify_in_default(pod, &queue).map(identity_labels))
            }
            DefaultQueue::None => Ok(None),
            // Only a pod that would be governed is held up: any other pod is none of sluice's business.
            DefaultQueue::Unknown => match self.identify_in_default(pod, "unknown") {
                Some(_) => Err(unseen_namespace_message(namespace, "pod")),
                None => Ok(None),
            },
        }
    }
}

/// Whether `value` is a valid label value (at most 63 characters, alphanumeric at both ends,
/// `-`, `_`, `.` between).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.len() <= 63
        && (value.is_empty()
            || (bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))))
}

/// What one pod made from the pod template (`{metadata, spec}`) at `path` (e.g.
/// `spec.headGroupSpec.template`) requests, counted as the scheduler counts it. Errors name the
/// field: templates are never validated as pods, so nothing else refuses a negative request.
fn template_requests(
    template: &serde_json::Value,
    path: &str,
) -> Result<ResourceList, DemandError> {
    let spec = template
        .get("spec")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    let spec: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(spec)
        .map_err(|e| DemandError::Invalid(format!("{path}.spec: not a pod spec: {e}")))?;
    crate::queue::resources::pod_requests(&spec)
        .map_err(|e| DemandError::Invalid(format!("{path}.{e}")))
}

/// A quantity as the object holds it: a string, or a number (Kubernetes reads both).
fn quantity_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads the amount at `field` (a quantity, not negative), or Err naming the field.
fn amount(text: &str, field: &str) -> Result<i64, DemandError> {
    crate::queue::resources::parse_amount(text)
        .map_err(|e| DemandError::Invalid(format!("{field}: {e}")))
}

/// The integer at `key` of `object` (`field` is its path, for errors): None when absent, Err
/// when negative or not an integer.
fn count(object: &serde_json::Value, key: &str, field: &str) -> Result<Option<i64>, DemandError> {
    let Some(value) = object.get(key) else {
        return Ok(None);
    };
    // 2.0 is a whole number too; JSON has no other integer type.
    let whole = value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
            .map(|f| f as i64)
    });
    match whole {
        Some(n) if n >= 0 => Ok(Some(n)),
        Some(n) => Err(DemandError::Invalid(format!(
            "{field}: must not be negative ({n})"
        ))),
        None if value.is_null() => Ok(None),
        None => Err(DemandError::Invalid(format!(
            "{field}: must be a whole number, not {value}"
        ))),
    }
}

/// Adds `count` pods of `per_pod` to `gang`, or Err naming `field` (the count's path) when the
/// product or the sum is more than sluice can count: such a gang could never be admitted, and
/// a wrapped or saturated total would be a lie.
fn add_to_gang(
    gang: &mut ResourceList,
    per_pod: &ResourceList,
    count: i64,
    field: &str,
) -> Result<(), DemandError> {
    gang.try_add_scaled(per_pod, count).map_err(|resource| {
        DemandError::Invalid(format!(
            "{field}: {count} pods need more {resource} than sluice can count (9223372036854775807m in all)"
        ))
    })
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn min_count_annotation(pod: &Pod) -> Option<u32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(MIN_COUNT_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// A valid DynamicWorkload name (a DNS subdomain) for any workload label value: lower-cased, other
/// characters replaced, and a hash suffix when that changed anything, so distinct values never meet.
pub fn workload_object_name(raw: &str) -> String {
    let cleaned: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c| c == '-' || c == '.');
    if trimmed == raw && !trimmed.is_empty() && trimmed.len() <= 253 {
        return raw.to_string();
    }
    // FNV-1a: stable across releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in raw.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    let base: String = trimmed.chars().take(200).collect();
    let base = if base.is_empty() {
        "workload".to_string()
    } else {
        base
    };
    format!("{base}-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DEFAULT_QUEUE_LABEL;
    use crate::namespaces::testing::namespaces;
    use sluice_webhooks::PodClassifier;

    fn pod_with(labels: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn spark_and_ray_pods_take_their_namespace_default_queue_plain_pods_do_not() {
        let adapters = Adapters::with_namespaces(namespaces(&[
            ("research", &[(DEFAULT_QUEUE_LABEL, "batch")]),
            ("other", &[]),
        ]));
        let executor = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
        ]);
        let labels = adapters
            .classify_in("research", &executor)
            .expect("known namespace")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("batch"));
        assert_eq!(
            labels.get(WORKLOAD_LABEL).map(String::as_str),
            Some("spark-spark-1")
        );
        let worker = pod_with(&[
            ("ray.io/cluster", "rc"),
            ("ray.io/node-type", "worker"),
            ("ray.io/group", "cpu"),
        ]);
        let labels = adapters
            .classify_in("research", &worker)
            .expect("known")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("batch"));
        assert_eq!(
            adapters.classify_in("research", &pod_with(&[("app", "web")])),
            Ok(None),
            "a plain pod without the queue label stays ungoverned"
        );
        assert_eq!(adapters.classify_in("other", &executor), Ok(None));
        // Its own label wins over the default.
        let own = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
            (QUEUE_LABEL, "mine"),
        ]);
        let labels = adapters
            .classify_in("research", &own)
            .expect("known")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("mine"));
    }

    #[test]
    fn an_unseen_namespace_holds_up_only_pods_that_would_be_governed() {
        let adapters = Adapters::with_namespaces(namespaces(&[]));
        let executor = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
        ]);
        let err = adapters
            .classify_in("fresh", &executor)
            .expect_err("cannot tell yet");
        assert!(err.contains("retry") && err.contains("fresh"), "{err}");
        assert_eq!(
            adapters.classify_in("fresh", &pod_with(&[("app", "web")])),
            Ok(None)
        );
    }

    #[test]
    fn workload_names_are_valid_and_distinct() {
        assert_eq!(workload_object_name("etl-7"), "etl-7");
        let a = workload_object_name("ETL_7");
        let b = workload_object_name("etl-7-");
        assert!(a.starts_with("etl-7-") && a != "etl-7");
        assert_ne!(a, b);
        assert!(workload_object_name("___").starts_with("workload-"));
    }
}
