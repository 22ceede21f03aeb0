//! The cluster of `admission_pass_incremental` (100,000 plain pods, each its own workload, in 8
//! queues) and the one-change passes over it, shared by the bench (`benches/admission.rs`) and
//! `examples/one_pod_changed.rs`, which runs only those passes: for instruction counts
//! (`valgrind --tool=callgrind --toggle-collect='*one_pod_changed_passes*'`), which a loaded
//! machine does not disturb as it does wall times.

use std::sync::Arc;

use sluice::api::{ADMISSION_GATE, CapacityQueue};
use sluice::queue::incremental::Snapshotter;
use sluice::queue::pod_cache::CachedPod;

/// `pods` plain pods, each its own workload, over 8 queues as in the bench's `snapshot`: a third admitted
/// (running), the others gated. With the 8 CapacityQueues.
pub fn cluster(pods: usize) -> (Vec<Arc<CapacityQueue>>, Vec<Arc<CachedPod>>) {
    let queues = (0..8)
        .map(|q| {
            let strategy = if q % 2 == 0 {
                "BestEffortFIFO"
            } else {
                "StrictFIFO"
            };
            let queue: CapacityQueue = serde_json::from_value(serde_json::json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": format!("q{q}")},
                "spec": {"quota": {"cpu": "2000", "memory": "8000Gi"}, "queueingStrategy": strategy,
                    "preemption": {"withinQueue": "Never"}}}))
            .expect("queue");
            Arc::new(queue)
        })
        .collect();
    let objects = (0..pods).map(|p| pod_object(p, p % 3 == 0)).collect();
    (queues, objects)
}

pub fn pod_object(p: usize, running: bool) -> Arc<CachedPod> {
    pod_version(p, if running { "Running" } else { "Pending" }, !running)
}

pub fn pod_version(p: usize, phase: &str, gated: bool) -> Arc<CachedPod> {
    let gates = if gated {
        serde_json::json!([{"name": ADMISSION_GATE}])
    } else {
        serde_json::json!([])
    };
    let cpu = 500 + (p % 4) * 500;
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("w{p}"), "namespace": format!("ns{}", p % 50),
            "uid": format!("uid-{p}"), "resourceVersion": "1",
            "creationTimestamp": format!("2026-11-25T{:02}:{:02}:{:02}Z", (p / 3600) % 24, (p / 60) % 60, p % 60),
            "labels": {"sluice.dev/queue": format!("q{}", p % 8)}},
        "spec": {"schedulingGates": gates, "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": "1Gi"}}}]},
        "status": {"phase": phase},
    }))
    .expect("pod");
    Arc::new(CachedPod::from_pod(pod))
}

/// With `SLUICE_BENCH_PASSES=N` set, only the `one_pod_changed` case, N passes and no timing:
/// for instruction counts, which a loaded machine does not disturb as it does wall times
/// (`valgrind --tool=callgrind --toggle-collect='*one_pod_changed_passes*' <bench binary>`;
/// set `SLUICE_BENCH_LENT=1` to lend and give back the whole after each pass, as the controller
/// does).
#[inline(never)]
pub fn one_pod_changed_passes(
    inc: &mut Snapshotter,
    versions: &[Arc<CachedPod>; 2],
    passes: usize,
    lent: bool,
) -> usize {
    let mut admitted = 0;
    for turn in 0..passes {
        inc.put_pod(versions[(turn + 1) % 2].clone());
        inc.pass();
        if lent {
            let (built, decisions) = inc.lend();
            admitted += decisions.admit.len();
            inc.give_back(built, decisions);
        }
    }
    admitted
}

pub fn count_passes(passes: usize) {
    let (queues, pods) = cluster(100_000);
    let mut inc = Snapshotter::default();
    inc.set_queues(queues);
    for pod in &pods {
        inc.put_pod(pod.clone());
    }
    inc.pass();
    let versions = [pod_version(3, "Succeeded", false), pod_object(3, true)];
    // One pass outside the count: the first pass after the full one warms what it keeps.
    one_pod_changed_passes(&mut inc, &versions, 2, false);
    let lent = std::env::var_os("SLUICE_BENCH_LENT").is_some();
    let started = std::time::Instant::now();
    let admitted = one_pod_changed_passes(&mut inc, &versions, passes, lent);
    // Wall time too, as a second view (noisy on a shared machine: say its load beside it).
    let per_pass = started.elapsed() / u32::try_from(passes.max(1)).unwrap_or(u32::MAX);
    let (built, decisions) = inc.lend();
    // A digest of the decisions, to check that a change of the pass decides the same.
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    format!(
        "{:?} {:?} {:?} {:?}",
        decisions.admit, decisions.evict, decisions.workloads, decisions.queues
    )
    .hash(&mut hasher);
    println!(
        "{passes} passes, {per_pass:?} each; {} workloads, {} admitted now, {admitted} lent, decisions {:016x}",
        built.snapshot.workloads.len(),
        decisions.admit.len(),
        hasher.finish()
    );
}
