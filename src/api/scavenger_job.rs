//! ScavengerJob: preemptible work that runs on reserved but idle capacity (seed 004). The
//! controller (`src/scavenger/`) runs it as a batch/v1 Job it owns, with Guaranteed pods of the
//! lowest priority, and starts it again after an interruption.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::Condition;

fn default_parallelism() -> i32 {
    1
}

fn default_duration() -> String {
    "30m".into()
}

/// Preemptible work on idle capacity: runs as a Job owned by it, is interrupted (and waits to run
/// again) when ordinary work needs the room, and must checkpoint more often than `duration`.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "ScavengerJob",
    plural = "scavengerjobs",
    shortname = "sj",
    category = "sluice",
    namespaced,
    status = "ScavengerJobStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A ScavengerJob is preemptible work that sluice runs on reserved but idle capacity, interrupted and started again rather than lost.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".spec.parallelism"),
    printcolumn(
        name = "Interruptions",
        type_ = "integer",
        json_path = ".status.interruptedCount"
    ),
    printcolumn(
        name = "Queue",
        type_ = "string",
        json_path = ".spec.queueName",
        priority = 1
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.parallelism == oldSelf.parallelism && self.resources == oldSelf.resources && (has(self.queueName) ? (has(oldSelf.queueName) && self.queueName == oldSelf.queueName) : !has(oldSelf.queueName))").message("parallelism, resources and queueName are fixed once a ScavengerJob exists (they are what its running pods hold of the queue's scavengerQuota): delete it and create it again to change them"))]
pub struct ScavengerJobSpec {
    /// The container image of every pod.
    #[x_kube(validation = Rule::new("self.size() > 0").message("image must not be empty"))]
    pub image: String,
    /// The command (entrypoint and arguments) of the container. Empty: the image's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Requests and limits of each pod's one container. They must be equal (Guaranteed pods).
    pub resources: ScavengerResources,
    /// Pods that run together (each with `resources`), started together and stopped together.
    #[serde(default = "default_parallelism")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("parallelism must be between 1 and 1000"))]
    pub parallelism: i32,
    /// How long it must be able to run to be worth starting (`30m`, `2h`); it checkpoints more
    /// often than this. Its running priority ramps up in steps over this window, then starts over.
    #[serde(default = "default_duration")]
    pub duration: String,
    /// Volumes to mount: each names exactly one PersistentVolumeClaim, ConfigMap or Secret of the
    /// namespace, which must exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<ScavengerMount>,
    /// The user id the container runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("runAsUser must not be negative"))]
    pub run_as_user: Option<i64>,
    /// Labels a node must have to run its pods (the pods' `nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints its pods tolerate (the pods' `tolerations`). The scavenger capacity counts only nodes
    /// without NoSchedule or NoExecute taints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// The CapacityQueue whose `spec.scavengerQuota` this job counts against. Absent: only the
    /// cluster's scavenger capacity limits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
}

/// Requests and limits of a scavenger pod's container.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScavengerResources {
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
}

/// One volume of a ScavengerJob: exactly one of `persistentVolumeClaim`, `configMap`, `secret`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScavengerMount {
    /// The name of a PersistentVolumeClaim of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<String>,
    /// The name of a ConfigMap of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
    /// The name of a Secret of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Where the volume appears in the container (an absolute path).
    pub mount_path: String,
    /// Mount it read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// Where a ScavengerJob is in its life.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ScavengerPhase {
    /// Waiting for idle capacity (never started yet).
    #[default]
    Waiting,
    /// Its Job exists and its pods are starting or running.
    Running,
    /// It ran and was interrupted (its pods evicted or deleted from outside): it waits to run
    /// again, ahead of jobs that never ran.
    Interrupted,
    /// Its pods all finished with exit code 0.
    Completed,
    /// A pod failed (exit code not 0) or a mount is missing: never retried.
    Failed,
}

impl std::fmt::Display for ScavengerPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ScavengerPhase::Waiting => "Waiting",
            ScavengerPhase::Running => "Running",
            ScavengerPhase::Interrupted => "Interrupted",
            ScavengerPhase::Completed => "Completed",
            ScavengerPhase::Failed => "Failed",
        })
    }
}

impl ScavengerPhase {
    /// Completed and Failed are final.
    pub fn is_final(self) -> bool {
        matches!(self, ScavengerPhase::Completed | ScavengerPhase::Failed)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScavengerJobStatus {
    #[serde(default)]
    pub phase: ScavengerPhase,
    /// How many times it was interrupted.
    #[serde(default)]
    pub interrupted_count: i32,
    /// When each interruption was seen (RFC 3339).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupted_timestamps: Vec<String>,
    /// When each run started (its Job created).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running_timestamps: Vec<String>,
    /// When it completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_timestamp: Option<String>,
    /// When its running priority last started over at the bottom of the ramp (a run lasting
    /// longer than `duration` starts a new window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_start_over_timestamp: Option<String>,
    /// The step of the running-priority ramp it is on (0 = least progress in its window).
    #[serde(default)]
    pub priority_step: i32,
    /// The Job of the current run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Why it waits, what stopped it, or why it failed.
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
