//! The controller's pass at scale, in one process: holds N realistic governed pods (Spark executor
//! shape as the API server returns them, managedFields and status included) in W workloads over 8
//! CapacityQueues, builds the admission snapshot from them (`queue::snapshot::build`, as each pass
//! does) and runs the admission function (`queue::admission::decide`). Prints the time of each step
//! and the peak resident memory (VmHWM) as one JSON line.
//!
//!   cargo run --release -p sluice-tools --bin admission_scale -- --workloads 10000 --pods 100000
//!   /usr/bin/time -v target/release/admission_scale --workloads 10000 --pods 100000
//!
//! `--strip-managed-fields` drops metadata.managedFields from every pod before holding it;
//! `--trim-pods` trims each pod as the controller's pod cache does (`queue::snapshot::trim_pod`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use sluice::api::{CapacityQueue, DynamicWorkload};
use sluice::integrations::Adapters;
use sluice::queue::{admission, snapshot};

struct Args {
    workloads: usize,
    pods: usize,
    passes: usize,
    strip_managed_fields: bool,
    trim_pods: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        workloads: 10_000,
        pods: 100_000,
        passes: 5,
        strip_managed_fields: false,
        trim_pods: false,
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
            "--strip-managed-fields" => args.strip_managed_fields = true,
            "--trim-pods" => args.trim_pods = true,
            "-h" | "--help" => {
                println!(
                    "admission_scale [--workloads W] [--pods N] [--passes P] [--strip-managed-fields] [--trim-pods]"
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
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

fn main() -> Result<(), String> {
    let args = parse_args()?;
    let per_workload = args.pods / args.workloads;
    let (_, rss_start) = memory_kib();

    let started = Instant::now();
    let mut pods: Vec<Arc<Pod>> = Vec::with_capacity(args.pods);
    let mut json_bytes = 0usize;
    for w in 0..args.workloads {
        let running = w % 3 == 0;
        for p in 0..per_workload {
            let value = pod(w, p, running && p < per_workload / 2, (w * 7 + p) as u64);
            json_bytes += value.to_string().len();
            let mut pod: Pod =
                serde_json::from_value(value).map_err(|e| format!("decoding pod: {e}"))?;
            if args.trim_pods {
                // What the controller's pod cache does to every pod it holds.
                sluice::queue::snapshot::trim_pod(&mut pod);
            } else if args.strip_managed_fields {
                pod.metadata.managed_fields = None;
            }
            pods.push(Arc::new(pod));
        }
    }
    let load_s = started.elapsed().as_secs_f64();
    let queues: Vec<Arc<CapacityQueue>> = (0..8)
        .map(|q| serde_json::from_value(queue(q)).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("decoding queue: {e}"))?;
    let workloads: Vec<Arc<DynamicWorkload>> = Vec::new();
    let (_, rss_held) = memory_kib();

    let adapters = Adapters::default();
    let in_flight = HashSet::new();
    let mut build_ms = Vec::new();
    let mut decide_ms = Vec::new();
    let mut admitted = 0;
    let mut snapshot_workloads = 0;
    for _ in 0..args.passes {
        let t = Instant::now();
        let built = snapshot::build(&adapters, &queues, &workloads, &pods, &[], &in_flight);
        build_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let decisions = admission::decide(&built.snapshot);
        decide_ms.push(t.elapsed().as_secs_f64() * 1e3);
        admitted = decisions.admit.len();
        snapshot_workloads = built.snapshot.workloads.len();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (peak, rss_end) = memory_kib();
    println!(
        "{}",
        json!({
            "workloads": snapshot_workloads,
            "pods": pods.len(),
            "pod_json_bytes_avg": json_bytes / pods.len().max(1),
            "strip_managed_fields": args.strip_managed_fields,
            "trim_pods": args.trim_pods,
            "load_s": load_s,
            "snapshot_build_ms_median": median(&mut build_ms),
            "decide_ms_median": median(&mut decide_ms),
            "admitted": admitted,
            "rss_start_mib": rss_start / 1024,
            "rss_holding_pods_mib": rss_held / 1024,
            "rss_end_mib": rss_end / 1024,
            "peak_rss_mib": peak / 1024,
        })
    );
    Ok(())
}
