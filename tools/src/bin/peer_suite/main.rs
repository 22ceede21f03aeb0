//! Kueue's scheduler performance suite (`test/performance/scheduler/` of Kueue v0.19.2) on a real
//! API server, against sluice or Kueue (`hack/bench.sh --only peer`, `peer_jobs`, `peer_tas`).
//!
//! Two of its configurations ([`suite`]): the baseline (`configs/baseline/generator.yaml`: 5
//! cohorts × 6 ClusterQueues of nominal 20 cpu, borrowing limit 100, reclaimWithinCohort Any,
//! withinClusterQueue LowerPriority; per queue 350 small (1 cpu, 200 ms, priority 50) every 100 ms,
//! 100 medium (5 cpu, 500 ms, priority 100) every 500 ms, 50 large (20 cpu, 1 s, priority 200) every
//! 1.2 s, the sets at once: 15,000 workloads) and topology-aware scheduling (`configs/tas`: the same
//! queues and sizes as 2-, 4- and 8-pod workloads asking for one rack, required, preferred or
//! balanced, on 10 racks of 64 nodes of 96 cpu). Kueue's runner creates Workload objects on envtest
//! and marks each Finished its runtime after its admission; here each workload is a plain pod or a
//! batch/v1 Job through webhooks, kube-scheduler and kwok, admitted when all its pods are ungated
//! and ended (annotation `sluice.dev/kwok-phase=Succeeded`) its runtime after that. A workload
//! preempted is brought back by its owner (the tool for a plain pod, the Job controller or Kueue's
//! resuming for a Job) and its time to admit runs to its last admission, as Kueue's recorder counts.
//!
//! `--setup` creates the PriorityClasses, the namespaces, the queues (sluice CapacityQueues, or
//! Kueue's ResourceFlavor, ClusterQueues and LocalQueues) and for the TAS shape the racked kwok nodes
//! and Kueue's Topology, and exits; without it, the load runs against queues already set up and one
//! JSON object is printed.
//!
//!   peer_suite --mode sluice --prefix ps --setup && peer_suite --mode sluice --prefix ps
//!   peer_suite --mode kueue --shape tas --as jobs --prefix pt --setup && peer_suite --mode kueue --shape tas --as jobs --prefix pt

mod objects;
mod suite;
mod track;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use suite::{Shape, WorkloadKind};
use track::{Progress, Seen, Then, Workload, seen};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Sluice,
    Kueue,
}

#[derive(Parser, Debug)]
#[command(about = "Kueue's scheduler performance suite (baseline or TAS) against sluice or Kueue")]
pub struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    /// Which of Kueue's configurations: baseline, or tas (needs --as jobs).
    #[arg(long, value_enum, default_value = "baseline")]
    shape: Shape,
    /// A workload as one plain pod (baseline only) or as a batch/v1 Job.
    #[arg(long = "as", value_enum, default_value = "pods")]
    workload_kind: WorkloadKind,
    /// Prefix of the namespaces, queues and cohorts (one run's objects apart from another's).
    #[arg(long, default_value = "ps")]
    prefix: String,
    /// Create the PriorityClasses, namespaces and queues (and the TAS shape's nodes), then exit.
    #[arg(long)]
    setup: bool,
    /// Multiply every workload count by this (1: the suite; less for a smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Cohorts and queues per cohort (the suite: 5 and 6).
    #[arg(long, default_value_t = 5)]
    cohorts: usize,
    #[arg(long, default_value_t = 6)]
    queues_per_cohort: usize,
    /// The TAS shape's nodes per rack (the suite: 64, in 10 racks).
    #[arg(long, default_value_t = 64)]
    nodes_per_rack: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800.0)]
    timeout: f64,
    /// Give up once no workload was admitted or finished for this many seconds after the last
    /// create (a stall: the summary then names some of the workloads left and what their pods showed).
    /// Default 300 for plain pods, 900 for Jobs: the Job controller holds back a preempted Job's
    /// replacement pods for up to 10 minutes (10 s doubled per failed pod), which is no stall.
    #[arg(long)]
    stall_timeout: Option<f64>,
}

enum Event {
    Created { workload: usize, at: f64 },
    Pod(Seen),
}

fn spawn_watch(client: &Client, prefix: &str, tx: tokio::sync::mpsc::UnboundedSender<Event>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let cfg = watcher::Config::default().labels(&format!(
        "bench=peer-suite,bench.sluice.dev/peer-run={prefix}"
    ));
    let mut stream = Box::pin(watcher(pods, cfg).default_backoff());
    tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            let (p, deleted) = match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                Ok(watcher::Event::Delete(p)) => (p, true),
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("watch: {e}");
                    continue;
                }
            };
            if let Some(s) = seen(&p, deleted) {
                let _ = tx.send(Event::Pod(s));
            }
        }
    });
}

/// A workload's object: its plain pod of this attempt, or its Job.
fn workload_name(args: &Args, wl: &Workload, w: usize) -> String {
    let class = args.shape.classes()[wl.class].name;
    match args.workload_kind {
        WorkloadKind::Pods => format!("{class}-{w}-{}", wl.attempt),
        WorkloadKind::Jobs => format!("{class}-{w}"),
    }
}

/// Creates the workload's object (its plain pod of this attempt, or its Job); whether it exists.
async fn create_workload(
    client: &Client,
    args: &Args,
    class: usize,
    queue: &str,
    name: &str,
    w: usize,
) -> bool {
    let c = &args.shape.classes()[class];
    let made = match args.workload_kind {
        WorkloadKind::Pods => objects::pod(args, queue, c, name, w).map(|p| (Some(p), None)),
        WorkloadKind::Jobs => objects::job(args, queue, c, name, w).map(|j| (None, Some(j))),
    };
    match made {
        Ok((Some(pod), _)) => objects::create(client, &pod).await,
        Ok((_, Some(job))) => objects::create(client, &job).await,
        Ok(_) => false,
        Err(e) => {
            eprintln!("building {name}: {e}");
            false
        }
    }
}

/// The suite's generator: per queue and class, one task creating its workloads one after another,
/// pausing the class's interval before each create (as Kueue's generateWlSet does).
fn spawn_generators(
    client: &Client,
    args: &Arc<Args>,
    wls: &[Workload],
    start: Instant,
    tx: &tokio::sync::mpsc::UnboundedSender<Event>,
) -> tokio::task::JoinHandle<f64> {
    let mut sets: HashMap<(String, usize), Vec<(usize, String)>> = HashMap::new();
    for (w, wl) in wls.iter().enumerate() {
        let name = workload_name(args, wl, w);
        sets.entry((wl.queue.clone(), wl.class))
            .or_default()
            .push((w, name));
    }
    let mut tasks = Vec::new();
    for ((queue, class), workloads) in sets {
        let (client, args, tx) = (client.clone(), args.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let interval = Duration::from_millis(args.shape.classes()[class].interval_ms);
            for (w, name) in workloads {
                tokio::time::sleep(interval).await;
                if create_workload(&client, &args, class, &queue, &name, w).await {
                    let _ = tx.send(Event::Created {
                        workload: w,
                        at: start.elapsed().as_secs_f64(),
                    });
                }
            }
        }));
    }
    tokio::spawn(async move {
        for t in tasks {
            let _ = t.await;
        }
        start.elapsed().as_secs_f64()
    })
}

/// Carries out what an observation asked for: a pod's end later, or a plain pod created again.
fn follow(client: &Client, args: &Arc<Args>, wl: &Workload, w: usize, then: Vec<Then>) {
    for then in then {
        match then {
            Then::End { pod, after } => {
                sluice_tools::end_pod_later(Api::namespaced(client.clone(), &wl.queue), pod, after)
            }
            Then::Recreate => {
                let (client, args) = (client.clone(), args.clone());
                let (class, queue, name) =
                    (wl.class, wl.queue.clone(), workload_name(&args, wl, w));
                tokio::spawn(async move {
                    create_workload(&client, &args, class, &queue, &name, w).await
                });
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    objects::check(&args)?;
    let client = Client::try_default().await?;
    let queues = suite::queue_names(&args.prefix, args.cohorts, args.queues_per_cohort);
    if args.setup {
        objects::setup(&client, &args).await?;
        eprintln!(
            "peer_suite: {} queues set up ({:?}, {:?})",
            queues.len(),
            args.mode,
            args.shape
        );
        return Ok(());
    }
    let classes = args.shape.classes();
    let mut wls: Vec<Workload> = suite::plan(classes, &queues, args.scale)
        .into_iter()
        .map(|p| Workload::new(p.class, p.queue))
        .collect();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    spawn_watch(&client, &args.prefix, tx.clone());
    // The watch is open (its initial list done or under way) before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let generator = spawn_generators(&client, &args, &wls, start, &tx);
    drop(tx);
    let deadline = start + Duration::from_secs_f64(args.timeout);
    let stall_timeout = args.stall_timeout.unwrap_or(match args.workload_kind {
        WorkloadKind::Pods => 300.0,
        WorkloadKind::Jobs => 900.0,
    });
    let mut finished = 0usize;
    let mut ticks = tokio::time::interval(Duration::from_secs(10));
    let mut progress = Progress::default();
    let mut stopped = None;
    // A run stopped from outside (SIGTERM, Ctrl-C: a time box) still prints what it saw so far.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    while finished < wls.len() {
        let ev = tokio::select! {
            _ = terminate.recv() => {
                eprintln!("peer_suite: stopped by SIGTERM with {finished} of {} finished", wls.len());
                stopped = Some("stopped from outside");
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                eprintln!("peer_suite: interrupted with {finished} of {} finished", wls.len());
                stopped = Some("stopped from outside");
                break;
            }
            ev = tokio::time::timeout_at(deadline.into(), rx.recv()) => ev,
            _ = ticks.tick() => {
                let t = start.elapsed().as_secs_f64();
                let admitted = wls.iter().filter(|w| w.admitted.is_some()).count();
                eprintln!("peer_suite: {t:.1}s admitted {admitted} finished {finished} of {}", wls.len());
                if progress.stalled(admitted, finished, generator.is_finished(), t, stall_timeout) {
                    eprintln!("peer_suite: stalled: nothing admitted or finished for {stall_timeout:.0} s");
                    stopped = Some("stalled");
                    break;
                }
                continue;
            }
        };
        let Ok(Some(ev)) = ev else {
            eprintln!(
                "peer_suite: timed out with {finished} of {} finished",
                wls.len()
            );
            stopped = Some("timed out");
            break;
        };
        let t = start.elapsed().as_secs_f64();
        match ev {
            Event::Created { workload, at } => {
                if let Some(wl) = wls.get_mut(workload) {
                    wl.created = Some(wl.created.map_or(at, |c| c.min(at)));
                }
            }
            Event::Pod(s) => {
                let w = s.workload;
                let Some(wl) = wls.get_mut(w) else { continue };
                let plain_pod = match args.workload_kind {
                    WorkloadKind::Pods => workload_name(&args, wl, w),
                    WorkloadKind::Jobs => String::new(),
                };
                let was = wl.finished.is_some();
                let then = wl.observe(&classes[wl.class], &s, t, &plain_pod);
                follow(&client, &args, wl, w, then);
                finished += usize::from(!was && wl.finished.is_some());
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let create_s = if generator.is_finished() {
        generator.await.unwrap_or(elapsed)
    } else {
        elapsed
    };
    let mut out = track::summary(classes, &wls, create_s, elapsed);
    out["mode"] = json!(format!("{:?}", args.mode).to_lowercase());
    out["shape"] = json!(format!("{:?}", args.shape).to_lowercase());
    out["as"] = json!(format!("{:?}", args.workload_kind).to_lowercase());
    out["queues"] = json!(queues.len());
    out["cohorts"] = json!(args.cohorts);
    out["scale"] = json!(args.scale);
    out["stopped"] = json!(stopped);
    out["left_sample"] = json!(
        wls.iter()
            .filter(|w| w.finished.is_none())
            .take(20)
            .map(|w| format!(
                "{} in {}: {}{}",
                classes[w.class].name,
                w.queue,
                w.last_seen,
                if w.ending_asked() {
                    ", ending asked"
                } else {
                    ""
                }
            ))
            .collect::<Vec<_>>()
    );
    println!("{out}");
    Ok(())
}
