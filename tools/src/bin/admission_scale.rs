//! The controller's pass at scale, in one process: holds N realistic governed pods (Spark executor
//! shape as the API server returns them, managedFields and status included) in W workloads over 8
//! CapacityQueues, as the controller's pod cache holds them, then runs the pass on them as the
//! controller does (each pod's facts, `queue::snapshot::build_from_facts`,
//! `queue::admission::decide`), then, as the controller's passes now run, through the incremental
//! pass (`queue::incremental::Snapshotter`, kept alive to the end as the controller keeps it): a
//! first pass over everything, then passes after one pod changed, each with the whole lent for
//! what acts on it and given back. Prints the time of each step and the peak resident memory (VmHWM)
//! as one JSON line.
//!
//!   cargo run --release -p sluice-tools --bin admission_scale -- --workloads 10000 --pods 100000
//!   /usr/bin/time -v target/release/admission_scale --workloads 10000 --pods 100000
//!
//! `--hold cached` (the default) is the controller's figure: each pod's JSON decoded straight into
//! `queue::pod_cache::CachedPod` (what the queue controller's pod watch decodes) and kept in a
//! `sluice::watch_store` store (keyed by uid), as its pod watch keeps it; each pass reads the store's state
//! and the pods' facts as `Controller::pass` does. The same bytes are also decoded into
//! `scavenger::pod::WatchedPod` and kept in a second store, as the ScavengerJob controller's watch
//! of every non-terminal pod keeps them (the leader runs both), and each pass also computes the
//! scavengers' capacity from it as that controller's passes do. The other modes hold `k8s_openapi` Pods for comparison
//! (memory only, no pass): `listed` as the API server sends them, `stripped` without managedFields,
//! `trimmed-before` trimmed as the controller's cache trimmed them before `CachedPod` (the function
//! is copied here as it was).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::watcher;
use serde_json::json;
use sluice::api::DynamicWorkloadStatus;
use sluice::api::{CapacityQueue, DynamicWorkload};
use sluice::integrations::Adapters;
use sluice::queue::at_creation::AdmitAtCreation;
use sluice::queue::incremental::Snapshotter;
use sluice::queue::pod_cache::CachedPod;
use sluice::queue::status;
use sluice::queue::{admission, snapshot};
use sluice::scavenger::capacity::capacity;
use sluice::scavenger::pod::WatchedPod;
use sluice::watch_store;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Hold {
    Cached,
    Listed,
    Stripped,
    TrimmedBefore,
}

struct Args {
    workloads: usize,
    pods: usize,
    passes: usize,
    hold: Hold,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        workloads: 10_000,
        pods: 100_000,
        passes: 5,
        hold: Hold::Cached,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--workloads" => {
                args.workloads = value()?.parse().map_err(|e| format!("--workloads: {e}"))?
            }
            "--pods" => args.pods = value()?.parse().map_err(|e| format!("--pods: {e}"))?,
            "--passes" => args.passes = value()?.parse().map_err(|e| format!("--passes: {e}"))?,
            "--hold" => {
                args.hold = match value()?.as_str() {
                    "cached" => Hold::Cached,
                    "listed" => Hold::Listed,
                    "stripped" => Hold::Stripped,
                    "trimmed-before" => Hold::TrimmedBefore,
                    other => {
                        return Err(format!(
                            "--hold: {other:?} is not cached, listed, stripped or trimmed-before"
                        ));
                    }
                }
            }
            "-h" | "--help" => {
                println!(
                    "admission_scale [--workloads W] [--pods N] [--passes P] [--hold cached|listed|stripped|trimmed-before]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other} (see --help)")),
        }
    }
    if args.workloads == 0 || args.pods < args.workloads {
        return Err("need at least one workload and one pod per workload".into());
    }
    Ok(args)
}

/// A governed executor pod as the API server returns it from a list or watch (~6 KB of JSON).
fn pod(w: usize, p: usize, admitted: bool, created_s: u64) -> serde_json::Value {
    let env: Vec<serde_json::Value> = (0..16)
        .map(|k| json!({"name": format!("SPARK_ENV_{k}"), "value": format!("value-{k}-{}", "x".repeat(32))}))
        .collect();
    let name = format!("app-{w}-exec-{p}");
    let created = format!(
        "2026-11-23T{:02}:{:02}:{:02}Z",
        (created_s / 3600) % 24,
        (created_s / 60) % 60,
        created_s % 60
    );
    let mut spec = json!({
        "restartPolicy": "Never", "hostname": name, "priority": (w % 3) as i32,
        "schedulerName": "default-scheduler", "serviceAccountName": "spark",
        "containers": [{
            "name": "spark-kubernetes-executor", "image": "apache/spark:3.5.3",
            "args": ["executor"], "env": env,
            "resources": {"requests": {"cpu": format!("{}m", 500 + (w % 4) * 500), "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
            "ports": [{"containerPort": 7079, "name": "blockmanager", "protocol": "TCP"}],
            "volumeMounts": [{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
        }],
        "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}, {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}, {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority", "securityContext": {}, "terminationGracePeriodSeconds": 30,
    });
    let status = if admitted {
        spec["nodeName"] = json!(format!("kwok-node-{}", p % 100));
        json!({"phase": "Running", "podIP": "10.244.0.7", "hostIP": "10.0.0.1", "qosClass": "Burstable", "startTime": created,
               "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": created}, {"type": "Ready", "status": "True", "lastTransitionTime": created}]})
    } else {
        spec["schedulingGates"] = json!([{"name": "sluice.dev/admission"}]);
        json!({"phase": "Pending", "qosClass": "Burstable",
               "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates", "lastTransitionTime": created}]})
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": format!("ns{}", w % 50), "uid": format!("00000000-0000-0000-{w:04x}-{p:012x}"),
            "resourceVersion": "123456", "creationTimestamp": created,
            "labels": {"spark-app-selector": format!("spark-{w:016x}"), "spark-role": "executor", "spark-exec-id": p.to_string(),
                       "sluice.dev/queue": format!("q{}", w % 8), "sluice.dev/workload": format!("app-{w}")},
            "annotations": {"sluice.dev/min-count": "3"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": format!("app-{w}-driver"), "uid": "9b0f4c1e-8a43-4a4e-9d1e-2f3b9a7c1d11", "controller": true}],
            "managedFields": [
                {"manager": "spark-driver", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:spark-app-selector": {}, "f:spark-exec-id": {}, "f:spark-role": {}, "f:sluice.dev/queue": {}}, "f:ownerReferences": {}},
                              "f:spec": {"f:containers": {"k:{\"name\":\"spark-kubernetes-executor\"}": {".": {}, "f:args": {}, "f:env": {}, "f:image": {}, "f:resources": {"f:limits": {}, "f:requests": {}}}}, "f:volumes": {}}}},
                {"manager": "kwok", "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}},
            ],
        },
        "spec": spec,
        "status": status,
    })
}

fn queue(q: usize) -> serde_json::Value {
    json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
        "metadata": {"name": format!("q{q}")},
        "spec": {"quota": {"cpu": "2000", "memory": "8000Gi"}, "queueingStrategy": if q.is_multiple_of(2) { "BestEffortFIFO" } else { "StrictFIFO" }},
    })
}

/// Peak and current resident memory of this process, in KiB (Linux /proc/self/status).
fn memory_kib() -> (u64, u64) {
    let field = sluice_tools::proc_status_kib;
    (field("VmHWM:"), field("VmRSS:"))
}

/// How the controller's pod cache trimmed a decoded `Pod` before `CachedPod` (sluice 8ac1203's
/// `queue::snapshot::trim_pod`), kept here only to measure against.
fn trim_before(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.affinity = None;
        spec.tolerations = None;
        spec.topology_spread_constraints = None;
        let trim = |c: &mut k8s_openapi::api::core::v1::Container| {
            c.env = None;
            c.env_from = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.command = None;
            c.args = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.ports = None;
            c.security_context = None;
        };
        spec.containers.iter_mut().for_each(trim);
        spec.init_containers.iter_mut().flatten().for_each(trim);
        spec.ephemeral_containers = None;
    }
    if let Some(status) = pod.status.as_mut() {
        status.container_statuses = None;
        status.init_container_statuses = None;
        status.ephemeral_container_statuses = None;
        status.conditions = None;
    }
}

/// What a run measured of its pass.
#[derive(Default)]
struct PassFigures {
    build_ms: f64,
    decide_ms: f64,
    admitted: usize,
    workloads: usize,
    /// The ordinary pods' cpu the scavengers' capacity counted (milli-cpu).
    ordinary_cpu: i64,
    /// The incremental pass: its first pass (everything), then the median after one pod changed.
    incremental_first_ms: f64,
    incremental_ms: f64,
    /// Of `incremental_ms`: the whole lent and given back (`Snapshotter::lend`, `give_back`).
    lend_ms: f64,
    incremental_admitted: usize,
    /// What a pass does after deciding, over every workload (medians): each workload's status
    /// computed and compared with the last, and the room published for admission at creation.
    statuses_ms: f64,
    publish_ms: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// `passes` passes over the cached pods, as `Controller::pass` reads them: the store's state, each
/// pod's facts, the snapshot, the decision.
fn passes(
    (store, scavenger_store): (
        &watch_store::Store<CachedPod>,
        &watch_store::Store<WatchedPod>,
    ),
    queues: &[Arc<CapacityQueue>],
    passes: usize,
) -> PassFigures {
    let adapters = Adapters::default();
    let workloads: Vec<Arc<DynamicWorkload>> = Vec::new();
    let in_flight = snapshot::InFlight::default();
    let mut memo = snapshot::PodMemo;
    let (mut build_ms, mut decide_ms) = (Vec::new(), Vec::new());
    let mut figures = PassFigures::default();
    for _ in 0..passes {
        let t = Instant::now();
        let pods = store.state();
        let facts = memo.refresh(&adapters, &pods);
        let built = snapshot::build_from_facts(queues, &workloads, &pods, &facts, &[], &in_flight);
        build_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let decisions = admission::decide(&built.snapshot);
        decide_ms.push(t.elapsed().as_secs_f64() * 1e3);
        figures.admitted = decisions.admit.len();
        figures.workloads = built.snapshot.workloads.len();
        // The ScavengerJob controller's pass over its own store.
        let watched = scavenger_store.state();
        let room = capacity(&[], watched.iter().map(|p| &p.facts), 0.7);
        figures.ordinary_cpu = room.ordinary.get("cpu");
    }
    figures.build_ms = median(&mut build_ms);
    figures.decide_ms = median(&mut decide_ms);
    figures
}

/// `passes` passes as `Controller::pass` runs them now: the store's state and what changed in it,
/// each pod's facts, the [`Snapshotter`] told of the changes, its pass, the whole put together.
/// Between passes one pod's watch event is applied again (its workload built again, its queue
/// decided again). Returns the snapshotter, for the caller to keep alive as the controller does.
fn incremental_passes(
    (store, writer): (
        &watch_store::Store<CachedPod>,
        &mut watch_store::Writer<CachedPod>,
    ),
    queues: &[Arc<CapacityQueue>],
    passes: usize,
    figures: &mut PassFigures,
) -> Snapshotter {
    let adapters = Adapters::default();
    let mut memo = snapshot::PodMemo;
    let mut inc = Snapshotter::default();
    inc.set_queues(queues.to_vec());
    let (mut times, mut lends) = (Vec::new(), Vec::new());
    for pass in 0..passes {
        if pass > 0
            && let Some(pod) = store.state().first()
        {
            writer.apply(watcher::Event::Apply((**pod).clone()));
        }
        let t = Instant::now();
        let (pods, changes) = store.state_and_changes();
        let _facts = memo.refresh(&adapters, &pods);
        inc.apply_pod_changes(&pods, changes);
        inc.pass();
        let lent_at = Instant::now();
        let (built, decisions) = inc.lend();
        figures.incremental_admitted = decisions.admit.len();
        inc.give_back(built, decisions);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if pass > 0 {
            lends.push(lent_at.elapsed().as_secs_f64() * 1e3);
        }
        if pass == 0 {
            figures.incremental_first_ms = ms;
        } else {
            times.push(ms);
        }
    }
    figures.incremental_ms = median(&mut times);
    figures.lend_ms = median(&mut lends);
    after_deciding(&mut inc, queues, passes, figures);
    inc
}

/// Times what `Controller::pass` does after deciding that reads every workload (see
/// [`PassFigures`]): the statuses (as `want_workload_statuses` computes them, against the status
/// the last pass computed) and the room published (`AdmitAtCreation::publish`).
fn after_deciding(
    inc: &mut Snapshotter,
    queues: &[Arc<CapacityQueue>],
    passes: usize,
    figures: &mut PassFigures,
) {
    let (built, decisions) = inc.lend();
    let none = HashSet::new();
    let now = "2026-11-26T00:00:00Z";
    let mut last: Vec<Option<DynamicWorkloadStatus>> = vec![None; built.snapshot.workloads.len()];
    let (mut statuses, mut publishes) = (Vec::new(), Vec::new());
    let at_creation = AdmitAtCreation::default();
    let open: HashMap<String, bool> = queues.iter().map(|q| (q.name_any(), true)).collect();
    for _ in 0..passes.max(2) {
        let t = Instant::now();
        let mut changed = 0usize;
        for (w, old) in last.iter_mut().enumerate() {
            let status = status::workload_status(
                &status::WorkloadView::of(&built, w),
                &decisions.workloads[w],
                &none,
                old.as_ref(),
                now,
            );
            if old.as_ref() != Some(&status) {
                changed += 1;
                *old = Some(status);
            }
        }
        std::hint::black_box(changed);
        statuses.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let (mark, _) = at_creation.holds_for_pass(std::time::Instant::now(), []);
        at_creation.publish(mark, &built, &decisions, &open, HashSet::new(), None);
        publishes.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // The first round computed every status from nothing: the later ones are a pass's.
    statuses.remove(0);
    figures.statuses_ms = median(&mut statuses);
    figures.publish_ms = median(&mut publishes);
    inc.give_back(built, decisions);
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let per_workload = args.pods / args.workloads;
    let (_, rss_start) = memory_kib();

    let started = Instant::now();
    // The controller's caches: watch stores fed by the watch's events.
    let (store, mut writer) = watch_store::store_with_changes::<CachedPod>();
    let (scavenger_store, mut scavenger_writer) = watch_store::store::<WatchedPod>();
    // The comparison modes' k8s Pods.
    let mut full: Vec<Arc<Pod>> = Vec::new();
    let mut json_bytes = 0usize;
    let mut held = 0usize;
    if args.hold == Hold::Cached {
        writer.apply(watcher::Event::Init);
        scavenger_writer.apply(watcher::Event::Init);
    }
    for w in 0..args.workloads {
        let running = w % 3 == 0;
        for p in 0..per_workload {
            let value = pod(w, p, running && p < per_workload / 2, (w * 7 + p) as u64);
            // The bytes of a list page or watch event, as the client reads them.
            let bytes = serde_json::to_vec(&value).map_err(|e| format!("encoding pod: {e}"))?;
            drop(value);
            json_bytes += bytes.len();
            held += 1;
            if args.hold == Hold::Cached {
                let pod: CachedPod =
                    serde_json::from_slice(&bytes).map_err(|e| format!("decoding pod: {e}"))?;
                writer.apply(watcher::Event::InitApply(pod));
                let pod: WatchedPod =
                    serde_json::from_slice(&bytes).map_err(|e| format!("decoding pod: {e}"))?;
                scavenger_writer.apply(watcher::Event::InitApply(pod));
                continue;
            }
            let mut pod: Pod =
                serde_json::from_slice(&bytes).map_err(|e| format!("decoding pod: {e}"))?;
            match args.hold {
                Hold::Stripped => pod.metadata.managed_fields = None,
                Hold::TrimmedBefore => trim_before(&mut pod),
                Hold::Listed | Hold::Cached => {}
            }
            full.push(Arc::new(pod));
        }
    }
    if args.hold == Hold::Cached {
        writer.apply(watcher::Event::InitDone);
        scavenger_writer.apply(watcher::Event::InitDone);
    }
    let load_s = started.elapsed().as_secs_f64();
    let queues: Vec<Arc<CapacityQueue>> = (0..8)
        .map(|q| serde_json::from_value(queue(q)).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("decoding queue: {e}"))?;
    let (_, rss_held) = memory_kib();

    let mut figures = if args.hold == Hold::Cached {
        passes((&store, &scavenger_store), &queues, args.passes)
    } else {
        PassFigures::default()
    };
    let _kept = (args.hold == Hold::Cached && args.passes > 0)
        .then(|| incremental_passes((&store, &mut writer), &queues, args.passes, &mut figures));
    let (peak, rss_end) = memory_kib();
    let hold = match args.hold {
        Hold::Cached => "cached",
        Hold::Listed => "listed",
        Hold::Stripped => "stripped",
        Hold::TrimmedBefore => "trimmed-before",
    };
    println!(
        "{}",
        json!({
            "hold": hold,
            "workloads": figures.workloads,
            "pods": held,
            "pods_in_store": store.state().len() + full.len(),
            "pod_json_bytes_avg": json_bytes / held.max(1),
            "load_s": load_s,
            "snapshot_build_ms_median": (args.hold == Hold::Cached).then_some(figures.build_ms),
            "decide_ms_median": (args.hold == Hold::Cached).then_some(figures.decide_ms),
            "incremental_first_pass_ms": (args.hold == Hold::Cached).then_some(figures.incremental_first_ms),
            "incremental_pass_ms_median": (args.hold == Hold::Cached).then_some(figures.incremental_ms),
            "incremental_lend_ms_median": (args.hold == Hold::Cached).then_some(figures.lend_ms),
            "incremental_admitted": figures.incremental_admitted,
            "statuses_ms_median": (args.hold == Hold::Cached).then_some(figures.statuses_ms),
            "publish_ms_median": (args.hold == Hold::Cached).then_some(figures.publish_ms),
            "admitted": figures.admitted,
            "scavenger_store_pods": scavenger_store.state().len(),
            "scavenger_ordinary_cpu_milli": figures.ordinary_cpu,
            "rss_start_mib": rss_start / 1024,
            "rss_holding_pods_mib": rss_held / 1024,
            "rss_end_mib": rss_end / 1024,
            "peak_rss_mib": peak / 1024,
        })
    );
    Ok(())
}
