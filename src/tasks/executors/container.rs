//! `container`: the Task runs as an ephemeral container in a worker pod of its TaskCluster (the
//! seed's mechanism). The controller picks an admitted, running worker with a free slot and below
//! `maxTasksPerWorker`, adds the container through the pod's `ephemeralcontainers` subresource and
//! reads its status; the result is the container's termination message (JSON when it is JSON).
//!
//! An ephemeral container can be neither removed nor stopped: a kill deletes the worker pod (the
//! TaskCluster controller replaces it). With `slotsPerWorker` above 1 that ends the worker's other
//! Tasks too (they end Killed: "worker ... was deleted").

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::owned::{Target, delete_until_gone};
use super::pod::task_env;
use super::{
    ExecContext, ExecError, ExecResult, ExecutorSteps, Outcome, Plan, Progress, bounded_name,
    parse_result,
};
use crate::api::{
    ContainerExecutor, TASK_CLUSTER_LABEL, Task, TaskCluster, TaskClusterSpec, TaskExecutor,
    TaskHandle,
};
use crate::tasks::substitute::{Variables, substitute, substitute_json};
use crate::tasks::workers::{choose_worker, free_slots, waiting_ahead, workers};

#[derive(Default)]
pub struct ContainerExecutorImpl;

/// The ephemeral container a Task runs as (a DNS label).
pub fn ephemeral_container_name(task: &str) -> String {
    bounded_name(&format!("t-{task}"), 63)
}

/// The ephemeral container to add to `worker` for a Task. Pure.
pub fn build_container(
    spec: &ContainerExecutor,
    task: &str,
    namespace: &str,
    worker: &Pod,
    vars: &Variables,
) -> Result<Value, ExecError> {
    let first = worker
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .ok_or_else(|| ExecError::Invalid("the worker pod has no container".into()))?;
    let image = match &spec.image {
        Some(i) => substitute(i, vars, "container.image")?,
        None => first.image.clone().ok_or_else(|| {
            ExecError::Invalid(
                "container.image is not set and the worker's container has none".into(),
            )
        })?,
    };
    let command = substitute_json(&json!(spec.command), vars, "container.command")?;
    let args = substitute_json(&json!(spec.args), vars, "container.args")?;
    let mut env = task_env(task, namespace);
    for (k, v) in &spec.env {
        env.push(json!({"name": k, "value": substitute(v, vars, &format!("container.env.{k}"))?}));
    }
    let mut container = json!({
        "name": ephemeral_container_name(task),
        "image": image,
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    });
    if !spec.command.is_empty() {
        container["command"] = command;
    }
    if !spec.args.is_empty() {
        container["args"] = args;
    }
    // The worker's mounts (its ServiceAccount token among them): Task code talks to the API.
    if let Some(mounts) = &first.volume_mounts {
        container["volumeMounts"] = json!(mounts);
    }
    Ok(container)
}

/// Where the Task's container stands. Pure.
pub fn container_progress(pod: &Pod, container: &str) -> Progress {
    if !pod
        .spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.name == container))
    {
        return Progress::Running("adding the container to the worker".into());
    }
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .and_then(|s| s.iter().find(|s| s.name == container));
    let Some(state) = status.and_then(|s| s.state.as_ref()) else {
        return Progress::Running("container created, not started yet".into());
    };
    if let Some(t) = &state.terminated {
        let result = t.message.as_deref().and_then(parse_result);
        return Progress::Done(if t.exit_code == 0 {
            Outcome {
                success: true,
                result,
                message: "container exited 0".into(),
            }
        } else {
            Outcome {
                success: false,
                result,
                message: format!(
                    "container exited {}{}",
                    t.exit_code,
                    t.reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
            }
        });
    }
    if let Some(w) = &state.waiting {
        return Progress::Running(format!(
            "container waiting: {}",
            w.reason.clone().unwrap_or_default()
        ));
    }
    Progress::Running("container running".into())
}

/// The cluster's worker pods and the namespace's Tasks, from the API server.
async fn read_cluster(
    ctx: &ExecContext<'_>,
    cluster: &str,
) -> Result<(Vec<Pod>, Vec<Task>), ExecError> {
    let selector = format!("{TASK_CLUSTER_LABEL}={cluster}");
    let pods = ctx
        .pods()
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(ExecError::api("listing worker pods"))?
        .items;
    let tasks: Api<Task> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let tasks = tasks
        .list(&ListParams::default())
        .await
        .map_err(ExecError::api("listing Tasks"))?
        .items;
    Ok((pods, tasks))
}

/// The worker `me` runs on, or (Err) why it waits. Strictly in creation order: an older Task
/// waiting takes the next slot. Pure.
pub fn pick_worker(
    cluster: &str,
    spec: &TaskClusterSpec,
    pods: &[Pod],
    tasks: &[Task],
    me: &Task,
) -> Result<String, String> {
    let ws = workers(pods, tasks);
    let ahead = waiting_ahead(tasks, cluster, me);
    if ahead > 0 {
        let free = free_slots(&ws, spec);
        return Err(format!(
            "TaskCluster {cluster}: {ahead} older Task(s) go first ({free} free slot(s))"
        ));
    }
    choose_worker(&ws, spec).map_err(|why| format!("TaskCluster {cluster}: {why}"))
}

impl ExecutorSteps for ContainerExecutorImpl {
    const KIND: &'static str = "container";
    type Spec = ContainerExecutor;

    /// Reads the cluster's workers and the namespace's Tasks from the API server (not a cache):
    /// the controller serialises container planning, so two Tasks never take the same slot.
    async fn plan(&self, ctx: &ExecContext<'_>, spec: &ContainerExecutor) -> ExecResult<Plan> {
        let clusters: Api<TaskCluster> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
        let Some(cluster) = clusters
            .get_opt(&spec.cluster)
            .await
            .map_err(ExecError::api(format!(
                "reading TaskCluster {}",
                spec.cluster
            )))?
        else {
            return Ok(Plan::Wait(format!(
                "waiting for TaskCluster {} to exist",
                spec.cluster
            )));
        };
        let (pods, tasks) = read_cluster(ctx, &spec.cluster).await?;
        let worker = match pick_worker(&spec.cluster, &cluster.spec, &pods, &tasks, ctx.task) {
            Ok(worker) => worker,
            Err(why) => return Ok(Plan::Wait(why)),
        };
        // Validate substitution now, before anything is recorded.
        if let Some(pod) = pods.iter().find(|p| p.name_any() == worker) {
            build_container(spec, &ctx.task_name(), &ctx.namespace, pod, ctx.vars)?;
        }
        Ok(Plan::Start {
            handle: TaskHandle {
                api_version: "v1".into(),
                kind: "EphemeralContainer".into(),
                name: worker.clone(),
                container: Some(ephemeral_container_name(&ctx.task_name())),
                uid: None,
            },
            worker: Some(worker),
        })
    }

    async fn start(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<String> {
        let spec = Self::spec(ctx)?;
        let Some(pod) = ctx.get_pod("worker", &handle.name).await? else {
            return Err(ExecError::Invalid(format!(
                "worker {} is gone",
                handle.name
            )));
        };
        let name = ephemeral_container_name(&ctx.task_name());
        let present = pod
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.name == name));
        let uid = pod.uid().unwrap_or_default();
        if present {
            return Ok(uid);
        }
        let container = build_container(spec, &ctx.task_name(), &ctx.namespace, &pod, ctx.vars)?;
        let patch = json!({"spec": {"ephemeralContainers": [container]}});
        ctx.pods()
            .patch_ephemeral_containers(
                &handle.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(ExecError::api(format!(
                "adding ephemeral container {name} to worker {}",
                handle.name
            )))?;
        Ok(uid)
    }

    async fn poll(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<Progress> {
        let pod = ctx.get_pod("worker", &handle.name).await?;
        let container = handle.container.clone().unwrap_or_default();
        Ok(match pod {
            Some(pod) if pod.metadata.deletion_timestamp.is_none() => {
                container_progress(&pod, &container)
            }
            _ => Progress::Gone(format!(
                "worker {} was deleted before the Task ended",
                handle.name
            )),
        })
    }

    async fn kill(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> ExecResult<bool> {
        let pod = ctx.get_pod("worker", &handle.name).await?;
        let Some(pod) = pod else { return Ok(true) };
        let container = handle.container.clone().unwrap_or_default();
        if matches!(container_progress(&pod, &container), Progress::Done(_)) {
            return Ok(true);
        }
        // An ephemeral container cannot be stopped: its worker goes, at once.
        let worker = Target {
            what: "worker",
            name: &handle.name,
        };
        let params = DeleteParams::default().grace_period(0);
        delete_until_gone(&ctx.pods(), &pod, worker, &params).await
    }

    fn spec_of(executor: &TaskExecutor) -> Option<&ContainerExecutor> {
        executor.container.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "w0"},
            "spec": {"containers": [{"name": "worker", "image": "sluice-worker:dev",
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}]},
        }))
        .unwrap()
    }

    #[test]
    fn builds_the_ephemeral_container() {
        let spec = ContainerExecutor {
            cluster: "c".into(),
            image: None,
            command: vec!["sluice".into(), "task".into(), "run-counter".into()],
            args: vec!["${input.count}".into()],
            env: [("LIMIT".to_string(), "${input.limit}".to_string())].into(),
        };
        let vars = Variables::new().with("input", json!({"count": 1, "limit": 10}));
        let c = build_container(&spec, "task-1", "demo", &worker(), &vars).unwrap();
        assert_eq!(c["name"], "t-task-1");
        assert_eq!(c["image"], "sluice-worker:dev");
        assert_eq!(c["args"][0], "1");
        assert_eq!(c["env"][0]["value"], "task-1");
        assert_eq!(c["env"][2]["name"], "LIMIT");
        assert_eq!(c["env"][2]["value"], "10");
        assert_eq!(c["volumeMounts"][0]["name"], "kube-api-access");
        let bad = ContainerExecutor {
            args: vec!["${input.nope}".into()],
            ..spec
        };
        assert!(build_container(&bad, "t", "demo", &worker(), &vars).is_err());
    }

    #[test]
    fn progress_from_ephemeral_container_status() {
        let mut pod = worker();
        assert!(matches!(
            container_progress(&pod, "t-x"),
            Progress::Running(_)
        ));
        pod.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
            serde_json::from_value(json!({"name": "t-x", "image": "i"})).unwrap(),
        ]);
        assert!(
            matches!(container_progress(&pod, "t-x"), Progress::Running(m) if m.contains("not started"))
        );
        pod.status = serde_json::from_value(json!({"ephemeralContainerStatuses": [
            {"name": "t-x", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "message": "{\"count\": 2}"}}}]}))
        .unwrap();
        assert_eq!(
            container_progress(&pod, "t-x"),
            Progress::Done(Outcome {
                success: true,
                result: Some(json!({"count": 2})),
                message: "container exited 0".into()
            })
        );
        pod.status = serde_json::from_value(json!({"ephemeralContainerStatuses": [
            {"name": "t-x", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
             "state": {"terminated": {"exitCode": 3, "reason": "Error", "message": "boom"}}}]}))
        .unwrap();
        assert!(
            matches!(container_progress(&pod, "t-x"), Progress::Done(o) if !o.success && o.message == "container exited 3 (Error)")
        );
    }

    #[test]
    fn workers_go_to_tasks_in_creation_order() {
        let spec = TaskClusterSpec {
            min_workers: 1,
            max_workers: 2,
            slots_per_worker: 1,
            max_tasks_per_worker: 5,
            idle_timeout: "30s".into(),
            template: json!({}),
        };
        let mut w = worker();
        w.status = serde_json::from_value(json!({"phase": "Running"})).unwrap();
        let staged = |name: &str, created: &str| {
            let mut t = Task::new(name, Default::default());
            t.spec.executor.container = Some(ContainerExecutor {
                cluster: "c".into(),
                ..Default::default()
            });
            t.metadata.creation_timestamp = Some(serde_json::from_value(json!(created)).unwrap());
            t
        };
        let older = staged("a", "2025-01-01T00:00:00Z");
        let newer = staged("b", "2025-01-01T00:00:01Z");
        let tasks = vec![older.clone(), newer.clone()];
        assert_eq!(
            pick_worker("c", &spec, std::slice::from_ref(&w), &tasks, &older),
            Ok("w0".into())
        );
        assert_eq!(
            pick_worker("c", &spec, std::slice::from_ref(&w), &tasks, &newer),
            Err("TaskCluster c: 1 older Task(s) go first (1 free slot(s))".into())
        );
        assert!(
            pick_worker("c", &spec, &[], &tasks, &older)
                .is_err_and(|why| why.starts_with("TaskCluster c: waiting for a free worker"))
        );
    }
}
