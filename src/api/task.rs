//! The Task API: Task (a small unit of work run by one executor), TaskObject (its input) and
//! TaskCluster (the pool of worker pods container Tasks run in).

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

/// The API server's check of a duration field (a Task's `timeout`): exactly what
/// [`crate::duration::parse_duration`] accepts (a number and an optional unit ms, s, m, h or d; a bare
/// number is seconds), up to its bound of 3650 days, so a typo is refused at submit instead of
/// meaning "no timeout". `tests` below hold the two to the same samples.
pub const DURATION_RULE: &str = "self.matches('^[0-9]{1,15}(ms|s|m|h|d)?$') && (\
self.endsWith('ms') ? int(self.substring(0, self.size() - 2)) <= 315360000000 : \
self.endsWith('d') ? int(self.substring(0, self.size() - 1)) <= 3650 : \
self.endsWith('h') ? int(self.substring(0, self.size() - 1)) <= 87600 : \
self.endsWith('m') ? int(self.substring(0, self.size() - 1)) <= 5256000 : \
self.endsWith('s') ? int(self.substring(0, self.size() - 1)) <= 315360000 : \
int(self) <= 315360000)";

/// Durations [`DURATION_RULE`] must accept: the unit test below holds the parser to the same
/// samples, and the e2e test `a_timeout_that_does_not_parse_is_refused_at_submit` submits them.
pub const DURATION_RULE_ACCEPTS: &[&str] = &["500ms", "30s", "5m", "1h", "2d", "20", "3650d", "0s"];
/// Durations [`DURATION_RULE`] must refuse (held to the same two tests).
pub const DURATION_RULE_REFUSES: &[&str] = &[
    "5 m",
    "5min",
    "1.5h",
    "3651d",
    "",
    "-1s",
    "1h30m",
    "s",
    "315360001s",
];

/// What the API server says when [`DURATION_RULE`] refuses a value.
pub const DURATION_RULE_MESSAGE: &str = "must be a duration: a whole number and a unit, ms, s, m, h or d (500ms, 30s, 5m, 1h, 2d; a bare number is seconds), at most 3650d";

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
    doc = "A Task is a small unit of work run by one executor (an ephemeral container in a TaskCluster worker, its own pod, an HTTP request, any object with a success condition, an Argo Workflow).",
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
    /// Longest time the Task may run (500ms, 30s, 5m, 1h, 2d; at most 3650d); then it is killed.
    /// One that does not parse is refused when the Task is submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 24))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_RULE_MESSAGE))]
    pub timeout: Option<String>,
    /// Set (RFC 3339 time) to kill the Task: it goes Killing, then Killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_timestamp: Option<String>,
}

/// Exactly one of the fields is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.container), has(self.pod), has(self.http), has(self.resource), has(self.workflow)].filter(x, x).size() == 1").message("exactly one executor (container, pod, http, resource or workflow) must be set"))]
pub struct TaskExecutor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceExecutor>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<WorkflowExecutor>,
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

/// The controller makes an HTTP request, written as a HAR 1.2 request (the HTTP Archive format
/// browsers export), over http or https.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpExecutor {
    /// The request (`${...}` substituted in the url, header and query values, postData).
    pub request: HarRequest,
    /// For https: the CA bundle that signs the server's certificate, and a client certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<HttpTls>,
    /// The longest the request may take in all: connecting, sending, reading the response
    /// (default 60s). Past it the Task fails; the Task's own `timeout` kills it instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 24))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_RULE_MESSAGE))]
    pub timeout: Option<String>,
    /// Status codes that mean success; default: any 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success_codes: Vec<u16>,
    /// Also needed for success: this holds on the body (parsed as JSON). A JSONPath alone (holds
    /// when it selects a value that is not false, null or empty) or compared with a literal:
    /// `$.status == "done"`; or CEL with the body as `self`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// A JSONPath (e.g. `$.result.jobs`) picking the result out of a JSON body; default: the
    /// whole body (JSON when it is JSON, else text), cut at 64 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_json_path: Option<String>,
}

/// A HAR 1.2 request (<http://www.softwareishard.com/blog/har-12-spec/#request>). `cookies`,
/// `headersSize` and `bodySize` are HAR's too: cookies become a Cookie header, sizes are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarRequest {
    /// GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS.
    #[serde(default = "default_method")]
    pub method: String,
    /// An absolute http:// or https:// URL; `queryString` is appended to its query.
    pub url: String,
    /// `HTTP/1.1` (default), `HTTP/1.0` or `HTTP/2` (over https: negotiated with ALPN; over http:
    /// prior knowledge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HarNameValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_string: Vec<HarNameValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookies: Vec<HarNameValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_data: Option<HarPostData>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

fn default_method() -> String {
    "GET".into()
}

/// A header, query parameter or cookie.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarNameValue {
    pub name: String,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The request body: `text`, or `params` (a form: `application/x-www-form-urlencoded`, or
/// `multipart/form-data` where a param with `fileName` is a file whose content is `value`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.text) && has(self.params) && size(self.params) > 0)").message("postData has text or params, not both"))]
pub struct HarPostData {
    /// The body's media type (the Content-Type header unless one is given).
    pub mime_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<HarParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// A posted form parameter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HarParam {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// TLS of an https request. Without `caBundle` the server must be trusted by the system's roots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpTls {
    /// PEM certificates the server's chain must lead to (instead of the system's roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<KeyReference>,
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) presented as the client certificate.
    /// The Secret must be labelled `sluice.dev/task-tls: "true"`: sluice reads it with its own
    /// rights, and only Secrets meant for Tasks may lend a Task their key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate_secret: Option<String>,
    /// The name checked against the server's certificate; default: the URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// A key of a ConfigMap or of a Secret in the Task's namespace (exactly one of the two).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.configMap) != has(self.secret)").message("exactly one of configMap and secret must be set"))]
pub struct KeyReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// A Secret labelled `sluice.dev/task-tls: "true"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Default `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The Task runs as an Argo Workflow (Argo Workflows must be installed), owned by the Task; its
/// pods are governed by the sluice gate like any other pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowExecutor {
    /// The CapacityQueue the Workflow's pods are admitted against (label `sluice.dev/queue` on each
    /// pod). Without it and without `cluster`, the pods are not governed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// A TaskCluster (same namespace) whose queue (its `sluice.dev/queue` label) the pods are
    /// admitted against, when `queue` is not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The Workflow: `metadata` (labels, annotations) and `spec` (entrypoint, templates...);
    /// `${...}` substituted. Its name is `<task>-wf`.
    #[schemars(schema_with = "any_object")]
    pub template: serde_json::Value,
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

// ---------------------------------------------------------------------------------------------
// TaskObject: the input of a Task.

/// The input of a Task: structured JSON, any shape (objects, arrays, numbers, strings).
///
/// A TaskObject has no status: it is data, written once by whoever creates the Task that reads it.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "TaskObject",
    plural = "taskobjects",
    shortname = "tobj",
    category = "sluice",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    doc = "A TaskObject holds the input of a Task as structured JSON (spec.data).",
    printcolumn(
        name = "Data",
        type_ = "string",
        json_path = ".spec.data",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TaskObjectSpec {
    /// Any JSON value; Tasks read it whole or field by field (`${input.count}`).
    #[serde(default)]
    #[schemars(schema_with = "any_json")]
    pub data: serde_json::Value,
}

// ---------------------------------------------------------------------------------------------
// TaskCluster: the worker pods container Tasks run in.

fn default_min_workers() -> i32 {
    1
}
fn default_slots() -> i32 {
    1
}
fn default_max_tasks_per_worker() -> i32 {
    10
}
fn default_idle_timeout() -> String {
    "30s".into()
}

/// A pool of worker pods that run Tasks as ephemeral containers. Label it `sluice.dev/queue` and its
/// workers are governed by sluice like any application: one DynamicWorkload, `minWorkers` the gang,
/// more workers elastic.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "TaskCluster",
    plural = "taskclusters",
    shortname = "tc",
    category = "sluice",
    namespaced,
    status = "TaskClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A TaskCluster is a pool of worker pods, governed by sluice's gate, that run Tasks as ephemeral containers.",
    printcolumn(
        name = "Queue",
        type_ = "string",
        json_path = ".metadata.labels.sluice\\.dev/queue"
    ),
    printcolumn(name = "Min", type_ = "integer", json_path = ".spec.minWorkers"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.maxWorkers"),
    printcolumn(name = "Workers", type_ = "integer", json_path = ".status.workers"),
    printcolumn(name = "Admitted", type_ = "integer", json_path = ".status.admitted"),
    printcolumn(name = "Busy", type_ = "integer", json_path = ".status.busy"),
    printcolumn(
        name = "Waiting",
        type_ = "integer",
        json_path = ".status.waitingTasks"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.maxWorkers >= self.minWorkers").message("maxWorkers must not be below minWorkers"))]
pub struct TaskClusterSpec {
    /// Workers that start together (the gang) and are always kept.
    #[serde(default = "default_min_workers")]
    #[x_kube(validation = Rule::new("self >= 0").message("minWorkers must not be negative"))]
    pub min_workers: i32,
    /// Most workers at once; extra ones are added while Tasks wait and removed when idle.
    pub max_workers: i32,
    /// Tasks a worker runs at once.
    #[serde(default = "default_slots")]
    #[x_kube(validation = Rule::new("self >= 1").message("slotsPerWorker must be at least 1"))]
    pub slots_per_worker: i32,
    /// A worker is retired and replaced after this many Tasks (a pod's ephemeral containers can
    /// never be removed, so its spec would grow without end).
    #[serde(default = "default_max_tasks_per_worker")]
    #[x_kube(validation = Rule::new("self >= 1").message("maxTasksPerWorker must be at least 1"))]
    pub max_tasks_per_worker: i32,
    /// An extra worker (above minWorkers) idle this long is removed (500ms, 30s, 5m).
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: String,
    /// The worker pod template (`metadata`, `spec`); its first container should stay up (a shell
    /// loop, `sleep infinity`): Tasks run beside it.
    #[schemars(schema_with = "any_object")]
    pub template: serde_json::Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskClusterStatus {
    /// Worker pods that exist and are not being deleted.
    #[serde(default)]
    pub workers: i32,
    /// Workers admitted by the gate (not gated).
    #[serde(default)]
    pub admitted: i32,
    /// Workers waiting behind the gate.
    #[serde(default)]
    pub gated: i32,
    /// Workers running at least one Task.
    #[serde(default)]
    pub busy: i32,
    /// Tasks waiting for a worker.
    #[serde(default)]
    pub waiting_tasks: i32,
    /// Tasks running on the workers.
    #[serde(default)]
    pub running_tasks: i32,
    /// What the controller does or waits for.
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::{DURATION_RULE_ACCEPTS, DURATION_RULE_REFUSES};

    #[test]
    fn the_duration_rule_and_the_parser_agree_on_samples() {
        for ok in DURATION_RULE_ACCEPTS {
            assert!(crate::duration::parse_duration(ok).is_ok(), "{ok}");
        }
        for bad in DURATION_RULE_REFUSES {
            assert!(crate::duration::parse_duration(bad).is_err(), "{bad}");
        }
    }
}
