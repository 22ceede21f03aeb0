//! The quota API: CapacityQueue (a pool of quota governed pods are admitted against) and
//! ResourceFlavor (where the pods charged to a flavor of a queue run).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
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
    printcolumn(
        name = "Used/Quota",
        type_ = "string",
        json_path = ".status.usageSummary",
        description = "per resource the quota names: used (admitted and reserved) / quota"
    ),
    printcolumn(
        name = "CPU-Quota",
        type_ = "string",
        json_path = ".spec.quota.cpu",
        priority = 1
    ),
    printcolumn(
        name = "CPU-Used",
        type_ = "string",
        json_path = ".status.usage.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Mem-Quota",
        type_ = "string",
        json_path = ".spec.quota.memory",
        priority = 1
    ),
    printcolumn(
        name = "Mem-Used",
        type_ = "string",
        json_path = ".status.usage.memory",
        priority = 1
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
        name = "Cohort",
        type_ = "string",
        json_path = ".spec.cohort",
        description = "The cohort whose queues share their unused quota"
    ),
    printcolumn(
        name = "CPU-Borrowed",
        type_ = "string",
        json_path = ".status.borrowed.cpu",
        description = "CPU used above the quota, borrowed from the cohort"
    ),
    printcolumn(
        name = "CPU-Lent",
        type_ = "string",
        json_path = ".status.lent.cpu",
        description = "Unused CPU of this queue that other queues of the cohort use",
        priority = 1
    ),
    printcolumn(
        name = "Preemption",
        type_ = "string",
        json_path = ".spec.preemption.withinQueue",
        description = "Whether higher priority may evict lower priority in the queue (empty: LowerPriority)",
        priority = 1
    ),
    printcolumn(
        name = "Max-Priority",
        type_ = "integer",
        json_path = ".spec.preemption.maxPriority",
        description = "The highest pod priority the queue accepts (empty: no cap)",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.quota) && self.quota.size() > 0) || (has(self.flavors) && self.flavors.size() > 0)").message("quota must name at least one resource, e.g. {cpu: \"4\", memory: 8Gi} (or give the queue flavors)"))]
#[x_kube(validation = Rule::new("!has(self.flavors) || self.flavors.size() == 0 || ((!has(self.quota) || self.quota.size() == 0) && (!has(self.borrowingLimit) || self.borrowingLimit.size() == 0) && (!has(self.lendingLimit) || self.lendingLimit.size() == 0))").message("a queue with flavors sets its quota, borrowingLimit and lendingLimit per flavor: leave spec.quota, spec.borrowingLimit and spec.lendingLimit empty"))]
pub struct CapacityQueueSpec {
    /// The most this queue's admitted pods may request together, per resource (cpu, memory,
    /// nvidia.com/gpu, pods, any extended resource). Resources not named here are not limited.
    /// Empty when the queue has `flavors`.
    #[serde(default)]
    pub quota: BTreeMap<String, Quantity>,

    /// The queue's quota per ResourceFlavor, tried in this order: a gang (or a later pod of a
    /// running workload, its pod set's flavor first) is admitted whole in the first flavor
    /// where it fits, then pinned to the flavor's nodes (its node labels and tolerations are
    /// added to the pod as its gate is removed). A flavor whose ResourceFlavor does not exist
    /// admits nothing. Absent: `quota` is the queue's one quota, which pins nothing.
    /// Each flavor appears once (a list keyed by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub flavors: Vec<FlavorQuota>,

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

    /// Whether waiting work of higher priority may take quota back from admitted work of lower
    /// priority in this queue, and the highest priority a pod of this queue may have. Absent: the
    /// defaults (withinQueue LowerPriority, no cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<QueuePreemption>,

    /// The cohort this queue belongs to: queues naming the same cohort lend each other their
    /// unused quota (see `borrowingLimit`, `lendingLimit`, `preemption.reclaimWithinCohort`,
    /// `fairSharing`). Absent: the queue shares nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.size() <= 63 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("cohort must be a DNS label: lower-case letters, digits and '-', at most 63 characters"))]
    pub cohort: Option<String>,

    /// Per resource, how much more than its quota this queue may use from its cohort. A
    /// resource not named: no limit (up to what the cohort lends). Only resources the quota names
    /// are ever borrowed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowing_limit: BTreeMap<String, Quantity>,

    /// Per resource, how much of its unused quota this queue lends to its cohort; the rest is
    /// kept for its own work whatever the others do. A resource not named: all of it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lending_limit: BTreeMap<String, Quantity>,

    /// This queue's weight when several queues of the cohort wait for borrowed room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,

    /// How long an admitted workload may hold quota while some of its admitted pods are not
    /// running (e.g. a node selector no node has), as `90s`, `5m`, `1h`. Past it, its admitted pods
    /// are evicted (an owner such as a Job recreates them, gated), it goes to the back of its
    /// priority level, and its DynamicWorkload says why (condition `Requeued`). Absent: forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_ready_timeout: Option<String>,

    /// How many times `podsReadyTimeout` may send a workload back: once more and it is marked
    /// Failed, and none of its pods is admitted again. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("requeueLimit must be 0 or more"))]
    pub requeue_limit: Option<i32>,

    /// The most this queue's ScavengerJobs (those naming it in `spec.queueName`) may request
    /// together while they run on idle capacity, per resource. A ScavengerJob naming a queue
    /// without it never starts: nobody escapes their quota by turning work into ScavengerJobs.
    /// Resources not named here are not limited beyond the cluster's scavenger capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scavenger_quota: Option<BTreeMap<String, Quantity>>,
}

/// A queue's quota in one flavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuota {
    /// The ResourceFlavor's name (a DNS subdomain).
    #[schemars(
        length(max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub name: String,
    /// The most the queue's pods admitted in this flavor may request together, per resource.
    /// Resources not named here are not limited in this flavor.
    #[schemars(length(min = 1))]
    pub quota: BTreeMap<String, Quantity>,
    /// As the queue's `borrowingLimit`, in this flavor (its cohort lends per flavor).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowing_limit: BTreeMap<String, Quantity>,
    /// As the queue's `lendingLimit`, in this flavor.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lending_limit: BTreeMap<String, Quantity>,
}

/// What a queue holds in one flavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorStatus {
    pub name: String,
    /// Requests of the pods admitted in this flavor that have not finished.
    #[serde(default)]
    pub usage: BTreeMap<String, Quantity>,
    /// Quota held in this flavor for gang members not created yet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reserved: BTreeMap<String, Quantity>,
}

/// A queue's weight in its cohort's fair sharing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    /// A queue's share is what it uses above its quota (its dominant resource, as a fraction of
    /// what the cohort lends) divided by its weight: among queues waiting for borrowed room, the
    /// least share goes first. Default 1; 0: it borrows only when no other queue waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
}

impl CapacityQueueSpec {
    /// The queue's preemption settings, defaults filled in when it names none.
    pub fn preemption(&self) -> QueuePreemption {
        self.preemption.clone().unwrap_or_default()
    }
}

/// How a queue's waiting work may take quota back from its admitted work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueuePreemption {
    /// LowerPriority (the default): a waiting workload that does not fit may evict admitted
    /// workloads of lower priority in this queue (elastic pods above a workload's minimum first,
    /// then whole workloads, lowest priority and newest first, never more than needed, through
    /// the Eviction API so PodDisruptionBudgets hold). Equal priority never preempts. Never:
    /// higher priority only goes first in line; nothing admitted is ever evicted.
    #[serde(default)]
    pub within_queue: WithinQueuePreemption,

    /// The highest `spec.priority` (from its PriorityClass) a pod of this queue may have: a pod
    /// above it is refused when it is created, with a message. A pod's PriorityClass is its
    /// owner's choice, and priority decides who may evict whom: this caps it. Absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,

    /// Whether waiting work of this queue that fits its own quota may take it back from other
    /// queues of the cohort that borrowed it: Any (the default): from any workload running on
    /// borrowed quota; LowerPriority: only from those of lower priority; Never: it waits until
    /// the borrowers finish. Only workloads running above their own queue's quota are evicted.
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum ReclaimWithinCohort {
    /// Borrowed quota is never taken back by eviction.
    Never,
    /// Only workloads of lower priority running on borrowed quota are evicted.
    LowerPriority,
    /// Any workload running on borrowed quota may be evicted.
    #[default]
    Any,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub enum WithinQueuePreemption {
    /// Nothing admitted in the queue is ever evicted for waiting work.
    Never,
    /// Waiting work may evict admitted work of strictly lower priority in the same queue.
    #[default]
    LowerPriority,
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
    /// What the queue uses above its quota, borrowed from its cohort.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed: BTreeMap<String, Quantity>,
    /// What other queues of the cohort use of this queue's unused quota (the cohort's borrowing
    /// spread over its lenders in proportion to what each has unused).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lent: BTreeMap<String, Quantity>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// A queue with flavors: what it holds per flavor, in the queue's order (`usage`,
    /// `reserved`, `borrowed` and `lent` above name each resource `<flavor>:<resource>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<FlavorStatus>,
    /// Per resource the quota names, in the quota's order: used and reserved / quota, e.g.
    /// `cpu=3/4 memory=1Gi/8Gi` (the `Used/Quota` column of `kubectl get cq`); with flavors,
    /// per flavor and resource, e.g. `a100:nvidia.com/gpu=8/8 h100:nvidia.com/gpu=2/8`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub usage_summary: String,
}

// ---------------------------------------------------------------------------------------------
// ResourceFlavor: where the pods charged to a flavor of a queue run.

/// Where pods charged to a flavor run: a named set of node labels and tolerations (a GPU type,
/// spot or on-demand capacity, a zone). Cluster-scoped and owned by the cluster's administrators;
/// CapacityQueues give it quota in `spec.flavors`. sluice adds the labels to a pod's
/// `spec.nodeSelector` and the tolerations to its `spec.tolerations` as it admits the pod in
/// the flavor, so the pod runs only on the flavor's nodes.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "ResourceFlavor",
    plural = "resourceflavors",
    shortname = "rf",
    category = "sluice",
    derive = "PartialEq",
    derive = "Default",
    doc = "A ResourceFlavor names where pods charged to it run: node labels and tolerations sluice pins them with.",
    printcolumn(
        name = "Node-Labels",
        type_ = "string",
        json_path = ".spec.nodeLabels",
        description = "the labels a pod admitted in this flavor is pinned to"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Node labels of the flavor's nodes (e.g. `nvidia.com/gpu.product: A100`): added to the
    /// `spec.nodeSelector` of every pod admitted in the flavor. A pod whose own nodeSelector or
    /// required node affinity excludes them is never admitted in the flavor. Empty: the flavor
    /// pins nothing (its pods run on any node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(length(max = 8))]
    pub node_labels: BTreeMap<String, String>,

    /// Tolerations added to every pod admitted in the flavor (for the taints of its nodes, e.g.
    /// spot capacity).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub tolerations: Vec<Toleration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> CapacityQueueSpec {
        serde_json::from_value(json).expect("spec")
    }

    #[test]
    fn a_queue_without_preemption_lets_lower_priority_be_preempted_and_caps_nothing() {
        let old = spec(serde_json::json!({"quota": {"cpu": "4"}}));
        assert_eq!(old.preemption, None);
        assert_eq!(
            old.preemption(),
            QueuePreemption {
                within_queue: WithinQueuePreemption::LowerPriority,
                max_priority: None,
                reclaim_within_cohort: ReclaimWithinCohort::Any,
            }
        );
        let empty = spec(serde_json::json!({"quota": {"cpu": "4"}, "preemption": {}}));
        assert_eq!(empty.preemption(), old.preemption());
        let set = spec(serde_json::json!({"quota": {"cpu": "4"},
            "preemption": {"withinQueue": "Never", "maxPriority": 1000}}));
        assert_eq!(
            set.preemption(),
            QueuePreemption {
                within_queue: WithinQueuePreemption::Never,
                max_priority: Some(1000),
                reclaim_within_cohort: ReclaimWithinCohort::Any,
            }
        );
        assert!(
            serde_json::from_value::<CapacityQueueSpec>(serde_json::json!({"quota": {"cpu": "4"},
                "preemption": {"withinQueue": "Always"}}))
            .is_err()
        );
    }
}
