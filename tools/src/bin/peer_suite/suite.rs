//! The suite's shapes, read from Kueue v0.19.2's `test/performance/scheduler/configs/`: the
//! baseline (`baseline/generator.yaml`) and topology-aware scheduling (`tas/generator.yaml`), and
//! the plan of one run (which workload of which class goes into which queue).

use clap::ValueEnum;

/// Which of Kueue's configurations runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shape {
    /// `configs/baseline`: one pod per workload (1, 5 or 20 cpu).
    Baseline,
    /// `configs/tas`: 2, 4 or 8 pods per workload, each set asking for one rack (required,
    /// preferred or balanced), on 10 racks of 64 nodes of 96 cpu.
    Tas,
}

/// What a workload is made of on the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    /// One plain pod per workload (the baseline only: Kueue's pod integration, sluice's plain pods).
    Pods,
    /// One batch/v1 Job per workload, parallelism = completions = its pod count (what Kueue's
    /// users run, and sluice's Job integration).
    Jobs,
}

/// A workload's topology ask (Kueue's `tasConstraint`), always on the rack level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyAsk {
    Required,
    Preferred,
    /// Kueue: the pods in slices of `slice` pods, each slice in one rack
    /// (`podset-slice-required-topology`). sluice has no slices: it runs as preferred.
    Balanced {
        slice: u32,
    },
}

/// One class of the suite's workloads.
pub struct Class {
    pub name: &'static str,
    /// small, medium or large: the baseline's three sizes, which the TAS shape keeps per workload.
    pub size: &'static str,
    pub count: usize,
    pub interval_ms: u64,
    pub pods: u32,
    /// Each pod's cpu request, in millicores.
    pub pod_millicpu: u32,
    pub runtime_ms: u64,
    pub priority: i32,
    pub topology: Option<TopologyAsk>,
}

const fn class(
    name: &'static str,
    size: &'static str,
    count: usize,
    pods: u32,
    pod_millicpu: u32,
    topology: Option<TopologyAsk>,
) -> Class {
    // The three sizes share interval, runtime and priority in both shapes.
    let (interval_ms, runtime_ms, priority) = match size.as_bytes() {
        [b's', ..] => (100, 200, 50),
        [b'm', ..] => (500, 500, 100),
        _ => (1200, 1000, 200),
    };
    Class {
        name,
        size,
        count,
        interval_ms,
        pods,
        pod_millicpu,
        runtime_ms,
        priority,
        topology,
    }
}

use TopologyAsk::{Balanced, Preferred, Required};

/// `configs/baseline/generator.yaml`: per queue 350 small, 100 medium, 50 large.
pub const BASELINE: [Class; 3] = [
    class("small", "small", 350, 1, 1000, None),
    class("medium", "medium", 100, 1, 5000, None),
    class("large", "large", 50, 1, 20000, None),
];

/// `configs/tas/generator.yaml`: the baseline's sizes split in three sets each (the same cpu per
/// workload, over 2, 4 or 8 pods).
pub const TAS: [Class; 9] = [
    class("small-required-rack", "small", 120, 2, 500, Some(Required)),
    class(
        "small-preferred-rack",
        "small",
        120,
        2,
        500,
        Some(Preferred),
    ),
    class(
        "small-balanced-rack",
        "small",
        110,
        2,
        500,
        Some(Balanced { slice: 1 }),
    ),
    class(
        "medium-required-rack",
        "medium",
        34,
        4,
        1250,
        Some(Required),
    ),
    class(
        "medium-preferred-rack",
        "medium",
        33,
        4,
        1250,
        Some(Preferred),
    ),
    class(
        "medium-balanced-rack",
        "medium",
        33,
        4,
        1250,
        Some(Balanced { slice: 2 }),
    ),
    class("large-required-rack", "large", 17, 8, 2500, Some(Required)),
    class(
        "large-preferred-rack",
        "large",
        17,
        8,
        2500,
        Some(Preferred),
    ),
    class(
        "large-balanced-rack",
        "large",
        16,
        8,
        2500,
        Some(Balanced { slice: 4 }),
    ),
];

pub const SIZES: [&str; 3] = ["small", "medium", "large"];

/// Every queue's nominal quota and borrowing limit, in cpu (both shapes).
pub const NOMINAL_CPU: u32 = 20;
pub const BORROWING_CPU: u32 = 100;

/// The TAS shape's topology: one block of 10 racks of 64 nodes (96 cpu, 256Gi each).
pub const BLOCK_LABEL: &str = "cloud.provider.com/topology-block";
pub const RACK_LABEL: &str = "cloud.provider.com/topology-rack";
/// The label Kueue's TAS flavor selects its nodes by.
pub const NODE_GROUP_LABEL: &str = "tas-node-group";
pub const RACKS: usize = 10;
pub const NODE_CPU: &str = "96";
pub const NODE_MEMORY: &str = "256Gi";

impl Shape {
    pub fn classes(self) -> &'static [Class] {
        match self {
            Shape::Baseline => &BASELINE,
            Shape::Tas => &TAS,
        }
    }
}

/// The PriorityClass of a priority (the classes of one size share it).
pub fn priority_class(priority: i32) -> String {
    format!("peer-suite-p{priority}")
}

/// The queues: `<prefix>-cq-<queue>-<cohort>` in `<prefix>-cohort-<cohort>`.
pub fn queue_names(
    prefix: &str,
    cohorts: usize,
    queues_per_cohort: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in 0..cohorts {
        for q in 0..queues_per_cohort {
            out.push((
                format!("{prefix}-cq-{q}-{c}"),
                format!("{prefix}-cohort-{c}"),
            ));
        }
    }
    out
}

/// One workload of a run's plan: its class (an index into the shape's classes) and its queue.
pub struct Planned {
    pub class: usize,
    pub queue: String,
}

/// Every workload of a run: per queue, each class's count times `scale` (at least one).
pub fn plan(classes: &[Class], queues: &[(String, String)], scale: f64) -> Vec<Planned> {
    let mut out = Vec::new();
    for (queue, _) in queues {
        for (ci, c) in classes.iter().enumerate() {
            let n = ((c.count as f64) * scale).round().max(1.0) as usize;
            out.extend((0..n).map(|_| Planned {
                class: ci,
                queue: queue.clone(),
            }));
        }
    }
    out
}
