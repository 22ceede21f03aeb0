//! The incremental admission pass after one change at 100k workloads × 100k pods, and nothing
//! else: `SLUICE_BENCH_PASSES=20 valgrind --tool=callgrind
//! --toggle-collect='*one_pod_changed_passes*' target/release/examples/one_pod_changed` counts
//! the instructions of 20 passes (`SLUICE_BENCH_LENT=1`: each whole lent and given back, as the
//! controller does). The cluster and the passes are the `one_pod_changed` bench's
//! (`benches/common/incremental.rs`).

/// The sluice binary's allocator, as in the bench.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/common/incremental.rs"]
mod incremental;

fn main() {
    let passes = std::env::var("SLUICE_BENCH_PASSES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    incremental::count_passes(passes);
}
