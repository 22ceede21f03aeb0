//! Turnover latency (issue 24, part 3): in a quota-limited queue, the time from a pod ending to the
//! next waiting pod being ungated, over many handovers. A queue with room for `--slots` pods of 1
//! cpu is filled, `--backlog` more pods wait behind the gate; then, one handover at a time, an
//! admitted running pod is ended as kwok ends pods (annotation `sluice.dev/kwok-phase=Succeeded`,
//! hack/kwok/stages.yaml), and the clock runs from the moment this tool's pod watch shows it
//! Succeeded to the moment the same watch shows a waiting pod without sluice's gate. The ended pod
//! is then deleted and a new pod created, so the backlog stays the same, and the next handover
//! starts once the watch shows the new pod behind the gate.
//!
//! Needs the local cluster with sluice (`hack/cluster.sh up --with-sluice --release-sluice`, then
//! `eval "$(hack/cluster.sh env)"`); hack/bench/turnover.sh runs it.
//!
//!   cargo run --release -p sluice-tools --bin turnover -- --handovers 2000 --json out.json

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use sluice::api::ADMISSION_GATE;

#[derive(Parser, Debug)]
struct Args {
    /// Handovers measured (after the warm-up ones).
    #[arg(long, default_value_t = 2000)]
    handovers: usize,
    /// Handovers run first and not counted.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Pods the queue's quota has room for (1 cpu each).
    #[arg(long, default_value_t = 4)]
    slots: usize,
    /// Pods kept waiting behind the gate.
    #[arg(long, default_value_t = 8)]
    backlog: usize,
    /// A handover not seen within this many seconds fails the run.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
    /// Writes the latencies and their summary here as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// What the watch shows of a pod.
#[derive(Clone, Debug, Default)]
struct Seen {
    gated: bool,
    phase: String,
}

fn gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// What changed for one pod in one watch event, at the moment the event was read.
enum Change {
    Ended(String),
    Ungated(String),
    Other,
}

struct Watch<S> {
    events: S,
    pods: HashMap<String, Seen>,
}

impl<S> Watch<S>
where
    S: futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin,
{
    /// Reads the next event and updates what is seen; a watch error is retried by the stream.
    async fn next(&mut self) -> anyhow::Result<Change> {
        let event = self.events.next().await.context("the pod watch ended")?;
        let pod = match event {
            Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod)) => pod,
            Ok(watcher::Event::Delete(pod)) => {
                self.pods.remove(&pod.name_any());
                return Ok(Change::Other);
            }
            Ok(_) => return Ok(Change::Other),
            Err(e) => {
                eprintln!("turnover: watch error (retried): {e}");
                return Ok(Change::Other);
            }
        };
        let name = pod.name_any();
        let now = Seen {
            gated: gated(&pod),
            phase: phase(&pod),
        };
        let before = self.pods.insert(name.clone(), now.clone());
        let was = before.unwrap_or(Seen {
            gated: true,
            phase: String::new(),
        });
        if was.gated && !now.gated {
            return Ok(Change::Ungated(name));
        }
        if was.phase != "Succeeded" && now.phase == "Succeeded" {
            return Ok(Change::Ended(name));
        }
        Ok(Change::Other)
    }

    /// Reads events until `done` holds for what is seen.
    async fn until(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&HashMap<String, Seen>) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !done(&self.pods) {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::timeout(left, self.next())
                .await
                .with_context(|| format!("timed out waiting for {what}"))??;
        }
        Ok(())
    }
}

fn pod_body(name: &str, queue: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]},
    }))?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await?;
    let ns = format!("turnover-{}", std::process::id());
    sluice_tools::create_scratch(&client, &ns, &args.slots.to_string()).await?;
    let result = run(&client, &ns, &args).await;
    sluice_tools::delete_scratch(&client, &ns).await;
    result
}

async fn run(client: &Client, ns: &str, args: &Args) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let events = Box::pin(watcher(pods.clone(), watcher::Config::default()));
    let mut watch = Watch {
        events,
        pods: HashMap::new(),
    };
    let timeout = Duration::from_secs(args.timeout_s);
    let mut next_pod = 0usize;
    for _ in 0..args.slots + args.backlog {
        pods.create(
            &PostParams::default(),
            &pod_body(&format!("p{next_pod}"), ns)?,
        )
        .await?;
        next_pod += 1;
    }
    let (slots, backlog) = (args.slots, args.backlog);
    watch
        .until(timeout * 4, "the queue to fill", |seen| {
            let running = (seen.values())
                .filter(|s| !s.gated && s.phase == "Running")
                .count();
            let waiting = seen.values().filter(|s| s.gated).count();
            running == slots && waiting == backlog
        })
        .await?;
    let mut latencies: Vec<f64> = Vec::with_capacity(args.handovers);
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    for round in 0..args.warmup + args.handovers {
        let Some(victim) = (watch.pods.iter())
            .filter(|(_, s)| !s.gated && s.phase == "Running")
            .map(|(n, _)| n.clone())
            .min_by_key(|n| n[1..].parse::<usize>().unwrap_or(usize::MAX))
        else {
            bail!("round {round}: no running pod to end");
        };
        let patch = json!({"metadata": {"annotations": {"sluice.dev/kwok-phase": "Succeeded"}}});
        pods.patch(&victim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("ending pod {victim}"))?;
        let deadline = Instant::now() + timeout;
        let mut ended_at: Option<Instant> = None;
        let latency = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let change = tokio::time::timeout(left, watch.next())
                .await
                .with_context(|| format!("round {round}: no handover after ending {victim}"))??;
            match change {
                Change::Ended(name) if name == victim => ended_at = Some(Instant::now()),
                Change::Ungated(name) => match ended_at {
                    Some(at) => break (at.elapsed(), name),
                    None => bail!("round {round}: {name} ungated before {victim} was seen ending"),
                },
                _ => {}
            }
        };
        if round >= args.warmup {
            latencies.push(latency.0.as_secs_f64() * 1000.0);
        }
        // Keep the backlog: the ended pod goes, a new one comes; the next round starts once it is
        // seen behind the gate and the admitted one runs.
        pods.delete(&victim, &DeleteParams::default().grace_period(0))
            .await
            .with_context(|| format!("deleting pod {victim}"))?;
        let fresh = format!("p{next_pod}");
        next_pod += 1;
        pods.create(&PostParams::default(), &pod_body(&fresh, ns)?)
            .await?;
        let admitted = latency.1;
        watch
            .until(
                timeout,
                "the new pod gated and the admitted one running",
                |seen| {
                    seen.get(&fresh).is_some_and(|s| s.gated)
                        && seen.get(&admitted).is_some_and(|s| s.phase == "Running")
                        && !seen.contains_key(&victim)
                },
            )
            .await?;
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    report(args, &latencies, &load_before, &load_after)
}

fn report(args: &Args, latencies: &[f64], before: &str, after: &str) -> anyhow::Result<()> {
    let mut sorted = latencies.to_vec();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    let load = |s: &str| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    println!(
        "handovers {}: pod ended -> next pod ungated ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} mean {:.1} (load {} -> {})",
        sorted.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0),
        mean,
        load(before),
        load(after)
    );
    if let Some(path) = &args.json {
        let out = json!({
            "handovers": sorted.len(), "slots": args.slots, "backlog": args.backlog,
            "p50_ms": pct(0.5), "p90_ms": pct(0.9), "p99_ms": pct(0.99), "max_ms": pct(1.0),
            "mean_ms": mean, "load_before": load(before), "load_after": load(after),
            "latencies_ms": latencies,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&out)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
