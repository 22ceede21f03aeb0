//! One admission pass over large snapshots: 1k / 10k pending workloads, 10k / 100k pods, a mix of
//! gangs and elastic pods in several queues. `cargo bench --bench admission --features reference`.
//! `admission_pass` and its reference run with preemption off (the work both do);
//! `admission_pass_preempting` is the same pass with in-queue preemption on, where most waiting
//! items outrank admitted ones, so every queue plans evictions in every pass (its worst case).
//! `admission_pass_cohort`: the same snapshots (preemption off) with the 8 queues in two cohorts
//! of 4 lending all their quota, so every queue borrows and reclaims in every pass.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use sluice::api::QueueingStrategy;
use sluice::queue::admission::*;
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
                .map(|p| PodSnapshot {
                    name: format!("w{w}-p{p}"),
                    requests: resources(cpu, 1024),
                    state: if running && p < per_workload / 2 {
                        PodState::Admitted
                    } else {
                        PodState::Gated
                    },
                    created_at: (next() % 100_000) as i64,
                    terminating: false,
                    eviction_blocked: false,
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
