//! The TaskCluster controller: keeps a TaskCluster's worker pods in step with its Tasks. Workers
//! are created from the template with the labels `sluice.dev/task-cluster` and (from the
//! TaskCluster) `sluice.dev/queue`, so the sluice gate governs them as one application (its
//! DynamicWorkload `taskcluster-<name>` is recorded from the TaskCluster: `minWorkers` the gang,
//! more workers elastic). Workers are added while Tasks wait, gated extras removed when nothing
//! waits, idle extras removed after `idleTimeout`, and a worker that ran `maxTasksPerWorker`
//! Tasks is retired and replaced.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::metrics::TaskMetrics;
use super::task_controller::TASK_FIELD_MANAGER;
use super::workers::{plan_workers, task_counts, workers};
use crate::api::{
    Condition, ConditionStatus, QUEUE_LABEL, TASK_CLUSTER_LABEL, Task, TaskCluster,
    TaskClusterStatus,
};

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

async fn publish(
    ctx: &Context,
    cluster: &TaskCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        debug!(%e, "event not recorded");
    }
}

pub async fn reconcile(
    object: Arc<TaskCluster>,
    ctx: Arc<Context>,
) -> Result<Action, ClusterError> {
    let namespace = object.namespace().ok_or(ClusterError::NoNamespace)?;
    let name = object.name_any();
    let err = |what: &str| {
        let (what, namespace, name) = (what.to_string(), namespace.clone(), name.clone());
        move |source| ClusterError::Api {
            what,
            namespace,
            name,
            source,
        }
    };
    let clusters: Api<TaskCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let Some(cluster) = clusters.get_opt(&name).await.map_err(err("reading"))? else {
        return Ok(Action::await_change());
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods = pods_api
        .list(&ListParams::default().labels(&format!("{TASK_CLUSTER_LABEL}={name}")))
        .await
        .map_err(err("listing workers"))?
        .items;
    let tasks = Api::<Task>::namespaced(ctx.client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .map_err(err("listing Tasks"))?
        .items;
    let ws = workers(&pods, &tasks);
    let (waiting, running) = task_counts(&tasks, &name);
    let idle_timeout = crate::duration::parse_duration(&cluster.spec.idle_timeout)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(30);
    let now = jiff::Timestamp::now();
    let plan = plan_workers(&cluster.spec, &ws, waiting, running, now, idle_timeout);

    let mut message = String::new();
    for (worker, why) in &plan.delete {
        match pods_api.delete(worker, &DeleteParams::default()).await {
            Ok(_) => {
                ctx.metrics.workers_deleted.inc();
                info!(cluster = %name, %namespace, %worker, %why, "worker deleted");
                publish(
                    &ctx,
                    &cluster,
                    EventType::Normal,
                    "WorkerDeleted",
                    format!("{worker}: {why}"),
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(err("deleting a worker")(e)),
        }
    }
    if plan.create > 0 {
        match worker_pod(&cluster) {
            Ok(body) => {
                let pod: Pod = serde_json::from_value(body).map_err(|e| ClusterError::Api {
                    what: "building a worker".into(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    source: kube::Error::SerdeError(e),
                })?;
                for _ in 0..plan.create {
                    let created = pods_api
                        .create(&PostParams::default(), &pod)
                        .await
                        .map_err(err("creating a worker"))?;
                    ctx.metrics.workers_created.inc();
                    info!(cluster = %name, %namespace, worker = %created.name_any(), waiting, "worker created");
                }
                publish(
                    &ctx,
                    &cluster,
                    EventType::Normal,
                    "WorkersCreated",
                    format!(
                        "{} worker(s) created ({waiting} Task(s) waiting)",
                        plan.create
                    ),
                )
                .await;
            }
            Err(why) => {
                message = format!("cannot create workers: {why}");
                publish(
                    &ctx,
                    &cluster,
                    EventType::Warning,
                    "InvalidTemplate",
                    message.clone(),
                )
                .await;
            }
        }
    }

    let deleted: Vec<&str> = plan.delete.iter().map(|(n, _)| n.as_str()).collect();
    let remaining: Vec<_> = ws
        .iter()
        .filter(|w| !w.terminating && !w.ended && !deleted.contains(&w.name.as_str()))
        .collect();
    let admitted = remaining.iter().filter(|w| w.admitted).count() as i32;
    let gated = remaining.len() as i32 - admitted;
    if message.is_empty() {
        message = if gated + plan.create > 0 && waiting > 0 {
            format!(
                "{waiting} Task(s) wait; {gated} worker(s) wait for quota behind the sluice gate"
            )
        } else {
            format!(
                "{} worker(s), {running} Task(s) running, {waiting} waiting",
                remaining.len()
            )
        };
    }
    let old = cluster.status.clone().unwrap_or_default();
    let stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let ready = admitted >= cluster.spec.min_workers;
    let status = TaskClusterStatus {
        workers: remaining.len() as i32 + plan.create,
        admitted,
        gated: gated + plan.create,
        busy: remaining.iter().filter(|w| w.busy > 0).count() as i32,
        waiting_tasks: waiting,
        running_tasks: running,
        message: message.clone(),
        conditions: vec![Condition::updated(
            old.conditions.iter().find(|c| c.type_ == "Ready"),
            "Ready",
            if ready {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            if ready {
                "MinWorkersAdmitted"
            } else {
                "WaitingForWorkers"
            },
            format!(
                "{admitted} of minWorkers {} admitted",
                cluster.spec.min_workers
            ),
            &stamp,
        )],
    };
    if cluster.status.as_ref() != Some(&status) {
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
            "metadata": {"name": name},
            "status": status,
        });
        clusters
            .patch_status(
                &name,
                &PatchParams::apply(TASK_FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(err("writing the status"))?;
    }
    Ok(match plan.recheck_secs {
        Some(s) => Action::requeue(Duration::from_secs(s.max(1) as u64)),
        None => Action::requeue(Duration::from_secs(30)),
    })
}

fn error_policy(cluster: Arc<TaskCluster>, error: &ClusterError, _: Arc<Context>) -> Action {
    warn!(cluster = %cluster.name_any(), %error, "TaskCluster reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

/// Runs the TaskCluster controller until `shutdown`.
pub async fn run(client: Client, metrics: TaskMetrics, shutdown: CancellationToken) {
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "sluice-tasks".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
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
        Api::<Task>::all(client.clone()),
        watcher::Config::default().any_semantic(),
        |task: Task| {
            let namespace = task.namespace()?;
            let cluster = task.spec.executor.container.as_ref()?.cluster.clone();
            Some(ObjectRef::<TaskCluster>::new(&cluster).within(&namespace))
        },
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
}
