//! The pod webhooks' decisions, as pure functions: gate and label governed pods on CREATE, and
//! refuse anyone but sluice's controller removing the gate or editing sluice's labels.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::{Value, json};
use tracing::{debug, warn};

use crate::handler::AdmissionHandler;

/// Tells sluice's governed pods from the rest (implemented by the root crate's adapters).
pub trait PodClassifier: Send + Sync + 'static {
    /// The labels sluice keeps on a pod it governs, or None when the pod is not sluice's business.
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>>;

    /// As [`PodClassifier::classify`], for a pod created in `namespace`, which may give a pod
    /// without sluice's queue label a default queue. Err carries a message for the user when the
    /// pod cannot be classified yet (the namespace was not seen yet): the creation is refused and
    /// retried rather than let through ungated.
    fn classify_in(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        let _ = namespace;
        Ok(self.classify(pod))
    }

    /// [`PodClassifier::classify_in`] for one CREATE request, with what the classifier worked out
    /// on the way ([`RequestFacts`]), handed back to [`PodClassifier::admit_at_creation`] and
    /// [`PodClassifier::gated_warnings`] for the same request. By default no facts.
    fn classify_request(&self, namespace: &str, pod: &Pod) -> Result<Option<Classified>, String> {
        Ok(self.classify_in(namespace, pod)?.map(|labels| Classified {
            labels,
            facts: RequestFacts::default(),
        }))
    }

    /// Whether the governed pod being created is admitted as it is created, without the gate: the
    /// annotations to add when it is, None when it waits behind the gate. Called once per creation
    /// of a governed pod; by default every pod waits.
    fn admit_at_creation(&self, created: &CreatedPod<'_>) -> Option<BTreeMap<String, String>> {
        let _ = created;
        None
    }

    /// What `kubectl` prints when the governed pod is created behind the gate: why it will wait
    /// (its queue full, unknown, or not admitting the namespace). Never refuses; by default
    /// nothing is said.
    fn gated_warnings(&self, created: &CreatedPod<'_>) -> Vec<String> {
        let _ = created;
        Vec::new()
    }

    /// Judges an update of a governed pod by anyone but sluice from `old` to `new`: Err carries
    /// the refusal when it changes where the pod belongs (its workload, pod set, gang or queue,
    /// as the labels and annotations its integration reads say). By default nothing is refused.
    fn judge_update(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        let _ = (namespace, old, new);
        Ok(())
    }

    /// Judges an in-place resize (`pods/resize`) of an admitted governed pod from `old` to `new`:
    /// Err carries the refusal. By default every resize is allowed.
    fn judge_resize(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        let _ = (namespace, old, new);
        Ok(())
    }
}

/// A governed pod in the request that creates it, as [`PodClassifier::admit_at_creation`] and
/// [`PodClassifier::gated_warnings`] are asked about it.
pub struct CreatedPod<'a> {
    /// The namespace it is created in.
    pub namespace: &'a str,
    pub pod: &'a Pod,
    /// The labels sluice gives it.
    pub labels: &'a BTreeMap<String, String>,
    /// What [`PodClassifier::classify_request`] worked out about it in this request.
    pub facts: &'a RequestFacts,
}

/// A governed pod as [`PodClassifier::classify_request`] classified it for one request.
pub struct Classified {
    /// The labels sluice keeps on the pod.
    pub labels: BTreeMap<String, String>,
    /// What the classifier worked out on the way, for its later calls in the same request.
    pub facts: RequestFacts,
}

/// What a classifier worked out about a pod during one request (sluice's: the pod's identity, which
/// costs a copy of the pod), kept for its later calls in the same request so that it is worked out
/// once. The webhook only carries it.
#[derive(Default)]
pub struct RequestFacts(Option<Box<dyn Any + Send + Sync>>);

impl RequestFacts {
    pub fn new<T: Any + Send + Sync>(facts: T) -> Self {
        RequestFacts(Some(Box::new(facts)))
    }

    /// The facts kept, when they are a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref().and_then(|facts| facts.downcast_ref())
    }
}

/// What the pod webhooks protect and who may change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateSettings {
    /// The scheduling gate sluice adds, e.g. `sluice.dev/admission`.
    pub gate_name: String,
    /// Labels under this prefix belong to sluice, e.g. `sluice.dev/`.
    pub protected_label_prefix: String,
    /// A pod carrying this label is governed, e.g. `sluice.dev/queue`.
    pub governed_label: String,
    /// Who may remove the gate and edit protected labels: sluice's own identity.
    pub controller_usernames: Vec<String>,
    /// Annotations that record an admission (its token, its time): removed from a pod that is
    /// gated at creation (a copied or stale token admits nothing), and only sluice may change them.
    pub admission_annotations: Vec<String>,
}

impl Default for GateSettings {
    /// sluice's names, with the controller's service account of a standard install.
    fn default() -> Self {
        GateSettings {
            gate_name: "sluice.dev/admission".into(),
            protected_label_prefix: "sluice.dev/".into(),
            governed_label: "sluice.dev/queue".into(),
            controller_usernames: vec!["system:serviceaccount:sluice-system:sluice".into()],
            admission_annotations: vec![
                "sluice.dev/admitted-at-creation".into(),
                "sluice.dev/admitted-at".into(),
            ],
        }
    }
}

impl GateSettings {
    fn is_controller(&self, username: &str) -> bool {
        self.controller_usernames.iter().any(|u| u == username)
    }

    fn controllers(&self) -> String {
        if self.controller_usernames.is_empty() {
            "sluice's controller".into()
        } else {
            self.controller_usernames.join(", ")
        }
    }
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    // Tokens are escaped here (`/` as ~1, `~` as ~0), so label keys can be used as they are.
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn add(tokens: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(tokens),
        value,
    })
}

/// The JSON patch that adds the scheduling gate `gate_name` and sets `labels` on `pod`; empty when
/// the pod already has both. Other gates and labels are left alone.
pub fn mutation_patch(pod: &Pod, labels: &BTreeMap<String, String>, gate_name: &str) -> Patch {
    let mut operations = Vec::new();
    let gate = json!({ "name": gate_name });
    match pod.spec.as_ref().map(|s| s.scheduling_gates.as_ref()) {
        None => operations.push(add(&["spec"], json!({ "schedulingGates": [gate] }))),
        Some(None) => operations.push(add(&["spec", "schedulingGates"], json!([gate]))),
        Some(Some(gates)) if gates.iter().any(|g| g.name == gate_name) => {}
        Some(Some(_)) => operations.push(add(&["spec", "schedulingGates", "-"], gate)),
    }
    set_map(
        &mut operations,
        "labels",
        pod.metadata.labels.as_ref(),
        labels,
    );
    Patch(operations)
}

/// The JSON patch for a pod admitted as it is created: `labels` and `annotations` set, no gate.
pub fn admission_at_creation_patch(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Patch {
    let mut operations = Vec::new();
    set_map(
        &mut operations,
        "labels",
        pod.metadata.labels.as_ref(),
        labels,
    );
    set_map(
        &mut operations,
        "annotations",
        pod.metadata.annotations.as_ref(),
        annotations,
    );
    Patch(operations)
}

/// Operations removing each of `keys` the pod's annotations hold.
fn remove_annotations(pod: &Pod, keys: &[String]) -> Vec<PatchOperation> {
    let Some(existing) = pod.metadata.annotations.as_ref() else {
        return Vec::new();
    };
    keys.iter()
        .filter(|key| existing.contains_key(key.as_str()))
        .map(|key| {
            PatchOperation::Remove(json_patch::RemoveOperation {
                path: pointer(&["metadata", "annotations", key]),
            })
        })
        .collect()
}

/// Operations setting `wanted` in the metadata map `field` (labels, annotations), others kept.
fn set_map(
    operations: &mut Vec<PatchOperation>,
    field: &str,
    existing: Option<&BTreeMap<String, String>>,
    wanted: &BTreeMap<String, String>,
) {
    match existing {
        None if wanted.is_empty() => {}
        None => operations.push(add(&["metadata", field], json!(wanted))),
        Some(existing) => {
            for (key, value) in wanted {
                match existing.get(key) {
                    Some(current) if current == value => {}
                    Some(_) => operations.push(PatchOperation::Replace(ReplaceOperation {
                        path: pointer(&["metadata", field, key]),
                        value: json!(value),
                    })),
                    None => operations.push(add(&["metadata", field, key], json!(value))),
                }
            }
        }
    }
}

fn has_gate(pod: &Pod, gate: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == gate))
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a String> {
    pod.metadata.labels.as_ref()?.get(key)
}

/// `namespace/name` for messages; a pod being created may only have a generateName yet.
fn pod_name<K>(request: &AdmissionRequest<K>, pod: &Pod) -> String
where
    K: kube::Resource,
{
    let namespace = request
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("default");
    let name = match (
        pod.metadata.name.as_deref(),
        pod.metadata.generate_name.as_deref(),
    ) {
        (Some(name), _) if !name.is_empty() => name.to_string(),
        (_, Some(prefix)) => format!("{prefix}<generated>"),
        _ => request.name.clone(),
    };
    format!("{namespace}/{name}")
}

/// Adds the gate and sluice's labels to a pod the classifier says is governed (CREATE only, dry
/// runs alike), or only the labels and the classifier's annotations when the classifier admits the
/// pod as it is created. Denies only when the classifier cannot tell yet whether the pod is governed;
/// otherwise the validator and the controller handle the rest.
pub fn mutate_pod(
    request: &AdmissionRequest<Pod>,
    classifier: &dyn PodClassifier,
    gate: &GateSettings,
) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    if request.operation != Operation::Create {
        return allowed;
    }
    let Some(pod) = request.object.as_ref() else {
        return allowed;
    };
    let namespace = request
        .namespace
        .as_deref()
        .or(pod.metadata.namespace.as_deref())
        .unwrap_or("default");
    let Classified { labels, facts } = match classifier.classify_request(namespace, pod) {
        Ok(Some(classified)) => classified,
        Ok(None) => return allowed,
        Err(message) => return allowed.deny(message),
    };
    let created = CreatedPod {
        namespace,
        pod,
        labels: &labels,
        facts: &facts,
    };
    // A dry run holds no quota, so it is shown gated.
    let at_creation = if request.dry_run {
        None
    } else {
        classifier.admit_at_creation(&created)
    };
    let mut warnings = Vec::new();
    let patch = match at_creation {
        Some(annotations) => {
            // Admission annotations the pod brought and this admission does not set are forged
            // (a flavor, a topology domain): dropped, as from a gated pod.
            let mut patch = admission_at_creation_patch(pod, &labels, &annotations);
            let forged: Vec<String> = (gate.admission_annotations.iter())
                .filter(|key| !annotations.contains_key(*key))
                .cloned()
                .collect();
            patch.0.extend(remove_annotations(pod, &forged));
            patch
        }
        None => {
            warnings = classifier.gated_warnings(&created);
            let mut patch = mutation_patch(pod, &labels, &gate.gate_name);
            patch
                .0
                .extend(remove_annotations(pod, &gate.admission_annotations));
            patch
        }
    };
    let mut response = if patch.0.is_empty() {
        allowed
    } else {
        match AdmissionResponse::from(request).with_patch(patch) {
            Ok(patched) => patched,
            Err(e) => {
                // The validator refuses the ungated governed pod, so this cannot admit it silently.
                warn!(error = %e, pod = %pod_name(request, pod), "could not encode the pod patch");
                allowed
            }
        }
    };
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

/// How a protected label changed, for the message.
fn describe_change(old: Option<&String>, new: Option<&String>) -> String {
    match (old, new) {
        (None, Some(new)) => format!("adding it with value {new:?}"),
        (Some(old), None) => format!("removing it (value {old:?})"),
        (Some(old), Some(new)) => format!("changing it from {old:?} to {new:?}"),
        (None, None) => "leaving it absent".into(),
    }
}

/// Refuses, unless the user is sluice's controller: removing the gate from a governed pod, adding,
/// changing or removing a protected label (UPDATE), and creating a governed pod without the gate
/// (CREATE: a safety net for a mutation that did not happen). Everything else is allowed.
pub fn validate_pod(request: &AdmissionRequest<Pod>, gate: &GateSettings) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    let username = request.user_info.username.as_deref().unwrap_or("");
    if gate.is_controller(username) {
        return allowed;
    }
    let verdict = match (
        &request.operation,
        request.old_object.as_ref(),
        request.object.as_ref(),
    ) {
        (Operation::Update, Some(old), Some(new)) => check_update(request, old, new, gate),
        (Operation::Create, _, Some(new)) => check_create(request, new, gate),
        _ => Ok(()),
    };
    match verdict {
        Ok(()) => allowed,
        Err(message) => {
            debug!(user = username, %message, "denied a pod change");
            allowed.deny(message)
        }
    }
}

fn check_update(
    request: &AdmissionRequest<Pod>,
    old: &Pod,
    new: &Pod,
    gate: &GateSettings,
) -> Result<(), String> {
    let Some(queue) = label(old, &gate.governed_label).or(label(new, &gate.governed_label)) else {
        return Ok(());
    };
    let namespace = request.namespace.as_deref().unwrap_or("default");
    if has_gate(old, &gate.gate_name) && !has_gate(new, &gate.gate_name) {
        return Err(format!(
            "sluice: pod {pod} waits for quota in queue {queue:?}; only sluice's controller ({controllers}) may remove the scheduling gate {gate_name:?}. See why it waits: kubectl get dynamicworkloads -n {namespace}",
            pod = pod_name(request, new),
            controllers = gate.controllers(),
            gate_name = gate.gate_name,
        ));
    }
    let empty = BTreeMap::new();
    let old_labels = old.metadata.labels.as_ref().unwrap_or(&empty);
    let new_labels = new.metadata.labels.as_ref().unwrap_or(&empty);
    let protected: BTreeSet<&String> = old_labels
        .keys()
        .chain(new_labels.keys())
        .filter(|k| k.starts_with(&gate.protected_label_prefix))
        .collect();
    let old_notes = old.metadata.annotations.as_ref().unwrap_or(&empty);
    let new_notes = new.metadata.annotations.as_ref().unwrap_or(&empty);
    for key in &gate.admission_annotations {
        let (before, after) = (old_notes.get(key), new_notes.get(key));
        if before != after {
            return Err(format!(
                "sluice: annotation {key:?} of pod {pod} records its admission to queue {queue:?}; refused {change} because only sluice's controller ({controllers}) may set it",
                pod = pod_name(request, new),
                change = describe_change(before, after),
                controllers = gate.controllers(),
            ));
        }
    }
    for key in protected {
        let (before, after) = (old_labels.get(key), new_labels.get(key));
        if before != after {
            return Err(format!(
                "sluice: label {key:?} of pod {pod} belongs to sluice, which uses it to account the pod to queue {queue:?}; refused {change} because only sluice's controller ({controllers}) may add, change or remove labels starting with {prefix:?}. To run in another queue, create a new pod with {governed:?} set to that queue",
                pod = pod_name(request, new),
                change = describe_change(before, after),
                controllers = gate.controllers(),
                prefix = gate.protected_label_prefix,
                governed = gate.governed_label,
            ));
        }
    }
    Ok(())
}

fn check_create(
    request: &AdmissionRequest<Pod>,
    new: &Pod,
    gate: &GateSettings,
) -> Result<(), String> {
    let Some(queue) = label(new, &gate.governed_label) else {
        return Ok(());
    };
    if has_gate(new, &gate.gate_name) {
        return Ok(());
    }
    Err(format!(
        "sluice: pod {pod} is in queue {queue:?} (label {governed:?}) but lacks the scheduling gate {gate_name:?}, so it would start without waiting for quota. sluice's mutating webhook adds the gate: retry, and if this persists check that the sluice webhook is running and that no other webhook removes the gate",
        pod = pod_name(request, new),
        governed = gate.governed_label,
        gate_name = gate.gate_name,
    ))
}

/// `/mutate-pods`.
pub(crate) struct MutatePods {
    pub(crate) gate: GateSettings,
    pub(crate) classifier: Arc<dyn PodClassifier>,
}

impl AdmissionHandler<Pod> for MutatePods {
    fn admit(&self, request: &AdmissionRequest<Pod>) -> AdmissionResponse {
        mutate_pod(request, self.classifier.as_ref(), &self.gate)
    }
}

/// `/validate-pods`.
pub(crate) struct ValidatePods {
    pub(crate) gate: GateSettings,
    pub(crate) classifier: Arc<dyn PodClassifier>,
}

impl AdmissionHandler<Pod> for ValidatePods {
    fn admit(&self, request: &AdmissionRequest<Pod>) -> AdmissionResponse {
        if request.sub_resource.as_deref() == Some("resize") {
            return validate_resize(request, self.classifier.as_ref(), &self.gate);
        }
        let response = validate_pod(request, &self.gate);
        if !response.allowed {
            return response;
        }
        validate_identity(request, self.classifier.as_ref(), &self.gate)
    }
}

/// Refuses, unless the user is sluice's controller, an update of a governed pod that changes where
/// it belongs (the classifier judges): relabelling an admitted pod into another application's
/// workload, or growing its gang, would move what it holds with no fit check.
pub fn validate_identity(
    request: &AdmissionRequest<Pod>,
    classifier: &dyn PodClassifier,
    gate: &GateSettings,
) -> AdmissionResponse {
    if request.operation != Operation::Update {
        return AdmissionResponse::from(request);
    }
    judge_governed(request, gate, |namespace, old, new| {
        classifier.judge_update(namespace, old, new)
    })
}

/// An in-place resize of a governed pod changes what it holds of its queue's quota (admitted), or
/// what a pass that already decided to admit it counted (gated: a resize between the pass and the
/// ungate would admit the larger pod): the classifier judges both.
pub fn validate_resize(
    request: &AdmissionRequest<Pod>,
    classifier: &dyn PodClassifier,
    gate: &GateSettings,
) -> AdmissionResponse {
    judge_governed(request, gate, |namespace, old, new| {
        classifier.judge_resize(namespace, old, new)
    })
}

/// The frame of both judges: a change of a governed pod (old and new) by anyone but sluice's
/// controller goes to `judge`; its Err is the refusal.
fn judge_governed(
    request: &AdmissionRequest<Pod>,
    gate: &GateSettings,
    judge: impl FnOnce(&str, &Pod, &Pod) -> Result<(), String>,
) -> AdmissionResponse {
    let allowed = AdmissionResponse::from(request);
    let username = request.user_info.username.as_deref().unwrap_or("");
    let (Some(old), Some(new)) = (request.old_object.as_ref(), request.object.as_ref()) else {
        return allowed;
    };
    if gate.is_controller(username) || label(old, &gate.governed_label).is_none() {
        return allowed;
    }
    let namespace = request.namespace.as_deref().unwrap_or("default");
    match judge(namespace, old, new) {
        Ok(()) => allowed,
        Err(message) => {
            debug!(user = username, %message, "denied a change of a governed pod");
            allowed.deny(message)
        }
    }
}

pub mod wire;

#[cfg(test)]
mod tests;
