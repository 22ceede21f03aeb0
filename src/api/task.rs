// kube-derive repeats printcolumn(name, type_, json_path) once per column by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::Condition;

/// Schema of a field that holds any JSON value (structured TaskObject data, results, manifests).
pub(crate) fn any_json(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Schema of a field that holds any JSON object (a manifest, a pod template).
pub(crate) fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A small unit of work, run by one executor. It may read a TaskObject as its input and create
/// downstream Tasks.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "Task",
    plural = "tasks",
    shortname = "tk",
    category = "sluice",
    namespaced,
    status = "TaskStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A Task is a small unit of work run by one executor (an ephemeral container in a TaskCluster worker, its own pod, an HTTP request, any object with a success condition).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Executor", type_ = "string", json_path = ".status.executor"),
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.executor.container.cluster"
    ),
    printcolumn(name = "Worker", type_ = "string", json_path = ".status.worker"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Result", type_ = "string", json_path = ".status.result"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    /// How the Task runs: exactly one executor.
    pub executor: TaskExecutor,
    /// The TaskObject holding the Task's input (same namespace). The Task waits in Staging until it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The Task that created this one; `${parent.result...}` reads its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Longest time the Task may run (500ms, 30s, 5m, 1h); then it is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Set (RFC 3339 time) to kill the Task: it goes Killing, then Killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_timestamp: Option<String>,
}

/// Exactly one of the fields is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.container), has(self.pod), has(self.http), has(self.resource)].filter(x, x).size() == 1").message("exactly one executor (container, pod, http or resource) must be set"))]
pub struct TaskExecutor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceExecutor>,
}

/// The Task runs as an ephemeral container in a worker pod of a TaskCluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerExecutor {
    /// The TaskCluster (same namespace) whose workers run the Task.
    pub cluster: String,
    /// Image; default: the image of the worker's first container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment (`${...}` substituted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// The Task runs as its own pod, governed by the sluice gate like any other pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodExecutor {
    /// The CapacityQueue the pod is admitted against (label `sluice.dev/queue`). Without it the pod
    /// is not governed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A pod template: `metadata` (labels, annotations) and `spec`.
    #[schemars(schema_with = "any_object")]
    pub template: serde_json::Value,
}

/// The controller makes an HTTP request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpExecutor {
    /// GET (default), POST, PUT, PATCH, DELETE...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// An http:// URL.
    pub url: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Status codes that mean success; default: any 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success_codes: Vec<u16>,
    /// A JSONPath (e.g. `$.result.jobs`) picking the result out of a JSON response; default: the
    /// whole response (JSON when it is JSON, else text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_json_path: Option<String>,
}

/// The controller creates any object from a manifest and watches it until a condition holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceExecutor {
    /// The object to create (apiVersion, kind, metadata, ...), in the Task's namespace.
    #[schemars(schema_with = "any_object")]
    pub manifest: serde_json::Value,
    /// When this holds on the object, the Task succeeded. JSONPath (starts with `$` or `.`), alone
    /// (holds when it selects a value that is not false, null or empty) or compared with a literal:
    /// `$.status.phase == "Succeeded"`; or CEL with the object as `self`:
    /// `self.status.phase == "Succeeded"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// When this holds on the object, the Task failed (same syntax).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// A JSONPath whose value on the finished object is the Task's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_json_path: Option<String>,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum TaskPhase {
    /// Waiting: for its input, a worker with a free slot, or to be started.
    #[default]
    Staging,
    /// Its executor runs it.
    Running,
    /// It ended well.
    Success,
    /// It ended badly (or could not start).
    Failed,
    /// A kill (killTimestamp or timeout) is in progress.
    Killing,
    /// It was killed.
    Killed,
}

impl TaskPhase {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TaskPhase::Success | TaskPhase::Failed | TaskPhase::Killed
        )
    }
}

impl std::fmt::Display for TaskPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            TaskPhase::Staging => "Staging",
            TaskPhase::Running => "Running",
            TaskPhase::Success => "Success",
            TaskPhase::Failed => "Failed",
            TaskPhase::Killing => "Killing",
            TaskPhase::Killed => "Killed",
        };
        f.write_str(s)
    }
}

/// What the executor started, recorded before it acts, so a restarted controller finds it again
/// instead of starting the Task twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskHandle {
    /// apiVersion of the object the Task runs as (Pod, a manifest's kind); empty for http.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// Kind of that object, or `HTTPRequest`.
    pub kind: String,
    /// Its name (a worker pod for the container executor).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The ephemeral container's name (container executor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// UID of the object once the executor created it; absent until then, so a restarted
    /// controller creates it (or adopts it) but never creates it again once it was gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    #[serde(default)]
    pub phase: TaskPhase,
    /// The executor kind: container, pod, http or resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// The pod the Task runs in (container and pod executors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<TaskHandle>,
    /// What happens, or why it ended as it did.
    #[serde(default)]
    pub message: String,
    /// The result: JSON when the executor's output is JSON, else text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub result: Option<serde_json::Value>,
    /// When the Task was first seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killing_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// `Finished` (True once the Task ended; the reason is its phase).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
