//! Kueue's scheduler performance suite (`test/performance/scheduler/` of Kueue v0.19.2, the baseline of
//! `configs/baseline/generator.yaml`) as plain pods on a real API server, against sluice or Kueue
//! (`hack/bench.sh --only peer`).
//!
//! The suite, read from its source: 5 cohorts × 6 ClusterQueues (nominal quota 20 cpu, borrowing limit
//! 100, preemption reclaimWithinCohort Any, withinClusterQueue LowerPriority); into each queue, three
//! sets of workloads created at once, each set one after another with a pause before every create:
//! 350 `small` (1 cpu, runs 200 ms, priority 50) every 100 ms, 100 `medium` (5 cpu, 500 ms,
//! priority 100) every 500 ms, 50 `large` (20 cpu, 1000 ms, priority 200) every 1200 ms: 15,000
//! workloads. Kueue's runner creates Workload objects and marks each Finished its runtime after its
//! admission; here each workload is one pod (priorityClassName per class) and is ended (annotation
//! `sluice.dev/kwok-phase=Succeeded`, which kwok acts on once the pod runs) its runtime after its
//! admission. A pod preempted (deleted or ended by someone else) is created again, as its owner
//! would, and its workload's time to admit runs from its first creation to its last admission, as
//! Kueue's recorder counts it.
//!
//! `--setup` creates the PriorityClasses, the namespaces and the queues (sluice CapacityQueues, or
//! Kueue's ResourceFlavor, ClusterQueues and LocalQueues) and exits; without it, the load runs
//! against queues already set up and one JSON object is printed.
//!
//!   peer_suite --mode sluice --prefix ps --setup && peer_suite --mode sluice --prefix ps

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Sluice,
    Kueue,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    /// Prefix of the namespaces, queues and cohorts (one run's objects apart from another's).
    #[arg(long, default_value = "ps")]
    prefix: String,
    /// Create the PriorityClasses, namespaces and queues, then exit.
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
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800.0)]
    timeout: f64,
    /// Give up once no workload was admitted or finished for this many seconds after the last
    /// create (a stall: the summary then names some of the workloads left and what their pods showed).
    #[arg(long, default_value_t = 300.0)]
    stall_timeout: f64,
}

/// One class of the suite's workloads (generator.yaml, baseline).
struct Class {
    name: &'static str,
    count: usize,
    interval_ms: u64,
    cpu: u32,
    runtime_ms: u64,
    priority: i32,
}

const CLASSES: [Class; 3] = [
    Class {
        name: "small",
        count: 350,
        interval_ms: 100,
        cpu: 1,
        runtime_ms: 200,
        priority: 50,
    },
    Class {
        name: "medium",
        count: 100,
        interval_ms: 500,
        cpu: 5,
        runtime_ms: 500,
        priority: 100,
    },
    Class {
        name: "large",
        count: 50,
        interval_ms: 1200,
        cpu: 20,
        runtime_ms: 1000,
        priority: 200,
    },
];
const NOMINAL_CPU: u32 = 20;
const BORROWING_CPU: u32 = 100;

fn queue_names(args: &Args) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in 0..args.cohorts {
        for q in 0..args.queues_per_cohort {
            let cohort = format!("{}-cohort-{c}", args.prefix);
            out.push((format!("{}-cq-{q}-{c}", args.prefix), cohort));
        }
    }
    out
}

fn priority_class(class: &Class) -> String {
    format!("peer-suite-{}", class.name)
}

async fn apply(
    client: &Client,
    ar: &ApiResource,
    ns: Option<&str>,
    obj: serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pp = PatchParams::apply("peer-suite").force();
    api.patch(&name, &pp, &Patch::Apply(&obj))
        .await
        .map_err(|e| anyhow::anyhow!("applying {} {name}: {e}", ar.kind))?;
    Ok(())
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

async fn setup(client: &Client, args: &Args) -> anyhow::Result<()> {
    let pc = resource(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
    );
    for class in &CLASSES {
        let obj = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": priority_class(class)}, "value": class.priority});
        apply(client, &pc, None, obj).await?;
    }
    let ns_res = resource("", "v1", "Namespace", "namespaces");
    if args.mode == Mode::Kueue {
        let rf = resource(
            "kueue.x-k8s.io",
            "v1beta2",
            "ResourceFlavor",
            "resourceflavors",
        );
        let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": format!("{}-rf", args.prefix)}});
        apply(client, &rf, None, obj).await?;
    }
    for (name, cohort) in queue_names(args) {
        let mut labels = json!({"bench.sluice.dev/peer-suite": args.prefix});
        if args.mode == Mode::Kueue {
            labels["bench.sluice.dev/kueue"] = json!("on");
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        apply(client, &ns_res, None, obj).await?;
        match args.mode {
            Mode::Sluice => setup_sluice_queue(client, &name, &cohort).await?,
            Mode::Kueue => setup_kueue_queue(client, args, &name, &cohort).await?,
        }
    }
    Ok(())
}

async fn setup_sluice_queue(client: &Client, name: &str, cohort: &str) -> anyhow::Result<()> {
    let cq = resource("sluice.dev", "v1alpha1", "CapacityQueue", "capacityqueues");
    let obj = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
        "metadata": {"name": name},
        "spec": {"quota": {"cpu": NOMINAL_CPU.to_string()}, "cohort": cohort,
            "borrowingLimit": {"cpu": BORROWING_CPU.to_string()},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "preemption": {"withinQueue": "LowerPriority", "reclaimWithinCohort": "Any"}}});
    apply(client, &cq, None, obj).await
}

async fn setup_kueue_queue(
    client: &Client,
    args: &Args,
    name: &str,
    cohort: &str,
) -> anyhow::Result<()> {
    let cq = resource("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues");
    let lq = resource("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues");
    let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohortName": cohort, "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": format!("{}-rf", args.prefix),
                "resources": [{"name": "cpu", "nominalQuota": NOMINAL_CPU.to_string(),
                    "borrowingLimit": BORROWING_CPU.to_string()}]}]}]}});
    apply(client, &cq, None, obj).await?;
    let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": name}, "spec": {"clusterQueue": name}});
    apply(client, &lq, Some(name), obj).await
}

/// One workload of the suite: its class, queue, and what happened to it (seconds since the start).
#[derive(Default)]
struct Workload {
    class: usize,
    queue: String,
    created: Option<f64>,
    admitted: Option<f64>,
    finished: Option<f64>,
    attempt: u32,
    /// The pod now standing for it, and whether that pod's end was asked for by the load.
    pod: String,
    ending: bool,
    preempted: u32,
    /// What the watch last saw of its pod (for a stalled run's summary).
    last_seen: String,
}

fn pod_spec(args: &Args, queue: &str, class: &Class, name: &str, workload: usize) -> Pod {
    let mut labels = serde_json::Map::new();
    labels.insert("bench".into(), json!("peer-suite"));
    labels.insert(
        "bench.sluice.dev/workload".into(),
        json!(workload.to_string()),
    );
    labels.insert("bench.sluice.dev/peer-run".into(), json!(args.prefix));
    match args.mode {
        Mode::Sluice => labels.insert("sluice.dev/queue".into(), json!(queue)),
        Mode::Kueue => labels.insert("kueue.x-k8s.io/queue-name".into(), json!(queue)),
    };
    let cpu = class.cpu.to_string();
    let spec = json!({
        "metadata": {"name": name, "namespace": queue, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "priorityClassName": priority_class(class),
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}],
        },
    });
    // The spec is built here from constants and names checked above: it always parses.
    serde_json::from_value(spec).unwrap_or_default()
}

/// What the watch saw of one pod.
struct Seen {
    workload: usize,
    name: String,
    ungated: bool,
    phase: String,
    deleted: bool,
}

fn seen(p: &Pod, deleted: bool) -> Option<Seen> {
    let workload = p.labels().get("bench.sluice.dev/workload")?.parse().ok()?;
    let ungated = p
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_none_or(|g| g.is_empty());
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let deleted = deleted || p.metadata.deletion_timestamp.is_some();
    Some(Seen {
        workload,
        name: p.name_any(),
        ungated,
        phase,
        deleted,
    })
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
            let (objs, deleted) = match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (vec![p], false),
                Ok(watcher::Event::Delete(p)) => (vec![p], true),
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("watch: {e}");
                    continue;
                }
            };
            for p in objs {
                if let Some(s) = seen(&p, deleted) {
                    let _ = tx.send(Event::Pod(s));
                }
            }
        }
    });
}

async fn create(client: &Client, pod: &Pod) -> bool {
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for _ in 0..20 {
        match api.create(&PostParams::default(), pod).await {
            Ok(_) => return true,
            Err(kube::Error::Api(e)) if e.code == 409 => return true,
            Err(e) => {
                eprintln!("create {}: {e}", pod.name_any());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    false
}

/// The suite's generator: per queue and class, one task creating its workloads one after another,
/// pausing the class's interval before each create (as Kueue's generateWlSet does).
fn spawn_generators(
    client: &Client,
    args: &Arc<Args>,
    plan: &[(usize, String, usize)],
    start: Instant,
    tx: &tokio::sync::mpsc::UnboundedSender<Event>,
) -> tokio::task::JoinHandle<f64> {
    let mut sets: HashMap<(String, usize), Vec<usize>> = HashMap::new();
    for (w, (class, queue, _)) in plan.iter().enumerate() {
        sets.entry((queue.clone(), *class)).or_default().push(w);
    }
    let mut tasks = Vec::new();
    for ((queue, class), workloads) in sets {
        let (client, args, tx) = (client.clone(), args.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let c = &CLASSES[class];
            for w in workloads {
                tokio::time::sleep(Duration::from_millis(c.interval_ms)).await;
                let name = format!("{}-{w}-0", c.name);
                if create(&client, &pod_spec(&args, &queue, c, &name, w)).await {
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

fn end_pod(client: &Client, ns: &str, name: &str, delay: f64) {
    sluice_tools::end_pod_later(Api::namespaced(client.clone(), ns), name.to_string(), delay);
}

/// One pod observation applied to its workload: admission, running (then its end is scheduled),
/// its end, or its preemption (then it is created again).
fn observe(client: &Client, args: &Args, wl: &mut Workload, w: usize, s: Seen, t: f64) {
    if s.name != wl.pod || wl.finished.is_some() {
        return;
    }
    wl.created.get_or_insert(t);
    wl.last_seen = format!(
        "{} {}{}{}",
        s.name,
        if s.phase.is_empty() {
            "no phase"
        } else {
            &s.phase
        },
        if s.ungated { ", ungated" } else { ", gated" },
        if s.deleted { ", deleted" } else { "" }
    );
    let running = s.phase == "Running";
    if (s.ungated || running) && !s.deleted && wl.admitted.is_none() {
        wl.admitted = Some(t);
    }
    let class = &CLASSES[wl.class];
    if running && !s.deleted && !wl.ending {
        wl.ending = true;
        let due = wl.admitted.unwrap_or(t) + class.runtime_ms as f64 / 1000.0 - t;
        end_pod(client, &wl.queue, &s.name, due);
        return;
    }
    if s.phase == "Succeeded" && wl.ending {
        wl.finished = Some(t);
        return;
    }
    let gone = s.deleted || s.phase == "Failed" || (s.phase == "Succeeded" && !wl.ending);
    if gone {
        // Preempted: its owner would create it again; it waits in line anew.
        wl.preempted += 1;
        wl.attempt += 1;
        // Its time to admit runs to its last admission (Kueue's recorder: the last transition).
        wl.admitted = None;
        wl.ending = false;
        wl.pod = format!("{}-{w}-{}", class.name, wl.attempt);
        let pod = pod_spec(args, &wl.queue, class, &wl.pod, w);
        let client = client.clone();
        tokio::spawn(async move { create(&client, &pod).await });
    }
}

/// When admissions and ends were last seen to move, to tell a stalled run from a slow one.
#[derive(Default)]
struct Progress {
    admitted: usize,
    finished: usize,
    since: f64,
}

impl Progress {
    /// Whether nothing moved for `limit` seconds once every workload was created.
    fn stalled(
        &mut self,
        admitted: usize,
        finished: usize,
        created_all: bool,
        t: f64,
        limit: f64,
    ) -> bool {
        if (admitted, finished) != (self.admitted, self.finished) || !created_all {
            *self = Progress {
                admitted,
                finished,
                since: t,
            };
            return false;
        }
        t - self.since > limit
    }
}

fn plan(args: &Args) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (queue, _) in queue_names(args) {
        for (ci, c) in CLASSES.iter().enumerate() {
            let n = ((c.count as f64) * args.scale).round().max(1.0) as usize;
            for i in 0..n {
                out.push((ci, queue.clone(), i));
            }
        }
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map(|v| (v * 1000.0).round() / 1000.0)
}

fn summary(args: &Args, wls: &[Workload], create_s: f64, elapsed: f64) -> serde_json::Value {
    let admit_times: Vec<f64> = wls.iter().filter_map(|w| w.admitted).collect();
    let all_admitted = wls.iter().all(|w| w.admitted.is_some());
    let all_finished = wls.iter().all(|w| w.finished.is_some());
    let wall_admit = admit_times.iter().copied().fold(0.0, f64::max);
    let wall_finish = wls.iter().filter_map(|w| w.finished).fold(0.0, f64::max);
    let tta = |filter: &dyn Fn(&Workload) -> bool| {
        let mut v: Vec<f64> = wls
            .iter()
            .filter(|w| filter(w))
            .filter_map(|w| Some(w.admitted? - w.created?))
            .map(|d| d.max(0.0))
            .collect();
        v.sort_by(f64::total_cmp);
        let avg = if v.is_empty() {
            None
        } else {
            Some(v.iter().sum::<f64>() / v.len() as f64)
        };
        json!({"count": v.len(), "avg_s": avg.map(|a| (a * 1000.0).round() / 1000.0),
            "p50_s": percentile(&v, 0.5), "p99_s": percentile(&v, 0.99), "max_s": percentile(&v, 1.0)})
    };
    let mut classes = serde_json::Map::new();
    for (ci, c) in CLASSES.iter().enumerate() {
        classes.insert(c.name.into(), tta(&|w: &Workload| w.class == ci));
    }
    json!({
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "workloads": wls.len(),
        "queues": args.cohorts * args.queues_per_cohort,
        "cohorts": args.cohorts,
        "scale": args.scale,
        "complete": all_admitted && all_finished,
        "admitted": admit_times.len(),
        "finished": wls.iter().filter(|w| w.finished.is_some()).count(),
        "preempted": wls.iter().map(|w| w.preempted).sum::<u32>(),
        "create_s": create_s,
        "wall_admit_all_s": (wall_admit * 1000.0).round() / 1000.0,
        "wall_finish_all_s": (wall_finish * 1000.0).round() / 1000.0,
        "elapsed_s": elapsed,
        "admissions_per_s": if wall_admit > 0.0 { Some(admit_times.len() as f64 / wall_admit) } else { None },
        "time_to_admit": tta(&|_| true),
        "time_to_admit_by_class": classes,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let client = Client::try_default().await?;
    if args.setup {
        setup(&client, &args).await?;
        eprintln!(
            "peer_suite: {} queues set up ({:?})",
            queue_names(&args).len(),
            args.mode
        );
        return Ok(());
    }
    let plan = plan(&args);
    let mut wls: Vec<Workload> = plan
        .iter()
        .map(|(class, queue, _)| Workload {
            class: *class,
            queue: queue.clone(),
            ..Default::default()
        })
        .collect();
    for (w, wl) in wls.iter_mut().enumerate() {
        wl.pod = format!("{}-{w}-0", CLASSES[wl.class].name);
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    spawn_watch(&client, &args.prefix, tx.clone());
    // The watch is open (its initial list done or under way) before the first create.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let generator = spawn_generators(&client, &args, &plan, start, &tx);
    drop(tx);
    let deadline = start + Duration::from_secs_f64(args.timeout);
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
                if progress.stalled(admitted, finished, generator.is_finished(), t, args.stall_timeout) {
                    eprintln!("peer_suite: stalled: nothing admitted or finished for {:.0} s", args.stall_timeout);
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
                if let Some(wl) = wls.get_mut(w) {
                    let was = wl.finished.is_some();
                    observe(&client, &args, wl, w, s, t);
                    finished += usize::from(!was && wl.finished.is_some());
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let create_s = if generator.is_finished() {
        generator.await.unwrap_or(elapsed)
    } else {
        elapsed
    };
    let mut out = summary(&args, &wls, create_s, elapsed);
    out["stopped"] = json!(stopped);
    out["left_sample"] = json!(
        wls.iter()
            .filter(|w| w.finished.is_none())
            .take(20)
            .map(|w| format!(
                "{} in {}: {}{}",
                CLASSES[w.class].name,
                w.queue,
                w.last_seen,
                if w.ending { ", ending asked" } else { "" }
            ))
            .collect::<Vec<_>>()
    );
    println!("{out}");
    Ok(())
}
