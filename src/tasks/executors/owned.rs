//! What the executors share about the objects a Task owns (the `pod` executor's pod, the
//! `resource` executor's object) and the workers it runs in: create or adopt, read, delete until
//! gone. Each executor keeps only what is its own (what to create, how to read its progress).

use std::fmt::{self, Debug};

use kube::api::{Api, DeleteParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ExecError;
use crate::api::Task;

/// An object as errors and messages name it: `pod t1-task`, `ConfigMap t1`, `worker w-x`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub what: &'a str,
    pub name: &'a str,
}

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.name)
    }
}

/// Whether `object` belongs to `task` (an owner reference of kind Task with its uid). Pure.
pub fn owned_by(object: &impl Resource, task: &Task) -> bool {
    let uid = task.uid();
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Task" && Some(&o.uid) == uid.as_ref())
}

/// Creates `object`, or adopts the one of that name when it already belongs to the Task (a
/// restarted controller starts nothing twice). Returns its uid. A refusal with a status code in
/// `refused` means the Task cannot run as written: it fails instead of being retried.
pub async fn create_or_adopt<K>(
    api: &Api<K>,
    object: &K,
    target: Target<'_>,
    task: &Task,
    refused: &[u16],
) -> Result<String, ExecError>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(created) => Ok(created.uid().unwrap_or_default()),
        Err(kube::Error::Api(e)) if e.code == 409 => adopt(api, target, task).await,
        Err(kube::Error::Api(e)) if refused.contains(&e.code) => Err(ExecError::Invalid(format!(
            "creating {target}: {}",
            e.message
        ))),
        Err(source) => Err(ExecError::Api {
            what: format!("creating {target}"),
            source,
        }),
    }
}

async fn adopt<K>(api: &Api<K>, target: Target<'_>, task: &Task) -> Result<String, ExecError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let existing = api
        .get(target.name)
        .await
        .map_err(ExecError::api(format!("reading {target}")))?;
    if owned_by(&existing, task) {
        Ok(existing.uid().unwrap_or_default())
    } else {
        Err(ExecError::Invalid(format!(
            "{target} exists and does not belong to this Task"
        )))
    }
}

/// The object if it exists and belongs to the Task; None when it is gone (or was replaced by
/// somebody else's of the same name).
pub async fn get_owned<K>(
    api: &Api<K>,
    target: Target<'_>,
    task: &Task,
) -> Result<Option<K>, ExecError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let object = api
        .get_opt(target.name)
        .await
        .map_err(ExecError::api(format!("reading {target}")))?;
    Ok(object.filter(|o| owned_by(o, task)))
}

/// Deletes `object` unless its deletion has begun. Always false ("not gone yet"): the kill is
/// called again until the object is no longer found.
pub async fn delete_until_gone<K>(
    api: &Api<K>,
    object: &K,
    target: Target<'_>,
    params: &DeleteParams,
) -> Result<bool, ExecError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if object.meta().deletion_timestamp.is_none() {
        api.delete(target.name, params)
            .await
            .map_err(ExecError::api(format!("deleting {target}")))?;
    }
    Ok(false)
}

/// Kills what the Task owns: true once it is gone (or no longer the Task's).
pub async fn kill_owned<K>(
    api: &Api<K>,
    target: Target<'_>,
    task: &Task,
    params: &DeleteParams,
) -> Result<bool, ExecError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match get_owned(api, target, task).await? {
        Some(object) => delete_until_gone(api, &object, target, params).await,
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn task(uid: &str) -> Task {
        let mut t = Task::new("t", Default::default());
        t.metadata.uid = Some(uid.into());
        t
    }

    #[test]
    fn ownership_is_by_task_uid() {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [
            {"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "name": "t", "uid": "u1"}]}}))
            .expect("a pod");
        assert!(owned_by(&pod, &task("u1")));
        assert!(
            !owned_by(&pod, &task("u2")),
            "another Task of the same name"
        );
        assert!(!owned_by(&Pod::default(), &task("u1")));
    }

    #[test]
    fn targets_name_kind_and_object() {
        let t = Target {
            what: "ConfigMap",
            name: "t1",
        };
        assert_eq!(t.to_string(), "ConfigMap t1");
    }
}
