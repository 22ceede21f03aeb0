//! End-to-end load for `hack/bench.sh --only e2e`: creates pods in workloads of mixed shapes (single
//! pods, gangs of 4-8, groups of 32) as fast as the API server takes them (a bounded number of creates
//! in flight), watches them, and prints one JSON object with the time every pod was first seen without
//! scheduling gates ("admitted") and first seen Running. With `--end-after S` each pod is ended
//! (annotation `sluice.dev/kwok-phase=Succeeded`, which kwok acts on) S seconds after it runs, so a
//! quota-limited queue turns over. A pod deleted by someone else before it ran (evicted by a
//! preemption or a cohort's reclaim in the churn run: a plain pod is not recreated) counts as gone;
//! the load is complete when every pod ran or is gone. The namespace (and the queue objects) must
//! exist; see hack/bench.sh.
//!
//!   cargo run --release -p sluice-tools --bin e2e_load -- --mode sluice --namespace e2e --queue e2e --pods 5000

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use sluice_tools::Mode;

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long)]
    namespace: String,
    /// The sluice CapacityQueue or the Kueue LocalQueue.
    #[arg(long, default_value = "e2e")]
    queue: String,
    /// At least this many pods (whole workloads are added until the count is reached).
    #[arg(long, default_value_t = 5000)]
    pods: usize,
    /// Pod creations in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// End each pod this many seconds after it is seen Running.
    #[arg(long)]
    end_after: Option<f64>,
    /// CPU request of every pod.
    #[arg(long, default_value = "10m")]
    cpu: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
}

/// Workload sizes, repeated: 8 single pods, gangs of 4 to 8, one group of 32 (70 pods a round).
const SHAPES: [usize; 14] = [1, 1, 1, 1, 4, 1, 5, 1, 6, 1, 7, 1, 8, 32];

fn workloads(pods: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut total = 0;
    for size in SHAPES.iter().cycle() {
        if total >= pods {
            break;
        }
        out.push(*size);
        total += size;
    }
    out
}

fn pod(args: &Args, workload: usize, size: usize, index: usize) -> serde_json::Value {
    let name = format!("w{workload}-{index}");
    let group = format!("w{workload}");
    let mut labels = serde_json::Map::new();
    let mut annotations = serde_json::Map::new();
    labels.insert("bench".into(), json!("e2e"));
    match args.mode {
        Mode::Nogate => {}
        Mode::Sluice => {
            labels.insert("sluice.dev/queue".into(), json!(args.queue));
            if size > 1 {
                labels.insert("sluice.dev/workload".into(), json!(group));
                annotations.insert("sluice.dev/min-count".into(), json!(size.to_string()));
            }
        }
        Mode::Kueue => {
            labels.insert("kueue.x-k8s.io/queue-name".into(), json!(args.queue));
            if size > 1 {
                labels.insert("kueue.x-k8s.io/pod-group-name".into(), json!(group));
                annotations.insert(
                    "kueue.x-k8s.io/pod-group-total-count".into(),
                    json!(size.to_string()),
                );
            }
        }
    }
    json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": args.cpu}, "limits": {"cpu": args.cpu}}}],
        },
    })
}

/// What the watch tells the main loop.
enum Seen {
    Pod {
        name: String,
        ungated: bool,
        running: bool,
    },
    /// Deleted (by an eviction, or anyone but this tool).
    Gone(String),
}

fn ungated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_none_or(|g| g.is_empty())
}

fn running(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded")
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let shapes = workloads(args.pods);
    let total: usize = shapes.iter().sum();
    let client = Client::try_default().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);

    // The watch is open before the first create, so no transition is missed.
    let mut events = Box::pin(
        watcher(pods.clone(), watcher::Config::default().labels("bench=e2e")).default_backoff(),
    );
    let start = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Seen>();
    tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let seen = match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => Seen::Pod {
                    name: p.name_any(),
                    ungated: ungated(&p),
                    running: running(&p),
                },
                Ok(watcher::Event::Delete(p)) => Seen::Gone(p.name_any()),
                Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
                Err(e) => {
                    eprintln!("watch: {e}");
                    continue;
                }
            };
            let _ = tx.send(seen);
        }
    });
    let created_all = Arc::new(AtomicBool::new(false));
    let specs: Vec<serde_json::Value> = shapes
        .iter()
        .enumerate()
        .flat_map(|(w, &size)| (0..size).map(move |i| (w, size, i)))
        .map(|(w, size, i)| pod(&args, w, size, i))
        .collect();
    let all_names: Vec<String> = specs
        .iter()
        .filter_map(|s| s["metadata"]["name"].as_str().map(String::from))
        .collect();
    let creator = {
        let concurrency = args.concurrency;
        let created_all = created_all.clone();
        let pods = pods.clone();
        tokio::spawn(async move {
            let errors = stream::iter(specs)
                .map(|spec| {
                    let pods = pods.clone();
                    async move {
                        let pod: Pod = serde_json::from_value(spec).expect("pod");
                        let mut failures = 0u32;
                        loop {
                            match pods.create(&PostParams::default(), &pod).await {
                                Ok(_) => return failures,
                                Err(kube::Error::Api(e)) if e.code == 409 => return failures,
                                Err(e) => {
                                    failures += 1;
                                    if failures >= 20 {
                                        eprintln!("create {}: {e} (giving up)", pod.name_any());
                                        return failures;
                                    }
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                }
                            }
                        }
                    }
                })
                .buffer_unordered(concurrency)
                .fold(0u32, |acc, f| async move { acc + f })
                .await;
            created_all.store(true, Ordering::Release);
            (start.elapsed().as_secs_f64(), errors)
        })
    };

    let mut admitted: HashMap<String, f64> = HashMap::new();
    let mut ran: HashMap<String, f64> = HashMap::new();
    let mut ended: HashSet<String> = HashSet::new();
    let mut gone: HashSet<String> = HashSet::new();
    let deadline = start + Duration::from_secs_f64(args.timeout);
    let mut last_report = Instant::now();
    let mut last_list = Instant::now();
    while ran.len() + gone.len() < total {
        // A deletion the watch did not deliver (one between a relist's LIST and its WATCH) is
        // found by a LIST once every pod was created.
        if created_all.load(Ordering::Acquire) && last_list.elapsed() > Duration::from_secs(15) {
            last_list = Instant::now();
            if let Ok(list) = pods
                .list_metadata(&ListParams::default().labels("bench=e2e"))
                .await
            {
                let present: HashSet<String> = list.items.iter().map(|p| p.name_any()).collect();
                gone.extend(
                    all_names
                        .iter()
                        .filter(|n| !present.contains(*n) && !ran.contains_key(*n))
                        .cloned(),
                );
            }
        }
        let tick = (Instant::now() + Duration::from_secs(5)).min(deadline);
        let next = tokio::time::timeout_at(tick.into(), rx.recv()).await;
        let (name, is_ungated, is_running) = match next {
            Ok(Some(Seen::Pod {
                name,
                ungated,
                running,
            })) => (name, ungated, running),
            Ok(Some(Seen::Gone(name))) => {
                if !ran.contains_key(&name) {
                    gone.insert(name);
                }
                continue;
            }
            Err(_) if Instant::now() < deadline => continue,
            _ => {
                eprintln!("e2e_load: timed out with {} of {total} running", ran.len());
                break;
            }
        };
        let t = start.elapsed().as_secs_f64();
        if is_ungated || is_running {
            admitted.entry(name.clone()).or_insert(t);
        }
        if is_running && !ran.contains_key(&name) {
            ran.insert(name.clone(), t);
            if let Some(after) = args.end_after
                && ended.insert(name.clone())
            {
                sluice_tools::end_pod_later(pods.clone(), name.clone(), after);
            }
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "e2e_load: {t:.1}s admitted {} running {} gone {} of {total}",
                admitted.len(),
                ran.len(),
                gone.len()
            );
            last_report = Instant::now();
        }
    }
    let (create_s, create_retries) = creator.await?;
    let mut admitted_times: Vec<f64> = admitted.into_values().collect();
    let mut running_times: Vec<f64> = ran.into_values().collect();
    admitted_times.sort_by(f64::total_cmp);
    running_times.sort_by(f64::total_cmp);
    let round = |v: &Vec<f64>| {
        v.iter()
            .map(|t| (t * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    };
    let summary = json!({
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "pods": total,
        "workloads": shapes.len(),
        "singles": shapes.iter().filter(|&&s| s == 1).count(),
        "gangs_4_8": shapes.iter().filter(|&&s| (4..=8).contains(&s)).count(),
        "groups_32": shapes.iter().filter(|&&s| s == 32).count(),
        "concurrency": args.concurrency,
        "end_after_s": args.end_after,
        "create_s": create_s,
        "create_retries": create_retries,
        "gone_before_running": gone.len(),
        "complete": running_times.len() + gone.len() == total,
        "all_running_s": running_times.last(),
        "all_admitted_s": admitted_times.last(),
        "admitted_times": round(&admitted_times),
        "running_times": round(&running_times),
    });
    println!("{summary}");
    Ok(())
}
