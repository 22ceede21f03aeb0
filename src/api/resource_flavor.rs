use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

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
