//! `resource`: the controller creates any namespaced object from a manifest (in the Task's
//! namespace, owned by the Task) and follows it until `failureCondition` or `successCondition`
//! (JSONPath or CEL, see [`crate::tasks::jsonpath`]) holds. Without a success condition the Task succeeds
//! once the object exists. A kill deletes the object. An Argo Workflow is one use:
//! `successCondition: self.status.phase == "Succeeded"`.
//!
//! sluice creates the object with its own rights: the kinds it may create are those its
//! ClusterRole allows (ConfigMaps out of the box; add others, e.g. Argo Workflows, to the role).

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Scope, pinned_kind};
use serde_json::{Value, json};

use super::owned::{Target, create_or_adopt, get_owned, kill_owned};
use super::{ExecContext, ExecError, ExecResult, ExecutorSteps, Outcome, Plan, Progress};
use crate::api::{ResourceExecutor, TASK_LABEL, TaskExecutor, TaskHandle};
use crate::tasks::jsonpath::{self, Condition};
use crate::tasks::substitute::{Variables, substitute_json};

pub struct ResourceExecutorImpl;

/// The object to create, after substitution, with name, namespace, owner and label set. Pure.
pub fn build_manifest(
    spec: &ResourceExecutor,
    task: &str,
    namespace: &str,
    owner: Value,
    vars: &Variables,
) -> Result<Value, ExecError> {
    let mut manifest = substitute_json(&spec.manifest, vars, "resource.manifest")?;
    let object = manifest
        .as_object_mut()
        .ok_or_else(|| ExecError::Invalid("resource.manifest must be an object".into()))?;
    for field in ["apiVersion", "kind"] {
        if !object.get(field).is_some_and(Value::is_string) {
            return Err(ExecError::Invalid(format!(
                "resource.manifest.{field} is missing"
            )));
        }
    }
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    let metadata = metadata
        .as_object_mut()
        .ok_or_else(|| ExecError::Invalid("resource.manifest.metadata must be an object".into()))?;
    if !metadata.get("name").is_some_and(Value::is_string) {
        metadata.remove("generateName");
        metadata.insert("name".into(), json!(task));
    }
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("ownerReferences".into(), json!([owner]));
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(TASK_LABEL.into(), json!(task));
    }
    for c in [&spec.success_condition, &spec.failure_condition]
        .into_iter()
        .flatten()
    {
        Condition::parse(c)?;
    }
    Ok(manifest)
}

/// Where the object stands. Pure.
pub fn resource_progress(spec: &ResourceExecutor, object: &Value) -> Result<Progress, ExecError> {
    let result = match &spec.result_json_path {
        Some(path) => jsonpath::pick(object, path).ok(),
        None => None,
    };
    if let Some(c) = &spec.failure_condition
        && Condition::parse(c)?.holds(object)?
    {
        return Ok(Progress::Done(Outcome {
            success: false,
            result,
            message: format!("failureCondition holds: {c}"),
        }));
    }
    match &spec.success_condition {
        Some(c) if Condition::parse(c)?.holds(object)? => Ok(Progress::Done(Outcome {
            success: true,
            result,
            message: format!("successCondition holds: {c}"),
        })),
        Some(c) => Ok(Progress::Running(format!("waiting for {c}"))),
        None => Ok(Progress::Done(Outcome {
            success: true,
            result,
            message: "created".into(),
        })),
    }
}

/// The Task's object, built from its manifest.
fn build(ctx: &ExecContext<'_>, spec: &ResourceExecutor) -> Result<Value, ExecError> {
    let owner = ctx.owner_reference();
    build_manifest(spec, &ctx.task_name(), &ctx.namespace, owner, ctx.vars)
}

async fn api_for(
    client: &Client,
    handle: &TaskHandle,
    namespace: &str,
) -> Result<Api<DynamicObject>, ExecError> {
    let (group, version) = match handle.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", handle.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &handle.kind);
    let (resource, caps): (ApiResource, _) =
        pinned_kind(client, &gvk).await.map_err(|e| match e {
            kube::Error::Api(ref s) if s.code == 404 => ExecError::Invalid(format!(
                "resource.manifest: the API server does not serve {}/{}",
                handle.api_version, handle.kind
            )),
            other => ExecError::Api {
                what: format!("discovering {}/{}", handle.api_version, handle.kind),
                source: other,
            },
        })?;
    if caps.scope != Scope::Namespaced {
        return Err(ExecError::Invalid(format!(
            "resource.manifest: {} is cluster-scoped; the resource executor creates namespaced objects only",
            handle.kind
        )));
    }
    Ok(Api::namespaced_with(client.clone(), namespace, &resource))
}

/// API refusals that mean the manifest cannot be created as written (forbidden to sluice,
/// invalid): the Task fails instead of retrying.
const REFUSED: &[u16] = &[400, 403, 422];

fn target(handle: &TaskHandle) -> Target<'_> {
    Target {
        what: &handle.kind,
        name: &handle.name,
    }
}

impl ExecutorSteps for ResourceExecutorImpl {
    const KIND: &'static str = "resource";
    type Spec = ResourceExecutor;

    async fn plan(&self, ctx: &ExecContext<'_>, spec: &ResourceExecutor) -> ExecResult<Plan> {
        let manifest = build(ctx, spec)?;
        let text = |p: &str| {
            manifest
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let handle = TaskHandle {
            api_version: text("/apiVersion"),
            kind: text("/kind"),
            name: text("/metadata/name"),
            ..Default::default()
        };
        // Fail now on a kind that cannot be created, before anything is recorded.
        api_for(ctx.client, &handle, &ctx.namespace).await?;
        Ok(Plan::Start {
            handle,
            worker: None,
        })
    }

    async fn start(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<String> {
        let spec = Self::spec(ctx)?;
        let object: DynamicObject = serde_json::from_value(build(ctx, spec)?)
            .map_err(|e| ExecError::Invalid(format!("resource.manifest: {e}")))?;
        let api = api_for(ctx.client, handle, &ctx.namespace).await?;
        create_or_adopt(&api, &object, target(handle), ctx.task, REFUSED).await
    }

    async fn poll(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<Progress> {
        let api = api_for(ctx.client, handle, &ctx.namespace).await?;
        match get_owned(&api, target(handle), ctx.task).await? {
            Some(o) => {
                let value = serde_json::to_value(&o).map_err(|e| {
                    ExecError::Invalid(format!("{} {}: {e}", handle.kind, handle.name))
                })?;
                resource_progress(Self::spec(ctx)?, &value)
            }
            None => Ok(Progress::Gone(format!(
                "{} {} was deleted before the Task ended",
                handle.kind, handle.name
            ))),
        }
    }

    async fn kill(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<bool> {
        let api = api_for(ctx.client, handle, &ctx.namespace).await?;
        kill_owned(&api, target(handle), ctx.task, &DeleteParams::background()).await
    }

    fn spec_of(executor: &TaskExecutor) -> Option<&ResourceExecutor> {
        executor.resource.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ResourceExecutor {
        ResourceExecutor {
            manifest: json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"n": "${input.n}"}}),
            success_condition: Some(r#"$.data.done == "true""#.into()),
            failure_condition: Some(r#"$.data.done == "failed""#.into()),
            result_json_path: Some("$.data.answer".into()),
        }
    }

    #[test]
    fn manifests_are_named_owned_and_substituted() {
        let vars = Variables::new().with("input", json!({"n": 4}));
        let m = build_manifest(&spec(), "t1", "ns", json!({"uid": "u"}), &vars).unwrap();
        assert_eq!(m["metadata"]["name"], "t1");
        assert_eq!(m["metadata"]["namespace"], "ns");
        assert_eq!(m["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(m["metadata"]["labels"]["sluice.dev/task"], "t1");
        assert_eq!(m["data"]["n"], "4");
        let mut no_kind = spec();
        no_kind.manifest = json!({"apiVersion": "v1"});
        assert!(build_manifest(&no_kind, "t", "ns", json!({}), &vars).is_err());
        let mut bad_condition = spec();
        bad_condition.success_condition = Some("$.[[[".into());
        assert!(build_manifest(&bad_condition, "t", "ns", json!({}), &vars).is_err());
    }

    #[test]
    fn conditions_decide() {
        let s = spec();
        let waiting = json!({"data": {"done": "no"}});
        assert!(matches!(
            resource_progress(&s, &waiting).unwrap(),
            Progress::Running(_)
        ));
        let done = json!({"data": {"done": "true", "answer": "42"}});
        assert_eq!(
            resource_progress(&s, &done).unwrap(),
            Progress::Done(Outcome {
                success: true,
                result: Some(json!("42")),
                message: r#"successCondition holds: $.data.done == "true""#.into()
            })
        );
        let failed = json!({"data": {"done": "failed"}});
        assert!(matches!(resource_progress(&s, &failed).unwrap(), Progress::Done(o) if !o.success));
    }
}
