//! Helpers for the Task end-to-end tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice::api::{Task, TaskCluster, TaskPhase};

use crate::support::{TestEnv, create, wait_for};

pub fn tasks(env: &TestEnv) -> Api<Task> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

pub async fn create_task(env: &TestEnv, task: Value) -> Task {
    let t: Task = serde_json::from_value(task).expect("task");
    tasks(env)
        .create(&PostParams::default(), &t)
        .await
        .unwrap_or_else(|e| panic!("create task: {e}"))
}

/// Creates the TaskCluster `pool` of `queue` with `spec` (workers, slots, idle timeout...) and its
/// worker template: busybox asking 1 cpu and 64Mi, gone at once when deleted.
pub async fn create_pool(env: &TestEnv, queue: &str, mut spec: Value) -> TaskCluster {
    spec["template"] = json!({"spec": {"terminationGracePeriodSeconds": 0, "containers": [{
        "name": "worker", "image": "busybox",
        "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}});
    let cluster: TaskCluster = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
        "metadata": {"name": "pool", "labels": {"sluice.dev/queue": queue}},
        "spec": spec,
    }))
    .expect("cluster");
    create(
        &Api::<TaskCluster>::namespaced(env.client.clone(), &env.namespace),
        &cluster,
    )
    .await
}

pub fn phase(t: &Task) -> TaskPhase {
    t.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// Waits until the Task reaches `phase` (fails at once on another final phase).
pub async fn wait_phase(env: &TestEnv, name: &str, want: TaskPhase, timeout: Duration) -> Task {
    let api = tasks(env);
    wait_for(&format!("Task {name} to be {want}"), timeout, || async {
        let t = api.get(name).await.ok()?;
        let p = phase(&t);
        if p != want && p.is_final() {
            panic!(
                "Task {name} ended {p} instead of {want}: {:?}",
                t.status.as_ref().map(|s| &s.message)
            );
        }
        (p == want).then_some(t)
    })
    .await
}

/// Sets the Task's killTimestamp to now: the external kill.
pub async fn kill_now(env: &TestEnv, name: &str) {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    tasks(env)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"killTimestamp": now}})),
        )
        .await
        .unwrap_or_else(|e| panic!("set killTimestamp of {name}: {e}"));
}

/// Waits for Killed and checks `reason` is in its message.
pub async fn wait_killed(env: &TestEnv, name: &str, reason: &str, timeout: Duration) -> Task {
    let killed = wait_phase(env, name, TaskPhase::Killed, timeout).await;
    let status = killed.status.clone().expect("status");
    assert!(
        status.message.contains(reason),
        "{name}: {}",
        status.message
    );
    killed
}

/// Whether the Task's status records that it went through Killing.
pub fn went_through_killing(task: &Task) -> bool {
    task.status.as_ref().is_some_and(|s| s.killing_at.is_some())
}

/// An Argo Workflows resource (argoproj.io/v1alpha1).
pub fn argo(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", kind),
        plural,
    )
}

/// Argo Workflows' Workflows in the test's namespace.
pub fn workflows(env: &TestEnv) -> Api<DynamicObject> {
    Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &argo("Workflow", "workflows"),
    )
}

/// The pods of the Argo Workflow `workflow` (none if they cannot be listed).
pub async fn workflow_pods(env: &TestEnv, workflow: &str) -> Vec<Pod> {
    let selector = format!("workflows.argoproj.io/workflow={workflow}");
    env.pods()
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Fails unless Argo Workflows is installed; `how_to_start` says how to bring it up.
pub async fn require_argo(env: &TestEnv, how_to_start: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    assert!(
        crds.get_opt("workflows.argoproj.io")
            .await
            .ok()
            .flatten()
            .is_some(),
        "Argo Workflows is not installed on this cluster: {how_to_start}"
    );
}

/// A local HTTP server in the test process; records every request path.
pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<String>>>,
    /// Paths of `/slow` requests whose connection the client dropped before the answer.
    pub cancelled: Arc<Mutex<Vec<String>>>,
}

/// Records the path in `cancelled` when dropped before `answered` (hyper drops the handler's
/// future when the client closes the connection).
struct CancelGuard {
    path: String,
    answered: bool,
    cancelled: Arc<Mutex<Vec<String>>>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.answered {
            self.cancelled
                .lock()
                .expect("cancelled")
                .push(self.path.clone());
        }
    }
}

impl TestServer {
    pub fn hits(&self, prefix: &str) -> usize {
        self.requests
            .lock()
            .expect("requests")
            .iter()
            .filter(|p| p.starts_with(prefix))
            .count()
    }
}

/// Routes: `/ok/...` answers 200 `{"result": {"jobs": 3}, "path": <path>}`, `/boom/...` 500,
/// `/slow/...` answers 200 after `slow` (a request killed or interrupted before).
pub async fn test_server(slow: Duration) -> TestServer {
    use axum::extract::Request;
    use axum::http::StatusCode;
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let cancelled: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = requests.clone();
    let dropped = cancelled.clone();
    let app = axum::Router::new().fallback(move |req: Request| {
        let seen = seen.clone();
        let dropped = dropped.clone();
        async move {
            let path = req.uri().path().to_string();
            seen.lock().expect("requests").push(path.clone());
            if path.starts_with("/boom") {
                return (StatusCode::INTERNAL_SERVER_ERROR, "boom".to_string());
            }
            if path.starts_with("/slow") {
                let mut guard = CancelGuard {
                    path: path.clone(),
                    answered: false,
                    cancelled: dropped,
                };
                tokio::time::sleep(slow).await;
                guard.answered = true;
            }
            let body = serde_json::json!({"result": {"jobs": 3}, "path": path});
            (StatusCode::OK, body.to_string())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the test server");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TestServer {
        addr,
        requests,
        cancelled,
    }
}

/// Labels as a map, for pod templates.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Plays the kubelet for a Task's ephemeral container on a kwok worker: marks it terminated. The
/// status list is replaced whole (as the kubelet writes it), keeping the other containers' states.
async fn end_ephemeral(
    pods: &Api<Pod>,
    worker: &str,
    container: &str,
    exit_code: i32,
    message: &str,
) {
    let pod = pods
        .get(worker)
        .await
        .unwrap_or_else(|e| panic!("get {worker}: {e}"));
    let mut statuses: Vec<serde_json::Value> = pod
        .status
        .and_then(|s| s.ephemeral_container_statuses)
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.name != container)
        .map(|s| serde_json::to_value(s).expect("status"))
        .collect();
    statuses.push(json!({
        "name": container, "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": exit_code, "message": message, "reason": if exit_code == 0 {"Completed"} else {"Error"}}},
    }));
    let status = json!({"status": {"ephemeralContainerStatuses": statuses}});
    pods.patch_status(worker, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|e| panic!("end ephemeral container {container} on {worker}: {e}"));
}

/// Plays the kubelet for every Running container Task of the namespace whose ephemeral container
/// was added and has not ended: ends it with exit code 0 and the message `{"task": "<name>"}`.
pub async fn end_running_containers(env: &TestEnv) {
    let Ok(all) = tasks(env).list(&Default::default()).await else {
        return;
    };
    for t in &all.items {
        let Some(s) = &t.status else { continue };
        if s.phase != TaskPhase::Running || s.executor.as_deref() != Some("container") {
            continue;
        }
        let (Some(worker), Some(container)) = (
            s.worker.clone(),
            s.handle.as_ref().and_then(|h| h.container.clone()),
        ) else {
            continue;
        };
        let Ok(pod) = env.pods().get(&worker).await else {
            continue;
        };
        let added = pod
            .spec
            .as_ref()
            .and_then(|s| s.ephemeral_containers.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.name == container));
        let ended = pod
            .status
            .as_ref()
            .and_then(|s| s.ephemeral_container_statuses.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.name == container && c.state.as_ref().is_some_and(|s| s.terminated.is_some())
                })
            });
        if added && !ended {
            let name = kube::ResourceExt::name_any(t);
            end_ephemeral(
                &env.pods(),
                &worker,
                &container,
                0,
                &format!("{{\"task\": \"{name}\"}}"),
            )
            .await;
        }
    }
}
