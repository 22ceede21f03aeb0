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

use crate::api::{MIN_COUNT_ANNOTATION, POD_SET_LABEL, PodSetSpec, QUEUE_LABEL, WORKLOAD_LABEL};

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
}

/// Every kind of application with an object of its own.
pub fn applications() -> Vec<Arc<dyn ApplicationAdapter>> {
    vec![
        Arc::new(RayClusters),
        Arc::new(SparkApplications),
        Arc::new(TaskClusters),
    ]
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

/// The adapters as one: the identity of a pod by the first adapter that knows it.
#[derive(Clone)]
pub struct Adapters(Vec<Arc<dyn Adapter>>);

impl Default for Adapters {
    fn default() -> Self {
        Adapters(all())
    }
}

impl Adapters {
    pub fn identify(&self, pod: &Pod) -> Option<PodIdentity> {
        self.0.iter().find_map(|a| a.identify_pod(pod))
    }
}

impl sluice_webhooks::PodClassifier for Adapters {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        let identity = self.identify(pod)?;
        let mut labels = BTreeMap::new();
        labels.insert(QUEUE_LABEL.to_string(), identity.queue);
        // A pod's own name may be too long for a label value; the controller falls back to it.
        if let Some(workload) = identity.workload.filter(|w| is_label_value(w)) {
            labels.insert(WORKLOAD_LABEL.to_string(), workload);
        }
        labels.insert(POD_SET_LABEL.to_string(), identity.pod_set);
        Some(labels)
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
