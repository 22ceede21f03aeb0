//! One admission pass over large snapshots: 1k / 10k pending workloads, 10k / 100k pods, a mix of
//! gangs and elastic pods in several queues. `cargo bench --bench admission --features reference`.
//! `admission_pass` and its reference run with preemption off (the work both do);
//! `admission_pass_preempting` is the same pass with in-queue preemption on, where most waiting
//! items outrank admitted ones, so every queue plans evictions in every pass (its worst case).
//! `admission_pass_cohort`: the same snapshots (preemption off) with the 8 queues in two cohorts
//! of 4 lending all their quota, so every queue borrows and reclaims in every pass.
//! `admission_pass_incremental`: 100,000 plain pods, each its own workload, in the same 8 queues,
//! through the incremental pass (`queue::incremental::Snapshotter`: pods grouped into workloads,
//! the workload snapshot built, the groups decided): `one_pod_changed` is a pass after one pod
//! changed (an admitted pod of a StrictFIFO queue ends, or runs again, in turn);
//! `one_pod_changed_assembled` the same with the whole snapshot and decisions put back together
//! (`Decider::assemble`, a copy); `one_pod_changed_lent` the same lent and given back
//! (`Snapshotter::lend`, `give_back`: moved, not copied), as the controller's pass does; `full` the same
//! state built and decided whole (a restart's pass); `build_and_decide` the controller's full path
//! (`snapshot::build_from_facts` over every pod, then `decide`).
//! `admission_pass_topology`: the 1k/10k-workload snapshots with every workload's pods asking for
//! one rack (`sluice.dev/topology-required`) over 1,000 nodes in 50 racks (`decide_with`), beside
//! the same snapshots without the ask and without nodes (the cost of the feature when unused is
//! `admission_pass` against the figures before it). `admission_pass_topology_searching`: the same
//! with the queues' quota a thousand times larger and the nodes' room 8 cpu each, so that every
//! gang fits its quota and searches the racks, and most find none (the worst case of the search).
//! `admission_pass_flavors`: the 10k-workload snapshots with each queue's quota in two flavors
//! (`flavors`), the same with every pod asking for a rack over 1,000 nodes whose racks hold both
//! flavors (`flavors_and_topology`), and the plain pass in the same run (`neither`).

use criterion::{BenchmarkId, Criterion, criterion_group};
use std::collections::HashSet;

/// The allocator of the sluice binary (src/main.rs), so that passes are measured as the controller
/// runs them: over a heap of 100,000 cached pods glibc's malloc spent ~40 % of an incremental pass in
/// malloc/free (consolidation and unlinking of fragmented chunks).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::sync::Arc;

use sluice::api::QueueingStrategy;
use sluice::queue::admission::*;
use sluice::queue::incremental::Snapshotter;
use sluice::queue::topology::{NodeRoom, Topology, TopologyAsk};
use sluice::resources::ResourceList;

fn resources(cpu: i64, memory_mib: i64) -> ResourceList {
    let mut r = ResourceList::new();
    r.add("cpu", cpu);
    r.add("memory", memory_mib * 1024 * 1024 * 1000);
    r.add("pods", 1000);
    r
}

/// `workloads` workloads with `pods` pods in all, spread over 8 queues. Every third workload is a
/// running application with elastic pods waiting; the others are gangs that have not started.
pub fn snapshot(workloads: usize, pods: usize, within_queue: WithinQueue) -> Snapshot {
    let queues = (0..8)
        .map(|q| {
            let mut quota = ResourceList::new();
            quota.add("cpu", 2_000_000); // 2000 cpu: some fit, most wait
            quota.add("memory", 8_000 * 1024 * 1024 * 1024 * 1000 / 1000);
            QueueSnapshot {
                name: format!("q{q}"),
                quota,
                strategy: if q % 2 == 0 {
                    QueueingStrategy::BestEffortFIFO
                } else {
                    QueueingStrategy::StrictFIFO
                },
                preemption: PreemptionPolicy { within_queue },
                cohort: None,
                flavors: Vec::new(),
            }
        })
        .collect();
    let per_workload = (pods / workloads).max(1);
    let mut seed: u64 = 42;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let workloads = (0..workloads)
        .map(|w| {
            let running = w % 3 == 0;
            let cpu = 500 + (next() % 4) as i64 * 500;
            let pods = (0..per_workload)
                .map(|p| {
                    let state = if running && p < per_workload / 2 {
                        PodState::Admitted
                    } else {
                        PodState::Gated
                    };
                    let requests = std::sync::Arc::new(resources(cpu, 1024));
                    PodSnapshot::plain(
                        format!("w{w}-p{p}"),
                        requests,
                        state,
                        (next() % 100_000) as i64,
                    )
                })
                .collect();
            WorkloadSnapshot {
                key: WorkloadKey {
                    namespace: format!("ns{}", w % 50),
                    name: format!("w{w}"),
                },
                queue: format!("q{}", w % 8),
                namespace_allowed: true,
                priority: (next() % 3) as i32,
                interrupted_count: 0,
                queued_at: (next() % 100_000) as i64,
                pod_sets: vec![PodSetSnapshot {
                    name: "main".into(),
                    per_pod: resources(cpu, 1024),
                    min_count: (per_workload as u32).min(3),
                    pods,
                }],
            }
        })
        .collect();
    Snapshot { queues, workloads }
}

fn bench(c: &mut Criterion) {
    let cases = [
        (1_000, 10_000),
        (1_000, 100_000),
        (10_000, 10_000),
        (10_000, 100_000),
        (100_000, 100_000),
    ];
    let snapshots: Vec<_> = cases
        .iter()
        .map(|&(workloads, pods)| {
            let id = format!("{workloads}w_{pods}p");
            (id, snapshot(workloads, pods, WithinQueue::Never))
        })
        .collect();
    let mut group = c.benchmark_group("admission_pass");
    group.sample_size(20);
    for (id, s) in &snapshots {
        group.bench_with_input(BenchmarkId::from_parameter(id), s, |b, s| {
            b.iter(|| decide(s))
        });
    }
    group.finish();
    // The pass before its rewrite, on the same snapshots, for the ratio (not the largest case: it
    // takes seconds per sample).
    let mut group = c.benchmark_group("admission_pass_reference");
    group.sample_size(10);
    for (id, s) in snapshots
        .iter()
        .filter(|(_, s)| s.workloads.len() <= 10_000)
    {
        group.bench_with_input(BenchmarkId::from_parameter(id), s, |b, s| {
            b.iter(|| sluice::queue::admission_reference::decide(s))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("admission_pass_preempting");
    group.sample_size(10);
    for &(workloads, pods) in &cases {
        let s = snapshot(workloads, pods, WithinQueue::LowerPriority);
        let id = format!("{workloads}w_{pods}p");
        group.bench_with_input(BenchmarkId::from_parameter(id), &s, |b, s| {
            b.iter(|| decide(s))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("admission_pass_cohort");
    group.sample_size(10);
    for (id, s) in snapshots
        .iter()
        .filter(|(_, s)| s.workloads.len() <= 10_000)
    {
        let mut s = s.clone();
        for (q, queue) in s.queues.iter_mut().enumerate() {
            queue.cohort = Some(CohortMembership::new(if q < 4 { "a" } else { "b" }));
        }
        group.bench_with_input(BenchmarkId::from_parameter(id), &s, |b, s| {
            b.iter(|| decide(s))
        });
    }
    group.finish();
    bench_topology(c, &snapshots);
    bench_flavors(c, &snapshots);
}

/// Each queue's quota split over two flavors (`a100` then `h100`, half each), as flavored
/// CapacityQueues are: every gang tries `a100` first and takes `h100` when `a100` is full; the
/// admitted pods alternate between the two. Beside it the same with every pod asking for one rack
/// as in [`bench_topology`]: the pass with flavors and topology at once.
fn bench_flavors(c: &mut Criterion, snapshots: &[(String, Snapshot)]) {
    let flavored = |s: &Snapshot| -> Snapshot {
        let mut s = s.clone();
        for queue in &mut s.queues {
            let mut half = ResourceList::new();
            for (name, value) in &queue.quota.0 {
                half.add(name, value / 2);
            }
            queue.flavors = ["a100", "h100"]
                .map(|name| {
                    Arc::new(FlavorSnapshot {
                        name: name.into(),
                        quota: half.clone(),
                        node_labels: [("gpu".to_string(), name.to_string())].into(),
                        tolerations: Vec::new(),
                        defined: true,
                    })
                })
                .to_vec();
        }
        let names: [Arc<str>; 2] = ["a100".into(), "h100".into()];
        let admitted = (s.workloads.iter_mut())
            .flat_map(|w| w.pod_sets.iter_mut())
            .flat_map(|set| set.pods.iter_mut())
            .filter(|pod| pod.state == PodState::Admitted);
        for (i, pod) in admitted.enumerate() {
            pod.flavor = Some(Arc::clone(&names[i % 2]));
        }
        s
    };
    // 1,000 nodes in 50 racks, half of each rack `a100`, half `h100`.
    let mut nodes = racks();
    for (n, node) in nodes.nodes.iter_mut().enumerate() {
        let gpu = ["a100", "h100"][(n / 50) % 2];
        node.labels.insert("gpu".to_string(), gpu.to_string());
    }
    let mut group = c.benchmark_group("admission_pass_flavors");
    group.sample_size(10);
    for (id, s) in snapshots
        .iter()
        .filter(|(_, s)| s.workloads.len() == 10_000)
    {
        let with_flavors = flavored(s);
        group.bench_with_input(BenchmarkId::new("flavors", id), &with_flavors, |b, s| {
            b.iter(|| decide(s))
        });
        let both = asking_a_rack(&with_flavors);
        group.bench_with_input(
            BenchmarkId::new("flavors_and_topology", id),
            &both,
            |b, s| b.iter(|| decide_with(s, Some(&nodes))),
        );
        group.bench_with_input(BenchmarkId::new("neither", id), s, |b, s| {
            b.iter(|| decide(s))
        });
    }
    group.finish();
}

/// 1,000 nodes of 64 cpu in 50 racks (`rack: rack-<n % 50>`).
fn racks() -> Topology {
    Topology {
        nodes: (0..1000)
            .map(|n| NodeRoom {
                name: format!("node-{n:04}"),
                labels: [("rack".to_string(), format!("rack-{}", n % 50))].into(),
                free: resources(64_000, 256 * 1024),
            })
            .collect(),
        ..Topology::default()
    }
}

/// `s` with every pod asking for one rack (`sluice.dev/topology-required: rack`).
fn asking_a_rack(s: &Snapshot) -> Snapshot {
    let ask = Arc::new(PodTopology {
        ask: Some(TopologyAsk {
            key: "rack".into(),
            required: true,
        }),
        ..PodTopology::default()
    });
    let mut asking = s.clone();
    for pod in (asking.workloads.iter_mut())
        .flat_map(|w| w.pod_sets.iter_mut())
        .flat_map(|set| set.pods.iter_mut())
    {
        pod.topology = Some(Arc::clone(&ask));
    }
    asking
}

/// See the module documentation.
fn bench_topology(c: &mut Criterion, snapshots: &[(String, Snapshot)]) {
    let nodes = racks();
    let mut group = c.benchmark_group("admission_pass_topology");
    group.sample_size(10);
    for (id, s) in snapshots
        .iter()
        .filter(|(_, s)| s.workloads.len() <= 10_000)
    {
        let asking = asking_a_rack(s);
        group.bench_with_input(BenchmarkId::from_parameter(id), &asking, |b, s| {
            b.iter(|| decide_with(s, Some(&nodes)))
        });
    }
    group.finish();
    let mut small = nodes.clone();
    for node in &mut small.nodes {
        node.free = resources(8_000, 256 * 1024);
    }
    let mut group = c.benchmark_group("admission_pass_topology_searching");
    group.sample_size(10);
    for (id, s) in snapshots
        .iter()
        .filter(|(_, s)| s.workloads.len() <= 10_000)
    {
        let mut asking = asking_a_rack(s);
        for queue in &mut asking.queues {
            for value in queue.quota.0.values_mut() {
                *value = value.saturating_mul(1000);
            }
        }
        group.bench_with_input(BenchmarkId::from_parameter(id), &asking, |b, s| {
            b.iter(|| decide_with(s, Some(&small)))
        });
    }
    group.finish();
}

fn bench_incremental(c: &mut Criterion) {
    let (queues, pods) = cluster(100_000);
    let mut inc = Snapshotter::default();
    inc.set_queues(queues.clone());
    for pod in &pods {
        inc.put_pod(pod.clone());
    }
    inc.pass();
    let mut group = c.benchmark_group("admission_pass_incremental");
    group.sample_size(20);
    // Pod 3: admitted, in q3 (StrictFIFO). It ends, then runs again, pass after pass.
    let versions = [pod_version(3, "Succeeded", false), pod_object(3, true)];
    let mut turn = 0usize;
    group.bench_function("100000w_100000p/one_pod_changed", |b| {
        b.iter(|| {
            turn += 1;
            inc.put_pod(versions[turn % 2].clone());
            inc.pass()
        })
    });
    // The same, with the whole put back together as the controller's pass does for what acts on
    // the decisions (ungates, statuses, the room published for admission at creation).
    group.bench_function("100000w_100000p/one_pod_changed_assembled", |b| {
        b.iter(|| {
            turn += 1;
            inc.put_pod(versions[turn % 2].clone());
            inc.pass();
            inc.decider.assemble()
        })
    });
    // As the controller's pass now does: the whole lent (moved, not copied), then given back.
    group.bench_function("100000w_100000p/one_pod_changed_lent", |b| {
        b.iter(|| {
            turn += 1;
            inc.put_pod(versions[turn % 2].clone());
            inc.pass();
            let (built, decisions) = inc.lend();
            let admitted = decisions.admit.len();
            inc.give_back(built, decisions);
            admitted
        })
    });
    group.sample_size(10);
    group.bench_function("100000w_100000p/full", |b| {
        b.iter(|| {
            inc.invalidate();
            inc.pass()
        })
    });
    let facts: Vec<_> = pods.iter().map(|p| p.facts.clone()).collect();
    let none = HashSet::new();
    group.bench_function("100000w_100000p/build_and_decide", |b| {
        b.iter(|| {
            let built =
                sluice::queue::snapshot::build_from_facts(&queues, &[], &pods, &facts, &[], &none);
            decide(&built.snapshot)
        })
    });
    group.finish();
}

/// The incremental pass's cluster, shared with `examples/one_pod_changed.rs`.
#[path = "common/incremental.rs"]
mod incremental;
use incremental::{cluster, count_passes, pod_object, pod_version};

criterion_group!(benches, bench, bench_incremental);

fn main() {
    // Only the `one_pod_changed` case, N passes, no timing (see `common/incremental.rs`).
    if let Some(passes) = std::env::var("SLUICE_BENCH_PASSES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        count_passes(passes);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
