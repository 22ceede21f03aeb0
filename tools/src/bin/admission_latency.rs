//! Time from a pod's creation to its admission (gate removed) when its queue has room, measured by
//! the client: create a governed pod, watch it, stop the clock when the gate is gone. Needs the
//! local cluster with sluice (`hack/cluster.sh up --with-sluice`, then `eval "$(hack/cluster.sh env)"`).
//!
//!   cargo run --release -p sluice-tools --bin admission_latency -- 200

use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use sluice::api::ADMISSION_GATE;

fn gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let count: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(100);
    let client = Client::try_default().await?;
    let ns = format!("latency-{}", std::process::id());
    sluice_tools::create_scratch(&client, &ns, "100000").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut events = std::pin::pin!(
        watcher(pods.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    let mut latencies = Vec::with_capacity(count);
    for i in 0..count {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{i}"), "labels": {"sluice.dev/queue": ns}},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]},
        }))?;
        let start = Instant::now();
        pods.create(&PostParams::default(), &pod).await?;
        while let Some(event) = events.next().await {
            let p = event?;
            if p.name_any() == format!("p{i}") && !gated(&p) {
                latencies.push(start.elapsed());
                break;
            }
        }
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies[((latencies.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
    };
    println!(
        "pods {count}: creation to admission ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    sluice_tools::delete_scratch(&client, &ns).await;
    Ok(())
}
