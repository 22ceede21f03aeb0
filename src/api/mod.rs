//! sluice's custom resources (group `sluice.dev`, version `v1alpha1`) and the names sluice puts on
//! other objects. This module is the single source of the CRD YAML (`sluice crds`).

// kube-derive repeats printcolumn(name, type_, json_path) once per column by design.
#![allow(clippy::duplicated_attributes)]

mod capacity_queue;
mod conditions;
mod dynamic_workload;
mod scavenger_job;
mod task;

pub use capacity_queue::{
    AdmissionTiming, CapacityQueue, CapacityQueueSpec, CapacityQueueStatus, FairSharing,
    FlavorQuota, FlavorStatus, QueuePreemption, QueueingStrategy, ReclaimWithinCohort,
    ResourceFlavor, ResourceFlavorSpec, WithinQueuePreemption,
};
pub use conditions::{Condition, ConditionStatus};
pub use dynamic_workload::{
    ApplicationEnd, DynamicWorkload, DynamicWorkloadSpec, DynamicWorkloadStatus, PodSetSpec,
    PodSetStatus, SourceRef, WorkloadPhase,
};
pub use scavenger_job::{
    ScavengerJob, ScavengerJobSpec, ScavengerJobStatus, ScavengerMount, ScavengerPhase,
    ScavengerResources,
};
pub use task::{
    ContainerExecutor, DURATION_RULE_ACCEPTS, DURATION_RULE_REFUSES, HarNameValue, HarParam,
    HarPostData, HarRequest, HttpExecutor, HttpTls, KeyReference, PodExecutor, ResourceExecutor,
    Task, TaskCluster, TaskClusterSpec, TaskClusterStatus, TaskExecutor, TaskHandle, TaskObject,
    TaskObjectSpec, TaskPhase, TaskSpec, TaskStatus, WorkflowExecutor,
};

use kube::CustomResourceExt;

/// The API group of every sluice resource.
pub const GROUP: &str = "sluice.dev";

/// The scheduling gate that holds a governed pod until its queue has room.
pub const ADMISSION_GATE: &str = "sluice.dev/admission";
/// Label: the CapacityQueue a pod (or application) is submitted to. Its presence marks a pod governed.
pub const QUEUE_LABEL: &str = "sluice.dev/queue";
/// Label on a Namespace: the CapacityQueue of its Spark and Ray applications and their pods when
/// they name none themselves.
pub const DEFAULT_QUEUE_LABEL: &str = "sluice.dev/default-queue";
/// Label: the DynamicWorkload a pod belongs to (pods sharing it form one workload).
pub const WORKLOAD_LABEL: &str = "sluice.dev/workload";
/// Label: the pod set of its workload a pod belongs to (driver, executor, head, worker group...).
pub const POD_SET_LABEL: &str = "sluice.dev/pod-set";
/// Every label sluice owns on a governed pod starts with this; only sluice may change them.
pub const PROTECTED_LABEL_PREFIX: &str = "sluice.dev/";
/// Annotation on a pod: the minimum gang of its workload (pods admitted together), default 1.
pub const MIN_COUNT_ANNOTATION: &str = "sluice.dev/min-count";
/// Annotation sluice writes when it admits a pod (RFC 3339 time), for latency accounting.
pub const ADMITTED_AT_ANNOTATION: &str = "sluice.dev/admitted-at";
/// Annotation sluice writes beside [`ADMITTED_AT_ANNOTATION`]: the replica and the leadership term
/// that admitted the pod (`<identity>@<leaseTransitions>`), so an auditor can check that each
/// admission happened inside its term and that no two terms admitted at once.
pub const ADMITTED_BY_ANNOTATION: &str = "sluice.dev/admitted-by";
/// Annotation on a pod admitted at creation (`src/queue/at_creation.rs`): the token of the room
/// held for it, until a pass sees the pod.
pub const AT_CREATION_ANNOTATION: &str = "sluice.dev/admitted-at-creation";
/// The annotations that record a pod's admission: only sluice sets them (the validating webhook
/// refuses a user's change; a pod gated at creation loses any it carries).
pub const ADMISSION_ANNOTATIONS: [&str; 6] = [
    AT_CREATION_ANNOTATION,
    ADMITTED_AT_ANNOTATION,
    ADMITTED_BY_ANNOTATION,
    FLAVOR_ANNOTATION,
    TOPOLOGY_DOMAIN_ANNOTATION,
    DATA_NODES_ANNOTATION,
];
/// Annotation sluice writes when it admits a pod whose gang asked for a topology domain: the
/// domain it was pinned to, `<node label key>=<value>` (also added to its nodeSelector). Only
/// sluice sets it, like the other admission annotations.
pub const TOPOLOGY_DOMAIN_ANNOTATION: &str = "sluice.dev/topology-domain";
/// On a workload's pods (or its pod template): keep its gang within one domain of this node
/// label (e.g. `topology.kubernetes.io/zone`), or wait.
pub const TOPOLOGY_REQUIRED_ANNOTATION: &str = "sluice.dev/topology-required";
/// As [`TOPOLOGY_REQUIRED_ANNOTATION`], but a gang that fits no single domain is admitted anyway,
/// unpinned.
pub const TOPOLOGY_PREFERRED_ANNOTATION: &str = "sluice.dev/topology-preferred";
/// On a workload's pods (or its pod template): its data is on the nodes of the pods in its own
/// namespace that this label selector matches (e.g. `app=cache`); its pods go there.
pub const DATA_PODS_ANNOTATION: &str = "sluice.dev/data-pods";
/// On a workload's pods (or its pod template): its data is on the volume bound to this
/// PersistentVolumeClaim of its own namespace; its pods go to the nodes the volume's node
/// affinity allows.
pub const DATA_CLAIM_ANNOTATION: &str = "sluice.dev/data-claim";
/// With [`DATA_PODS_ANNOTATION`] or [`DATA_CLAIM_ANNOTATION`]: `required` (the default: wait
/// until the data's nodes have room) or `preferred` (else run anywhere).
pub const DATA_LOCALITY_ANNOTATION: &str = "sluice.dev/data-locality";
/// Annotation sluice writes when it admits a pod beside its data: the `kubernetes.io/hostname`
/// values of the nodes it was pinned to, comma-separated (also in its required node affinity).
/// Only sluice sets it, like the other admission annotations.
pub const DATA_NODES_ANNOTATION: &str = "sluice.dev/data-nodes";
/// Annotation sluice writes when it admits a pod in a flavor of its queue (`spec.flavors`): the
/// flavor's name, which the pod's quota is charged to. Only sluice sets it, like the other
/// admission annotations.
pub const FLAVOR_ANNOTATION: &str = "sluice.dev/flavor";
/// In a governed Job's pod template (so on its pods): the gang fixed at submission.
pub const JOB_GANG_ANNOTATION: &str = "sluice.dev/job-gang";
/// The annotations a pod's identity is read from (its gang): fixed once the pod exists, like the
/// labels its integration joins pods by (the validating webhook refuses a change to either).
pub const IDENTITY_ANNOTATIONS: [&str; 2] = [MIN_COUNT_ANNOTATION, JOB_GANG_ANNOTATION];
/// Label on a DynamicWorkload that sluice recorded from plain pods (value `pods`): it is deleted
/// when its last pod is gone, as an application's workload goes with its application.
pub const RECORDED_FROM_LABEL: &str = "sluice.dev/recorded-from";
/// Label on a TaskCluster's worker pods: the TaskCluster's name.
pub const TASK_CLUSTER_LABEL: &str = "sluice.dev/task-cluster";
/// Label on the objects a Task's executor creates (its pod, a resource): the Task's name.
pub const TASK_LABEL: &str = "sluice.dev/task";
/// Label on a ScavengerJob's Job and pods: the ScavengerJob's name. Only sluice may set it (the
/// scavenger webhook refuses anyone else's pod or Job carrying it).
pub const SCAVENGER_JOB_LABEL: &str = "sluice.dev/scavenger-job";
/// The PriorityClass of every scavenger pod: below every ordinary pod, `preemptionPolicy: Never`.
pub const SCAVENGER_PRIORITY_CLASS: &str = "sluice-scavenger";
/// The `globalDefault` PriorityClass sluice installs for ordinary pods that name none.
pub const DEFAULT_PRIORITY_CLASS: &str = "sluice-default";
/// Field manager used for every server-side apply sluice makes.
pub const FIELD_MANAGER: &str = "sluice";

/// Every CRD sluice defines, in a stable order.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        CapacityQueue::crd(),
        ResourceFlavor::crd(),
        DynamicWorkload::crd(),
        Task::crd(),
        TaskObject::crd(),
        TaskCluster::crd(),
        ScavengerJob::crd(),
    ]
}

/// The CRDs as one multi-document YAML stream, as checked in under `manifests/crds/`.
pub fn crds_yaml() -> Result<Vec<(String, String)>, serde_norway::Error> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            serde_norway::to_string(&crd).map(|yaml| (name, yaml))
        })
        .collect()
}
