//! The TaskCluster controller: keeps a TaskCluster's worker pods in step with its Tasks. Workers
//! are created from the template with the labels `sluice.dev/task-cluster` and (from the
//! TaskCluster) `sluice.dev/queue`, so the sluice gate governs them as one application (its
//! DynamicWorkload `taskcluster-<name>` is recorded from the TaskCluster: `minWorkers` the gang,
//! more workers elastic). Workers are added while Tasks wait, gated extras removed when nothing
//! waits, idle extras removed after `idleTimeout`, and a worker that ran `maxTasksPerWorker`
//! Tasks is retired and replaced.
//!
//! A reconcile observes (the cluster, its worker pods, the namespace's Tasks), decides
//! ([`plan_workers`], pure), deletes and creates workers, and writes the status
//! ([`cluster_status`], pure).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use super::metrics::TaskMetrics;
use super::task_controller::TASK_FIELD_MANAGER;
use super::workers::{Worker, WorkerPlan, plan_workers, task_counts, workers};
use crate::api::{
    Condition, ConditionStatus, QUEUE_LABEL, TASK_CLUSTER_LABEL, Task, TaskCluster,
    TaskClusterStatus,
};

/// The idle timeout when `spec.idleTimeout` does not parse.
const DEFAULT_IDLE_TIMEOUT_SECS: i64 = 30;
/// The longest a TaskCluster goes without a look.
const RESYNC: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("TaskCluster has no namespace")]
    NoNamespace,
    #[error("TaskCluster {namespace}/{name}: {what}: {source}")]
    Api {
        what: String,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: TaskMetrics,
}

/// A worker pod for the cluster. Pure.
pub fn worker_pod(cluster: &TaskCluster) -> Result<Value, String> {
    let name = cluster.name_any();
    let mut pod = cluster.spec.template.clone();
    let object = pod
        .as_object_mut()
        .ok_or("spec.template must be an object with metadata and spec")?;
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!("Pod"));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    let metadata = metadata
        .as_object_mut()
        .ok_or("spec.template.metadata must be an object")?;
    metadata.remove("name");
    metadata.insert(
        "generateName".into(),
        json!(format!(
            "{}-worker-",
            super::executors::bounded_name(&name, 40)
        )),
    );
    metadata.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster", "name": name,
            "uid": cluster.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
        }]),
    );
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    let labels = labels
        .as_object_mut()
        .ok_or("spec.template.metadata.labels must be an object")?;
    labels.insert(TASK_CLUSTER_LABEL.into(), json!(name));
    if let Some(queue) = cluster.labels().get(QUEUE_LABEL) {
        labels.insert(QUEUE_LABEL.into(), json!(queue));
    }
    let spec = object
        .get("spec")
        .and_then(Value::as_object)
        .ok_or("spec.template.spec is missing")?;
    if spec
        .get("containers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err("spec.template.spec.containers is empty".into());
    }
    serde_json::from_value::<Pod>(pod.clone())
        .map_err(|e| format!("spec.template is not a valid pod: {e}"))?;
    Ok(pod)
}

/// The status after this pass: the workers that remain, those created, the Tasks, and the Ready
/// condition (minWorkers admitted). `problem` replaces the message when set. Pure.
pub fn cluster_status(
    cluster: &TaskCluster,
    workers: &[Worker],
    plan: &WorkerPlan,
    (waiting, running): (i32, i32),
    problem: Option<String>,
    now: jiff::Timestamp,
) -> TaskClusterStatus {
    let deleted: Vec<&str> = plan.delete.iter().map(|(n, _)| n.as_str()).collect();
    let remaining: Vec<_> = workers
        .iter()
        .filter(|w| !w.terminating && !w.ended && !deleted.contains(&w.name.as_str()))
        .collect();
    let admitted = remaining.iter().filter(|w| w.admitted).count() as i32;
    let gated = remaining.len() as i32 - admitted;
    let message = problem.unwrap_or_else(|| {
        if gated + plan.create > 0 && waiting > 0 {
            format!(
                "{waiting} Task(s) wait; {gated} worker(s) wait for quota behind the sluice gate"
            )
        } else {
            format!(
                "{} worker(s), {running} Task(s) running, {waiting} waiting",
                remaining.len()
            )
        }
    });
    let old = cluster.status.clone().unwrap_or_default();
    TaskClusterStatus {
        workers: remaining.len() as i32 + plan.create,
        admitted,
        gated: gated + plan.create,
        busy: remaining.iter().filter(|w| w.busy > 0).count() as i32,
        waiting_tasks: waiting,
        running_tasks: running,
        message,
        conditions: vec![ready_condition(
            old.conditions.iter().find(|c| c.type_ == "Ready"),
            admitted,
            cluster.spec.min_workers,
            now,
        )],
    }
}

fn ready_condition(
    old: Option<&Condition>,
    admitted: i32,
    min_workers: i32,
    now: jiff::Timestamp,
) -> Condition {
    let ready = admitted >= min_workers;
    let (status, reason) = if ready {
        (ConditionStatus::True, "MinWorkersAdmitted")
    } else {
        (ConditionStatus::False, "WaitingForWorkers")
    };
    let stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let message = format!("{admitted} of minWorkers {min_workers} admitted");
    Condition::updated(old, "Ready", status, reason, message, &stamp)
}

/// When to look again: when an idle extra worker's timeout runs out, else after [`RESYNC`]. Pure.
fn requeue_after(plan: &WorkerPlan) -> Duration {
    match plan.recheck_secs {
        Some(s) => Duration::from_secs(s.max(1) as u64),
        None => RESYNC,
    }
}

/// One reconcile of one TaskCluster.
struct Pass<'a> {
    ctx: &'a Context,
    cluster: TaskCluster,
    namespace: String,
    name: String,
    pods: Api<Pod>,
}

/// What the cluster's workers and Tasks are now.
struct Observed {
    workers: Vec<Worker>,
    /// Tasks of the cluster waiting for a worker, and running on one.
    counts: (i32, i32),
}

impl Pass<'_> {
    fn api_err(&self, what: &str) -> impl FnOnce(kube::Error) -> ClusterError {
        api_err(what, &self.namespace, &self.name)
    }

    async fn publish(&self, type_: EventType, reason: &str, note: String) {
        let object = self.cluster.object_ref(&());
        crate::events::publish(&self.ctx.recorder, &object, type_, reason, note).await;
    }

    /// The cluster's worker pods (by label) and the namespace's Tasks, from the API server.
    async fn observe(&self) -> Result<Observed, ClusterError> {
        let selector = format!("{TASK_CLUSTER_LABEL}={}", self.name);
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(self.api_err("listing workers"))?
            .items;
        let tasks = Api::<Task>::namespaced(self.ctx.client.clone(), &self.namespace)
            .list(&ListParams::default())
            .await
            .map_err(self.api_err("listing Tasks"))?
            .items;
        Ok(Observed {
            workers: workers(&pods, &tasks),
            counts: task_counts(&tasks, &self.name),
        })
    }

    async fn delete_workers(&self, delete: &[(String, String)]) -> Result<(), ClusterError> {
        for (worker, why) in delete {
            match self.pods.delete(worker, &DeleteParams::default()).await {
                Ok(_) => {
                    self.ctx.metrics.workers_deleted.inc();
                    info!(%worker, %why, "worker deleted");
                    let note = format!("{worker}: {why}");
                    self.publish(EventType::Normal, "WorkerDeleted", note).await;
                }
                // Gone already: what the deletion wanted.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(self.api_err("deleting a worker")(e)),
            }
        }
        Ok(())
    }

    /// Creates `count` workers; Some(problem) when the template cannot make one.
    async fn create_workers(
        &self,
        count: i32,
        waiting: i32,
    ) -> Result<Option<String>, ClusterError> {
        if count <= 0 {
            return Ok(None);
        }
        let body = match worker_pod(&self.cluster) {
            Ok(body) => body,
            Err(why) => {
                let problem = format!("cannot create workers: {why}");
                self.publish(EventType::Warning, "InvalidTemplate", problem.clone())
                    .await;
                return Ok(Some(problem));
            }
        };
        let pod: Pod = serde_json::from_value(body)
            .map_err(|e| self.api_err("building a worker")(kube::Error::SerdeError(e)))?;
        for _ in 0..count {
            let created = self
                .pods
                .create(&PostParams::default(), &pod)
                .await
                .map_err(self.api_err("creating a worker"))?;
            self.ctx.metrics.workers_created.inc();
            info!(worker = %created.name_any(), waiting, "worker created");
        }
        let note = format!("{count} worker(s) created ({waiting} Task(s) waiting)");
        self.publish(EventType::Normal, "WorkersCreated", note)
            .await;
        Ok(None)
    }

    async fn write_status(&self, status: TaskClusterStatus) -> Result<(), ClusterError> {
        if self.cluster.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
            "metadata": {"name": self.name},
            "status": status,
        });
        let params = PatchParams::apply(TASK_FIELD_MANAGER).force();
        Api::<TaskCluster>::namespaced(self.ctx.client.clone(), &self.namespace)
            .patch_status(&self.name, &params, &Patch::Apply(body))
            .await
            .map_err(self.api_err("writing the status"))?;
        Ok(())
    }
}

fn api_err(what: &str, namespace: &str, name: &str) -> impl FnOnce(kube::Error) -> ClusterError {
    let (what, namespace, name) = (what.to_string(), namespace.to_string(), name.to_string());
    move |source| ClusterError::Api {
        what,
        namespace,
        name,
        source,
    }
}

pub async fn reconcile(
    object: Arc<TaskCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ClusterError> {
    let namespace = object.namespace().ok_or(ClusterError::NoNamespace)?;
    let name = object.name_any();
    let span = info_span!("task_cluster", cluster = %name, %namespace);
    reconcile_cluster(&ctx, namespace, name)
        .instrument(span)
        .await
}

async fn reconcile_cluster(
    ctx: &Context,
    namespace: String,
    name: String,
) -> Result<Action, ClusterError> {
    let clusters: Api<TaskCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let cluster = clusters
        .get_opt(&name)
        .await
        .map_err(api_err("reading", &namespace, &name))?;
    let Some(cluster) = cluster.filter(|c| c.meta().deletion_timestamp.is_none()) else {
        return Ok(Action::await_change());
    };
    let pass = Pass {
        ctx,
        pods: Api::namespaced(ctx.client.clone(), &namespace),
        cluster,
        namespace,
        name,
    };
    let observed = pass.observe().await?;
    let (waiting, running) = observed.counts;
    let idle_timeout = crate::duration::parse_duration(&pass.cluster.spec.idle_timeout)
        .map_or(DEFAULT_IDLE_TIMEOUT_SECS, |d| d.as_secs() as i64);
    let now = jiff::Timestamp::now();
    let spec = &pass.cluster.spec;
    let plan = plan_workers(spec, &observed.workers, waiting, running, now, idle_timeout);
    pass.delete_workers(&plan.delete).await?;
    let problem = pass.create_workers(plan.create, waiting).await?;
    let status = cluster_status(
        &pass.cluster,
        &observed.workers,
        &plan,
        observed.counts,
        problem,
        now,
    );
    pass.write_status(status).await?;
    Ok(Action::requeue(requeue_after(&plan)))
}

fn error_policy(cluster: Arc<TaskCluster>, error: &ClusterError, _: Arc<Context>) -> Action {
    // A namespace being deleted refuses new workers: the cluster goes with it, nothing to warn of.
    if let ClusterError::Api { source, .. } = error
        && crate::namespaces::is_namespace_terminating(source)
    {
        debug!(cluster = %cluster.name_any(), %error, "TaskCluster's namespace is being deleted");
        return Action::requeue(Duration::from_secs(2));
    }
    warn!(cluster = %cluster.name_any(), namespace = %cluster.namespace().unwrap_or_default(), %error, "TaskCluster reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

/// The TaskCluster a Task runs in, if it is a container Task. Pure.
fn cluster_of(task: &Task) -> Option<ObjectRef<TaskCluster>> {
    let namespace = task.namespace()?;
    let cluster = &task.spec.executor.container.as_ref()?.cluster;
    Some(ObjectRef::new(cluster).within(&namespace))
}

/// Runs the TaskCluster controller until `shutdown`.
pub async fn run(client: Client, metrics: TaskMetrics, shutdown: CancellationToken) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: crate::events::recorder(client.clone(), "sluice-tasks"),
        metrics,
    });
    info!("TaskCluster controller running");
    Controller::new(
        Api::<TaskCluster>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .owns(
        Api::<Pod>::all(client.clone()),
        watcher::Config::default()
            .labels(TASK_CLUSTER_LABEL)
            .any_semantic(),
    )
    .watches(
        Api::<Task>::all(client),
        watcher::Config::default().any_semantic(),
        |task: Task| cluster_of(&task),
    )
    .graceful_shutdown_on(async move { shutdown.cancelled().await })
    .run(reconcile, error_policy, ctx)
    .for_each(|_| async {})
    .await;
    info!("TaskCluster controller stopped");
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TaskClusterSpec;

    #[test]
    fn worker_pods_are_labelled_owned_and_named() {
        let mut c = TaskCluster::new(
            "counter",
            TaskClusterSpec {
                min_workers: 1,
                max_workers: 2,
                slots_per_worker: 1,
                max_tasks_per_worker: 5,
                idle_timeout: "30s".into(),
                template: json!({"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "w", "image": "busybox"}]}}),
            },
        );
        c.metadata.uid = Some("u1".into());
        c.metadata.labels = Some([(QUEUE_LABEL.to_string(), "q".to_string())].into());
        let pod = worker_pod(&c).unwrap();
        assert_eq!(pod["metadata"]["generateName"], "counter-worker-");
        assert_eq!(
            pod["metadata"]["labels"]["sluice.dev/task-cluster"],
            "counter"
        );
        assert_eq!(pod["metadata"]["labels"]["sluice.dev/queue"], "q");
        assert_eq!(pod["metadata"]["labels"]["app"], "w");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u1");
        c.spec.template = json!({"spec": {"containers": []}});
        assert!(worker_pod(&c).is_err());
    }

    fn worker(name: &str, admitted: bool, busy: i32) -> Worker {
        Worker {
            idle_since: None,
            ..crate::tasks::workers::tests::w(name, admitted, busy, busy, "")
        }
    }

    fn cluster(min_workers: i32) -> TaskCluster {
        TaskCluster::new(
            "pool",
            TaskClusterSpec {
                min_workers,
                max_workers: 4,
                slots_per_worker: 1,
                max_tasks_per_worker: 5,
                idle_timeout: "30s".into(),
                template: json!({}),
            },
        )
    }

    #[test]
    fn the_status_counts_what_remains_and_what_is_created() {
        let now: jiff::Timestamp = "2025-01-01T00:00:00Z".parse().expect("a timestamp");
        let mut ended = worker("c", true, 0);
        ended.ended = true;
        let ws = vec![worker("a", true, 1), worker("b", false, 0), ended];
        let plan = WorkerPlan {
            create: 1,
            delete: vec![("b".into(), "not needed".into())],
            recheck_secs: None,
        };
        let status = cluster_status(&cluster(1), &ws, &plan, (2, 1), None, now);
        assert_eq!(
            (status.workers, status.admitted, status.gated, status.busy),
            (2, 1, 1, 1)
        );
        assert_eq!((status.waiting_tasks, status.running_tasks), (2, 1));
        assert_eq!(
            status.message,
            "2 Task(s) wait; 0 worker(s) wait for quota behind the sluice gate"
        );
        assert_eq!(status.conditions[0].reason, "MinWorkersAdmitted");
        let idle = cluster_status(&cluster(2), &ws, &WorkerPlan::default(), (0, 1), None, now);
        assert_eq!(idle.message, "2 worker(s), 1 Task(s) running, 0 waiting");
        assert_eq!(idle.conditions[0].status, ConditionStatus::False);
        let problem = Some("cannot create workers: x".to_string());
        let broken = cluster_status(&cluster(1), &ws, &plan, (2, 1), problem, now);
        assert_eq!(broken.message, "cannot create workers: x");
    }

    #[test]
    fn requeues_and_watched_tasks() {
        let idle = WorkerPlan {
            recheck_secs: Some(0),
            ..Default::default()
        };
        assert_eq!(requeue_after(&idle), Duration::from_secs(1));
        assert_eq!(requeue_after(&WorkerPlan::default()), RESYNC);
        let mut task = Task::new("t", Default::default());
        task.metadata.namespace = Some("ns".into());
        assert_eq!(cluster_of(&task), None, "not a container Task");
        task.spec.executor.container = Some(crate::api::ContainerExecutor {
            cluster: "pool".into(),
            ..Default::default()
        });
        assert_eq!(cluster_of(&task), Some(ObjectRef::new("pool").within("ns")));
    }
}
