//! `sluice task`: the client for Task code, run inside a Task's container. It knows its Task from
//! `SLUICE_TASK_NAME` / `SLUICE_TASK_NAMESPACE` (every executor sets them) and needs a
//! ServiceAccount that may get Tasks and TaskObjects and create them (see
//! `manifests/samples/task-counter.yaml`).
//!
//! - `sluice task input [--field count]`: prints the input (the TaskObject's data) as JSON;
//! - `sluice task result '<json>'`: writes the result to the termination message file, where the
//!   controller reads it (JSON when it parses as JSON);
//! - `sluice task spawn --name task-2 --input '{"count": 2}'`: creates a downstream Task (a copy of
//!   this Task's executor, `parent` set to this Task) and its TaskObject;
//! - `sluice task counter`: the counter demo (input `count`, `limit`; spawns the next Task until
//!   `count == limit`, then, when the input holds `final` (a Task executor), the demo's last step
//!   `task-final` with that executor);
//! - `sluice task worker`: a TaskCluster worker's main process in an image without a shell (such as
//!   `sluice:dev`): it waits for SIGTERM or SIGINT and exits 0, while Tasks run beside it as
//!   ephemeral containers.

use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::api::{Task, TaskExecutor, TaskObject, TaskObjectSpec, TaskSpec};

#[derive(clap::Subcommand, Debug, Clone)]
pub enum TaskCommand {
    /// Print this Task's input (its TaskObject's data) as JSON.
    Input {
        /// Print only this field (a dot path: `count`, `items.0.name`).
        #[arg(long)]
        field: Option<String>,
    },
    /// Write this Task's result (JSON, or any text) where the controller reads it.
    Result {
        value: String,
        /// The termination message file of the container.
        #[arg(
            long,
            env = "SLUICE_RESULT_FILE",
            default_value = "/dev/termination-log"
        )]
        file: std::path::PathBuf,
    },
    /// Create a downstream Task running like this one, with its own input.
    Spawn {
        /// The new Task's name (its TaskObject gets the same name).
        #[arg(long)]
        name: String,
        /// The new Task's input (JSON).
        #[arg(long, default_value = "{}")]
        input: String,
    },
    /// The counter demo: reads count and limit, spawns task-<count+1> until count == limit, then
    /// the input's `final` executor (if any) as task-final.
    Counter {
        #[arg(
            long,
            env = "SLUICE_RESULT_FILE",
            default_value = "/dev/termination-log"
        )]
        file: std::path::PathBuf,
    },
    /// A TaskCluster worker's main process: waits for SIGTERM or SIGINT, then exits 0 (Tasks run
    /// beside it as ephemeral containers; images without `sleep` need it).
    Worker,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0} is not set: `sluice task` runs inside a Task's container, which sets it")]
    NotInTask(&'static str),
    #[error("connecting to the API server: {0}")]
    Connect(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("waiting for a signal: {0}")]
    Signal(#[source] std::io::Error),
    #[error("writing the result to {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

struct Me {
    client: Client,
    name: String,
    namespace: String,
}

impl Me {
    async fn new() -> Result<Me, ClientError> {
        let name = std::env::var("SLUICE_TASK_NAME")
            .map_err(|_| ClientError::NotInTask("SLUICE_TASK_NAME"))?;
        let namespace = std::env::var("SLUICE_TASK_NAMESPACE")
            .map_err(|_| ClientError::NotInTask("SLUICE_TASK_NAMESPACE"))?;
        let client = Client::try_default()
            .await
            .map_err(|e| ClientError::Connect(e.to_string()))?;
        Ok(Me {
            client,
            name,
            namespace,
        })
    }

    /// `K` in this Task's namespace.
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The error of `doing` (`reading`, `creating`) the `kind` named `name` in this namespace.
    fn api_error(
        &self,
        doing: &str,
        kind: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> ClientError {
        let what = format!("{doing} {kind} {}/{name}", self.namespace);
        move |source| ClientError::Api { what, source }
    }

    async fn task(&self) -> Result<Task, ClientError> {
        self.api::<Task>()
            .get(&self.name)
            .await
            .map_err(self.api_error("reading", "Task", &self.name))
    }

    async fn input(&self) -> Result<Value, ClientError> {
        let task = self.task().await?;
        let Some(input) = task.spec.input else {
            return Ok(Value::Null);
        };
        let object = self
            .api::<TaskObject>()
            .get(&input)
            .await
            .map_err(self.api_error("reading", "TaskObject", &input))?;
        Ok(object.spec.data)
    }

    /// Creates the Task `name` with its input; its executor is this Task's unless `executor`.
    async fn spawn(
        &self,
        name: &str,
        input: Value,
        executor: Option<TaskExecutor>,
    ) -> Result<(), ClientError> {
        let me = self.task().await?;
        let mut spec = downstream_spec(&me.spec, &self.name, name);
        if let Some(executor) = executor {
            spec.executor = executor;
        }
        let task = Task::new(name, spec);
        let created = self
            .api::<Task>()
            .create(&PostParams::default(), &task)
            .await
            .map_err(self.api_error("creating", "Task", name))?;
        let mut object = TaskObject::new(name, TaskObjectSpec { data: input });
        object.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "sluice.dev/v1alpha1".into(),
                kind: "Task".into(),
                name: name.to_string(),
                uid: created.uid().unwrap_or_default(),
                ..Default::default()
            },
        ]);
        self.api::<TaskObject>()
            .create(&PostParams::default(), &object)
            .await
            .map_err(self.api_error("creating", "TaskObject", name))?;
        Ok(())
    }
}

/// A downstream Task's spec: this Task's executor, its own input, this Task as parent. Pure.
pub fn downstream_spec(parent: &TaskSpec, parent_name: &str, name: &str) -> TaskSpec {
    TaskSpec {
        executor: parent.executor.clone(),
        input: Some(name.to_string()),
        parent: Some(parent_name.to_string()),
        timeout: parent.timeout.clone(),
        kill_timestamp: None,
    }
}

/// The Task the counter demo spawns next: its name, its input and, for the final step, its own
/// executor (else the spawning Task's).
#[derive(Debug, Clone, PartialEq)]
pub struct CounterNext {
    pub name: String,
    pub input: Value,
    pub executor: Option<TaskExecutor>,
}

/// The name of the counter demo's last step, spawned at the limit when the input has `final`.
pub const COUNTER_FINAL_TASK: &str = "task-final";

/// The counter demo's step: the result, and the next Task if any. Below the limit, the next
/// count (the input's other fields carried along, `final` among them); at the limit, the input's
/// `final` executor as `task-final`, with the count and limit as its input. Pure.
pub fn counter_step(input: &Value) -> Result<(Value, Option<CounterNext>), ClientError> {
    let int = |key: &str| {
        input
            .get(key)
            .and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .ok_or_else(|| ClientError::Invalid(format!("input has no integer {key:?}: {input}")))
    };
    let (count, limit) = (int("count")?, int("limit")?);
    let result = json!({"count": count, "limit": limit});
    if count < limit {
        let mut next_input = input.clone();
        next_input["count"] = json!(count + 1);
        let next = CounterNext {
            name: format!("task-{}", count + 1),
            input: next_input,
            executor: None,
        };
        return Ok((result, Some(next)));
    }
    let Some(last) = input.get("final") else {
        return Ok((result, None));
    };
    let executor: TaskExecutor = serde_json::from_value(last.clone()).map_err(|e| {
        ClientError::Invalid(format!(
            "input.final is not a Task executor (container, pod, http, resource or workflow): {e}"
        ))
    })?;
    let next = CounterNext {
        name: COUNTER_FINAL_TASK.into(),
        input: result.clone(),
        executor: Some(executor),
    };
    Ok((result, Some(next)))
}

fn write_result(file: &std::path::Path, value: &str) -> Result<(), ClientError> {
    std::fs::write(file, value).map_err(|source| ClientError::Write {
        path: file.display().to_string(),
        source,
    })
}

/// Runs one `sluice task` command.
pub async fn run(command: TaskCommand) -> Result<(), ClientError> {
    match command {
        TaskCommand::Result { value, file } => {
            write_result(&file, &value)?;
            println!("{value}");
            Ok(())
        }
        TaskCommand::Input { field } => {
            let me = Me::new().await?;
            let input = me.input().await?;
            let value = match field {
                Some(f) => {
                    let vars = super::substitute::Variables::new().with("input", input);
                    vars.lookup(&format!("input.{f}"), "--field")
                        .map_err(|e| ClientError::Invalid(e.to_string()))?
                        .clone()
                }
                None => input,
            };
            println!("{}", super::substitute::render(&value));
            Ok(())
        }
        TaskCommand::Spawn { name, input } => {
            let me = Me::new().await?;
            let input: Value = serde_json::from_str(&input)
                .map_err(|e| ClientError::Invalid(format!("--input is not JSON: {e}")))?;
            me.spawn(&name, input, None).await?;
            println!("task/{name} created");
            Ok(())
        }
        TaskCommand::Counter { file } => {
            let me = Me::new().await?;
            let input = me.input().await?;
            let (result, next) = counter_step(&input)?;
            if let Some(next) = next {
                me.spawn(&next.name, next.input, next.executor).await?;
                println!("task/{} created", next.name);
            }
            write_result(&file, &result.to_string())?;
            println!("{result}");
            Ok(())
        }
        TaskCommand::Worker => wait_for_termination().await,
    }
}

/// Returns on SIGTERM or SIGINT. As a container's PID 1 the process gets no default signal action,
/// so without handlers the kubelet's SIGTERM would be ignored until the grace period ends.
async fn wait_for_termination() -> Result<(), ClientError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(ClientError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ClientError::Signal)?;
    println!("worker: waiting for Tasks (ephemeral containers); SIGTERM ends it");
    tokio::select! {
        _ = term.recv() => println!("worker: SIGTERM, exiting"),
        _ = int.recv() => println!("worker: SIGINT, exiting"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ContainerExecutor, TaskExecutor};

    #[test]
    fn counter_steps_until_the_limit() {
        let (r, next) = counter_step(&json!({"count": 0, "limit": 10})).unwrap();
        assert_eq!(r, json!({"count": 0, "limit": 10}));
        assert_eq!(
            next,
            Some(CounterNext {
                name: "task-1".into(),
                input: json!({"count": 1, "limit": 10}),
                executor: None,
            })
        );
        let (_, next) = counter_step(&json!({"count": "10", "limit": 10})).unwrap();
        assert_eq!(next, None);
        assert!(counter_step(&json!({"limit": 10})).is_err());
    }

    #[test]
    fn the_counter_ends_with_its_final_step() {
        let last =
            json!({"workflow": {"cluster": "counter", "template": {"spec": {"entrypoint": "x"}}}});
        // Carried along below the limit.
        let (_, next) = counter_step(&json!({"count": 9, "limit": 10, "final": last})).unwrap();
        let next = next.expect("task-10");
        assert_eq!(next.name, "task-10");
        assert_eq!(next.input["final"], last);
        assert_eq!(next.executor, None);
        // At the limit: task-final with that executor, the count and limit as its input.
        let (_, next) = counter_step(&next.input).unwrap();
        let next = next.expect("task-final");
        assert_eq!(next.name, COUNTER_FINAL_TASK);
        assert_eq!(next.input, json!({"count": 10, "limit": 10}));
        let executor = next.executor.expect("its own executor");
        assert_eq!(
            executor.workflow.map(|w| w.cluster),
            Some(Some("counter".into()))
        );
        // A `final` that is no executor is refused, saying what it should be.
        let bad = counter_step(&json!({"count": 1, "limit": 1, "final": {"workflow": "x"}}));
        assert!(
            bad.expect_err("refused")
                .to_string()
                .contains("input.final is not a Task executor")
        );
    }

    #[test]
    fn worker_and_counter_parse_as_the_sample_writes_them() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: TaskCommand,
        }
        let parse = |args: &[&str]| <Cli as clap::Parser>::try_parse_from(args).map(|c| c.command);
        // manifests/samples/task-counter.yaml: the worker's command and the Task's.
        assert!(matches!(
            parse(&["task", "worker"]),
            Ok(TaskCommand::Worker)
        ));
        assert!(matches!(
            parse(&["task", "counter"]),
            Ok(TaskCommand::Counter { .. })
        ));
        assert!(parse(&["task", "worker", "infinity"]).is_err());
    }

    #[test]
    fn downstream_tasks_copy_the_executor_and_name_their_parent() {
        let parent = TaskSpec {
            executor: TaskExecutor {
                container: Some(ContainerExecutor {
                    cluster: "counter".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            input: Some("task-0".into()),
            kill_timestamp: Some("2025-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        let child = downstream_spec(&parent, "task-0", "task-1");
        assert_eq!(child.input.as_deref(), Some("task-1"));
        assert_eq!(child.parent.as_deref(), Some("task-0"));
        assert_eq!(child.executor, parent.executor);
        assert_eq!(child.kill_timestamp, None);
    }
}
