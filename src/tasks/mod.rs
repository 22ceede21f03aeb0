//! Tasks: sluice's own dynamic application. A Task is a small unit of work run by an executor
//! (an ephemeral container in a TaskCluster worker, its own pod, an HTTP request, any object with a
//! success condition); a TaskObject holds its input; a TaskCluster is a pool of worker pods
//! governed by the sluice gate. The leader runs both controllers.

pub mod client;
pub mod cluster_controller;
pub mod executors;
pub mod jsonpath;
pub mod metrics;
pub mod substitute;
pub mod task_controller;
pub mod workers;

use kube::Client;
use tokio_util::sync::CancellationToken;

pub use metrics::TaskMetrics;

/// Runs the Task and TaskCluster controllers until `shutdown`.
pub async fn run(client: Client, metrics: TaskMetrics, shutdown: CancellationToken) {
    let tasks = tokio::spawn(task_controller::run(
        client.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    cluster_controller::run(client, metrics, shutdown).await;
    let _ = tasks.await;
}
