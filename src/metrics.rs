//! Prometheus metrics of the controller (the webhook server registers its own).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

#[derive(Clone)]
pub struct ControllerMetrics {
    /// Pods ungated, per queue.
    pub admitted_pods: Family<QueueLabels, Counter>,
    /// Pods admitted by the webhook as they were created (never gated), per queue.
    pub admitted_at_creation: Family<QueueLabels, Counter>,
    /// Pods waiting behind the gate, per queue, after the last pass.
    pub pending_pods: Family<QueueLabels, Gauge>,
    /// Workloads with waiting pods, per queue, after the last pass.
    pub pending_workloads: Family<QueueLabels, Gauge>,
    /// Seconds from a pod's creation to its admission (1 s resolution: creation timestamps are whole seconds).
    pub admission_wait_seconds: Family<QueueLabels, Histogram>,
    /// Seconds one admission pass took (snapshot and decision; the writes it asks for run after it).
    pub pass_duration_seconds: Histogram,
    /// Ungate patches that failed.
    pub ungate_errors: Counter,
    /// Ungate patches asked for and not yet answered.
    pub ungates_in_flight: Gauge,
    /// DynamicWorkload and CapacityQueue status writes sent (coalesced: the newest per object).
    pub status_writes: Counter,
    /// DynamicWorkload statuses wanted and not written yet (waiting for the status write budget,
    /// for pods to start, or for the lazy interval), after the last round of writes.
    pub status_writes_pending: Gauge,
    /// 1 while this replica leads and runs the controller.
    pub leader: Gauge,
}

impl ControllerMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = ControllerMetrics {
            admitted_pods: Family::default(),
            admitted_at_creation: Family::default(),
            pending_pods: Family::default(),
            pending_workloads: Family::default(),
            admission_wait_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.5, 2.0, 14))
            }),
            pass_duration_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            ungate_errors: Counter::default(),
            ungates_in_flight: Gauge::default(),
            status_writes: Counter::default(),
            status_writes_pending: Gauge::default(),
            leader: Gauge::default(),
        };
        registry.register(
            "sluice_admitted_pods",
            "Pods admitted by a pass (ungated) per queue",
            m.admitted_pods.clone(),
        );
        registry.register(
            "sluice_admitted_at_creation_pods",
            "Pods admitted as they were created (never gated) per queue",
            m.admitted_at_creation.clone(),
        );
        registry.register(
            "sluice_queue_pending_pods",
            "Pods waiting behind the gate per queue",
            m.pending_pods.clone(),
        );
        registry.register(
            "sluice_queue_pending_workloads",
            "Workloads with waiting pods per queue",
            m.pending_workloads.clone(),
        );
        registry.register(
            "sluice_admission_wait_seconds",
            "Time from pod creation to admission",
            m.admission_wait_seconds.clone(),
        );
        registry.register(
            "sluice_admission_pass_duration_seconds",
            "Duration of one admission pass",
            m.pass_duration_seconds.clone(),
        );
        registry.register(
            "sluice_ungate_errors",
            "Ungate patches that failed",
            m.ungate_errors.clone(),
        );
        registry.register(
            "sluice_ungates_in_flight",
            "Ungate patches asked for and not yet answered",
            m.ungates_in_flight.clone(),
        );
        registry.register(
            "sluice_status_writes",
            "Status writes sent to DynamicWorkloads and CapacityQueues",
            m.status_writes.clone(),
        );
        registry.register(
            "sluice_status_writes_pending",
            "DynamicWorkload statuses wanted and not yet written (status write budget, pods starting, lazy interval)",
            m.status_writes_pending.clone(),
        );
        registry.register(
            "sluice_leader",
            "1 while this replica runs the controller",
            m.leader.clone(),
        );
        m
    }
}
