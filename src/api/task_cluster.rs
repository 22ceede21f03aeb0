use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::Condition;

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
    #[schemars(schema_with = "super::task::any_object")]
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
