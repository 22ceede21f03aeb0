//! Task executors, one file each, behind [`Executor`].
//!
//! The controller drives every executor the same way, and records what it will start (the
//! [`TaskHandle`]) in the Task's status *before* acting, so a restarted controller finds the work
//! again instead of starting it twice:
//! 1. [`Executor::plan`] decides the handle (or says why the Task must wait);
//! 2. the controller writes status Running with the handle (guarded by the Task's resourceVersion);
//! 3. [`Executor::start`] creates what the handle names; idempotent (an existing object that belongs
//!    to the Task is adopted);
//! 4. [`Executor::poll`] reports progress and the outcome;
//! 5. [`Executor::kill`] stops it; called until it reports the work gone.
//!
//! Creating or adopting, reading and deleting the objects a Task owns is shared, in [`owned`].

mod container;
mod http;
pub mod owned;
mod pod;
mod resource;
mod workflow;

pub use container::{ContainerExecutorImpl, ephemeral_container_name};
pub use http::{HttpExecutorImpl, HttpRuntime};
pub use pod::{PodExecutorImpl, pod_name};
pub use resource::ResourceExecutorImpl;
pub use workflow::{ARGO_WORKFLOW_LABEL, WorkflowExecutorImpl, workflow_name};

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::jsonpath::PathError;
use super::substitute::{SubstitutionError, Variables};
use crate::api::{Task, TaskExecutor, TaskHandle};

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The Task cannot run as written: it fails with this message.
    #[error(transparent)]
    Substitution(#[from] SubstitutionError),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("{0}")]
    Invalid(String),
    /// A transient API error: the controller retries.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl ExecError {
    pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ExecError {
        let what = what.into();
        move |source| ExecError::Api { what, source }
    }

    /// Whether retrying can help (API errors); the others fail the Task.
    pub fn is_transient(&self) -> bool {
        matches!(self, ExecError::Api { .. })
    }
}

/// What the controller knows when it drives an executor.
pub struct ExecContext<'a> {
    pub client: &'a Client,
    pub task: &'a Task,
    pub namespace: String,
    pub vars: &'a Variables,
}

impl ExecContext<'_> {
    pub fn task_name(&self) -> String {
        self.task.name_any()
    }

    /// Pods in the Task's namespace.
    pub fn pods(&self) -> kube::Api<k8s_openapi::api::core::v1::Pod> {
        kube::Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The pod `name` in the Task's namespace, if it exists; `what` names it in errors ("pod",
    /// "worker").
    pub async fn get_pod(
        &self,
        what: &str,
        name: &str,
    ) -> Result<Option<k8s_openapi::api::core::v1::Pod>, ExecError> {
        self.pods()
            .get_opt(name)
            .await
            .map_err(ExecError::api(format!("reading {what} {name}")))
    }

    /// An owner reference to the Task (controller), for everything an executor creates.
    pub fn owner_reference(&self) -> Value {
        serde_json::json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "name": self.task.name_any(), "uid": self.task.uid().unwrap_or_default(),
            "controller": true, "blockOwnerDeletion": true,
        })
    }
}

/// What an executor decided to run the Task as.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Start it as this handle (in this worker pod, when there is one).
    Start {
        handle: TaskHandle,
        worker: Option<String>,
    },
    /// Not yet: the message says what it waits for.
    Wait(String),
}

/// The outcome of a finished Task.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub success: bool,
    pub result: Option<Value>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Still running; the message says how far it is.
    Running(String),
    Done(Outcome),
    /// What the Task ran as was deleted from outside before it ended: an external kill, so the
    /// Task ends Killed (not Failed); the message says what went.
    Gone(String),
}

/// What an executor's step returns.
pub type ExecResult<T> = Result<T, ExecError>;

/// One step of an executor as it writes it (an `async fn` of [`ExecutorSteps`]): a future of its
/// result that may move between threads.
pub trait StepFuture<T>: Future<Output = ExecResult<T>> + Send {}

impl<T, F: Future<Output = ExecResult<T>> + Send> StepFuture<T> for F {}

/// One step of an executor as the controller awaits it: boxed, for the [`Executor`] trait object.
pub type Step<'a, T> = BoxFuture<'a, ExecResult<T>>;

/// How the controller drives an executor (a trait object: the Task names which one at run time).
/// Every executor gets it from [`ExecutorSteps`]; nobody implements it by hand.
pub trait Executor: Send + Sync {
    /// `container`, `pod`, `http`, `resource` or `workflow`.
    fn kind(&self) -> &'static str;
    fn plan<'a>(&'a self, ctx: &'a ExecContext<'a>) -> Step<'a, Plan>;
    /// Returns an id of what it started (the object's uid), recorded as the handle's `uid`.
    fn start<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, String>;
    fn poll<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, Progress>;
    /// Stops the work; true once it is gone.
    fn kill<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, bool>;
}

/// What each executor writes: its part of the Task's spec and its four steps, as plain async
/// functions. The frame (the [`Executor`] impl below) drives the steps: `plan` is given the spec
/// (the frame refuses a Task that is not of this kind before anything is recorded); the later
/// steps read what they need from the context ([`ExecutorSteps::spec`]) and the handle.
pub trait ExecutorSteps: Send + Sync {
    /// `container`, `pod`, `http`, `resource` or `workflow`.
    const KIND: &'static str;
    /// `spec.executor.<KIND>` of a Task.
    type Spec: Send + Sync;
    fn spec_of(executor: &TaskExecutor) -> Option<&Self::Spec>;

    /// The Task's `spec.executor.<KIND>`, or why this executor cannot run it.
    fn spec<'t>(ctx: &ExecContext<'t>) -> Result<&'t Self::Spec, ExecError> {
        Self::spec_of(&ctx.task.spec.executor)
            .ok_or_else(|| ExecError::Invalid(format!("not a {} Task", Self::KIND)))
    }

    fn plan(&self, ctx: &ExecContext<'_>, spec: &Self::Spec) -> impl StepFuture<Plan>;
    fn start(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> impl StepFuture<String>;
    fn poll(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> impl StepFuture<Progress>;
    fn kill(&self, ctx: &ExecContext<'_>, handle: &TaskHandle) -> impl StepFuture<bool>;
}

impl<E: ExecutorSteps> Executor for E {
    fn kind(&self) -> &'static str {
        E::KIND
    }

    fn plan<'a>(&'a self, ctx: &'a ExecContext<'a>) -> Step<'a, Plan> {
        async move { ExecutorSteps::plan(self, ctx, E::spec(ctx)?).await }.boxed()
    }

    fn start<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, String> {
        ExecutorSteps::start(self, ctx, handle).boxed()
    }

    fn poll<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, Progress> {
        ExecutorSteps::poll(self, ctx, handle).boxed()
    }

    fn kill<'a>(&'a self, ctx: &'a ExecContext<'a>, handle: &'a TaskHandle) -> Step<'a, bool> {
        ExecutorSteps::kill(self, ctx, handle).boxed()
    }
}

/// The progress of an owned object whose own status says Running while its deletion has begun:
/// it goes (deleted from outside), so it counts as gone.
pub fn unless_deleting(
    progress: Progress,
    deleting: bool,
    gone: impl FnOnce() -> Progress,
) -> Progress {
    match progress {
        Progress::Running(_) if deleting => gone(),
        progress => progress,
    }
}

/// The executors, one of each kind.
#[derive(Clone)]
pub struct Executors {
    pub container: Arc<ContainerExecutorImpl>,
    pub pod: Arc<PodExecutorImpl>,
    pub http: Arc<HttpExecutorImpl>,
    pub resource: Arc<ResourceExecutorImpl>,
    pub workflow: Arc<WorkflowExecutorImpl>,
}

impl Executors {
    pub fn new(http: HttpRuntime) -> Self {
        Executors {
            container: Arc::new(ContainerExecutorImpl),
            pod: Arc::new(PodExecutorImpl),
            http: Arc::new(HttpExecutorImpl::new(http)),
            resource: Arc::new(ResourceExecutorImpl),
            workflow: Arc::new(WorkflowExecutorImpl),
        }
    }

    /// The executor a Task names, or why it names none.
    pub fn for_task(&self, task: &Task) -> Result<&dyn Executor, ExecError> {
        let e = &task.spec.executor;
        let set = [
            e.container.is_some(),
            e.pod.is_some(),
            e.http.is_some(),
            e.resource.is_some(),
            e.workflow.is_some(),
        ];
        if set.iter().filter(|s| **s).count() != 1 {
            return Err(ExecError::Invalid(
                "exactly one executor (container, pod, http, resource or workflow) must be set"
                    .into(),
            ));
        }
        Ok(if e.container.is_some() {
            self.container.as_ref()
        } else if e.pod.is_some() {
            self.pod.as_ref()
        } else if e.http.is_some() {
            self.http.as_ref()
        } else if e.resource.is_some() {
            self.resource.as_ref()
        } else {
            self.workflow.as_ref()
        })
    }
}

/// A container's output as a Task result: JSON when it parses as JSON, else the trimmed text;
/// None when empty.
pub fn parse_result(text: &str) -> Option<Value> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return None;
    }
    Some(serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(trimmed.to_string())))
}

/// A name derived from the Task's that fits in `max` characters: as it is when short enough,
/// else truncated with a stable hash suffix.
pub fn bounded_name(base: &str, max: usize) -> String {
    if base.len() <= max {
        return base.to_string();
    }
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in base.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    let keep = max.saturating_sub(9);
    let head: String = base.chars().take(keep).collect();
    format!("{}-{:08x}", head.trim_end_matches(['-', '.']), hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_are_json_when_json() {
        assert_eq!(parse_result(" {\"count\": 3}\n"), Some(json!({"count": 3})));
        assert_eq!(parse_result("42"), Some(json!(42)));
        assert_eq!(parse_result("done\n"), Some(json!("done")));
        assert_eq!(parse_result("  "), None);
    }

    #[test]
    fn bounded_names() {
        assert_eq!(bounded_name("short", 63), "short");
        let long = "x".repeat(100);
        let b = bounded_name(&long, 63);
        assert!(b.len() <= 63, "{b}");
        assert_ne!(b, bounded_name(&"x".repeat(101), 63));
    }

    #[test]
    fn exactly_one_executor() {
        let executors = Executors::new(HttpRuntime::default());
        let mut task = Task::new("t", Default::default());
        assert!(executors.for_task(&task).is_err());
        task.spec.executor.http = Some(Default::default());
        assert_eq!(executors.for_task(&task).unwrap().kind(), "http");
        task.spec.executor.pod = Some(Default::default());
        assert!(executors.for_task(&task).is_err());
    }
}
