//! What every integration shares (Kueue's `jobframework`): the typed reading of the foreign fields
//! sluice needs (counts, pod templates), the demand arithmetic with errors naming the field, the
//! patch that copies the queue label into an application's pod templates, and RBAC rule helpers.
//!
//! Foreign specs are read into small typed structs of the fields sluice reads. A field of another
//! type than the one expected reads as absent (the API server's schema refuses such objects
//! before they are stored or validated; only the mutating webhook may see them), except counts and
//! pod specs, whose errors name the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ApiResource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::api::{MIN_COUNT_ANNOTATION, QUEUE_LABEL};
use crate::resources::ResourceList;

/// An application's declared demand could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum DemandError {
    #[error("{0}")]
    Invalid(String),
}

/// For `#[serde(default, deserialize_with = "lenient")]`: the value as `T`, or None when it is
/// of another type (what the JSON-pointer reads did: `as_bool`, `as_str`, `as_array`).
pub fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

/// A count of pods (replicas, instances, workers) as written; read with [`Count::get`], which
/// names the field in its errors. JSON has one number type: 2.0 is a whole number too.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Count {
    #[default]
    Absent,
    Whole(i64),
    /// Anything else, as JSON text for the error.
    NotWhole(String),
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let whole = value.as_i64().or_else(|| {
            value
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                .map(|f| f as i64)
        });
        Ok(match whole {
            Some(n) => Count::Whole(n),
            None if value.is_null() => Count::Absent,
            None => Count::NotWhole(value.to_string()),
        })
    }
}

impl Count {
    /// The count (None when absent), or Err naming `field` when negative or not a whole number.
    pub fn get(&self, field: &str) -> Result<Option<i64>, DemandError> {
        match self {
            Count::Absent => Ok(None),
            Count::Whole(n) if *n >= 0 => Ok(Some(*n)),
            Count::Whole(n) => Err(DemandError::Invalid(format!(
                "{field}: must not be negative ({n})"
            ))),
            Count::NotWhole(text) => Err(DemandError::Invalid(format!(
                "{field}: must be a whole number, not {text}"
            ))),
        }
    }
}

/// A pod spec as written, read as Kubernetes' `PodSpec` when asked (templates are never
/// validated as pods: the error names the field).
#[derive(Clone, Debug)]
pub struct PodSpecField(Result<Box<PodSpec>, String>);

impl Default for PodSpecField {
    /// An absent spec reads as `null` did.
    fn default() -> Self {
        PodSpecField::from(Value::Null)
    }
}

impl From<Value> for PodSpecField {
    fn from(value: Value) -> Self {
        PodSpecField(
            serde_json::from_value(value)
                .map(Box::new)
                .map_err(|e| e.to_string()),
        )
    }
}

impl<'de> Deserialize<'de> for PodSpecField {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(PodSpecField::from(Value::deserialize(deserializer)?))
    }
}

/// The `metadata` of a pod template: its labels and annotations are all that matter to sluice.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TemplateMetadata {
    #[serde(deserialize_with = "lenient")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(deserialize_with = "lenient")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// A pod template (`{metadata, spec}`) inside a foreign object.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodTemplate {
    #[serde(deserialize_with = "lenient")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: PodSpecField,
}

impl PodTemplate {
    /// What one pod made from this template (at `path`, e.g. `spec.headGroupSpec.template`)
    /// requests, counted as the scheduler counts it. Errors name the field: templates are never
    /// validated as pods, so nothing else refuses a negative request.
    pub fn requests(&self, path: &str) -> Result<ResourceList, DemandError> {
        let spec = self
            .spec
            .0
            .as_ref()
            .map_err(|e| DemandError::Invalid(format!("{path}.spec: not a pod spec: {e}")))?;
        crate::resources::pod_requests(spec)
            .map_err(|e| DemandError::Invalid(format!("{path}.{e}")))
    }

    /// The image of the template's first container, when it has one.
    pub fn first_container_image(&self) -> Option<String> {
        let spec = self.spec.0.as_ref().ok()?;
        spec.containers.first()?.image.clone()
    }

    /// Where the queue label goes for this template, whose JSON pointer is `pointer`.
    pub fn label_target(template: Option<&PodTemplate>, pointer: &str) -> LabelTarget {
        let labels = match template.and_then(|t| t.metadata.as_ref()) {
            None => TargetLabels::NoObject,
            Some(meta) => TargetLabels::from(meta.labels.clone()),
        };
        LabelTarget {
            path: format!("{pointer}/metadata"),
            labels,
        }
    }
}

/// Reads the spec of an application object into `T`, the fields an integration reads (every
/// field lenient: a spec that is not even an object reads as an empty one).
pub fn read_spec<T: DeserializeOwned + Default>(
    app: &kube::core::DynamicObject,
    kind: &str,
) -> Result<T, DemandError> {
    let spec = app
        .data
        .get("spec")
        .ok_or_else(|| DemandError::Invalid(format!("{kind} has no spec")))?;
    Ok(serde_json::from_value(spec.clone()).unwrap_or_default())
}

/// The spec of an application object as `T`, for labelling (an object without one reads as
/// an empty spec).
pub fn spec_or_default<T: DeserializeOwned + Default>(app: &kube::core::DynamicObject) -> T {
    app.data
        .get("spec")
        .and_then(|spec| serde_json::from_value(spec.clone()).ok())
        .unwrap_or_default()
}

/// The name of the CustomResourceDefinition of `resource` (`<plural>.<group>`).
pub fn crd_name(resource: &ApiResource) -> String {
    format!("{}.{}", resource.plural, resource.group)
}

/// Reads the amount at `field` (a quantity, not negative), or Err naming the field.
pub fn amount(text: &str, field: &str) -> Result<i64, DemandError> {
    crate::resources::parse_amount(text).map_err(|e| DemandError::Invalid(format!("{field}: {e}")))
}

/// Adds `count` pods of `per_pod` to `gang`, or Err naming `field` (the count's path) when the
/// product or the sum is more than sluice can count: such a gang could never be admitted, and
/// a wrapped or saturated total would be a lie.
pub fn add_to_gang(
    gang: &mut ResourceList,
    per_pod: &ResourceList,
    count: i64,
    field: &str,
) -> Result<(), DemandError> {
    gang.try_add_scaled(per_pod, count).map_err(|resource| {
        DemandError::Invalid(format!(
            "{field}: {count} pods need more {resource} than sluice can count (9223372036854775807m in all)"
        ))
    })
}

/// A pod count as a PodSetSpec holds it: counts beyond i32 only grow, and a gang that large never
/// fits any quota.
pub fn pod_count(n: i64) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The name of the object's controller (the owner reference with `controller: true`) when it is a
/// `kind` of API group `group` (any version), e.g. the Job that created a pod.
pub fn controller_of<'a>(meta: &'a ObjectMeta, group: &str, kind: &str) -> Option<&'a str> {
    let owner = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let owner_group = owner
        .api_version
        .rsplit_once('/')
        .map_or("", |(group, _)| group);
    (owner.kind == kind && owner_group == group).then_some(owner.name.as_str())
}

/// A JSON pointer (`/spec/workerGroupSpecs/0/template`) as a field path for messages
/// (`spec.workerGroupSpecs[0].template`).
pub fn pointer_to_field(pointer: &str) -> String {
    let mut field = String::new();
    for segment in pointer.split('/').filter(|s| !s.is_empty()) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.bytes().all(|b| b.is_ascii_digit()) {
            field.push_str(&format!("[{segment}]"));
        } else {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(&segment);
        }
    }
    field
}

pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

pub fn min_count_annotation(pod: &Pod) -> Option<u32> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(MIN_COUNT_ANNOTATION)?
        .trim()
        .parse()
        .ok()
}

/// The labels at a [`LabelTarget`] now.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetLabels {
    /// The object that would hold `labels` is absent.
    NoObject,
    /// The object is there, without labels (or with something else than a map of strings).
    NoLabels,
    Labels(BTreeMap<String, String>),
}

impl From<Option<BTreeMap<String, String>>> for TargetLabels {
    fn from(labels: Option<BTreeMap<String, String>>) -> Self {
        labels.map_or(TargetLabels::NoLabels, TargetLabels::Labels)
    }
}

/// An object whose `labels` the operator puts on the pods it creates (a pod template's
/// `metadata`, a SparkApplication's `driver`): the application webhook copies the queue label
/// into each, so the operator's pods are governed.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelTarget {
    /// The object's JSON pointer, e.g. `/spec/headGroupSpec/template/metadata`.
    pub path: String,
    pub labels: TargetLabels,
}

pub fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// JSON patch operations that put `queue` into the labels of every target (none for a target
/// that already has it).
pub fn queue_label_patch(targets: &[LabelTarget], queue: &str) -> Vec<Value> {
    labels_patch(targets, &[(QUEUE_LABEL, queue)])
}

/// JSON patch operations that put `labels` into the labels of every target (none for a label a
/// target already has with that value).
pub fn labels_patch(targets: &[LabelTarget], labels: &[(&str, &str)]) -> Vec<Value> {
    let all: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut ops = Vec::new();
    for target in targets {
        let path = &target.path;
        match &target.labels {
            TargetLabels::Labels(have) => {
                for (key, value) in labels {
                    if have.get(*key).map(String::as_str) != Some(*value) {
                        ops.push(json!({"op": "add", "path": format!("{path}/labels/{}", escape(key)), "value": value}));
                    }
                }
            }
            TargetLabels::NoLabels => {
                ops.push(json!({"op": "add", "path": format!("{path}/labels"), "value": all}))
            }
            TargetLabels::NoObject => {
                ops.push(json!({"op": "add", "path": path, "value": {"labels": all}}))
            }
        }
    }
    ops
}

/// A rule granting `verbs` on `resources` of `group`.
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    }
}

/// What the recorder needs of an application kind: read and watch its objects.
pub fn read_rule(resource: &ApiResource) -> PolicyRule {
    rule(
        &resource.group,
        &[resource.plural.as_str()],
        &["get", "list", "watch"],
    )
}
