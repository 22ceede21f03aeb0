// kube-derive repeats printcolumn(name, type_, json_path) once per column by design.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::Condition;

/// A pool of quota that governed pods are admitted against.
///
/// A pod submitted to the queue stays gated until the queue's usage plus reservations plus the pod's
/// requests fit in `quota` for every resource the quota names.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "CapacityQueue",
    plural = "capacityqueues",
    shortname = "cq",
    category = "sluice",
    status = "CapacityQueueStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A CapacityQueue is a pool of quota that sluice admits governed pods against, in priority order.",
    printcolumn(name = "CPU-Quota", type_ = "string", json_path = ".spec.quota.cpu"),
    printcolumn(name = "CPU-Used", type_ = "string", json_path = ".status.usage.cpu"),
    printcolumn(name = "Mem-Quota", type_ = "string", json_path = ".spec.quota.memory"),
    printcolumn(
        name = "Mem-Used",
        type_ = "string",
        json_path = ".status.usage.memory"
    ),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        json_path = ".status.pendingWorkloads",
        description = "Workloads with pods waiting for quota"
    ),
    printcolumn(
        name = "Admitted",
        type_ = "integer",
        json_path = ".status.admittedWorkloads",
        description = "Workloads holding quota"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityQueueSpec {
    /// The most this queue's admitted pods may request together, per resource (cpu, memory,
    /// nvidia.com/gpu, pods, any extended resource). Resources not named here are not limited.
    #[x_kube(validation = Rule::new("self.size() > 0").message("quota must name at least one resource, e.g. {cpu: \"4\", memory: 8Gi}"))]
    pub quota: BTreeMap<String, Quantity>,

    /// Which namespaces may submit to this queue. Absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// How the queue orders waiting work: StrictFIFO stops at the first item that does not fit;
    /// BestEffortFIFO (the default) lets smaller items behind it go first.
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,

    /// When a pod that fits is admitted. AtCreation (the default): as it is created, with no gate
    /// at all, when the queue has room for it and nothing waits in the queue; otherwise it waits
    /// behind the gate. InPass: every pod is gated and admitted by the controller's next pass.
    #[serde(default)]
    pub admission: AdmissionTiming,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum AdmissionTiming {
    /// A pod that fits, in a queue where nothing waits, is admitted as it is created (no gate).
    #[default]
    AtCreation,
    /// Every pod is gated and admitted by the controller's next pass.
    InPass,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum QueueingStrategy {
    /// Waiting work is admitted strictly in order: nothing passes an item that does not fit.
    StrictFIFO,
    /// Waiting work is admitted in order, but an item that does not fit lets later ones that do fit go.
    #[default]
    BestEffortFIFO,
}

/// What the queue holds and what waits, as the controller last computed it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityQueueStatus {
    /// Requests of admitted pods that have not finished.
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
    /// Quota held for gang members of admitted workloads that do not exist (or run) yet.
    #[serde(default)]
    pub reserved: BTreeMap<String, Quantity>,
    /// Workloads with at least one pod waiting for quota.
    #[serde(default)]
    pub pending_workloads: i32,
    /// Workloads holding quota (admitted pods or reservations).
    #[serde(default)]
    pub admitted_workloads: i32,
    /// Pods waiting behind the gate.
    #[serde(default)]
    pub pending_pods: i32,
    /// Admitted pods that have not finished.
    #[serde(default)]
    pub admitted_pods: i32,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
