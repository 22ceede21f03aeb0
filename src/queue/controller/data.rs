//! Data locality's I/O: before a pass in which a gated pod asks for its data's nodes
//! (`sluice.dev/data-pods` / `-claim`, see `src/queue/data_locality.rs`), each distinct
//! (namespace, ask) is looked up once: the pods of that namespace its selector matches, or its
//! claim and the volume bound to it. Only the asking pod's own namespace is read: a selector or
//! a claim name cannot reach another tenant's pods or claims, and a volume counts only when its
//! `claimRef` names that very claim.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tracing::debug;

use super::Controller;
use crate::queue::data_locality::{DataNodes, DataSource, nodes_allowed};

/// At most this many pods of one selector are read (the nodes of the first ones found).
const MAX_DATA_PODS: u32 = 1000;

/// Each (namespace, data ask) of the gated pods, and where its data was found.
pub(super) type DataMap = HashMap<(String, DataSource), DataNodes>;

impl Controller {
    /// Looks up where the data of every gated pod's ask is, for the next pass (nothing when no
    /// gated pod asks). Each lookup is bounded by the API timeout; one that fails finds nothing
    /// (a required ask waits, saying why).
    pub(super) async fn find_data(&mut self) {
        let asks: BTreeSet<(String, DataSource)> = (self.stores.pods)
            .pick(|p| {
                p.admission_gate.as_ref()?;
                let data = p.facts.as_deref()?.topology.as_deref()?.data.as_ref()?;
                Some((p.namespace()?.to_string(), data.source.clone()))
            })
            .into_iter()
            .collect();
        self.data.clear();
        if asks.is_empty() {
            return;
        }
        let nodes = self.stores.nodes.state();
        let client = self.ungater.client.clone();
        for (namespace, source) in asks {
            let lookup = find(&client, &namespace, &source, &nodes);
            let found = tokio::time::timeout(self.settings.api_timeout, lookup)
                .await
                .unwrap_or_else(|_| DataNodes::none("the API server did not answer in time"));
            debug!(%namespace, %source, nodes = found.nodes.len(), missing = ?found.missing, "data nodes");
            self.data.insert((namespace, source), found);
        }
    }
}

async fn find(
    client: &Client,
    namespace: &str,
    source: &DataSource,
    nodes: &[Arc<Node>],
) -> DataNodes {
    match source {
        DataSource::Pods(selector) => pods_nodes(client, namespace, selector).await,
        DataSource::Claim(claim) => claim_nodes(client, namespace, claim, nodes).await,
    }
}

/// The nodes of the pods of `namespace` that `selector` matches, bound, not terminating and not
/// ended.
async fn pods_nodes(client: &Client, namespace: &str, selector: &str) -> DataNodes {
    let params = ListParams::default().labels(selector).limit(MAX_DATA_PODS);
    let pods = match Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&params)
        .await
    {
        Ok(pods) => pods,
        Err(e) => return DataNodes::none(format!("its pods could not be listed: {e}")),
    };
    let nodes: BTreeSet<String> = (pods.items.iter())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    if nodes.is_empty() {
        return DataNodes::none(format!(
            "no pod of namespace {namespace} that matches it runs on a node"
        ));
    }
    DataNodes {
        nodes,
        missing: None,
    }
}

/// The nodes the node affinity of the volume bound to `claim` (of `namespace`) allows.
async fn claim_nodes(
    client: &Client,
    namespace: &str,
    claim: &str,
    nodes: &[Arc<Node>],
) -> DataNodes {
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
    let pvc = match claims.get_opt(claim).await {
        Ok(Some(pvc)) => pvc,
        Ok(None) => {
            return DataNodes::none(format!(
                "no PersistentVolumeClaim {claim} in namespace {namespace}"
            ));
        }
        Err(e) => return DataNodes::none(format!("the claim could not be read: {e}")),
    };
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(volume) = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|_| bound)
    else {
        return DataNodes::none("the claim is not bound to a volume yet");
    };
    let pv = match Api::<PersistentVolume>::all(client.clone())
        .get_opt(&volume)
        .await
    {
        Ok(Some(pv)) => pv,
        Ok(None) => return DataNodes::none(format!("its volume {volume} does not exist")),
        Err(e) => return DataNodes::none(format!("its volume {volume} could not be read: {e}")),
    };
    let spec = pv.spec.as_ref();
    // The volume must be bound to this very claim: a claim naming another tenant's volume
    // (spec.volumeName) learns nothing of where it is.
    let claimed = spec.and_then(|s| s.claim_ref.as_ref()).is_some_and(|r| {
        r.namespace.as_deref() == Some(namespace)
            && r.name.as_deref() == Some(claim)
            && r.uid
                .as_ref()
                .is_none_or(|uid| pvc.uid().as_ref() == Some(uid))
    });
    if !claimed {
        return DataNodes::none(format!("its volume {volume} is not bound to it"));
    }
    let terms = (spec.and_then(|s| s.node_affinity.as_ref()))
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    if terms.is_empty() {
        return DataNodes::none(format!(
            "its volume {volume} has no node affinity: it says nothing of where its data is"
        ));
    }
    let allowed = nodes_allowed(terms, nodes);
    if allowed.is_empty() {
        return DataNodes::none(format!(
            "no node matches the node affinity of its volume {volume}"
        ));
    }
    DataNodes {
        nodes: allowed,
        missing: None,
    }
}
