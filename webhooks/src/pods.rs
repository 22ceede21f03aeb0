//! The pod webhooks' decisions, as pure functions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// Tells sluice's governed pods from the rest (implemented by the root crate's adapters).
pub trait PodClassifier: Send + Sync + 'static {
    /// The labels sluice keeps on a pod it governs, or None when the pod is not sluice's business.
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>>;
}

/// What the pod webhooks protect and who may change it.
#[derive(Clone, Debug)]
pub struct GateSettings {
    /// The scheduling gate sluice adds, e.g. `sluice.dev/admission`.
    pub gate_name: String,
    /// Labels under this prefix belong to sluice, e.g. `sluice.dev/`.
    pub protected_label_prefix: String,
    /// A pod carrying this label is governed, e.g. `sluice.dev/queue`.
    pub governed_label: String,
    /// Who may remove the gate and edit protected labels: sluice's own identity.
    pub controller_usernames: Vec<String>,
}

/// Escapes a map key for a JSON pointer (RFC 6901).
fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch operations that gate a governed pod and set sluice's labels; empty when the pod
/// already has both.
pub fn mutation_ops(pod: &Pod, labels: &BTreeMap<String, String>, gate_name: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    let gates = pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref());
    match gates {
        None => ops.push(
            json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": gate_name}]}),
        ),
        Some(g) if g.iter().any(|g| g.name == gate_name) => {}
        Some(_) => ops.push(
            json!({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": gate_name}}),
        ),
    }
    match pod.metadata.labels.as_ref() {
        None => {
            if !labels.is_empty() {
                ops.push(json!({"op": "add", "path": "/metadata/labels", "value": labels}));
            }
        }
        Some(existing) => {
            for (key, value) in labels {
                if existing.get(key) != Some(value) {
                    // "add" replaces an existing member, so one operation covers both cases.
                    ops.push(json!({"op": "add", "path": format!("/metadata/labels/{}", pointer_escape(key)), "value": value}));
                }
            }
        }
    }
    ops
}

fn has_gate(pod: &Pod, gate: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == gate))
}

fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// Checks an update of a pod. Err carries the message for the user.
pub fn validate_update(
    old: &Pod,
    new: &Pod,
    username: &str,
    settings: &GateSettings,
) -> Result<(), String> {
    let (old_labels, new_labels) = (labels(old), labels(new));
    let governed = old_labels.contains_key(&settings.governed_label)
        || new_labels.contains_key(&settings.governed_label);
    if !governed || settings.controller_usernames.iter().any(|u| u == username) {
        return Ok(());
    }
    let namespace = new
        .metadata
        .namespace
        .as_deref()
        .or(old.metadata.namespace.as_deref())
        .unwrap_or("default");
    let name = new
        .metadata
        .name
        .as_deref()
        .or(old.metadata.name.as_deref())
        .unwrap_or("");
    let queue = old_labels
        .get(&settings.governed_label)
        .or_else(|| new_labels.get(&settings.governed_label))
        .cloned()
        .unwrap_or_default();
    let sluice = settings
        .controller_usernames
        .first()
        .map(String::as_str)
        .unwrap_or("sluice");
    if has_gate(old, &settings.gate_name) && !has_gate(new, &settings.gate_name) {
        return Err(format!(
            "sluice: pod {namespace}/{name} waits for quota in queue {queue:?}; only sluice's controller ({sluice}) may remove the scheduling gate {:?}. See why it waits: kubectl get dynamicworkloads -n {namespace}",
            settings.gate_name
        ));
    }
    let keys: std::collections::BTreeSet<&String> = old_labels
        .keys()
        .chain(new_labels.keys())
        .filter(|k| k.starts_with(&settings.protected_label_prefix))
        .collect();
    for key in keys {
        if old_labels.get(key) != new_labels.get(key) {
            return Err(format!(
                "sluice: label {key:?} of pod {namespace}/{name} belongs to sluice and cannot be changed (only {sluice} may); to use another queue, create a new pod",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GATE: &str = "sluice.dev/admission";

    fn settings() -> GateSettings {
        GateSettings {
            gate_name: GATE.into(),
            protected_label_prefix: "sluice.dev/".into(),
            governed_label: "sluice.dev/queue".into(),
            controller_usernames: vec!["system:serviceaccount:sluice-system:sluice".into()],
        }
    }

    fn pod(value: Value) -> Pod {
        serde_json::from_value(value).expect("pod")
    }

    fn apply(p: &Pod, ops: Vec<Value>) -> Pod {
        let mut doc = serde_json::to_value(p).expect("json");
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch");
        json_patch::patch(&mut doc, &patch).expect("applies");
        serde_json::from_value(doc).expect("pod")
    }

    fn wanted() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("sluice.dev/queue".to_string(), "q".to_string()),
            ("sluice.dev/pod-set".to_string(), "main".to_string()),
        ])
    }

    #[test]
    fn gates_and_labels_a_bare_pod() {
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        let out = apply(&p, mutation_ops(&p, &wanted(), GATE));
        assert!(has_gate(&out, GATE));
        assert_eq!(labels(&out), wanted());
    }

    #[test]
    fn appends_to_other_gates_and_keeps_other_labels() {
        let p = pod(
            json!({"metadata": {"name": "p", "labels": {"app": "x", "sluice.dev/queue": "q"}}, "spec": {"containers": [], "schedulingGates": [{"name": "other"}]}}),
        );
        let ops = mutation_ops(&p, &wanted(), GATE);
        assert_eq!(
            ops.len(),
            2,
            "gate + pod-set label; the equal queue label is left alone: {ops:?}"
        );
        let out = apply(&p, ops);
        let gates: Vec<String> = out
            .spec
            .unwrap()
            .scheduling_gates
            .unwrap()
            .into_iter()
            .map(|g| g.name)
            .collect();
        assert_eq!(gates, vec!["other".to_string(), GATE.to_string()]);
        assert_eq!(
            out.metadata.labels.unwrap().get("app").map(String::as_str),
            Some("x")
        );
    }

    #[test]
    fn replaces_a_differing_label_and_does_nothing_when_all_is_in_place() {
        let p = pod(
            json!({"metadata": {"labels": {"sluice.dev/queue": "q", "sluice.dev/pod-set": "old"}}, "spec": {"containers": [], "schedulingGates": [{"name": GATE}]}}),
        );
        let out = apply(&p, mutation_ops(&p, &wanted(), GATE));
        assert_eq!(labels(&out), wanted());
        assert!(mutation_ops(&out, &wanted(), GATE).is_empty());
    }

    #[test]
    fn refuses_a_user_removing_the_gate_and_allows_sluice() {
        let old = pod(
            json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": [], "schedulingGates": [{"name": GATE}]}}),
        );
        let new = pod(
            json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": []}}),
        );
        let err = validate_update(&old, &new, "alice", &settings()).expect_err("denied");
        assert!(
            err.contains("sluice.dev/admission") && err.contains("ns/p"),
            "{err}"
        );
        assert!(
            validate_update(
                &old,
                &new,
                "system:serviceaccount:sluice-system:sluice",
                &settings()
            )
            .is_ok()
        );
    }

    #[test]
    fn refuses_changes_to_sluice_labels_allows_the_rest() {
        let old = pod(
            json!({"metadata": {"labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": []}}),
        );
        let moved = pod(
            json!({"metadata": {"labels": {"sluice.dev/queue": "other"}}, "spec": {"containers": []}}),
        );
        let removed = pod(json!({"metadata": {"labels": {}}, "spec": {"containers": []}}));
        let annotated = pod(
            json!({"metadata": {"labels": {"sluice.dev/queue": "q", "team": "a"}, "annotations": {"x": "y"}}, "spec": {"containers": []}}),
        );
        assert!(validate_update(&old, &moved, "alice", &settings()).is_err());
        assert!(validate_update(&old, &removed, "alice", &settings()).is_err());
        assert!(validate_update(&old, &annotated, "alice", &settings()).is_ok());
        let ungoverned =
            pod(json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}));
        assert!(validate_update(&ungoverned, &ungoverned, "alice", &settings()).is_ok());
    }
}
