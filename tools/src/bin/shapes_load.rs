//! Spark- and Ray-shaped load through the real API server (`hack/bench.sh --only shapes`), against no
//! gate, sluice or Kueue; prints one JSON object.
//!
//! `--shape spark`: each application is what a plain spark-submit with dynamic allocation makes: a
//! driver pod (`spark-role=driver`, `spark-app-selector`), then, once the driver runs, executor pods
//! (`spark-role=executor`, owned by the driver pod as Spark owns them) requested in batches that
//! double every `--step-s` seconds (1, 2, 4, ...: Spark's schedulerBacklogTimeout and
//! sustainedSchedulerBacklogTimeout) up to `--executors`.
//! `--shape ray`: each application is a RayCluster (KubeRay creates its pods): a head and one worker
//! group of `--workers` replicas (minReplicas), then, once those run, `replicas` doubled every
//! `--step-s` seconds up to `--max-workers` (as the autoscaler asks). Under Kueue the RayCluster is an
//! elastic job (annotation `kueue.x-k8s.io/elastic-job: "true"`, feature gate
//! ElasticJobsViaWorkloadSlices: each scale-up is a new workload slice).
//!
//! Per pod: first seen, first seen without scheduling gates ("admitted"), first seen Running; per
//! step (a driver, an executor batch, a RayCluster's creation or scale-up): from the request to every
//! pod of the step running. Applications start `--app-interval-s` apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

use sluice_tools::Mode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Shape {
    Spark,
    Ray,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long, value_enum)]
    shape: Shape,
    #[arg(long)]
    namespace: String,
    /// The sluice CapacityQueue or the Kueue LocalQueue.
    #[arg(long, default_value = "shapes")]
    queue: String,
    /// Applications (Spark applications or RayClusters).
    #[arg(long, default_value_t = 40)]
    apps: usize,
    /// Seconds between two applications' starts.
    #[arg(long, default_value_t = 0.25)]
    app_interval_s: f64,
    /// Seconds between two scale-up steps of an application.
    #[arg(long, default_value_t = 1.0)]
    step_s: f64,
    /// Spark: executors each application asks for in the end.
    #[arg(long, default_value_t = 31)]
    executors: usize,
    /// Ray: workers at creation (minReplicas) and in the end.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    #[arg(long, default_value_t = 16)]
    max_workers: usize,
    /// CPU request of every pod.
    #[arg(long, default_value = "100m")]
    cpu: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 900.0)]
    timeout: f64,
}

#[derive(Clone, Default)]
struct PodTimes {
    app: String,
    role: String,
    seen: f64,
    gated: bool,
    admitted: Option<f64>,
    running: Option<f64>,
}

/// What the watch has seen, shared with the application tasks, which wait on `changed`.
#[derive(Default)]
struct State {
    pods: Mutex<HashMap<String, PodTimes>>,
    changed: Notify,
}

impl State {
    /// Waits until `n` pods of `app` with a role in `roles` run; returns when (seconds since start).
    async fn running(&self, app: &str, roles: &[&str], n: usize, start: Instant) -> f64 {
        loop {
            let notified = self.changed.notified();
            let count = self
                .lock()
                .values()
                .filter(|p| p.app == app && roles.contains(&p.role.as_str()) && p.running.is_some())
                .count();
            if count >= n {
                return start.elapsed().as_secs_f64();
            }
            notified.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodTimes>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn queue_labels(args: &Args) -> serde_json::Map<String, serde_json::Value> {
    let mut labels = serde_json::Map::new();
    labels.insert("bench".into(), json!("shapes"));
    match args.mode {
        Mode::Nogate => {}
        Mode::Sluice => {
            labels.insert("sluice.dev/queue".into(), json!(args.queue));
        }
        Mode::Kueue => {
            labels.insert("kueue.x-k8s.io/queue-name".into(), json!(args.queue));
        }
    }
    labels
}

fn container(args: &Args) -> serde_json::Value {
    json!({"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": args.cpu}, "limits": {"cpu": args.cpu}}})
}

fn spark_pod(
    args: &Args,
    app: &str,
    role: &str,
    name: &str,
    driver: Option<(&str, &str)>,
) -> anyhow::Result<Pod> {
    let mut labels = queue_labels(args);
    labels.insert("spark-app-selector".into(), json!(app));
    labels.insert("spark-role".into(), json!(role));
    labels.insert("bench.sluice.dev/app".into(), json!(app));
    let mut meta = json!({"name": name, "labels": labels});
    if let Some((driver_name, uid)) = driver {
        // As Spark's KubernetesClusterSchedulerBackend owns its executors: controller, the driver pod.
        meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": driver_name, "uid": uid,
            "controller": true}]);
    }
    let spec = json!({"metadata": meta, "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "containers": [container(args)]}});
    serde_json::from_value(spec).map_err(|e| anyhow::anyhow!("building pod {name}: {e}"))
}

/// Creates refused and tried again (a webhook's refusal, a timeout): each adds 200 ms to its step,
/// so the summary says how many there were and the first few reasons.
static CREATE_RETRIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static RETRY_REASONS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

async fn create_pod(api: &Api<Pod>, pod: &Pod) -> anyhow::Result<Pod> {
    let mut last = None;
    for _ in 0..20 {
        match api.create(&PostParams::default(), pod).await {
            Ok(p) => return Ok(p),
            Err(e) => {
                CREATE_RETRIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                {
                    let mut reasons = RETRY_REASONS.lock().unwrap_or_else(|e| e.into_inner());
                    if reasons.len() < 5 {
                        reasons.push(format!("{}: {e}", pod.name_any()));
                    }
                }
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    Err(anyhow::anyhow!("creating {}: {:?}", pod.name_any(), last))
}

/// One application's run: the tool's arguments and client, the shared watch state, the
/// application's name and the load's start.
struct AppRun {
    args: Arc<Args>,
    client: Client,
    state: Arc<State>,
    app: String,
    start: Instant,
}

/// One step of an application: what was asked, when, and when all of it ran.
#[derive(Clone, Debug)]
struct Step {
    kind: &'static str,
    pods: usize,
    asked: f64,
    running: f64,
}

async fn spark_app(run: AppRun) -> anyhow::Result<Vec<Step>> {
    let AppRun {
        args,
        client,
        state,
        app,
        start,
    } = run;
    let api: Api<Pod> = Api::namespaced(client, &args.namespace);
    let mut steps = Vec::new();
    let driver_name = format!("{app}-driver");
    let asked = start.elapsed().as_secs_f64();
    let driver = create_pod(&api, &spark_pod(&args, &app, "driver", &driver_name, None)?).await?;
    let uid = driver.metadata.uid.clone().unwrap_or_default();
    let running = state.running(&app, &["driver"], 1, start).await;
    steps.push(Step {
        kind: "driver",
        pods: 1,
        asked,
        running,
    });
    let (mut made, mut batch) = (0usize, 1usize);
    let mut pending = Vec::new();
    while made < args.executors {
        let n = batch.min(args.executors - made);
        let asked = start.elapsed().as_secs_f64();
        let creates = (made..made + n).map(|i| {
            let pod = spark_pod(
                &args,
                &app,
                "executor",
                &format!("{app}-exec-{}", i + 1),
                Some((&driver_name, &uid)),
            );
            let api = api.clone();
            async move { create_pod(&api, &pod?).await }
        });
        for r in futures::future::join_all(creates).await {
            r?;
        }
        made += n;
        let (state, app2) = (state.clone(), app.clone());
        pending.push(tokio::spawn(async move {
            let running = state.running(&app2, &["executor"], made, start).await;
            Step {
                kind: "executors",
                pods: n,
                asked,
                running,
            }
        }));
        batch *= 2;
        if made < args.executors {
            // Dynamic allocation's own timer: the next request comes this long after the last.
            tokio::time::sleep(Duration::from_secs_f64(args.step_s)).await;
        }
    }
    for p in pending {
        steps.push(p.await?);
    }
    Ok(steps)
}

fn raycluster(args: &Args, app: &str) -> serde_json::Value {
    let mut labels = queue_labels(args);
    labels.insert("bench.sluice.dev/app".into(), json!(app));
    let mut pod_labels = serde_json::Map::new();
    pod_labels.insert("bench".into(), json!("shapes"));
    pod_labels.insert("bench.sluice.dev/app".into(), json!(app));
    let annotations = if args.mode == Mode::Kueue {
        json!({"kueue.x-k8s.io/elastic-job": "true"})
    } else {
        json!({})
    };
    let template = json!({"metadata": {"labels": pod_labels}, "spec": {"terminationGracePeriodSeconds": 0, "containers": [container(args)]}});
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": app, "labels": labels, "annotations": annotations},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template},
            "workerGroupSpecs": [{"groupName": "w", "replicas": args.workers, "minReplicas": args.workers,
                "maxReplicas": args.max_workers, "rayStartParams": {}, "template": template}]}})
}

/// Sets the worker group's replicas as Ray's autoscaler does: the object read, its `replicas`
/// changed, written back (again on a conflict). The rest of the group stays as the cluster has it,
/// with what webhooks added (Kueue's elastic-job scheduling gate: a merge patch of the group's list
/// would replace the template and drop it).
async fn scale_workers(api: &Api<DynamicObject>, app: &str, replicas: usize) -> anyhow::Result<()> {
    loop {
        let mut obj = api.get(app).await?;
        let group = obj
            .data
            .pointer_mut("/spec/workerGroupSpecs/0")
            .and_then(|g| g.as_object_mut())
            .ok_or_else(|| anyhow::anyhow!("RayCluster {app} has no worker group"))?;
        group.insert("replicas".into(), json!(replicas));
        match api.replace(app, &PostParams::default(), &obj).await {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            done => return done.map(|_| ()).map_err(Into::into),
        }
    }
}

async fn ray_app(run: AppRun) -> anyhow::Result<Vec<Step>> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(run.client, &run.args.namespace, &ar);
    let obj: DynamicObject = serde_json::from_value(raycluster(&run.args, &run.app))?;
    let asked = run.start.elapsed().as_secs_f64();
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| anyhow::anyhow!("creating RayCluster {}: {e}", run.app))?;
    let running = run
        .state
        .running(
            &run.app,
            &["head", "worker"],
            1 + run.args.workers,
            run.start,
        )
        .await;
    let mut steps = vec![Step {
        kind: "raycluster",
        pods: 1 + run.args.workers,
        asked,
        running,
    }];
    let mut replicas = run.args.workers;
    while replicas < run.args.max_workers {
        tokio::time::sleep(Duration::from_secs_f64(run.args.step_s)).await;
        let next = (replicas * 2).min(run.args.max_workers);
        let asked = run.start.elapsed().as_secs_f64();
        scale_workers(&api, &run.app, next)
            .await
            .map_err(|e| anyhow::anyhow!("scaling RayCluster {} to {next}: {e}", run.app))?;
        let running = run
            .state
            .running(&run.app, &["head", "worker"], 1 + next, run.start)
            .await;
        steps.push(Step {
            kind: "scale-up",
            pods: next - replicas,
            asked,
            running,
        });
        replicas = next;
    }
    Ok(steps)
}

fn role_of(p: &Pod) -> String {
    let l = p.labels();
    l.get("spark-role")
        .or_else(|| l.get("ray.io/node-type"))
        .cloned()
        .unwrap_or_default()
}

fn spawn_watch(client: &Client, namespace: &str, state: Arc<State>, start: Instant) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut events = Box::pin(
        watcher(pods, watcher::Config::default().labels("bench=shapes"))
            .default_backoff()
            .applied_objects(),
    );
    tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let p = match ev {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("watch: {e}");
                    continue;
                }
            };
            let t = start.elapsed().as_secs_f64();
            let gated = p
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty());
            let running = matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Running" | "Succeeded")
            );
            let app = p
                .labels()
                .get("bench.sluice.dev/app")
                .cloned()
                .unwrap_or_default();
            {
                let mut pods = state.lock();
                let e = pods.entry(p.name_any()).or_insert_with(|| PodTimes {
                    app,
                    role: role_of(&p),
                    seen: t,
                    ..Default::default()
                });
                e.gated |= gated;
                if !gated && e.admitted.is_none() {
                    e.admitted = Some(t);
                }
                if running && e.running.is_none() {
                    e.running = Some(t);
                }
            }
            state.changed.notify_waiters();
        }
    });
}

fn pct(v: &mut [f64], p: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).map(|x| (x * 1000.0).round() / 1000.0)
}

fn summary(
    args: &Args,
    pods: &HashMap<String, PodTimes>,
    steps: &[Step],
    errors: usize,
) -> serde_json::Value {
    let last_running = pods.values().filter_map(|p| p.running).fold(0.0, f64::max);
    let running = pods.values().filter(|p| p.running.is_some()).count();
    let mut tta: Vec<f64> = pods
        .values()
        .filter_map(|p| Some((p.admitted? - p.seen).max(0.0)))
        .collect();
    let mut ttr: Vec<f64> = pods
        .values()
        .filter_map(|p| Some((p.running? - p.seen).max(0.0)))
        .collect();
    let mut by_kind = serde_json::Map::new();
    for kind in ["driver", "executors", "raycluster", "scale-up"] {
        let mut v: Vec<f64> = steps
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.running - s.asked)
            .collect();
        if v.is_empty() {
            continue;
        }
        let n = v.len();
        let pods: usize = steps
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.pods)
            .sum();
        by_kind.insert(kind.into(), json!({"steps": n, "pods": pods, "p50_s": pct(&mut v, 0.5), "p99_s": pct(&mut v, 0.99), "max_s": pct(&mut v, 1.0)}));
    }
    json!({
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "shape": format!("{:?}", args.shape).to_lowercase(),
        "apps": args.apps, "step_s": args.step_s, "app_interval_s": args.app_interval_s,
        "executors": args.executors, "workers": args.workers, "max_workers": args.max_workers,
        "pods": pods.len(), "running": running,
        "gated_pods": pods.values().filter(|p| p.gated).count(),
        "errors": errors,
        "create_retries": CREATE_RETRIES.load(std::sync::atomic::Ordering::Relaxed),
        "create_retry_reasons": RETRY_REASONS.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        "all_running_s": last_running,
        "pods_per_s": if last_running > 0.0 { Some(running as f64 / last_running) } else { None },
        "time_to_admit_p50_s": pct(&mut tta, 0.5), "time_to_admit_p99_s": pct(&mut tta, 0.99),
        "time_to_running_p50_s": pct(&mut ttr, 0.5), "time_to_running_p99_s": pct(&mut ttr, 0.99),
        "steps": by_kind,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    let client = Client::try_default().await?;
    let state = Arc::new(State::default());
    let start = Instant::now();
    spawn_watch(&client, &args.namespace, state.clone(), start);
    let mut tasks = Vec::new();
    for i in 0..args.apps {
        if i > 0 {
            // The applications' arrival schedule, not a wait for a condition.
            tokio::time::sleep(Duration::from_secs_f64(args.app_interval_s)).await;
        }
        let run = AppRun {
            args: args.clone(),
            client: client.clone(),
            state: state.clone(),
            app: format!("{}-{i}", args.shape_name()),
            start,
        };
        tasks.push(tokio::spawn(async move {
            match run.args.shape {
                Shape::Spark => spark_app(run).await,
                Shape::Ray => ray_app(run).await,
            }
        }));
    }
    let mut steps = Vec::new();
    let mut errors = 0;
    let all = futures::future::join_all(tasks);
    match tokio::time::timeout(Duration::from_secs_f64(args.timeout), all).await {
        Ok(results) => {
            for r in results {
                match r {
                    Ok(Ok(s)) => steps.extend(s),
                    Ok(Err(e)) => {
                        errors += 1;
                        eprintln!("shapes_load: {e:#}");
                    }
                    Err(e) => {
                        errors += 1;
                        eprintln!("shapes_load: task: {e}");
                    }
                }
            }
        }
        Err(_) => eprintln!("shapes_load: timed out after {} s", args.timeout),
    }
    let pods = state.lock().clone();
    println!("{}", summary(&args, &pods, &steps, errors));
    Ok(())
}

impl Args {
    fn shape_name(&self) -> &'static str {
        match self.shape {
            Shape::Spark => "spark",
            Shape::Ray => "ray",
        }
    }
}
