use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The input of a Task: structured JSON, any shape (objects, arrays, numbers, strings).
///
/// A TaskObject has no status: it is data, written once by whoever creates the Task that reads it.
#[derive(CustomResource, KubeSchema, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "sluice.dev",
    version = "v1alpha1",
    kind = "TaskObject",
    plural = "taskobjects",
    shortname = "tobj",
    category = "sluice",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    doc = "A TaskObject holds the input of a Task as structured JSON (spec.data).",
    printcolumn(
        name = "Data",
        type_ = "string",
        json_path = ".spec.data",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TaskObjectSpec {
    /// Any JSON value; Tasks read it whole or field by field (`${input.count}`).
    #[serde(default)]
    #[schemars(schema_with = "super::task::any_json")]
    pub data: serde_json::Value,
}
