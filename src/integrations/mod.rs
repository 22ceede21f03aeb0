//! Integrations: one folder per kind of application sluice governs, each owning how its pods are
//! identified, what it declares (demand), when it ends, where the queue label goes in its pod
//! templates, which of its pods follow a namespace's default queue, its RBAC rules and its row
//! of the book's table (docs/src/concepts/gangs-and-elastic-pods.md). Shared code is in [`framework`].
//!
//! [`registry`] lists them; everything else is built from it: the pod classifier ([`Adapters`]),
//! the application webhooks' rules and the default-queue pod condition (`webhook_config`), the
//! recorder, the RBAC manifests (`install::rbac`) and the docs table ([`docs_table`]).
//!
//! A new kind of application is a new folder here (a type implementing [`Integration`], and
//! [`ApplicationIntegration`] when it has an object of its own) and one line in [`registry`].

mod classifier;
pub mod framework;
pub mod job;
mod plain;
pub mod ray;
pub mod ray_job;
pub mod scheduled_spark;
pub mod spark;
pub mod task_cluster;

/// Pods for the integrations' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::DynamicObject;

    /// An application object `kind` of `api_version` named `name` in namespace `ns`, submitted to
    /// queue `q`, with `spec`.
    pub fn application(
        api_version: &str,
        kind: &str,
        name: &str,
        spec: serde_json::Value,
    ) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
            "spec": spec,
        }))
        .expect("an application object")
    }

    /// `app` as JSON with the JSON patch operations `ops` applied (what the application webhook's
    /// patch makes of it).
    pub fn patched(app: &DynamicObject, ops: Vec<serde_json::Value>) -> serde_json::Value {
        let mut doc = serde_json::to_value(app).expect("json");
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(ops)).expect("patch");
        json_patch::patch(&mut doc, &patch).expect("applies");
        doc
    }

    /// Asserts that `doc` holds, at each JSON pointer of `expected`, its value.
    #[track_caller]
    pub fn assert_holds(doc: &serde_json::Value, expected: &[(&str, serde_json::Value)]) {
        for (pointer, value) in expected {
            assert_eq!(doc.pointer(pointer), Some(value), "at {pointer}");
        }
    }

    /// A pod named `name` (when given) with `labels` and, when there are any, `annotations`.
    pub fn labelled_pod(
        name: Option<&str>,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Pod {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut p = Pod::default();
        p.metadata.name = name.map(str::to_string);
        p.metadata.labels = Some(map(labels));
        p.metadata.annotations = (!annotations.is_empty()).then(|| map(annotations));
        p
    }
}

pub use classifier::{Adapters, is_label_value, workload_object_name};
pub use framework::{DemandError, LabelTarget, TargetLabels, queue_label_patch};
pub use job::Jobs;
pub use plain::PlainPods;
pub use ray::RayClusters;
pub use ray_job::RayJobs;
pub use scheduled_spark::ScheduledSparkApplications;
pub use spark::SparkApplications;
pub use task_cluster::TaskClusters;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::core::{ApiResource, DynamicObject};

use crate::api::{ApplicationEnd, PodSetSpec};

/// Every integration, most specific first: the first that recognises a pod wins, so plain pods
/// (any pod with the queue label) stay last. A new integration is one line here.
pub fn registry() -> Vec<Registered> {
    // A RayJob's pods (`sluice.dev/ray-job`) before Jobs' (its submitter's) and RayClusters' (its
    // cluster's); a Job's pods (marked by sluice at submission) before every other kind's labels.
    vec![
        Registered::Application(Arc::new(RayJobs)),
        Registered::Application(Arc::new(Jobs)),
        Registered::Application(Arc::new(RayClusters)),
        Registered::Application(Arc::new(SparkApplications)),
        Registered::Application(Arc::new(ScheduledSparkApplications)),
        Registered::Application(Arc::new(TaskClusters)),
        Registered::Pods(Arc::new(PlainPods)),
    ]
}

/// An entry of the [`registry`].
pub enum Registered {
    /// Pods alone: no object of their own.
    Pods(Arc<dyn Integration>),
    /// An object (a custom resource) whose pods sluice governs and whose demand it records.
    Application(Arc<dyn ApplicationIntegration>),
}

impl Registered {
    pub fn integration(&self) -> Arc<dyn Integration> {
        match self {
            Registered::Pods(p) => p.clone(),
            Registered::Application(a) => a.clone(),
        }
    }

    pub fn application(&self) -> Option<Arc<dyn ApplicationIntegration>> {
        match self {
            Registered::Pods(_) => None,
            Registered::Application(a) => Some(a.clone()),
        }
    }
}

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

/// An integration's row of the book's table of integrations.
#[derive(Clone, Debug)]
pub struct IntegrationDoc {
    /// What is submitted (the kind and its API version, or "pods").
    pub kind: &'static str,
    /// What is admitted together or not at all.
    pub gang: &'static str,
    /// What queues one by one beyond the gang.
    pub elastic: &'static str,
    /// What ends it (gives its quota back).
    pub end: &'static str,
}

/// A kind of application's pods.
pub trait Integration: Send + Sync + 'static {
    /// A short name for logs and metrics.
    fn kind(&self) -> &'static str;
    /// Where the pod belongs, or None when it is not this integration's kind of pod.
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
    /// Its row of the book's table (docs/src/concepts/gangs-and-elastic-pods.md).
    fn doc(&self) -> IntegrationDoc;
}

/// A kind of application with an object of its own (RayCluster, SparkApplication...): sluice records
/// one DynamicWorkload per object, from the demand the object declares.
pub trait ApplicationIntegration: Integration {
    /// The custom resource.
    fn api_resource(&self) -> ApiResource;
    /// The DynamicWorkload name of the application called `app` (the same its pods map to).
    fn workload_name(&self, app: &str) -> String;
    /// The pod sets the application declares: per-pod requests, gang minimum, maximum.
    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError>;
    /// The objects holding the `labels` the operator puts on its pods (a pod template's metadata,
    /// a SparkApplication's driver / executor), with those labels now: the application webhook
    /// copies the queue label into each, so the operator's pods are governed.
    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget>;
    /// Whether the application has ended, as its object's status says (None while it runs, or for
    /// kinds that never end on their own).
    fn ended(&self, app: &DynamicObject) -> Option<ApplicationEnd> {
        let _ = app;
        None
    }
    /// What sluice may do with the custom resource: the recorder reads and watches it.
    fn rbac_rules(&self) -> Vec<PolicyRule> {
        vec![framework::read_rule(&self.api_resource())]
    }
    /// Whether the API server serves the kind itself (batch/v1 Job): no CRD to wait for.
    fn built_in(&self) -> bool {
        false
    }
    /// Whether sluice leaves the object alone altogether (no default queue, no labels, no check,
    /// no ledger): it belongs to another part of sluice (a ScavengerJob's Job) or to another
    /// application, whose integration governs its pods (a RayJob's submitter Job).
    fn left_alone(&self, app: &DynamicObject) -> bool {
        let _ = app;
        false
    }
    /// Whether the object gets a DynamicWorkload of its own (a RayJob's RayCluster is counted in
    /// the RayJob's; a ScheduledSparkApplication's runs each have theirs).
    fn records_workload(&self, app: &DynamicObject) -> bool {
        let _ = app;
        true
    }
    /// The JSON patch operations that make the operator's pods governed in `queue`: by default
    /// the queue label copied into every [`label_targets`](Self::label_targets).
    fn pods_patch(&self, app: &DynamicObject, queue: &str) -> Vec<serde_json::Value> {
        queue_label_patch(&self.label_targets(app), queue)
    }
}

/// Every integration's pods, in the registry's order.
pub fn all() -> Vec<Arc<dyn Integration>> {
    registry().iter().map(Registered::integration).collect()
}

/// Every kind of application with an object of its own.
pub fn applications() -> Vec<Arc<dyn ApplicationIntegration>> {
    registry()
        .iter()
        .filter_map(Registered::application)
        .collect()
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

/// What the integrations need of their custom resources, in the registry's order.
pub fn rbac_rules() -> Vec<PolicyRule> {
    applications().iter().flat_map(|a| a.rbac_rules()).collect()
}

/// The CRDs of the application kinds, which the recorder looks up before watching them.
pub fn crd_names() -> Vec<String> {
    applications()
        .iter()
        .filter(|a| !a.built_in())
        .map(|a| framework::crd_name(&a.api_resource()))
        .collect()
}

/// The book's table of integrations (Markdown), one row per integration.
pub fn docs_table() -> String {
    let mut table = String::from(
        "| integration | the gang (admitted together) | elastic (queues one by one) | what ends it |\n|---|---|---|---|\n",
    );
    for integration in all() {
        let d = integration.doc();
        table.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            d.kind, d.gang, d.elastic, d.end
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_lists_each_kind_once_with_plain_pods_last() {
        let kinds: Vec<&str> = all().iter().map(|i| i.kind()).collect();
        assert_eq!(
            kinds,
            [
                "RayJob",
                "Job",
                "RayCluster",
                "Spark",
                "ScheduledSpark",
                "TaskCluster",
                "pod"
            ]
        );
        let crds = crd_names();
        assert_eq!(
            crds,
            [
                "rayjobs.ray.io",
                "rayclusters.ray.io",
                "sparkapplications.sparkoperator.k8s.io",
                "scheduledsparkapplications.sparkoperator.k8s.io",
                "taskclusters.sluice.dev"
            ]
        );
    }

    #[test]
    fn the_default_queue_condition_names_sparks_and_rays_marker_labels() {
        assert_eq!(
            default_queue_pod_condition(),
            "has(object.metadata.labels) && (('ray.io/cluster' in object.metadata.labels) || ('spark-app-selector' in object.metadata.labels && 'spark-role' in object.metadata.labels))"
        );
    }

    #[test]
    fn the_docs_table_has_a_row_per_integration() {
        let table = docs_table();
        assert_eq!(table.lines().count(), 2 + all().len());
        for line in table.lines() {
            // Four cells: no cell may hold a `|` of its own.
            assert_eq!(line.matches('|').count(), 5, "{line}");
        }
    }
}
