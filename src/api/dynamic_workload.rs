use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::Condition;

/// The ledger of one application: what it asked for and what it was given.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "DynamicWorkload",
    plural = "dynamicworkloads",
    shortname = "dwl",
    category = "sluice",
    namespaced,
    status = "DynamicWorkloadStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A DynamicWorkload is sluice's ledger of one application: the pods it asked for and the quota it was given.",
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queueName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Admitted",
        type_ = "integer",
        json_path = ".status.admittedPods"
    ),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingPods"),
    printcolumn(
        name = "Position",
        type_ = "integer",
        json_path = ".status.position",
        description = "1-based place in its queue's pending order (empty: nothing waits)"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.reason",
        description = "why pods of it wait, short (e.g. Quota:cpu, Cohort:memory, StrictFIFO); the message says it in full"
    ),
    printcolumn(
        name = "Pod-Sets",
        type_ = "string",
        json_path = ".status.podSetSummary",
        description = "per pod set: admitted/pending pods"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.used.cpu",
        description = "cpu requested by admitted pods"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.used.memory",
        description = "memory requested by admitted pods"
    ),
    printcolumn(
        name = "GPU",
        type_ = "string",
        json_path = ".status.used.nvidia\\.com/gpu",
        description = "nvidia.com/gpu requested by admitted pods",
        priority = 1
    ),
    printcolumn(
        name = "Interrupted",
        type_ = "integer",
        json_path = ".status.interruptedCount",
        description = "how often the workload was preempted",
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
pub struct DynamicWorkloadSpec {
    /// The application this workload records, when it has an object of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceRef>,
    /// The CapacityQueue the workload's pods are admitted against.
    #[x_kube(validation = Rule::new("self.size() > 0").message("queueName must name a CapacityQueue"))]
    pub queue_name: String,
    /// Higher goes first.
    #[serde(default)]
    pub priority: i32,
    /// The kinds of pod the workload creates.
    #[serde(default)]
    pub pod_sets: Vec<PodSetSpec>,
    /// Set when the application object says it has ended (a SparkApplication COMPLETED or FAILED):
    /// nothing is reserved for it any more, and pods of it still behind the gate are not admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_ended: Option<ApplicationEnd>,
}

/// How an application ended, as its own object tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ApplicationEnd {
    Succeeded,
    Failed,
}

/// The object a workload was recorded from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// One kind of pod of a workload (driver, executors, head, a worker group...).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.maxCount) || self.maxCount >= self.minCount").message("maxCount must not be below minCount"))]
pub struct PodSetSpec {
    pub name: String,
    /// What one pod of the set requests, counted as the scheduler counts it (containers, init
    /// containers, pod overhead), plus `pods: 1`.
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    /// Pods of this set that must be admitted together with the rest of the workload's gang.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0").message("minCount must not be negative"))]
    pub min_count: i32,
    /// The most pods of this set the application may create, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_count: Option<i32>,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum WorkloadPhase {
    /// Its minimum gang waits for quota.
    #[default]
    Pending,
    /// It holds quota; not all of its admitted pods run yet.
    Admitted,
    /// Its admitted pods run.
    Running,
    /// Its pods were taken back to make room for others (condition `Preempted`), and it holds
    /// no quota now: it waits to be admitted again.
    Preempted,
    /// Every pod ended and none failed.
    Finished,
    /// Every pod ended and at least one failed.
    Failed,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DynamicWorkloadStatus {
    #[serde(default)]
    pub phase: WorkloadPhase,
    /// Why the workload waits (which resource, how much is missing), or what it holds.
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Per pod set counts.
    #[serde(default)]
    pub pod_sets: Vec<PodSetStatus>,
    /// Per pod set, admitted (not ended) / pending pods, e.g. `driver=1/0 executor=3/1`.
    #[serde(default)]
    pub pod_set_summary: String,
    /// Pods waiting behind the gate.
    #[serde(default)]
    pub pending_pods: i32,
    /// Admitted pods that have not ended.
    #[serde(default)]
    pub admitted_pods: i32,
    /// Requests of admitted pods that have not ended.
    #[serde(default)]
    pub used: BTreeMap<String, Quantity>,
    /// Quota held for gang members that are not admitted yet (not created, or just created).
    #[serde(default)]
    pub reserved: BTreeMap<String, Quantity>,
    /// How often the workload's pods were taken back (preempted: evicted to make room for a
    /// workload of higher priority). Its pods queue again ahead of fresh ones of the same priority.
    #[serde(default)]
    pub interrupted_count: i32,
    /// The workload (`namespace/name`) whose admission last preempted this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_preempted_by: Option<String>,
    /// When the workload was last preempted (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_at: Option<String>,
    /// When the workload's minimum gang was first admitted (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<String>,
    /// When every pod of the workload had ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// What the workload uses above its queue's quota, borrowed from the queue's cohort (the
    /// queue's borrowing is charged to its lowest-priority, newest workloads first: those that
    /// give it back first when the lenders reclaim it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed: BTreeMap<String, Quantity>,
    /// Its 1-based place in its queue's pending order, in the order admission considers it;
    /// absent when nothing of it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i32>,
    /// Since when pods of it have been waiting without a break (RFC 3339); absent when nothing
    /// waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_since: Option<String>,
    /// Why pods of it wait, short: the kind of wait and its resource (`Quota:cpu`,
    /// `Cohort:memory`, `StrictFIFO`, `Preempting`, `NeverFits:cpu`, ...); absent when nothing
    /// waits. `message` says it in full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How often its queue's `podsReadyTimeout` sent it back (its admitted pods did not all run
    /// in time): each time it waits again at the back of its priority level.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeue_count: i32,
    /// When it was last sent back (RFC 3339): its place in its priority level counts from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeued_at: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    pub name: String,
    /// Pods waiting behind the gate.
    pub pending: i32,
    /// Pods admitted and not yet running (scheduling, starting).
    pub admitted: i32,
    /// Pods running.
    pub running: i32,
    /// Pods that ended (succeeded or failed).
    pub finished: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}
