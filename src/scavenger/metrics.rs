//! Prometheus metrics of the ScavengerJob controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `outside` (evicted, preempted or deleted by someone else) or `sluice` (stopped by sluice to
    /// give the room back to ordinary work, least progress first).
    pub by: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

#[derive(Clone)]
pub struct ScavengerMetrics {
    pub started: Counter,
    pub finished: Counter,
    pub interrupted: Family<ReasonLabels, Counter>,
    pub failed: Counter,
    /// Starts whose pods were not all scheduled in time (the Job removed, retried later).
    pub unschedulable: Counter,
    pub first_start_seconds: Histogram,
    /// What scavenger pods hold, per resource (cpu in cores, memory in bytes).
    pub in_use: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// What scavengers may hold in all (allocatable × threshold − ordinary pods' requests).
    pub capacity: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl ScavengerMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = ScavengerMetrics {
            started: Counter::default(),
            finished: Counter::default(),
            interrupted: Family::default(),
            failed: Counter::default(),
            unschedulable: Counter::default(),
            first_start_seconds: Histogram::new(exponential_buckets(0.5, 2.0, 16)),
            in_use: Family::default(),
            capacity: Family::default(),
        };
        registry.register(
            "sluice_scavenger_started",
            "ScavengerJob runs started (Jobs created)",
            m.started.clone(),
        );
        registry.register(
            "sluice_scavenger_finished",
            "ScavengerJobs completed",
            m.finished.clone(),
        );
        registry.register(
            "sluice_scavenger_interrupted",
            "ScavengerJob runs interrupted, by whom (outside, sluice)",
            m.interrupted.clone(),
        );
        registry.register(
            "sluice_scavenger_failed",
            "ScavengerJobs failed (a pod's exit code not 0, a mount missing)",
            m.failed.clone(),
        );
        registry.register(
            "sluice_scavenger_unschedulable",
            "ScavengerJob starts removed because their pods were not scheduled in time",
            m.unschedulable.clone(),
        );
        registry.register(
            "sluice_scavenger_first_start_seconds",
            "Time from a ScavengerJob's creation to its first start",
            m.first_start_seconds.clone(),
        );
        registry.register(
            "sluice_scavenger_in_use",
            "Requests of scavenger pods holding room, per resource (cores, bytes)",
            m.in_use.clone(),
        );
        registry.register(
            "sluice_scavenger_capacity",
            "What scavengers may hold in all, per resource: allocatable x threshold - ordinary pods' requests",
            m.capacity.clone(),
        );
        m
    }

    /// Sets the gauges from milli-unit lists.
    pub fn set_capacity(
        &self,
        capacity: &crate::resources::ResourceList,
        in_use: &crate::resources::ResourceList,
    ) {
        for (family, list) in [(&self.capacity, capacity), (&self.in_use, in_use)] {
            for name in ["cpu", "memory", "nvidia.com/gpu"] {
                family
                    .get_or_create(&ResourceLabels {
                        resource: name.to_string(),
                    })
                    .set(list.get(name) as f64 / 1000.0);
            }
        }
    }
}
