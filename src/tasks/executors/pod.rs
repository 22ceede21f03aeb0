//! `pod`: the Task runs as its own pod, owned by the Task. With `queue` set, the pod carries the
//! label `sluice.dev/queue` and goes through the sluice gate like any other pod. The result is the
//! termination message of the pod's first container (JSON when it is JSON).

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use super::owned::{Target, create_or_adopt, get_owned, kill_owned};
use super::{
    ExecContext, ExecError, ExecResult, ExecutorSteps, Outcome, Plan, Progress, bounded_name,
    parse_result, unless_deleting,
};
use crate::api::{ADMISSION_GATE, PodExecutor, QUEUE_LABEL, TASK_LABEL, TaskExecutor, TaskHandle};
use crate::tasks::substitute::{Variables, substitute_json};

pub struct PodExecutorImpl;

/// The pod a Task runs as.
pub fn pod_name(task: &str) -> String {
    bounded_name(&format!("{task}-task"), 63)
}

/// Environment every Task container gets: who it is, for `sluice task`.
pub fn task_env(task: &str, namespace: &str) -> Vec<Value> {
    vec![
        json!({"name": "SLUICE_TASK_NAME", "value": task}),
        json!({"name": "SLUICE_TASK_NAMESPACE", "value": namespace}),
    ]
}

/// The pod to create. Pure.
pub fn build_pod(
    spec: &PodExecutor,
    task: &str,
    namespace: &str,
    owner: Value,
    vars: &Variables,
) -> Result<Value, ExecError> {
    let mut pod = substitute_json(&spec.template, vars, "pod.template")?;
    let Some(object) = pod.as_object_mut() else {
        return Err(ExecError::Invalid(
            "pod.template must be an object with metadata and spec".into(),
        ));
    };
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!("Pod"));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err(ExecError::Invalid(
            "pod.template.metadata must be an object".into(),
        ));
    };
    metadata.remove("generateName");
    metadata.insert("name".into(), json!(pod_name(task)));
    metadata.insert("namespace".into(), json!(namespace));
    metadata.insert("ownerReferences".into(), json!([owner]));
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let Some(labels) = labels.as_object_mut() else {
        return Err(ExecError::Invalid(
            "pod.template.metadata.labels must be an object".into(),
        ));
    };
    labels.insert(TASK_LABEL.into(), json!(task));
    if let Some(queue) = &spec.queue {
        labels.insert(QUEUE_LABEL.into(), json!(queue));
    }
    let Some(pod_spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(ExecError::Invalid("pod.template.spec is missing".into()));
    };
    pod_spec
        .entry("restartPolicy")
        .or_insert_with(|| json!("Never"));
    let Some(containers) = pod_spec.get_mut("containers").and_then(Value::as_array_mut) else {
        return Err(ExecError::Invalid(
            "pod.template.spec.containers is missing".into(),
        ));
    };
    if containers.is_empty() {
        return Err(ExecError::Invalid(
            "pod.template.spec.containers is empty".into(),
        ));
    }
    for container in containers {
        if let Some(c) = container.as_object_mut() {
            let env = c.entry("env").or_insert_with(|| json!([]));
            if let Some(env) = env.as_array_mut() {
                env.extend(task_env(task, namespace));
            }
        }
    }
    // Validate the shape now: a clear failure instead of an API error later.
    serde_json::from_value::<Pod>(pod.clone())
        .map_err(|e| ExecError::Invalid(format!("pod.template is not a valid pod: {e}")))?;
    Ok(pod)
}

/// The outcome of an ended pod, or None while it has not ended. Pure.
pub fn pod_progress(pod: &Pod) -> Progress {
    let status = pod.status.clone().unwrap_or_default();
    let first_terminated = status
        .container_statuses
        .as_ref()
        .and_then(|s| s.first())
        .and_then(|s| s.state.as_ref())
        .and_then(|s| s.terminated.clone());
    let result = first_terminated
        .as_ref()
        .and_then(|t| t.message.as_deref())
        .and_then(parse_result);
    match status.phase.as_deref() {
        Some("Succeeded") => Progress::Done(Outcome {
            success: true,
            result,
            message: "pod succeeded".into(),
        }),
        Some("Failed") => {
            let detail = first_terminated
                .map(|t| {
                    format!(
                        "exit code {}{}",
                        t.exit_code,
                        t.reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    )
                })
                .or(status.message.clone())
                .unwrap_or_else(|| "no detail".into());
            Progress::Done(Outcome {
                success: false,
                result,
                message: format!("pod failed: {detail}"),
            })
        }
        phase => {
            let gated = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE));
            Progress::Running(if gated {
                "pod waits for quota behind the sluice gate".into()
            } else {
                format!("pod {}", phase.unwrap_or("Pending"))
            })
        }
    }
}

impl ExecutorSteps for PodExecutorImpl {
    const KIND: &'static str = "pod";
    type Spec = PodExecutor;

    async fn plan(&self, ctx: &ExecContext<'_>, spec: &PodExecutor) -> ExecResult<Plan> {
        // Fail now on a bad template, before anything is recorded.
        build(ctx, spec)?;
        let pod = pod_name(&ctx.task_name());
        Ok(Plan::Start {
            handle: TaskHandle {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.clone(),
                ..Default::default()
            },
            worker: Some(pod),
        })
    }

    async fn start(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<String> {
        let spec = Self::spec(ctx)?;
        let pod: Pod = serde_json::from_value(build(ctx, spec)?)
            .map_err(|e| ExecError::Invalid(format!("pod.template: {e}")))?;
        // A pod the API server refuses is retried, as any API error.
        create_or_adopt(&ctx.pods(), &pod, target(handle), ctx.task, &[]).await
    }

    async fn poll(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<Progress> {
        let pod = get_owned(&ctx.pods(), target(handle), ctx.task).await?;
        let deleted = || Progress::Gone(format!("pod {} was deleted before it ended", handle.name));
        Ok(match pod {
            Some(pod) => unless_deleting(
                pod_progress(&pod),
                pod.metadata.deletion_timestamp.is_some(),
                deleted,
            ),
            None => deleted(),
        })
    }

    async fn kill(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<bool> {
        let params = DeleteParams::default();
        kill_owned(&ctx.pods(), target(handle), ctx.task, &params).await
    }

    fn spec_of(executor: &TaskExecutor) -> Option<&PodExecutor> {
        executor.pod.as_ref()
    }
}

/// The Task's pod, built from its template.
fn build(ctx: &ExecContext<'_>, spec: &PodExecutor) -> Result<Value, ExecError> {
    let owner = ctx.owner_reference();
    build_pod(spec, &ctx.task_name(), &ctx.namespace, owner, ctx.vars)
}

fn target(handle: &TaskHandle) -> Target<'_> {
    Target {
        what: "pod",
        name: &handle.name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builds_a_governed_owned_pod() {
        let spec = PodExecutor {
            queue: Some("q".into()),
            template: json!({
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "main", "image": "busybox", "args": ["${input.n}"]}]},
            }),
        };
        let vars = Variables::new().with("input", json!({"n": 7}));
        let pod = build_pod(
            &spec,
            "t1",
            "ns",
            json!({"kind": "Task", "uid": "u"}),
            &vars,
        )
        .unwrap();
        assert_eq!(pod["metadata"]["name"], "t1-task");
        assert_eq!(pod["metadata"]["labels"]["sluice.dev/queue"], "q");
        assert_eq!(pod["metadata"]["labels"]["sluice.dev/task"], "t1");
        assert_eq!(pod["metadata"]["labels"]["app"], "x");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["containers"][0]["args"][0], "7");
        assert_eq!(pod["spec"]["containers"][0]["env"][0]["value"], "t1");
        let empty = PodExecutor {
            queue: None,
            template: json!({"spec": {"containers": []}}),
        };
        assert!(build_pod(&empty, "t", "ns", json!({}), &vars).is_err());
    }

    #[test]
    fn progress_from_pod_status() {
        let mut pod: Pod = serde_json::from_value(json!({
            "spec": {"containers": [], "schedulingGates": [{"name": "sluice.dev/admission"}]},
            "status": {"phase": "Pending"},
        }))
        .unwrap();
        assert!(matches!(pod_progress(&pod), Progress::Running(m) if m.contains("gate")));
        pod.status = serde_json::from_value(json!({
            "phase": "Succeeded",
            "containerStatuses": [{"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "message": "{\"count\": 1}"}}}],
        }))
        .unwrap();
        assert_eq!(
            pod_progress(&pod),
            Progress::Done(Outcome {
                success: true,
                result: Some(json!({"count": 1})),
                message: "pod succeeded".into()
            })
        );
        pod.status =
            serde_json::from_value(json!({"phase": "Failed", "message": "evicted"})).unwrap();
        assert!(
            matches!(pod_progress(&pod), Progress::Done(o) if !o.success && o.message.contains("evicted"))
        );
    }
}
