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
use tracing::{Instrument, debug, info, info_span, warn};

use super::executors::{
    ExecContext, ExecError, Executor, Executors, HttpRuntime, Outcome, Plan, Progress,
};
use super::metrics::TaskMetrics;
use super::substitute::Variables;
use crate::api::{
    Condition, ConditionStatus, TASK_CLUSTER_LABEL, TASK_LABEL, Task, TaskHandle, TaskObject,
    TaskPhase, TaskStatus,
};

/// Field manager of the Task controller's status writes.
pub const TASK_FIELD_MANAGER: &str = "sluice-tasks";

/// The longest a Task that is not finished goes without a look.
const RESYNC: Duration = Duration::from_secs(30);

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

fn parse_time(text: Option<&str>) -> Option<jiff::Timestamp> {
    text?.parse().ok()
}

// ---- Pure decisions ----------------------------------------------------------------------------

/// Why the Task must be killed now, if it must. Pure.
pub fn kill_reason(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<String> {
    if let Some(at) = &task.spec.kill_timestamp {
        // An unreadable killTimestamp kills at once: it was set to kill.
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
    let started = parse_time(status.started_at.as_deref())?;
    let elapsed = now.duration_since(started);
    (elapsed.as_secs_f64() >= limit.as_secs_f64())
        .then(|| format!("killed: timeout {timeout} exceeded"))
}

/// When the Task must be looked at again for its timeout or a future killTimestamp. Pure.
fn next_deadline(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Option<Duration> {
    let kill_at = parse_time(task.spec.kill_timestamp.as_deref());
    let timeout = task
        .spec
        .timeout
        .as_deref()
        .and_then(|t| crate::duration::parse_duration(t).ok())
        .and_then(|t| jiff::SignedDuration::try_from(t).ok());
    let timeout_at = match (timeout, parse_time(status.started_at.as_deref())) {
        (Some(span), Some(started)) => started.checked_add(span).ok(),
        _ => None,
    };
    kill_at
        .into_iter()
        .chain(timeout_at)
        .min()
        .map(|at| Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
        .map(|d| d + Duration::from_millis(50))
}

/// The latest the Task is looked at again: its next deadline, at most [`RESYNC`]. Pure.
fn resync_after(task: &Task, status: &TaskStatus, now: jiff::Timestamp) -> Duration {
    next_deadline(task, status, now).map_or(RESYNC, |d| d.min(RESYNC))
}

/// What a running executor does in this reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// An HTTP request not sent yet: record that it goes, then send it (at most once).
    SendOnce,
    /// Recorded but not known to be started: start it (idempotent), then record that.
    Start,
    /// Started: read its progress.
    Observe,
}

/// What one reconcile does, decided from the recorded status alone.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Killed while Staging: it ends Killed without having run.
    KillBeforeStart(String),
    /// Wait for the input and a slot, then record the handle (phase Running).
    Stage,
    /// Running without a handle: nothing can be resumed, it fails.
    FailNoHandle,
    /// Running and to be killed: record Killing first.
    BeginKill(String),
    /// Running: drive the executor on the recorded handle.
    Act(Act, TaskHandle),
    /// Killing: kill until the work is gone, then Killed.
    Kill,
    /// Ended: nothing to do.
    Nothing,
}

/// The step for a Task in `status` run by an `executor` (its kind), given why it must be killed
/// now, if it must. Pure.
pub fn next_step(status: &TaskStatus, executor: &str, kill: Option<String>) -> Step {
    match status.phase {
        TaskPhase::Staging => kill.map_or(Step::Stage, Step::KillBeforeStart),
        TaskPhase::Running => {
            let Some(handle) = &status.handle else {
                return Step::FailNoHandle;
            };
            if let Some(reason) = kill {
                return Step::BeginKill(reason);
            }
            let act = match (&handle.uid, executor) {
                (None, "http") => Act::SendOnce,
                (None, _) => Act::Start,
                (Some(_), _) => Act::Observe,
            };
            Step::Act(act, handle.clone())
        }
        TaskPhase::Killing => Step::Kill,
        TaskPhase::Success | TaskPhase::Failed | TaskPhase::Killed => Step::Nothing,
    }
}

/// How often a running Task of this executor is polled. Pure.
fn poll_interval(executor: &str) -> Duration {
    // Objects of any kind are polled (no watch per kind); an HTTP request in flight is looked at
    // often, its end is not an API event; pods are watched, the poll is a backstop.
    match executor {
        "resource" => Duration::from_secs(1),
        "http" => Duration::from_millis(300),
        _ => Duration::from_secs(10),
    }
}

/// The phase an executor's outcome ends the Task in. Pure.
fn final_phase(outcome: &Outcome) -> TaskPhase {
    if outcome.success {
        TaskPhase::Success
    } else {
        TaskPhase::Failed
    }
}

fn failure(message: String) -> Outcome {
    Outcome {
        success: false,
        result: None,
        message,
    }
}

// ---- Pure status building ------------------------------------------------------------------------

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

/// Staging, with the executor and when it was first seen. Pure.
fn staging_status(status: &TaskStatus, executor: &str, stamp: &str) -> TaskStatus {
    let mut next = status.clone();
    next.executor = Some(executor.to_string());
    next.staging_at.get_or_insert_with(|| stamp.to_string());
    if next.conditions.is_empty() {
        next.conditions = finished_condition(status, TaskPhase::Staging, "", stamp);
    }
    next
}

/// Running on `handle`, recorded before the executor acts. `previous` is the status read (its
/// condition is the one updated). Pure.
fn running_status(
    staged: &TaskStatus,
    previous: &TaskStatus,
    handle: &TaskHandle,
    worker: Option<String>,
    stamp: &str,
) -> TaskStatus {
    let mut next = staged.clone();
    next.phase = TaskPhase::Running;
    next.handle = Some(handle.clone());
    next.worker = worker;
    next.started_at = Some(stamp.to_string());
    next.message = format!("starting {} {}", handle.kind, handle.name);
    next.conditions = finished_condition(previous, TaskPhase::Running, "", stamp);
    next
}

/// The handle's `uid` recorded (what the executor started), with a message. Pure.
fn acted_status(status: &TaskStatus, uid: String, message: String) -> TaskStatus {
    let mut next = status.clone();
    if let Some(h) = next.handle.as_mut() {
        h.uid = Some(uid);
    }
    next.message = message;
    next
}

/// Killing, with why. Pure.
fn killing_status(status: &TaskStatus, reason: &str, stamp: &str) -> TaskStatus {
    let mut next = status.clone();
    next.phase = TaskPhase::Killing;
    next.killing_at = Some(stamp.to_string());
    next.message = reason.to_string();
    next.conditions = finished_condition(status, TaskPhase::Killing, reason, stamp);
    next
}

/// Ended in `phase` with the executor's outcome. `executor` is "none" when the Task names no
/// valid executor. Pure.
fn finished_status(
    status: &TaskStatus,
    executor: &str,
    phase: TaskPhase,
    outcome: &Outcome,
    stamp: &str,
) -> TaskStatus {
    let mut next = status.clone();
    if next.executor.is_none() && executor != "none" {
        next.executor = Some(executor.to_string());
    }
    next.phase = phase;
    next.message = outcome.message.clone();
    next.result = outcome.result.clone();
    next.finished_at = Some(stamp.to_string());
    next.conditions = finished_condition(status, phase, &outcome.message, stamp);
    next
}

// ---- I/O -----------------------------------------------------------------------------------------

struct Writer<'a> {
    api: Api<Task>,
    task: &'a Task,
    name: String,
    namespace: String,
}

impl Writer<'_> {
    /// Writes the whole status, guarded by the resourceVersion the decision was based on. False:
    /// the Task changed since it was read (decide again from the new state).
    async fn write(&self, status: &TaskStatus) -> Result<bool, TaskError> {
        if self.task.status.as_ref() == Some(status) {
            return Ok(true);
        }
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": self.name, "resourceVersion": self.task.resource_version()},
            "status": status,
        });
        let params = PatchParams::apply(TASK_FIELD_MANAGER).force();
        match self
            .api
            .patch_status(&self.name, &params, &Patch::Apply(body))
            .await
        {
            Ok(_) => Ok(true),
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

/// The Task's variables, or (inner Err) what input it waits for.
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

/// One reconcile of one Task: what was read, and what it writes with.
struct Pass<'a> {
    ctx: &'a Context,
    task: &'a Task,
    writer: Writer<'a>,
    /// The status read (the decision's base).
    status: TaskStatus,
    namespace: String,
    name: String,
    now: jiff::Timestamp,
    resync: Duration,
}

impl Pass<'_> {
    fn exec_err(&self, source: ExecError) -> TaskError {
        TaskError::Executor {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn exec_context<'v>(&'v self, vars: &'v Variables) -> ExecContext<'v> {
        ExecContext {
            client: &self.ctx.client,
            task: self.task,
            namespace: self.namespace.clone(),
            vars,
        }
    }

    async fn drive(&self, executor: &dyn Executor, step: Step) -> Result<Action, TaskError> {
        let kind = executor.kind();
        match step {
            Step::KillBeforeStart(reason) => {
                let outcome = failure(format!("{reason} (before it started)"));
                self.finish(kind, TaskPhase::Killed, outcome).await
            }
            Step::Stage => self.stage(executor).await,
            Step::FailNoHandle => {
                let why = "Running without an executor handle (status edited by hand?)";
                self.fail(kind, why.into()).await
            }
            Step::BeginKill(reason) => self.begin_kill(reason).await,
            Step::Act(act, handle) => self.act(executor, act, &handle).await,
            Step::Kill => self.kill(executor).await,
            Step::Nothing => Ok(Action::await_change()),
        }
    }

    /// Staging: resolve the inputs, let the executor plan, and record the handle (phase Running)
    /// before anything runs; the executor acts in the next reconcile, from the recorded state.
    async fn stage(&self, executor: &dyn Executor) -> Result<Action, TaskError> {
        let kind = executor.kind();
        let stamp = rfc3339(self.now);
        let mut next = staging_status(&self.status, kind, &stamp);
        let vars = match variables(&self.ctx.client, self.task, &self.namespace).await? {
            Ok(v) => v,
            Err(waiting) => {
                next.message = waiting;
                self.writer.write(&next).await?;
                return Ok(Action::requeue(self.resync));
            }
        };
        let exec = self.exec_context(&vars);
        // Container Tasks hold the slot lock from the plan until the pick is written: two Tasks
        // never take the same slot.
        let guard = match kind {
            "container" => Some(self.ctx.slot_lock.lock().await),
            _ => None,
        };
        let (handle, worker) = match executor.plan(&exec).await {
            Ok(Plan::Start { handle, worker }) => (handle, worker),
            Ok(Plan::Wait(why)) => {
                next.message = why;
                self.writer.write(&next).await?;
                return Ok(Action::requeue(Duration::from_secs(5).min(self.resync)));
            }
            Err(e) if e.is_transient() => return Err(self.exec_err(e)),
            Err(e) => {
                drop(guard);
                return self.fail(kind, e.to_string()).await;
            }
        };
        let running = running_status(&next, &self.status, &handle, worker, &stamp);
        let recorded = self.writer.write(&running).await?;
        drop(guard);
        if recorded {
            self.started(kind, &handle).await;
        }
        Ok(Action::requeue(Duration::ZERO))
    }

    async fn started(&self, kind: &str, handle: &TaskHandle) {
        self.ctx.metrics.record_started(kind);
        let note = format!("{kind} executor: {} {}", handle.kind, handle.name);
        publish(self.ctx, self.task, EventType::Normal, "Started", note).await;
        info!(executor = kind, handle = %handle.name, "Task started");
    }

    async fn begin_kill(&self, reason: String) -> Result<Action, TaskError> {
        let next = killing_status(&self.status, &reason, &rfc3339(self.now));
        if self.writer.write(&next).await? {
            publish(self.ctx, self.task, EventType::Normal, "Killing", reason).await;
        }
        Ok(Action::requeue(Duration::ZERO))
    }

    /// Running: resolve the inputs again (the executor substitutes from them), then act.
    async fn act(
        &self,
        executor: &dyn Executor,
        act: Act,
        handle: &TaskHandle,
    ) -> Result<Action, TaskError> {
        let kind = executor.kind();
        let vars = match variables(&self.ctx.client, self.task, &self.namespace).await? {
            Ok(v) => v,
            Err(waiting) => {
                let why = format!("its input went away while it ran ({waiting})");
                return self.fail(kind, why).await;
            }
        };
        let exec = self.exec_context(&vars);
        match act {
            Act::SendOnce => self.send_once(executor, &exec, handle).await,
            Act::Start => self.start(executor, &exec, handle).await,
            Act::Observe => self.observe(executor, &exec, handle).await,
        }
    }

    /// At most once: record that the request goes out before it does. A controller that restarts
    /// after this finds no request in flight and fails the Task.
    async fn send_once(
        &self,
        executor: &dyn Executor,
        exec: &ExecContext<'_>,
        handle: &TaskHandle,
    ) -> Result<Action, TaskError> {
        let message = format!("request sent: {}", handle.name);
        let next = acted_status(&self.status, "sent".into(), message);
        if !self.writer.write(&next).await? {
            return Ok(Action::requeue(Duration::ZERO));
        }
        if let Err(e) = executor.start(exec, handle).await {
            return self.fail(executor.kind(), e.to_string()).await;
        }
        Ok(Action::requeue(Duration::from_millis(300).min(self.resync)))
    }

    async fn start(
        &self,
        executor: &dyn Executor,
        exec: &ExecContext<'_>,
        handle: &TaskHandle,
    ) -> Result<Action, TaskError> {
        let uid = match executor.start(exec, handle).await {
            Ok(uid) => uid,
            Err(e) if e.is_transient() => return Err(self.exec_err(e)),
            Err(e) => return self.fail(executor.kind(), e.to_string()).await,
        };
        let message = format!("started {} {}", handle.kind, handle.name);
        self.writer
            .write(&acted_status(&self.status, uid, message))
            .await?;
        Ok(Action::requeue(Duration::from_secs(1).min(self.resync)))
    }

    async fn observe(
        &self,
        executor: &dyn Executor,
        exec: &ExecContext<'_>,
        handle: &TaskHandle,
    ) -> Result<Action, TaskError> {
        let kind = executor.kind();
        match executor.poll(exec, handle).await {
            Ok(Progress::Running(message)) => {
                let mut next = self.status.clone();
                next.message = message;
                self.writer.write(&next).await?;
                Ok(Action::requeue(poll_interval(kind).min(self.resync)))
            }
            Ok(Progress::Done(outcome)) => self.finish(kind, final_phase(&outcome), outcome).await,
            Err(e) if e.is_transient() => Err(self.exec_err(e)),
            Err(e) => self.fail(kind, e.to_string()).await,
        }
    }

    /// Killing: the executor kills until the work is gone; then Killed, with the message and
    /// result it had.
    async fn kill(&self, executor: &dyn Executor) -> Result<Action, TaskError> {
        // A kill substitutes nothing.
        let vars = Variables::new();
        let exec = self.exec_context(&vars);
        let gone = match &self.status.handle {
            Some(handle) => executor
                .kill(&exec, handle)
                .await
                .map_err(|e| self.exec_err(e))?,
            None => true,
        };
        if !gone {
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        let outcome = Outcome {
            success: false,
            result: self.status.result.clone(),
            message: self.status.message.clone(),
        };
        self.finish(executor.kind(), TaskPhase::Killed, outcome)
            .await
    }

    async fn fail(&self, executor: &str, message: String) -> Result<Action, TaskError> {
        self.finish(executor, TaskPhase::Failed, failure(message))
            .await
    }

    /// Ends the Task: the final status, then metrics and an event once it is written.
    async fn finish(
        &self,
        executor: &str,
        phase: TaskPhase,
        outcome: Outcome,
    ) -> Result<Action, TaskError> {
        let now = now();
        let next = finished_status(&self.status, executor, phase, &outcome, &rfc3339(now));
        if !self.writer.write(&next).await? {
            return Ok(Action::requeue(Duration::ZERO));
        }
        let ran_for = parse_time(self.status.started_at.as_deref())
            .map(|started| now.duration_since(started).as_secs_f64().max(0.0));
        self.ctx.metrics.record_finished(executor, phase, ran_for);
        let type_ = match phase {
            TaskPhase::Success => EventType::Normal,
            _ => EventType::Warning,
        };
        let reason = phase.to_string();
        publish(self.ctx, self.task, type_, &reason, outcome.message).await;
        Ok(Action::await_change())
    }
}

/// The Task as the API server has it now, unless it is gone, ended or being deleted.
async fn read_open(
    api: &Api<Task>,
    namespace: &str,
    name: &str,
) -> Result<Option<Task>, TaskError> {
    let task = api.get_opt(name).await.map_err(|source| TaskError::Api {
        what: "reading",
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    })?;
    Ok(task.filter(|t| {
        let ended = t.status.as_ref().is_some_and(|s| s.phase.is_final());
        !ended && t.meta().deletion_timestamp.is_none()
    }))
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
            task: &task,
            name: name.clone(),
            namespace: namespace.clone(),
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
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "sluice-tasks".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
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

    fn task(kill: Option<&str>, timeout: Option<&str>) -> Task {
        let mut t = Task::new("t", Default::default());
        t.spec.kill_timestamp = kill.map(str::to_string);
        t.spec.timeout = timeout.map(str::to_string);
        t
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    fn running(uid: Option<&str>) -> TaskStatus {
        TaskStatus {
            phase: TaskPhase::Running,
            started_at: Some("2025-01-01T00:00:00Z".into()),
            handle: Some(TaskHandle {
                kind: "Pod".into(),
                name: "t-task".into(),
                uid: uid.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn kill_by_timestamp_and_timeout() {
        let now = at("2025-01-01T00:01:00Z");
        let running = running(Some("u"));
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

    #[test]
    fn resync_is_the_nearest_deadline_at_most_30s() {
        let now = at("2025-01-01T00:01:00Z");
        let running = running(Some("u"));
        assert_eq!(resync_after(&task(None, None), &running, now), RESYNC);
        assert_eq!(resync_after(&task(None, Some("5m")), &running, now), RESYNC);
        let soon = resync_after(
            &task(Some("2025-01-01T00:01:02Z"), Some("5m")),
            &running,
            now,
        );
        assert_eq!(soon, Duration::from_millis(2050));
        // A deadline past: look again at once (plus the margin).
        let past = resync_after(&task(None, Some("30s")), &running, now);
        assert_eq!(past, Duration::from_millis(50));
    }

    #[test]
    fn the_step_follows_the_recorded_phase() {
        let staging = TaskStatus::default();
        assert_eq!(next_step(&staging, "pod", None), Step::Stage);
        assert_eq!(
            next_step(&staging, "pod", Some("k".into())),
            Step::KillBeforeStart("k".into())
        );
        let no_handle = TaskStatus {
            phase: TaskPhase::Running,
            ..Default::default()
        };
        assert_eq!(next_step(&no_handle, "pod", None), Step::FailNoHandle);
        assert_eq!(
            next_step(&no_handle, "pod", Some("k".into())),
            Step::FailNoHandle,
            "without a handle there is nothing to kill"
        );
        let handle = |s: &TaskStatus| s.handle.clone().expect("a handle");
        let recorded = running(None);
        assert_eq!(
            next_step(&recorded, "pod", None),
            Step::Act(Act::Start, handle(&recorded))
        );
        assert_eq!(
            next_step(&recorded, "http", None),
            Step::Act(Act::SendOnce, handle(&recorded))
        );
        let started = running(Some("u"));
        for kind in ["pod", "http", "container", "resource"] {
            assert_eq!(
                next_step(&started, kind, None),
                Step::Act(Act::Observe, handle(&started))
            );
        }
        assert_eq!(
            next_step(&started, "pod", Some("k".into())),
            Step::BeginKill("k".into())
        );
        let killing = TaskStatus {
            phase: TaskPhase::Killing,
            ..started.clone()
        };
        assert_eq!(next_step(&killing, "pod", Some("k".into())), Step::Kill);
        for phase in [TaskPhase::Success, TaskPhase::Failed, TaskPhase::Killed] {
            let ended = TaskStatus {
                phase,
                ..Default::default()
            };
            assert_eq!(next_step(&ended, "pod", Some("k".into())), Step::Nothing);
        }
    }

    #[test]
    fn statuses_record_each_transition() {
        let stamp = "2025-01-01T00:00:00.000Z";
        let staged = staging_status(&TaskStatus::default(), "pod", stamp);
        assert_eq!(staged.executor.as_deref(), Some("pod"));
        assert_eq!(staged.staging_at.as_deref(), Some(stamp));
        assert_eq!(staged.conditions[0].reason, "Staging");
        let again = staging_status(&staged, "pod", "2025-01-01T00:00:09.000Z");
        assert_eq!(again, staged, "a second pass changes nothing");

        let handle = running(None).handle.expect("a handle");
        let later = "2025-01-01T00:00:01.000Z";
        let started = running_status(&staged, &staged, &handle, Some("w".into()), later);
        assert_eq!(started.phase, TaskPhase::Running);
        assert_eq!(started.message, "starting Pod t-task");
        assert_eq!(started.worker.as_deref(), Some("w"));
        assert_eq!(started.started_at.as_deref(), Some(later));
        assert_eq!(started.staging_at.as_deref(), Some(stamp));
        assert_eq!(started.conditions[0].reason, "Running");

        let acted = acted_status(&started, "u1".into(), "started".into());
        assert_eq!(acted.handle.and_then(|h| h.uid).as_deref(), Some("u1"));

        let killing = killing_status(&started, "killed: x", later);
        assert_eq!(
            (killing.phase, killing.killing_at.as_deref()),
            (TaskPhase::Killing, Some(later))
        );

        let outcome = Outcome {
            success: true,
            result: Some(json!(9)),
            message: "pod succeeded".into(),
        };
        assert_eq!(final_phase(&outcome), TaskPhase::Success);
        assert_eq!(final_phase(&failure("x".into())), TaskPhase::Failed);
        let done = finished_status(&started, "pod", TaskPhase::Success, &outcome, later);
        assert_eq!(done.result, Some(json!(9)));
        assert_eq!(done.conditions[0].status, ConditionStatus::True);
        let invalid = finished_status(
            &TaskStatus::default(),
            "none",
            TaskPhase::Failed,
            &outcome,
            later,
        );
        assert_eq!(invalid.executor, None, "no executor named: none recorded");
    }

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
