//! A pod's own node constraints (its nodeSelector and required node affinity), read once per pod
//! version, and whether a flavor's node labels satisfy them: a flavor they exclude is never
//! charged for the pod, since the pod would not run on that flavor's nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, PodSpec};

/// A pod's node constraints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    pub node_selector: BTreeMap<String, String>,
    /// `requiredDuringSchedulingIgnoredDuringExecution` terms (any one must hold); empty: none.
    pub terms: Vec<Vec<NodeSelectorRequirement>>,
}

impl Placement {
    /// The pod's constraints; None when it has none (most pods: no allocation).
    pub fn of(spec: &PodSpec) -> Option<Placement> {
        let node_selector = spec.node_selector.clone().unwrap_or_default();
        let terms: Vec<Vec<NodeSelectorRequirement>> = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|required| {
                (required.node_selector_terms.iter())
                    .map(|t| t.match_expressions.clone().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        (!node_selector.is_empty() || !terms.is_empty()).then_some(Placement {
            node_selector,
            terms,
        })
    }

    /// Whether a node carrying `labels` (a flavor's node labels; its other labels unknown) may
    /// satisfy the constraints. Only what the labels decide is judged: a requirement on a key they
    /// do not name may hold on the flavor's nodes, so it does not exclude the flavor.
    pub fn allows(&self, labels: &BTreeMap<String, String>) -> bool {
        let selector_ok = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k).is_none_or(|l| l == v));
        let affinity_ok = self.terms.is_empty()
            || self
                .terms
                .iter()
                .any(|term| term.iter().all(|r| requirement_may_hold(r, labels)));
        selector_ok && affinity_ok
    }
}

impl Placement {
    /// Whether a node with exactly these `labels` satisfies the constraints (a key the node
    /// lacks: `In`, `Exists`, `Gt`, `Lt` fail, `NotIn` and `DoesNotExist` hold).
    pub fn matches_node(&self, labels: &BTreeMap<String, String>) -> bool {
        let selector_ok = (self.node_selector.iter()).all(|(k, v)| labels.get(k) == Some(v));
        let holds = |r: &NodeSelectorRequirement| match labels.get(&r.key) {
            Some(_) => requirement_may_hold(r, labels),
            None => matches!(r.operator.as_str(), "NotIn" | "DoesNotExist"),
        };
        selector_ok
            && (self.terms.is_empty() || self.terms.iter().any(|term| term.iter().all(holds)))
    }
}

/// Whether one node selector requirement may hold on a node with `labels` (unknown keys: yes).
fn requirement_may_hold(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let Some(value) = labels.get(&r.key) else {
        // DoesNotExist / NotIn hold if the nodes lack the key; In / Exists might hold anyway
        // through the nodes' other labels: only the flavor's own labels exclude.
        return true;
    };
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => values.contains(value),
        "NotIn" => !values.contains(value),
        "Exists" => true,
        "DoesNotExist" => false,
        "Gt" => {
            matches!((number(value), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((number(value), values.first().and_then(|v| number(v))), (Some(a), Some(b)) if a < b)
        }
        // An operator the API server would have refused: it matches nothing.
        _ => false,
    }
}

/// How much of a pod's required node affinity exists: the ungate patch pinning it beside its data
/// adds only what is missing (Kubernetes lets a gated pod's required node affinity only narrow:
/// a requirement added to each existing term).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AffinityShape {
    #[default]
    NoAffinity,
    NoNodeAffinity,
    NoRequired,
    /// Its `nodeSelectorTerms`: for each, whether it has `matchExpressions` (empty: none).
    Terms(Vec<bool>),
}

impl AffinityShape {
    pub fn of(spec: &PodSpec) -> AffinityShape {
        let Some(affinity) = spec.affinity.as_ref() else {
            return AffinityShape::NoAffinity;
        };
        let Some(node) = affinity.node_affinity.as_ref() else {
            return AffinityShape::NoNodeAffinity;
        };
        let Some(required) = node
            .required_during_scheduling_ignored_during_execution
            .as_ref()
        else {
            return AffinityShape::NoRequired;
        };
        AffinityShape::Terms(
            (required.node_selector_terms.iter())
                .map(|t| t.match_expressions.is_some())
                .collect(),
        )
    }
}

/// Checks a label key's syntax: `[prefix/]name`, the prefix a DNS subdomain of at most 253
/// characters, the name at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both ends.
pub fn check_label_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(
                "its prefix must be a DNS subdomain: lower-case alphanumerics, '-' and '.'",
            );
        }
    }
    let bytes = name.as_bytes();
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !name_ok {
        return Err(
            "its name must be 1 to 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).expect("a pod spec")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_pod_without_constraints_has_no_placement() {
        assert_eq!(Placement::of(&spec(json!({"containers": []}))), None);
    }

    #[test]
    fn a_node_selector_excludes_a_flavor_with_another_value_only() {
        let p = Placement::of(&spec(
            json!({"containers": [], "nodeSelector": {"gpu": "h100"}}),
        ))
        .expect("constraints");
        assert!(!p.allows(&labels(&[("gpu", "a100")])));
        assert!(p.allows(&labels(&[("gpu", "h100"), ("pool", "x")])));
        assert!(p.allows(&labels(&[("pool", "x")])), "unknown key: may hold");
    }

    #[test]
    fn required_affinity_terms_are_ored_and_requirements_anded() {
        let p = Placement::of(&spec(
            json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["a100"]}]},
                {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"},
                                      {"key": "gpu", "operator": "In", "values": ["a100"]}]}
            ]}}}}),
        ))
        .expect("constraints");
        assert!(p.allows(&labels(&[("gpu", "h100")])));
        assert!(
            p.allows(&labels(&[("gpu", "a100")])),
            "second term may hold"
        );
        assert!(!p.allows(&labels(&[("gpu", "a100"), ("spot", "true")])));
    }

    #[test]
    fn numeric_and_unknown_operators() {
        let p = Placement::of(&spec(
            json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "mem", "operator": "Gt", "values": ["100"]}]}]}}}}),
        ))
        .expect("constraints");
        assert!(p.allows(&labels(&[("mem", "200")])));
        assert!(!p.allows(&labels(&[("mem", "50")])));
        assert!(!p.allows(&labels(&[("mem", "lots")])));
        let q = Placement {
            terms: vec![vec![NodeSelectorRequirement {
                key: "gpu".into(),
                operator: "Like".into(),
                values: None,
            }]],
            ..Placement::default()
        };
        assert!(!q.allows(&labels(&[("gpu", "a100")])));
    }

    #[test]
    fn a_real_node_lacking_a_key_fails_in_and_passes_not_in() {
        let p = Placement::of(&spec(
            json!({"containers": [], "nodeSelector": {"rack": "r1"}, "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "spot", "operator": "NotIn", "values": ["true"]},
                                      {"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}),
        ))
        .expect("constraints");
        assert!(p.matches_node(&labels(&[("rack", "r1"), ("zone", "a")])));
        assert!(!p.matches_node(&labels(&[("rack", "r1")])), "zone missing");
        assert!(!p.matches_node(&labels(&[("zone", "a")])), "rack missing");
        assert!(!p.matches_node(&labels(&[("rack", "r1"), ("zone", "a"), ("spot", "true")])));
    }
}
