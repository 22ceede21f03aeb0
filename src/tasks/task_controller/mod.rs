//! The Task controller: drives every Task through Staging → Running → Success / Failed, and
//! Killing → Killed on `spec.killTimestamp` or `spec.timeout`.
//!
//! Restart safety: every reconcile reads the Task fresh from the API server, and every status write
//! is a server-side apply guarded by the resourceVersion it was based on (a stale view conflicts
//! instead of acting twice). The executor's handle is written (phase Running) before the executor
//! acts, and its `uid` once it has; a restarted controller resumes from there (see
//! [`super::executors`]).
//!
//! A reconcile reads the Task, validates its executor, decides the [`Step`] from the recorded
//! status alone ([`next_step`], pure), and runs that one step: stage (resolve the inputs, plan,
//! record the handle), start, observe, kill or finish. The statuses each step writes are built by
//! pure functions beside it.
//!
//! Split by concern: [`decide`] (pure: what one reconcile does, deadlines), [`status`] (pure: the
//! statuses each step writes), [`pass`] (one reconcile's I/O: reading inputs, driving the
//! executor, writing the status); this file wires the controller and its watches.

mod decide;
mod pass;
mod status;

pub use decide::{Act, Step, check_timeout, kill_reason, next_step};

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::executors::{ExecError, Executors, HttpRuntime};
use super::metrics::TaskMetrics;
use crate::api::{TASK_CLUSTER_LABEL, TASK_LABEL, Task, TaskObject, TaskPhase};
use decide::{now, resync_after};
use pass::{Pass, WriteGuard, Writer, read_open};

/// Field manager of the Task controller's status writes.
pub const TASK_FIELD_MANAGER: &str = "sluice-tasks";

/// The longest a Task that is not finished goes without a look.
pub(crate) const RESYNC: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("Task has no namespace")]
    NoNamespace,
    #[error("{what} of Task {namespace}/{name}: {source}")]
    Api {
        what: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Task {namespace}/{name}: {source}")]
    Executor {
        namespace: String,
        name: String,
        #[source]
        source: ExecError,
    },
}

pub struct Context {
    pub client: Client,
    pub executors: Executors,
    pub recorder: Recorder,
    pub metrics: TaskMetrics,
    /// Container Tasks pick worker slots one at a time (plan and status write together).
    pub slot_lock: tokio::sync::Mutex<()>,
}

pub async fn reconcile(object: Arc<Task>, ctx: Arc<Context>) -> Result<Action, TaskError> {
    let namespace = object.namespace().ok_or(TaskError::NoNamespace)?;
    let name = object.name_any();
    let span = info_span!("task", task = %name, %namespace);
    reconcile_task(&ctx, namespace, name).instrument(span).await
}

async fn reconcile_task(
    ctx: &Context,
    namespace: String,
    name: String,
) -> Result<Action, TaskError> {
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(task) = read_open(&api, &namespace, &name).await? else {
        return Ok(Action::await_change());
    };
    let status = task.status.clone().unwrap_or_default();
    let now = now();
    let pass = Pass {
        ctx,
        task: &task,
        writer: Writer {
            api,
            name: name.clone(),
            namespace: namespace.clone(),
            guard: std::sync::Mutex::new(WriteGuard::of(&task)),
        },
        resync: resync_after(&task, &status, now),
        status,
        namespace,
        name,
        now,
    };
    // Validate: a Task that names no executor, or several, fails at once.
    let executor = match ctx.executors.for_task(&task) {
        Ok(e) => e,
        Err(e) => return pass.fail("none", e.to_string()).await,
    };
    // The API server refuses a timeout that does not parse; one stored before that rule (or
    // past it) fails the Task rather than meaning "no timeout".
    if let Err(why) = check_timeout(&task) {
        return pass.fail(executor.kind(), why).await;
    }
    let kill = kill_reason(&task, &pass.status, now);
    let step = next_step(&pass.status, executor.kind(), kill);
    pass.drive(executor, step).await
}

fn error_policy(task: Arc<Task>, error: &TaskError, _: Arc<Context>) -> Action {
    warn!(task = %task.name_any(), namespace = ?task.namespace(), %error, "Task reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

// ---- The controller ------------------------------------------------------------------------------

/// The Tasks that read `object` as their input. Pure.
fn tasks_reading(tasks: &[Arc<Task>], object: &TaskObject) -> Vec<ObjectRef<Task>> {
    let namespace = object.namespace();
    let name = object.name_any();
    tasks
        .iter()
        .filter(|t| t.namespace() == namespace && t.spec.input.as_deref() == Some(name.as_str()))
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

/// The container Tasks a worker pod's change concerns: those on it, and those of its cluster
/// waiting for a worker. Pure.
fn tasks_of_worker(tasks: &[Arc<Task>], pod: &Pod) -> Vec<ObjectRef<Task>> {
    let namespace = pod.namespace();
    let pod_name = pod.name_any();
    let cluster = pod
        .labels()
        .get(TASK_CLUSTER_LABEL)
        .cloned()
        .unwrap_or_default();
    tasks
        .iter()
        .filter(|t| t.namespace() == namespace)
        .filter(|t| {
            let status = t.status.clone().unwrap_or_default();
            let in_cluster = t
                .spec
                .executor
                .container
                .as_ref()
                .is_some_and(|c| c.cluster == cluster);
            in_cluster
                && (status.worker.as_deref() == Some(pod_name.as_str())
                    || status.phase == TaskPhase::Staging)
        })
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

fn context(client: Client, metrics: TaskMetrics) -> Arc<Context> {
    Arc::new(Context {
        recorder: crate::events::recorder(client.clone(), "sluice-tasks"),
        client,
        executors: Executors::new(HttpRuntime::default()),
        metrics,
        slot_lock: tokio::sync::Mutex::new(()),
    })
}

/// Runs the Task controller until `shutdown`. Besides Tasks and their pods, it watches
/// TaskObjects (a Task waiting for its input) and TaskCluster workers (a Task waiting for a slot,
/// or running in the worker).
pub async fn run(client: Client, metrics: TaskMetrics, shutdown: CancellationToken) {
    let ctx = context(client.clone(), metrics);
    let controller = Controller::new(
        Api::<Task>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    let inputs_store = controller.store();
    let workers_store = inputs_store.clone();
    info!("Task controller running");
    controller
        .owns(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().labels(TASK_LABEL).any_semantic(),
        )
        .watches(
            Api::<TaskObject>::all(client.clone()),
            watcher::Config::default().any_semantic(),
            move |object: TaskObject| tasks_reading(&inputs_store.state(), &object),
        )
        .watches(
            Api::<Pod>::all(client),
            watcher::Config::default()
                .labels(TASK_CLUSTER_LABEL)
                .any_semantic(),
            move |pod: Pod| tasks_of_worker(&workers_store.state(), &pod),
        )
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    info!("Task controller stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ContainerExecutor;
    use serde_json::json;

    #[test]
    fn watched_objects_map_to_their_tasks() {
        let mut reader = Task::new("reader", Default::default());
        reader.metadata.namespace = Some("ns".into());
        reader.spec.input = Some("in".into());
        let mut waiting = Task::new("waiting", Default::default());
        waiting.metadata.namespace = Some("ns".into());
        waiting.spec.executor.container = Some(ContainerExecutor {
            cluster: "c".into(),
            ..Default::default()
        });
        let mut elsewhere = waiting.clone();
        elsewhere.metadata.namespace = Some("other".into());
        let tasks = vec![Arc::new(reader), Arc::new(waiting), Arc::new(elsewhere)];
        let mut object = TaskObject::new("in", Default::default());
        object.metadata.namespace = Some("ns".into());
        let names =
            |refs: Vec<ObjectRef<Task>>| refs.into_iter().map(|r| r.name).collect::<Vec<_>>();
        assert_eq!(names(tasks_reading(&tasks, &object)), vec!["reader"]);
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "ns",
            "labels": {"sluice.dev/task-cluster": "c"}}}))
        .expect("a pod");
        assert_eq!(names(tasks_of_worker(&tasks, &pod)), vec!["waiting"]);
    }
}
