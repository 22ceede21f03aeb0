//! What the ungate patch pins an admitted pod to: its flavor's node labels and tolerations, its
//! topology domain (nodeSelector), its data's nodes (required node affinity on
//! `kubernetes.io/hostname`). Kubernetes lets a gated pod's scheduling directives only narrow:
//! nodeSelector entries and tolerations added, a requirement added to each existing term of its
//! required node affinity (or the affinity set when it has none).

use serde_json::json;

use crate::queue::admission::FlavorSnapshot;
use crate::queue::placement::AffinityShape;
use crate::queue::pod_cache::CachedPod;

/// Where an admitted pod is pinned: its flavor, and the topology domain of its gang
/// (`<key>=<value>`, see `src/queue/topology.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pin<'a> {
    pub flavor: Option<&'a FlavorSnapshot>,
    pub domain: Option<&'a str>,
    /// The hostnames of its data's nodes, comma-separated (see `src/queue/data_locality.rs`).
    pub data_nodes: Option<&'a str>,
}

/// The operations that pin a gated pod to its flavor's nodes and its topology domain: the
/// flavor's node labels and the domain's label added to its nodeSelector, the flavor's
/// tolerations to the pod's.
pub(super) fn pin_to_nodes(pod: &CachedPod, pin: Pin<'_>, ops: &mut Vec<serde_json::Value>) {
    let facts = pod.facts.as_deref();
    let mut selector = pin
        .flavor
        .map(|f| f.node_labels.clone())
        .unwrap_or_default();
    if let Some((key, value)) = pin.domain.and_then(crate::queue::topology::split_domain) {
        selector.insert(key.to_string(), value.to_string());
    }
    if !selector.is_empty() {
        if facts.is_some_and(|f| f.has_node_selector) {
            for (key, value) in &selector {
                let path = format!("/spec/nodeSelector/{}", pointer_escape(key));
                ops.push(json!({"op": "add", "path": path, "value": value}));
            }
        } else {
            ops.push(json!({"op": "add", "path": "/spec/nodeSelector", "value": selector}));
        }
    }
    if let Some(nodes) = pin.data_nodes {
        pin_to_hosts(facts.map(|f| &f.affinity), nodes, ops);
    }
    let Some(flavor) = pin.flavor else {
        return;
    };
    if !flavor.tolerations.is_empty() {
        if facts.is_some_and(|f| f.has_tolerations) {
            for toleration in &flavor.tolerations {
                ops.push(json!({"op": "add", "path": "/spec/tolerations/-", "value": toleration}));
            }
        } else {
            ops.push(
                json!({"op": "add", "path": "/spec/tolerations", "value": flavor.tolerations}),
            );
        }
    }
}

/// The operations that pin a gated pod to its data's nodes: `kubernetes.io/hostname In
/// [hosts]` added to each term of its required node affinity (Kubernetes lets a gated pod's
/// terms only gain requirements), or a required node affinity of that one term set.
fn pin_to_hosts(shape: Option<&AffinityShape>, hosts: &str, ops: &mut Vec<serde_json::Value>) {
    let hosts: Vec<&str> = crate::queue::data_locality::split_nodes(hosts).collect();
    let requirement = json!({"key": crate::queue::data_locality::HOSTNAME_LABEL, "operator": "In", "values": hosts});
    let terms = json!([{"matchExpressions": [requirement]}]);
    let required = json!({"nodeSelectorTerms": terms});
    let base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution";
    match shape.unwrap_or(&AffinityShape::NoAffinity) {
        AffinityShape::NoAffinity => ops.push(json!({"op": "add", "path": "/spec/affinity",
            "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}})),
        AffinityShape::NoNodeAffinity => ops.push(json!({"op": "add", "path": "/spec/affinity/nodeAffinity",
            "value": {"requiredDuringSchedulingIgnoredDuringExecution": required}})),
        AffinityShape::NoRequired => {
            ops.push(json!({"op": "add", "path": base, "value": required}));
        }
        AffinityShape::Terms(terms_have) if terms_have.is_empty() => {
            ops.push(json!({"op": "add", "path": format!("{base}/nodeSelectorTerms"), "value": terms}));
        }
        AffinityShape::Terms(terms_have) => {
            for (i, has) in terms_have.iter().enumerate() {
                let path = format!("{base}/nodeSelectorTerms/{i}/matchExpressions");
                if *has {
                    ops.push(json!({"op": "add", "path": format!("{path}/-"), "value": requirement}));
                } else {
                    ops.push(json!({"op": "add", "path": path, "value": [requirement]}));
                }
            }
        }
    }
}

/// A JSON pointer token (RFC 6901): `~` and `/` escaped.
fn pointer_escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ADMISSION_GATE;
    use crate::queue::pod_cache::CachedPod;

    fn gated_pod_json() -> serde_json::Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-a"},
            "spec": {"containers": [], "schedulingGates": [{"name": ADMISSION_GATE}]},
        })
    }

    #[test]
    fn the_ungate_patch_pins_the_pod_to_its_data_s_nodes_in_every_term() {
        let host =
            json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]});
        let own = json!({"key": "disk", "operator": "In", "values": ["ssd"]});
        let name = json!({"key": "metadata.name", "operator": "In", "values": ["n2"]});
        let required = |terms| json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}});
        let anti = json!({"podAntiAffinity": {}});
        let preferred =
            json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}});
        for (affinity, want) in [
            (None, required(json!([{"matchExpressions": [host]}]))),
            (Some(anti.clone()), {
                let mut want = required(json!([{"matchExpressions": [host]}]));
                want["podAntiAffinity"] = json!({});
                want
            }),
            (Some(preferred.clone()), {
                let mut want = required(json!([{"matchExpressions": [host]}]));
                want["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([]);
                want
            }),
            (
                Some(required(json!([]))),
                required(json!([{"matchExpressions": [host]}])),
            ),
            (
                Some(required(
                    json!([{"matchExpressions": [own]}, {"matchFields": [name]}]),
                )),
                required(json!([{"matchExpressions": [own, host]},
                                {"matchFields": [name], "matchExpressions": [host]}])),
            ),
        ] {
            let mut pod = gated_pod_json();
            pod["metadata"]["labels"] = json!({"sluice.dev/queue": "q"});
            if let Some(affinity) = &affinity {
                pod["spec"]["affinity"] = affinity.clone();
            }
            let cached: CachedPod = serde_json::from_value(pod.clone()).expect("pod");
            let pin = Pin {
                data_nodes: Some("n1,n2"),
                ..Pin::default()
            };
            let patch = super::super::ungate::ungate_patch_pinned(&cached, "t", "r1@3", pin)
                .expect("patch");
            json_patch::patch(&mut pod, &patch).expect("the patch applies");
            assert_eq!(pod["spec"]["affinity"], want, "from {affinity:?}");
            assert_eq!(
                pod["metadata"]["annotations"]["sluice.dev/data-nodes"],
                "n1,n2"
            );
        }
    }
}
