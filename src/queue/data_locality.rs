//! Data locality (seed 003): a workload may say where its data is, and its pods are admitted
//! onto those nodes. On its pods (or pod templates):
//!
//! - `sluice.dev/data-pods: <label selector>`: the nodes of the pods of its own namespace the
//!   selector matches (bound, not terminating, not ended), e.g. a local-volume cache;
//! - `sluice.dev/data-claim: <PersistentVolumeClaim>`: the nodes the node affinity of the volume
//!   bound to that claim of its own namespace allows (a local PersistentVolume);
//! - `sluice.dev/data-locality: required` (default: wait until the data's nodes have room) or
//!   `preferred` (else admitted as if it had not asked).
//!
//! Pure: the controller resolves each ask to node names ([`DataNodes`], `controller/data.rs`);
//! the admission pass narrows the nodes a gang may be placed on to them
//! (`admission/topology.rs`), and the ungate patch pins the pods by required node affinity on
//! `kubernetes.io/hostname` (recorded in `sluice.dev/data-nodes`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm};

use crate::api::{DATA_CLAIM_ANNOTATION, DATA_LOCALITY_ANNOTATION, DATA_PODS_ANNOTATION};
use crate::queue::placement::{Placement, check_label_key};

/// The node label the pods are pinned by: its values name the nodes for the scheduler.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Where a workload's data is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataSource {
    /// A label selector of pods in the workload's namespace (checked by [`check_selector`]).
    Pods(String),
    /// A PersistentVolumeClaim of the workload's namespace.
    Claim(String),
}

impl std::fmt::Display for DataSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataSource::Pods(selector) => write!(f, "pods {selector}"),
            DataSource::Claim(claim) => write!(f, "claim {claim}"),
        }
    }
}

/// What a pod asks: to run where its data is (`required`) or there when there is room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataAsk {
    pub source: DataSource,
    pub required: bool,
}

impl DataAsk {
    /// The ask a pod's annotations make. Err: a malformed ask; the message says what to set.
    pub fn of(annotations: Option<&BTreeMap<String, String>>) -> Result<Option<DataAsk>, String> {
        let Some(annotations) = annotations else {
            return Ok(None);
        };
        let pods = annotations.get(DATA_PODS_ANNOTATION).map(|s| s.trim());
        let claim = annotations.get(DATA_CLAIM_ANNOTATION).map(|s| s.trim());
        let locality = annotations.get(DATA_LOCALITY_ANNOTATION).map(|s| s.trim());
        let source = match (pods, claim) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "annotations {DATA_PODS_ANNOTATION} and {DATA_CLAIM_ANNOTATION} are both set; set one of them: where the workload's data is"
                ));
            }
            (Some(selector), None) => {
                check_selector(selector).map_err(|why| {
                    format!(
                        "annotation {DATA_PODS_ANNOTATION}: {selector:?} is not a label selector ({why}); set it to the labels of the pods (in this namespace) whose nodes hold the data, e.g. app=cache"
                    )
                })?;
                DataSource::Pods(selector.to_string())
            }
            (None, Some(claim)) => {
                check_claim_name(claim).map_err(|why| {
                    format!(
                        "annotation {DATA_CLAIM_ANNOTATION}: {claim:?} is not a PersistentVolumeClaim name ({why}); set it to the name of a claim in this namespace whose volume has node affinity"
                    )
                })?;
                DataSource::Claim(claim.to_string())
            }
            (None, None) => {
                return match locality {
                    Some(_) => Err(format!(
                        "annotation {DATA_LOCALITY_ANNOTATION} is set but neither {DATA_PODS_ANNOTATION} nor {DATA_CLAIM_ANNOTATION}: set one of them to say where the data is, or remove it"
                    )),
                    None => Ok(None),
                };
            }
        };
        let required = match locality {
            None | Some("required") => true,
            Some("preferred") => false,
            Some(other) => {
                return Err(format!(
                    "annotation {DATA_LOCALITY_ANNOTATION}: {other:?} is neither required nor preferred; set it to required (wait for room beside the data) or preferred (else run anywhere)"
                ));
            }
        };
        Ok(Some(DataAsk { source, required }))
    }
}

/// Checks a label selector's syntax (as `kubectl get -l` takes it): comma-separated
/// requirements `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)`,
/// `key notin (v1,v2)`; keys label keys, values label values; not empty.
pub fn check_selector(selector: &str) -> Result<(), String> {
    if selector.is_empty() {
        return Err("it is empty, which would match every pod".into());
    }
    if selector.len() > 1024 {
        return Err("it is longer than 1024 characters".into());
    }
    for term in split_terms(selector)? {
        check_requirement(term.trim())?;
    }
    Ok(())
}

/// The selector's requirements: split at the commas outside parentheses.
fn split_terms(selector: &str) -> Result<Vec<&str>, String> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0u8, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            ')' if depth == 1 => depth = 0,
            '(' | ')' => return Err("its parentheses do not pair".into()),
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("its parentheses do not pair".into());
    }
    terms.push(&selector[start..]);
    Ok(terms)
}

fn check_requirement(term: &str) -> Result<(), String> {
    let key_ok =
        |key: &str| check_label_key(key.trim()).map_err(|why| format!("{:?}: {why}", key.trim()));
    if term.is_empty() {
        return Err("a requirement is empty".into());
    }
    if let Some(key) = term.strip_prefix('!') {
        return key_ok(key);
    }
    for op in ["!=", "==", "="] {
        if let Some((key, value)) = term.split_once(op) {
            key_ok(key)?;
            return check_label_value(value.trim());
        }
    }
    for op in [" notin ", " in "] {
        if let Some((key, values)) = term.split_once(op) {
            key_ok(key)?;
            let values = values.trim();
            let inner = (values.strip_prefix('(').and_then(|v| v.strip_suffix(')')))
                .ok_or_else(|| format!("{term:?}: the values of in/notin go in parentheses"))?;
            for value in inner.split(',') {
                check_label_value(value.trim())?;
            }
            return Ok(());
        }
    }
    key_ok(term)
}

/// A label value: at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both ends (or empty).
fn check_label_value(value: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let ok = value.is_empty()
        || (value.len() <= 63
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
            && (bytes.iter())
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a label value: at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends"
        ))
    }
}

/// A claim's name: a DNS subdomain (lower-case alphanumerics, `-` and `.`, at most 253).
fn check_claim_name(name: &str) -> Result<(), &'static str> {
    let bytes = name.as_bytes();
    let ok = !name.is_empty()
        && name.len() <= 253
        && bytes
            .first()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && (bytes.iter())
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.".contains(b));
    if ok {
        Ok(())
    } else {
        Err(
            "a name is lower-case alphanumerics, '-' and '.', at most 253, alphanumeric at both ends",
        )
    }
}

/// Where one ask's data was found: the names of the nodes (empty: none, `missing` says why).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataNodes {
    pub nodes: BTreeSet<String>,
    pub missing: Option<String>,
}

impl DataNodes {
    pub fn none(why: impl Into<String>) -> DataNodes {
        DataNodes {
            nodes: BTreeSet::new(),
            missing: Some(why.into()),
        }
    }
}

/// The nodes a volume's node affinity (`spec.nodeAffinity.required.nodeSelectorTerms`, any one
/// term) allows: a term's `matchExpressions` on the node's labels and `matchFields` on its name
/// all hold. No terms: no node (a volume without node affinity says nothing about where it is).
pub fn nodes_allowed(
    terms: &[NodeSelectorTerm],
    nodes: &[std::sync::Arc<Node>],
) -> BTreeSet<String> {
    let term_holds = |term: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>| {
        let expressions = Placement {
            node_selector: BTreeMap::new(),
            terms: vec![term.match_expressions.clone().unwrap_or_default()],
        };
        let fields_hold = (term.match_fields.iter().flatten()).all(|f| {
            let values = f.values.as_deref().unwrap_or_default();
            f.key == "metadata.name"
                && match f.operator.as_str() {
                    "In" => values.iter().any(|v| v == name),
                    "NotIn" => !values.iter().any(|v| v == name),
                    _ => false,
                }
        });
        let empty = term.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && term.match_fields.as_ref().is_none_or(Vec::is_empty);
        // An empty term matches no node (as the scheduler reads it).
        !empty && fields_hold && expressions.matches_node(labels)
    };
    let mut allowed = BTreeSet::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if terms.iter().any(|t| term_holds(t, name, &labels)) {
            allowed.insert(name.to_string());
        }
    }
    allowed
}

/// The value of `sluice.dev/data-nodes`: hostnames, comma-separated.
pub fn nodes_annotation<'a>(hostnames: impl IntoIterator<Item = &'a str>) -> String {
    hostnames.into_iter().collect::<Vec<_>>().join(",")
}

/// The hostnames a `sluice.dev/data-nodes` annotation names.
pub fn split_nodes(annotation: &str) -> impl Iterator<Item = &str> {
    annotation
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
}

#[cfg(test)]
#[path = "data_locality_tests.rs"]
mod tests;
