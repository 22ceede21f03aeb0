//! What the load tools share: what gates their pods ([`Mode`]), and the scratch namespace of one
//! run, with a CapacityQueue of the same name, created before the run and deleted after it.

use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sluice::api::CapacityQueue;

/// What gates a load tool's pods: the `--mode` of e2e_load and shapes_load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No queue label: nothing gates the pods.
    Nogate,
    /// `sluice.dev/queue`; gangs carry `sluice.dev/workload` and `sluice.dev/min-count`.
    Sluice,
    /// `kueue.x-k8s.io/queue-name`; gangs are Kueue pod groups.
    Kueue,
}

/// Creates the namespace `name` and the CapacityQueue `name` of `cpu` quota, and returns once the
/// namespace's default ServiceAccount exists (pods need it), or fails after 30 s.
pub async fn create_scratch(client: &Client, name: &str, cpu: &str) -> anyhow::Result<()> {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
    Api::<CapacityQueue>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": name}, "spec": {"quota": {"cpu": cpu}}}),
            )?,
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let started = Instant::now();
    while accounts.get_opt("default").await?.is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            bail!("namespace {name} has no default ServiceAccount after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Deletes what [`create_scratch`] made, as far as it can (a failure here leaves litter, no wrong
/// result).
pub async fn delete_scratch(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<CapacityQueue>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// A field of this process's `/proc/self/status` in KiB (`VmRSS:`, `VmHWM:`), 0 when unreadable.
pub fn proc_status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Ends the kwok pod `name` as Succeeded (its `sluice.dev/kwok-phase` annotation) after `delay`
/// seconds, in a task of its own; tries ten times, 200 ms apart.
pub fn end_pod_later(pods: Api<k8s_openapi::api::core::v1::Pod>, name: String, delay: f64) {
    tokio::spawn(async move {
        if delay > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        }
        let patch = json!({"metadata": {"annotations": {"sluice.dev/kwok-phase": "Succeeded"}}});
        for _ in 0..10 {
            let merge = kube::api::Patch::Merge(&patch);
            match pods.patch(&name, &Default::default(), &merge).await {
                Ok(_) => return,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
}
