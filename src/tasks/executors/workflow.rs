//! `workflow`: the Task runs as an Argo Workflow (`argoproj.io/v1alpha1`), created from the Task's
//! template with `${...}` substituted, owned by the Task, named `<task>-wf`. Its pods carry the
//! queue label (`spec.podMetadata.labels`), so sluice's gate admits them against the queue like any
//! pod: a workflow step does not bypass quota. Phases follow the Workflow's: Pending / Running →
//! Running, Succeeded → Success, Failed / Error → Failed; the result is the entrypoint's output
//! parameters as JSON (`{name: value}`, each value JSON when it parses).
//!
//! A kill asks Argo to stop (`spec.shutdown: Terminate`), then deletes the Workflow with foreground
//! propagation: the Task stays Killing until the Workflow and all its pods are gone. A Workflow
//! deleted from outside ends the Task Killed.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PropagationPolicy,
};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};

use super::owned::{Target, create_or_adopt, get_owned};
use super::{
    ExecContext, ExecError, ExecResult, ExecutorSteps, Outcome, Plan, Progress, bounded_name,
    unless_deleting,
};
use crate::api::{
    QUEUE_LABEL, TASK_LABEL, TaskCluster, TaskExecutor, TaskHandle, WorkflowExecutor,
};
use crate::tasks::substitute::{Variables, substitute_json};

/// The label Argo puts on a Workflow's pods.
pub const ARGO_WORKFLOW_LABEL: &str = "workflows.argoproj.io/workflow";

#[derive(Default)]
pub struct WorkflowExecutorImpl;

/// The Workflow's name: `<task>-wf`, short enough for Argo's pod names (`<wf>-<template>-<hash>`).
pub fn workflow_name(task: &str) -> String {
    bounded_name(&format!("{task}-wf"), 45)
}

fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow"),
        "workflows",
    )
}

fn workflows(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &resource())
}

fn target(handle: &TaskHandle) -> Target<'_> {
    Target {
        what: "Workflow",
        name: &handle.name,
    }
}

/// The Workflow to create from the Task's template: substituted, named, owned, its pods labelled
/// with the queue and the Task. Pure.
pub fn build_workflow(
    template: &Value,
    name: &str,
    task: &str,
    queue: Option<&str>,
    owner: Value,
    vars: &Variables,
) -> Result<Value, ExecError> {
    let mut wf = substitute_json(template, vars, "workflow.template")?;
    let Some(object) = wf.as_object_mut() else {
        return Err(ExecError::Invalid(
            "workflow.template must be an object (a Workflow's metadata and spec)".into(),
        ));
    };
    for field in object.keys() {
        if !["apiVersion", "kind", "metadata", "spec"].contains(&field.as_str()) {
            return Err(ExecError::Invalid(format!(
                "workflow.template.{field}: a Workflow template has apiVersion, kind, metadata and spec only"
            )));
        }
    }
    if !object.get("spec").is_some_and(Value::is_object) {
        return Err(ExecError::Invalid(
            "workflow.template.spec is missing: give the Workflow's spec (entrypoint, templates)"
                .into(),
        ));
    }
    object.insert("apiVersion".into(), json!("argoproj.io/v1alpha1"));
    object.insert("kind".into(), json!("Workflow"));
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ExecError::Invalid("workflow.template.metadata must be an object".into()))?;
    metadata.remove("generateName");
    metadata.remove("namespace");
    metadata.insert("name".into(), json!(name));
    metadata.insert("ownerReferences".into(), json!([owner]));
    let labels = object_at(metadata, "labels", "workflow.template.metadata.labels")?;
    labels.insert(TASK_LABEL.into(), json!(task));
    let spec = object
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ExecError::Invalid("workflow.template.spec must be an object".into()))?;
    let pod_metadata = object_at(spec, "podMetadata", "workflow.template.spec.podMetadata")?;
    let pod_labels = object_at(
        pod_metadata,
        "labels",
        "workflow.template.spec.podMetadata.labels",
    )?;
    pod_labels.insert(TASK_LABEL.into(), json!(task));
    match queue {
        Some(q) => {
            pod_labels.insert(QUEUE_LABEL.into(), json!(q));
        }
        // Without a queue named here, none smuggled in the template either: the queue is the
        // Task's to choose (its executor's `queue` or its `cluster`'s).
        None => {
            pod_labels.remove(QUEUE_LABEL);
        }
    }
    Ok(wf)
}

fn object_at<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a mut Map<String, Value>, ExecError> {
    parent
        .entry(key)
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| ExecError::Invalid(format!("{field} must be an object")))
}

/// The entrypoint's output parameters as `{name: value}` (each value JSON when it parses), from
/// the Workflow's root node; None without any. Pure.
pub fn outputs(workflow: &Value) -> Option<Value> {
    let name = workflow.pointer("/metadata/name")?.as_str()?;
    let root = workflow.pointer("/status/nodes")?.get(name)?;
    let params = root.pointer("/outputs/parameters")?.as_array()?;
    let map: Map<String, Value> = params
        .iter()
        .filter_map(|p| {
            let name = p.get("name")?.as_str()?.to_string();
            let value = p.get("value")?.as_str()?;
            let parsed =
                serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
            Some((name, parsed))
        })
        .collect();
    (!map.is_empty()).then_some(Value::Object(map))
}

/// Where the Workflow stands. Pure.
pub fn workflow_progress(workflow: &Value) -> Progress {
    let phase = workflow
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = workflow
        .pointer("/status/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    let progress = workflow
        .pointer("/status/progress")
        .and_then(Value::as_str)
        .unwrap_or("");
    match phase {
        "Succeeded" => Progress::Done(Outcome {
            success: true,
            result: outputs(workflow),
            message: "workflow succeeded".into(),
        }),
        "Failed" | "Error" => Progress::Done(Outcome {
            success: false,
            result: outputs(workflow),
            message: if message.is_empty() {
                format!("workflow {}", phase.to_lowercase())
            } else {
                format!("workflow {}: {message}", phase.to_lowercase())
            },
        }),
        "" => Progress::Running("workflow created, not picked up by Argo yet".into()),
        other => Progress::Running(if progress.is_empty() {
            format!("workflow {}", other.to_lowercase())
        } else {
            format!("workflow {} ({progress} steps done)", other.to_lowercase())
        }),
    }
}

/// The queue the Workflow's pods are admitted against: the executor's `queue`, else its
/// TaskCluster's (label `sluice.dev/queue`).
async fn queue_of(
    ctx: &ExecContext<'_>,
    spec: &WorkflowExecutor,
) -> Result<Option<String>, ExecError> {
    if spec.queue.is_some() {
        return Ok(spec.queue.clone());
    }
    let Some(cluster) = &spec.cluster else {
        return Ok(None);
    };
    let clusters: Api<TaskCluster> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let found = clusters
        .get_opt(cluster)
        .await
        .map_err(ExecError::api(format!("reading TaskCluster {cluster}")))?;
    match found {
        Some(c) => Ok(c.labels().get(QUEUE_LABEL).cloned()),
        None => Err(ExecError::Invalid(format!(
            "workflow.cluster: TaskCluster {cluster} does not exist"
        ))),
    }
}

async fn pods_left(ctx: &ExecContext<'_>, name: &str) -> Result<usize, ExecError> {
    let pods: Api<Pod> = ctx.pods();
    let list = pods
        .list_metadata(&ListParams::default().labels(&format!("{ARGO_WORKFLOW_LABEL}={name}")))
        .await
        .map_err(ExecError::api(format!(
            "listing the pods of Workflow {name}"
        )))?;
    Ok(list.items.len())
}

impl ExecutorSteps for WorkflowExecutorImpl {
    const KIND: &'static str = "workflow";
    type Spec = WorkflowExecutor;

    async fn plan(&self, ctx: &ExecContext<'_>, spec: &WorkflowExecutor) -> ExecResult<Plan> {
        let name = workflow_name(&ctx.task_name());
        // Validate now: a template that cannot be built fails the Task before it runs.
        build_workflow(
            &spec.template,
            &name,
            &ctx.task_name(),
            None,
            json!({}),
            ctx.vars,
        )?;
        Ok(Plan::Start {
            handle: TaskHandle {
                api_version: "argoproj.io/v1alpha1".into(),
                kind: "Workflow".into(),
                name,
                ..Default::default()
            },
            worker: None,
        })
    }

    async fn start(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<String> {
        let spec = Self::spec(ctx)?;
        let queue = queue_of(ctx, spec).await?;
        let manifest = build_workflow(
            &spec.template,
            &handle.name,
            &ctx.task_name(),
            queue.as_deref(),
            ctx.owner_reference(),
            ctx.vars,
        )?;
        let object: DynamicObject = serde_json::from_value(manifest)
            .map_err(|e| ExecError::Invalid(format!("workflow.template: {e}")))?;
        let api = workflows(ctx.client, &ctx.namespace);
        create_or_adopt(&api, &object, target(handle), ctx.task, &[400, 403, 404, 422])
            .await
            .map_err(|e| match e {
                ExecError::Invalid(m) if m.contains("404") || m.contains("not found") => {
                    ExecError::Invalid(format!(
                        "{m} (is Argo Workflows installed? the API server does not serve argoproj.io/v1alpha1 Workflow)"
                    ))
                }
                other => other,
            })
    }

    async fn poll(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<Progress> {
        let api = workflows(ctx.client, &ctx.namespace);
        let deleted = || {
            Progress::Gone(format!(
                "Workflow {} was deleted before it ended",
                handle.name
            ))
        };
        Ok(match get_owned(&api, target(handle), ctx.task).await? {
            Some(wf) => {
                let value = serde_json::to_value(&wf)
                    .map_err(|e| ExecError::Invalid(format!("Workflow {}: {e}", handle.name)))?;
                let deleting = wf.metadata.deletion_timestamp.is_some();
                unless_deleting(workflow_progress(&value), deleting, deleted)
            }
            None => deleted(),
        })
    }

    async fn kill(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<bool> {
        let api = workflows(ctx.client, &ctx.namespace);
        if let Some(wf) = get_owned(&api, target(handle), ctx.task).await? {
            if wf.metadata.deletion_timestamp.is_none() {
                // Argo stops scheduling steps first; the deletion takes the pods with it.
                let stop = json!({"spec": {"shutdown": "Terminate"}});
                api.patch(&handle.name, &PatchParams::default(), &Patch::Merge(&stop))
                    .await
                    .map_err(ExecError::api(format!("stopping Workflow {}", handle.name)))?;
                let params = DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Foreground),
                    ..Default::default()
                };
                api.delete(&handle.name, &params)
                    .await
                    .map_err(ExecError::api(format!("deleting Workflow {}", handle.name)))?;
            }
            return Ok(false);
        }
        // Killing until its pods are gone too.
        Ok(pods_left(ctx, &handle.name).await? == 0)
    }

    fn spec_of(executor: &TaskExecutor) -> Option<&WorkflowExecutor> {
        executor.workflow.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Variables {
        Variables::new()
            .with("task", json!({"name": "t1", "namespace": "ns"}))
            .with("input", json!({"n": 3}))
    }

    #[test]
    fn the_workflow_is_built_from_the_template() {
        let template = json!({
            "metadata": {"generateName": "x-", "namespace": "elsewhere", "labels": {"a": "b"}},
            "spec": {"entrypoint": "main", "podMetadata": {"labels": {"sluice.dev/queue": "smuggled"}},
                "templates": [{"name": "main", "container": {"image": "busybox", "args": ["echo", "${input.n}"]}}]},
        });
        let owner = json!({"kind": "Task", "name": "t1"});
        let wf =
            build_workflow(&template, "t1-wf", "t1", Some("q"), owner.clone(), &vars()).unwrap();
        assert_eq!(wf["apiVersion"], "argoproj.io/v1alpha1");
        assert_eq!(wf["kind"], "Workflow");
        assert_eq!(wf["metadata"]["name"], "t1-wf");
        assert!(wf["metadata"].get("generateName").is_none());
        assert!(wf["metadata"].get("namespace").is_none());
        assert_eq!(wf["metadata"]["ownerReferences"], json!([owner]));
        assert_eq!(wf["metadata"]["labels"]["a"], "b");
        assert_eq!(wf["spec"]["podMetadata"]["labels"]["sluice.dev/queue"], "q");
        assert_eq!(wf["spec"]["podMetadata"]["labels"]["sluice.dev/task"], "t1");
        assert_eq!(wf["spec"]["templates"][0]["container"]["args"][1], "3");
        let unqueued = build_workflow(&template, "t1-wf", "t1", None, json!({}), &vars()).unwrap();
        assert!(
            unqueued["spec"]["podMetadata"]["labels"]
                .get("sluice.dev/queue")
                .is_none()
        );
    }

    #[test]
    fn abusive_templates_are_refused() {
        let bad = |t: Value| {
            build_workflow(&t, "w", "t", None, json!({}), &vars())
                .expect_err("refused")
                .to_string()
        };
        assert!(bad(json!("a string")).contains("must be an object"));
        assert!(bad(json!({"metadata": {}})).contains("spec is missing"));
        assert!(
            bad(json!({"spec": {}, "status": {"phase": "Succeeded"}})).contains("template.status")
        );
        assert!(
            bad(json!({"spec": {"podMetadata": []}})).contains("podMetadata must be an object")
        );
        assert!(bad(json!({"spec": {"entrypoint": "${task.nope}"}})).contains("${task.nope}"));
        assert!(workflow_name(&"x".repeat(100)).len() <= 45);
    }

    #[test]
    fn progress_follows_the_phase_and_outputs_are_the_result() {
        let wf = |phase: &str, nodes: Value| {
            json!({"metadata": {"name": "w"}, "status": {"phase": phase, "progress": "1/2",
                "message": "child failed", "nodes": nodes}})
        };
        assert_eq!(
            workflow_progress(&json!({"metadata": {"name": "w"}})),
            Progress::Running("workflow created, not picked up by Argo yet".into())
        );
        assert_eq!(
            workflow_progress(&wf("Running", json!({}))),
            Progress::Running("workflow running (1/2 steps done)".into())
        );
        let nodes = json!({"w": {"outputs": {"parameters": [
            {"name": "count", "value": "3"}, {"name": "word", "value": "hi"}, {"name": "none"}]}}});
        let Progress::Done(done) = workflow_progress(&wf("Succeeded", nodes)) else {
            panic!("done")
        };
        assert!(done.success);
        assert_eq!(done.result, Some(json!({"count": 3, "word": "hi"})));
        let Progress::Done(failed) = workflow_progress(&wf("Failed", json!({}))) else {
            panic!("done")
        };
        assert!(!failed.success);
        assert_eq!(failed.message, "workflow failed: child failed");
        assert_eq!(failed.result, None);
    }
}
