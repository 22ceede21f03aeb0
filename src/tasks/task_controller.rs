//! The Task controller: drives every Task through Staging → Running → Success / Failed, and
//! Killing → Killed on `spec.killTimestamp` or `spec.timeout`.
//!
//! Restart safety: every reconcile reads the Task fresh from the API server, and every status write
//! is a server-side apply guarded by the resourceVersion it was based on (a stale view conflicts
//! instead of acting twice). The executor's handle is written (phase Running) before the executor
//! acts, and its `uid` once it has; a restarted controller resumes from there (see
//! [`super::executors`]).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::executors::{ExecContext, ExecError, Executors, HttpRuntime, Outcome, Plan, Progress};
use super::metrics::{ExecutorLabels, FinishedLabels, TaskMetrics};
use super::substitute::Variables;
use crate::api::{
    Condition, ConditionStatus, TASK_CLUSTER_LABEL, TASK_LABEL, Task, TaskObject, TaskPhase,
    TaskStatus,
};

/// Field manager of the Task controller's status writes.
pub const TASK_FIELD_MANAGER: &str = "sluice-tasks";

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

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

/// RFC 3339 with milliseconds: Tasks start and end within the same second.
fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// Why the Task must be killed now, if it must. Pure.
pub fn kill_reason(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<String> {
    if let Some(at) = &task.spec.kill_timestamp {
        let due = at
            .parse::<jiff::Timestamp>()
            .map(|t| t <= now)
            .unwrap_or(true);
        if due {
            return Some(format!("killed: spec.killTimestamp is {at}"));
        }
    }
    let timeout = task.spec.timeout.as_deref()?;
    let limit = crate::duration::parse_duration(timeout).ok()?;
    let started = status
        .started_at
        .as_deref()?
        .parse::<jiff::Timestamp>()
        .ok()?;
    let elapsed = now.duration_since(started);
    (elapsed.as_secs_f64() >= limit.as_secs_f64())
        .then(|| format!("killed: timeout {timeout} exceeded"))
}

/// When the Task must be looked at again for its timeout or a future killTimestamp.
fn next_deadline(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<Duration> {
    let mut deadlines = Vec::new();
    if let Some(at) = task
        .spec
        .kill_timestamp
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    {
        deadlines.push(at);
    }
    if let (Some(timeout), Some(started)) = (
        task.spec
            .timeout
            .as_deref()
            .and_then(|t| crate::duration::parse_duration(t).ok()),
        status
            .started_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok()),
    ) && let Ok(span) = jiff::SignedDuration::try_from(timeout)
        && let Ok(at) = started.checked_add(span)
    {
        deadlines.push(at);
    }
    deadlines
        .into_iter()
        .min()
        .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
        .map(|d| d + Duration::from_millis(50))
}

fn finished_condition(
    previous: &TaskStatus,
    phase: TaskPhase,
    message: &str,
    now: &str,
) -> Vec<Condition> {
    let old = previous.conditions.iter().find(|c| c.type_ == "Finished");
    let status = if phase.is_final() {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    vec![Condition::updated(
        old,
        "Finished",
        status,
        &phase.to_string(),
        message.to_string(),
        now,
    )]
}

struct Writer<'a> {
    api: Api<Task>,
    task: &'a Task,
    name: String,
    namespace: String,
}

impl Writer<'_> {
    /// Writes the whole status, guarded by the resourceVersion the decision was based on.
    async fn write(&self, status: &TaskStatus) -> Result<bool, TaskError> {
        if self.task.status.as_ref() == Some(status) {
            return Ok(true);
        }
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": self.name, "resourceVersion": self.task.resource_version()},
            "status": status,
        });
        match self
            .api
            .patch_status(
                &self.name,
                &PatchParams::apply(TASK_FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
        {
            Ok(_) => Ok(true),
            // Somebody changed the Task since it was read: decide again from the new state.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(source) => Err(TaskError::Api {
                what: "writing the status",
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            }),
        }
    }
}

async fn variables(
    client: &Client,
    task: &Task,
    namespace: &str,
) -> Result<Result<Variables, String>, TaskError> {
    let api_err = |what: &'static str| {
        let namespace = namespace.to_string();
        let name = task.name_any();
        move |source| TaskError::Api {
            what,
            namespace,
            name,
            source,
        }
    };
    let mut vars = Variables::new().with(
        "task",
        json!({"name": task.name_any(), "namespace": namespace, "uid": task.uid().unwrap_or_default()}),
    );
    if let Some(input) = &task.spec.input {
        let objects: Api<TaskObject> = Api::namespaced(client.clone(), namespace);
        match objects
            .get_opt(input)
            .await
            .map_err(api_err("reading the input"))?
        {
            Some(o) => vars = vars.with("input", o.spec.data),
            None => return Ok(Err(format!("waiting for its input: TaskObject {input}"))),
        }
    }
    if let Some(parent) = &task.spec.parent {
        let tasks: Api<Task> = Api::namespaced(client.clone(), namespace);
        let mut value = json!({"name": parent});
        if let Some(p) = tasks
            .get_opt(parent)
            .await
            .map_err(api_err("reading the parent"))?
        {
            let status = p.status.unwrap_or_default();
            value["phase"] = json!(status.phase.to_string());
            if let Some(r) = status.result {
                value["result"] = r;
            }
        }
        vars = vars.with("parent", value);
    }
    Ok(Ok(vars))
}

async fn publish(ctx: &Context, task: &Task, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &task.object_ref(&())).await {
        debug!(%e, "event not recorded");
    }
}

async fn finish(
    ctx: &Context,
    writer: &Writer<'_>,
    status: &TaskStatus,
    executor: &str,
    phase: TaskPhase,
    outcome: Outcome,
) -> Result<Action, TaskError> {
    let now = now();
    let stamp = rfc3339(now);
    let mut next = status.clone();
    if next.executor.is_none() && executor != "none" {
        next.executor = Some(executor.to_string());
    }
    next.phase = phase;
    next.message = outcome.message.clone();
    next.result = outcome.result;
    next.finished_at = Some(stamp.clone());
    next.conditions = finished_condition(status, phase, &outcome.message, &stamp);
    if !writer.write(&next).await? {
        return Ok(Action::requeue(Duration::ZERO));
    }
    ctx.metrics
        .finished
        .get_or_create(&FinishedLabels {
            executor: executor.to_string(),
            phase: phase.to_string(),
        })
        .inc();
    if let Some(started) = status
        .started_at
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    {
        ctx.metrics
            .duration_seconds
            .get_or_create(&ExecutorLabels {
                executor: executor.to_string(),
            })
            .observe(now.duration_since(started).as_secs_f64().max(0.0));
    }
    let type_ = if phase == TaskPhase::Success {
        EventType::Normal
    } else {
        EventType::Warning
    };
    publish(ctx, writer.task, type_, &phase.to_string(), outcome.message).await;
    Ok(Action::await_change())
}

pub async fn reconcile(object: Arc<Task>, ctx: Arc<Context>) -> Result<Action, TaskError> {
    let namespace = object.namespace().ok_or(TaskError::NoNamespace)?;
    let name = object.name_any();
    let api: Api<Task> = Api::namespaced(ctx.client.clone(), &namespace);
    let fresh = api.get_opt(&name).await.map_err(|source| TaskError::Api {
        what: "reading",
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    })?;
    let Some(task) = fresh else {
        return Ok(Action::await_change());
    };
    let status = task.status.clone().unwrap_or_default();
    if status.phase.is_final() || task.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let writer = Writer {
        api: api.clone(),
        task: &task,
        name: name.clone(),
        namespace: namespace.clone(),
    };
    let exec_err = |source: ExecError| TaskError::Executor {
        namespace: namespace.clone(),
        name: name.clone(),
        source,
    };
    let now_ts = now();
    let stamp = rfc3339(now_ts);
    let executor = match ctx.executors.for_task(&task) {
        Ok(e) => e,
        Err(e) => {
            let outcome = Outcome {
                success: false,
                result: None,
                message: e.to_string(),
            };
            return finish(&ctx, &writer, &status, "none", TaskPhase::Failed, outcome).await;
        }
    };
    let kind = executor.kind();
    let kill = kill_reason(&task, &status, now_ts);
    let resync = next_deadline(&task, &status, now_ts)
        .map(|d| d.min(Duration::from_secs(30)))
        .unwrap_or(Duration::from_secs(30));

    match status.phase {
        TaskPhase::Staging => {
            if let Some(reason) = kill {
                let outcome = Outcome {
                    success: false,
                    result: None,
                    message: format!("{reason} (before it started)"),
                };
                return finish(&ctx, &writer, &status, kind, TaskPhase::Killed, outcome).await;
            }
            let mut next = status.clone();
            next.executor = Some(kind.to_string());
            next.staging_at.get_or_insert_with(|| stamp.clone());
            if next.conditions.is_empty() {
                next.conditions = finished_condition(&status, TaskPhase::Staging, "", &stamp);
            }
            let vars = match variables(&ctx.client, &task, &namespace).await? {
                Ok(v) => v,
                Err(waiting) => {
                    next.message = waiting;
                    writer.write(&next).await?;
                    return Ok(Action::requeue(resync));
                }
            };
            let exec = ExecContext {
                client: &ctx.client,
                task: &task,
                namespace: namespace.clone(),
                vars: &vars,
            };
            let guard = if kind == "container" {
                Some(ctx.slot_lock.lock().await)
            } else {
                None
            };
            let plan = match executor.plan(&exec).await {
                Ok(p) => p,
                Err(e) if e.is_transient() => return Err(exec_err(e)),
                Err(e) => {
                    drop(guard);
                    let outcome = Outcome {
                        success: false,
                        result: None,
                        message: e.to_string(),
                    };
                    return finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome).await;
                }
            };
            let (handle, worker) = match plan {
                Plan::Wait(why) => {
                    next.message = why;
                    writer.write(&next).await?;
                    return Ok(Action::requeue(Duration::from_secs(5).min(resync)));
                }
                Plan::Start { handle, worker } => (handle, worker),
            };
            // Record what will run before it runs.
            next.phase = TaskPhase::Running;
            next.handle = Some(handle.clone());
            next.worker = worker;
            next.started_at = Some(stamp.clone());
            next.message = format!("starting {} {}", handle.kind, handle.name);
            next.conditions = finished_condition(&status, TaskPhase::Running, "", &stamp);
            if !writer.write(&next).await? {
                return Ok(Action::requeue(Duration::ZERO));
            }
            drop(guard);
            ctx.metrics
                .started
                .get_or_create(&ExecutorLabels {
                    executor: kind.to_string(),
                })
                .inc();
            publish(
                &ctx,
                &task,
                EventType::Normal,
                "Started",
                format!("{kind} executor: {} {}", handle.kind, handle.name),
            )
            .await;
            info!(task = %name, %namespace, executor = kind, handle = %handle.name, "Task started");
            // Act in the next reconcile, from the recorded state (the status write triggers it).
            Ok(Action::requeue(Duration::ZERO))
        }
        TaskPhase::Running => {
            let Some(handle) = status.handle.clone() else {
                let outcome = Outcome {
                    success: false,
                    result: None,
                    message: "Running without an executor handle (status edited by hand?)".into(),
                };
                return finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome).await;
            };
            if let Some(reason) = kill {
                let mut next = status.clone();
                next.phase = TaskPhase::Killing;
                next.killing_at = Some(stamp.clone());
                next.message = reason.clone();
                next.conditions = finished_condition(&status, TaskPhase::Killing, &reason, &stamp);
                if writer.write(&next).await? {
                    publish(&ctx, &task, EventType::Normal, "Killing", reason).await;
                }
                return Ok(Action::requeue(Duration::ZERO));
            }
            let vars = match variables(&ctx.client, &task, &namespace).await? {
                Ok(v) => v,
                Err(waiting) => {
                    let outcome = Outcome {
                        success: false,
                        result: None,
                        message: format!("its input went away while it ran ({waiting})"),
                    };
                    return finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome).await;
                }
            };
            let exec = ExecContext {
                client: &ctx.client,
                task: &task,
                namespace: namespace.clone(),
                vars: &vars,
            };
            if handle.uid.is_none() && kind == "http" {
                // At most once: record that the request goes out before it does. A controller
                // that restarts after this finds no request in flight and fails the Task.
                let mut next = status.clone();
                if let Some(h) = next.handle.as_mut() {
                    h.uid = Some("sent".into());
                }
                next.message = format!("request sent: {}", handle.name);
                if !writer.write(&next).await? {
                    return Ok(Action::requeue(Duration::ZERO));
                }
                if let Err(e) = executor.start(&exec, &handle).await {
                    let outcome = Outcome {
                        success: false,
                        result: None,
                        message: e.to_string(),
                    };
                    return finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome).await;
                }
                return Ok(Action::requeue(Duration::from_millis(300).min(resync)));
            }
            if handle.uid.is_none() {
                // Recorded but not (known to be) started: start it (idempotent), then record that.
                let uid = match executor.start(&exec, &handle).await {
                    Ok(uid) => uid,
                    Err(e) if e.is_transient() => return Err(exec_err(e)),
                    Err(e) => {
                        let outcome = Outcome {
                            success: false,
                            result: None,
                            message: e.to_string(),
                        };
                        return finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome)
                            .await;
                    }
                };
                let mut next = status.clone();
                if let Some(h) = next.handle.as_mut() {
                    h.uid = Some(uid);
                }
                next.message = format!("started {} {}", handle.kind, handle.name);
                writer.write(&next).await?;
                return Ok(Action::requeue(Duration::from_secs(1).min(resync)));
            }
            match executor.poll(&exec, &handle).await {
                Ok(Progress::Running(message)) => {
                    let mut next = status.clone();
                    next.message = message;
                    writer.write(&next).await?;
                    // Objects of any kind are polled (no watch per kind); an HTTP request in
                    // flight is looked at often, its end is not an API event.
                    let poll = match kind {
                        "resource" => Duration::from_secs(1),
                        "http" => Duration::from_millis(300),
                        _ => Duration::from_secs(10),
                    };
                    Ok(Action::requeue(poll.min(resync)))
                }
                Ok(Progress::Done(outcome)) => {
                    let phase = if outcome.success {
                        TaskPhase::Success
                    } else {
                        TaskPhase::Failed
                    };
                    finish(&ctx, &writer, &status, kind, phase, outcome).await
                }
                Err(e) if e.is_transient() => Err(exec_err(e)),
                Err(e) => {
                    let outcome = Outcome {
                        success: false,
                        result: None,
                        message: e.to_string(),
                    };
                    finish(&ctx, &writer, &status, kind, TaskPhase::Failed, outcome).await
                }
            }
        }
        TaskPhase::Killing => {
            let vars = Variables::new();
            let exec = ExecContext {
                client: &ctx.client,
                task: &task,
                namespace: namespace.clone(),
                vars: &vars,
            };
            let gone = match &status.handle {
                Some(handle) => executor.kill(&exec, handle).await.map_err(exec_err)?,
                None => true,
            };
            if !gone {
                return Ok(Action::requeue(Duration::from_millis(500)));
            }
            let outcome = Outcome {
                success: false,
                result: status.result.clone(),
                message: status.message.clone(),
            };
            finish(&ctx, &writer, &status, kind, TaskPhase::Killed, outcome).await
        }
        TaskPhase::Success | TaskPhase::Failed | TaskPhase::Killed => Ok(Action::await_change()),
    }
}

fn error_policy(task: Arc<Task>, error: &TaskError, _: Arc<Context>) -> Action {
    warn!(task = %task.name_any(), %error, "Task reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

/// Runs the Task controller until `shutdown`.
pub async fn run(client: Client, metrics: TaskMetrics, shutdown: CancellationToken) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        executors: Executors::new(HttpRuntime::default()),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "sluice-tasks".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        metrics,
        slot_lock: tokio::sync::Mutex::new(()),
    });
    let controller = Controller::new(
        Api::<Task>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    let store = controller.store();
    let inputs_store = store.clone();
    let workers_store = store.clone();
    info!("Task controller running");
    controller
        .owns(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().labels(TASK_LABEL).any_semantic(),
        )
        .watches(
            Api::<TaskObject>::all(client.clone()),
            watcher::Config::default().any_semantic(),
            move |object: TaskObject| {
                let namespace = object.namespace();
                let name = object.name_any();
                inputs_store
                    .state()
                    .into_iter()
                    .filter(|t| {
                        t.namespace() == namespace && t.spec.input.as_deref() == Some(name.as_str())
                    })
                    .map(|t| ObjectRef::from_obj(t.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default()
                .labels(TASK_CLUSTER_LABEL)
                .any_semantic(),
            move |pod: Pod| {
                let namespace = pod.namespace();
                let pod_name = pod.name_any();
                let cluster = pod
                    .labels()
                    .get(TASK_CLUSTER_LABEL)
                    .cloned()
                    .unwrap_or_default();
                workers_store
                    .state()
                    .into_iter()
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
                    .collect::<Vec<_>>()
            },
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

    fn task(kill: Option<&str>, timeout: Option<&str>) -> Task {
        let mut t = Task::new("t", Default::default());
        t.spec.kill_timestamp = kill.map(str::to_string);
        t.spec.timeout = timeout.map(str::to_string);
        t
    }

    #[test]
    fn kill_by_timestamp_and_timeout() {
        let now: jiff::Timestamp = "2025-01-01T00:01:00Z".parse().unwrap();
        let running = TaskStatus {
            phase: TaskPhase::Running,
            started_at: Some("2025-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert_eq!(kill_reason(&task(None, None), &running, now), None);
        assert!(kill_reason(&task(Some("2025-01-01T00:00:30Z"), None), &running, now).is_some());
        assert_eq!(
            kill_reason(&task(Some("2025-01-01T00:05:00Z"), None), &running, now),
            None
        );
        assert_eq!(
            kill_reason(&task(None, Some("30s")), &running, now).as_deref(),
            Some("killed: timeout 30s exceeded")
        );
        assert_eq!(kill_reason(&task(None, Some("5m")), &running, now), None);
        // Not started: a timeout does not run yet.
        assert_eq!(
            kill_reason(&task(None, Some("1s")), &TaskStatus::default(), now),
            None
        );
        let d = next_deadline(&task(None, Some("5m")), &running, now).unwrap();
        assert!(
            d > Duration::from_secs(239) && d < Duration::from_secs(241),
            "{d:?}"
        );
    }
}
