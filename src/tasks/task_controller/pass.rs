//! One reconcile of one Task: reading what it needs (its inputs, its parent), driving its executor
//! one step, and writing the status that step decided, guarded by the resourceVersion read.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::info;

use super::decide::{Act, Step, failure, final_phase, now, parse_time, poll_interval, rfc3339};
use super::status::{
    acted_status, finished_status, killing_status, running_status, staging_status,
};
use super::{Context, TASK_FIELD_MANAGER, TaskError};
use crate::api::{Task, TaskHandle, TaskObject, TaskPhase, TaskStatus};
use crate::tasks::executors::{ExecContext, ExecError, Executor, Outcome, Plan, Progress};
use crate::tasks::substitute::Variables;

pub(super) struct Writer {
    pub(super) api: Api<Task>,
    pub(super) name: String,
    pub(super) namespace: String,
    /// What the next write is guarded by: the Task as read, then as each write left it.
    pub(super) guard: std::sync::Mutex<WriteGuard>,
}

/// The resourceVersion and status a write is decided from: those read at first, then those the
/// pass's own last write returned, so that a second write in one pass (a start that fails after
/// "sent" was written) is not refused as a conflict with the first and its message lost. Pure.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct WriteGuard {
    version: Option<String>,
    status: Option<TaskStatus>,
}

impl WriteGuard {
    pub(super) fn of(task: &Task) -> WriteGuard {
        WriteGuard {
            version: task.resource_version(),
            status: task.status.clone(),
        }
    }

    /// The server-side apply body writing `status`, guarded by the version; None when the Task
    /// already has that status.
    fn body(&self, name: &str, status: &TaskStatus) -> Option<serde_json::Value> {
        (self.status.as_ref() != Some(status)).then(|| {
            json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
                "metadata": {"name": name, "resourceVersion": self.version},
                "status": status,
            })
        })
    }

    /// After a write: the Task as the API server returned it.
    fn written(&mut self, task: &Task) {
        *self = WriteGuard::of(task);
    }
}

impl Writer {
    /// Writes the whole status, guarded by the resourceVersion the decision was based on. False:
    /// the Task changed since it was read (decide again from the new state).
    async fn write(&self, status: &TaskStatus) -> Result<bool, TaskError> {
        let body = {
            let guard = self.guard.lock().unwrap_or_else(|p| p.into_inner());
            guard.body(&self.name, status)
        };
        let Some(body) = body else {
            return Ok(true);
        };
        let params = PatchParams::apply(TASK_FIELD_MANAGER).force();
        match self
            .api
            .patch_status(&self.name, &params, &Patch::Apply(body))
            .await
        {
            Ok(task) => {
                let mut guard = self.guard.lock().unwrap_or_else(|p| p.into_inner());
                guard.written(&task);
                Ok(true)
            }
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
    let object = task.object_ref(&());
    crate::events::publish(&ctx.recorder, &object, type_, reason, note).await;
}

/// One reconcile of one Task: what was read, and what it writes with.
pub(super) struct Pass<'a> {
    pub(super) ctx: &'a Context,
    pub(super) task: &'a Task,
    pub(super) writer: Writer,
    /// The status read (the decision's base).
    pub(super) status: TaskStatus,
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) now: jiff::Timestamp,
    pub(super) resync: Duration,
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

    pub(super) async fn drive(
        &self,
        executor: &dyn Executor,
        step: Step,
    ) -> Result<Action, TaskError> {
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
            // From the status just written ("sent"), guarded by that write: the failure is
            // recorded with its own message.
            let outcome = failure(e.to_string());
            return self
                .finish_from(&next, executor.kind(), TaskPhase::Failed, outcome)
                .await;
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
            // Deleted from outside: an external kill, not a failure of the work.
            Ok(Progress::Gone(message)) => {
                publish(
                    self.ctx,
                    self.task,
                    EventType::Normal,
                    "Killing",
                    message.clone(),
                )
                .await;
                self.finish(kind, TaskPhase::Killed, failure(message)).await
            }
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

    pub(super) async fn fail(&self, executor: &str, message: String) -> Result<Action, TaskError> {
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
        self.finish_from(&self.status, executor, phase, outcome)
            .await
    }

    /// [`Pass::finish`] from `base`: the status read, or the one this pass wrote last.
    async fn finish_from(
        &self,
        base: &TaskStatus,
        executor: &str,
        phase: TaskPhase,
        outcome: Outcome,
    ) -> Result<Action, TaskError> {
        let now = now();
        let next = finished_status(base, executor, phase, &outcome, &rfc3339(now));
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
pub(super) async fn read_open(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn task(version: &str, message: &str) -> Task {
        let mut t = Task::new("t", Default::default());
        t.metadata.resource_version = Some(version.into());
        t.status = Some(TaskStatus {
            message: message.into(),
            ..Default::default()
        });
        t
    }

    fn status(message: &str) -> TaskStatus {
        TaskStatus {
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_second_write_in_a_pass_is_guarded_by_the_first() {
        // Read at version 7; "request sent" is written (the API server answers version 8); the
        // start then fails: the failure's write carries version 8, not the 7 read (a conflict
        // that used to drop the failure's message).
        let mut guard = WriteGuard::of(&task("7", "staged"));
        let sent = guard
            .body("t", &status("request sent: t"))
            .expect("a write");
        assert_eq!(sent["metadata"]["resourceVersion"], "7");
        guard.written(&task("8", "request sent: t"));
        let failed = guard
            .body("t", &status("connection refused"))
            .expect("a write");
        assert_eq!(failed["metadata"]["resourceVersion"], "8");
        assert_eq!(failed["status"]["message"], "connection refused");
        // The status the Task already has is not written again.
        assert!(guard.body("t", &status("request sent: t")).is_none());
    }
}
