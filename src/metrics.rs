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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptionLabels {
    pub queue: String,
    /// Why the preemptor may take quota back (`InQueuePriority`).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueResourceLabels {
    pub queue: String,
    pub resource: String,
}

/// The labels of `sluice_build_info` (always 1): which build runs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildInfoLabels {
    pub version: String,
    pub commit: String,
}

/// Registers `sluice_build_info{version, commit} 1` (crate::build_info).
fn register_build_info(registry: &mut Registry) {
    let info: Family<BuildInfoLabels, Gauge> = Family::default();
    info.get_or_create(&BuildInfoLabels {
        version: crate::build_info::VERSION.to_string(),
        commit: crate::build_info::GIT_COMMIT.to_string(),
    })
    .set(1);
    registry.register(
        "sluice_build_info",
        "The version and git commit of the running sluice (always 1)",
        info,
    );
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
    /// The Lease's `leaseTransitions` of the term this replica holds, -1 while it holds none:
    /// with the replica's identity (the Lease's holder) it names the term its admissions belong to.
    pub leader_term: Gauge,
    /// Preemptors whose evictions were sent, per queue and reason (one per preemptor and round of
    /// evictions, however many victims).
    pub preemptions: Family<PreemptionLabels, Counter>,
    /// Pods evicted to make room for a preemptor, per queue and reason.
    pub evicted_pods: Family<PreemptionLabels, Counter>,
    /// Seconds from a preemptor's first eviction decision to its admission, per queue.
    pub preemption_admission_seconds: Family<QueueLabels, Histogram>,
    /// A cohort queue's usage and reservations above its quota, per resource (milli-units).
    pub borrowed: Family<QueueResourceLabels, Gauge>,
    /// Events on users' objects (`src/queue/announcer.rs`).
    pub events: EventMetrics,
    /// Per queue quota, usage and waiting, in base units (`src/queue/gauges.rs`).
    pub queues: QueueGauges,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueInfoLabels {
    pub queue: String,
    /// Empty when the queue is in no cohort.
    pub cohort: String,
    pub strategy: String,
}

/// The events sluice posts on applications and pods.
#[derive(Clone, Default)]
pub struct EventMetrics {
    pub sent: Family<EventLabels, Counter>,
    pub dropped: Counter,
    pub failed: Counter,
}

/// A cohort's label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CohortLabels {
    pub cohort: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CohortResourceLabels {
    pub cohort: String,
    pub resource: String,
}

/// Per cohort gauges (sums over its queues), in base units, per resource its queues' quotas name.
#[derive(Clone, Default)]
pub struct CohortGauges {
    pub quota: Family<CohortResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub used: Family<CohortResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub reserved: Family<CohortResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub borrowed: Family<CohortResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub pending_workloads: Family<CohortLabels, Gauge>,
    pub pending_pods: Family<CohortLabels, Gauge>,
    pub oldest_pending_timestamp: Family<CohortLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

/// Registers the `sluice_cohort_*` gauges.
pub fn register_cohort_gauges(registry: &mut Registry, c: &CohortGauges) {
    registry.register(
        "sluice_cohort_quota",
        "A cohort's pool: the sum of its queues' quotas, per resource (base units)",
        c.quota.clone(),
    );
    registry.register(
        "sluice_cohort_used",
        "Requests of the admitted pods of a cohort's queues, per resource (base units)",
        c.used.clone(),
    );
    registry.register(
        "sluice_cohort_reserved",
        "Quota a cohort's queues hold for gang members not admitted yet, per resource (base units)",
        c.reserved.clone(),
    );
    registry.register(
        "sluice_cohort_borrowed",
        "What a cohort's queues use above their own quotas, lent by the others, per resource (base units)",
        c.borrowed.clone(),
    );
    registry.register(
        "sluice_cohort_pending_workloads",
        "Workloads with pods waiting in a cohort's queues, after the last pass",
        c.pending_workloads.clone(),
    );
    registry.register(
        "sluice_cohort_pending_pods",
        "Pods waiting behind the gate in a cohort's queues, after the last pass",
        c.pending_pods.clone(),
    );
    registry.register(
        "sluice_cohort_oldest_pending_timestamp_seconds",
        "Creation time (Unix seconds) of the oldest pod still behind the gate in a cohort's queues; absent while nothing waits",
        c.oldest_pending_timestamp.clone(),
    );
}

/// Per queue gauges, in base units (cores, bytes, GPUs, pods), per resource the quota names.
#[derive(Clone, Default)]
pub struct QueueGauges {
    pub quota: Family<QueueResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub used: Family<QueueResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub reserved: Family<QueueResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub borrowed: Family<QueueResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub lent: Family<QueueResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub admitted_workloads: Family<QueueLabels, Gauge>,
    pub admitted_pods: Family<QueueLabels, Gauge>,
    /// When the queue's longest-waiting gated pod was created (seconds since the epoch); no series
    /// while nothing waits. A timestamp, not an age, so that an alert sees the wait grow even if
    /// passes stopped.
    pub oldest_pending_timestamp: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// 1 per queue, with its cohort and strategy as labels (to join the others on).
    pub info: Family<QueueInfoLabels, Gauge>,
    /// The same summed per cohort.
    pub cohorts: CohortGauges,
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
            leader_term: Gauge::default(),
            preemptions: Family::default(),
            evicted_pods: Family::default(),
            preemption_admission_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.25, 2.0, 14))
            }),
            borrowed: Family::default(),
            events: EventMetrics::default(),
            queues: QueueGauges::default(),
        };
        m.leader_term.set(-1);
        register_build_info(registry);
        m.register_admission(registry);
        m.register_preemption(registry);
        m.register_queues(registry);
        m.register_events(registry);
        m
    }

    fn register_queues(&self, registry: &mut Registry) {
        let q = &self.queues;
        registry.register(
            "sluice_queue_quota",
            "A queue's quota per resource (base units: cores, bytes, GPUs, pods)",
            q.quota.clone(),
        );
        registry.register(
            "sluice_queue_used",
            "Requests of a queue's admitted pods that have not ended, per resource (base units)",
            q.used.clone(),
        );
        registry.register(
            "sluice_queue_reserved",
            "Quota a queue holds for gang members not admitted yet, per resource (base units)",
            q.reserved.clone(),
        );
        registry.register(
            "sluice_queue_borrowed",
            "What a cohort queue uses above its quota, borrowed from its cohort, per resource (base units)",
            q.borrowed.clone(),
        );
        registry.register(
            "sluice_queue_lent",
            "What other queues of the cohort use of this queue's unused quota, per resource (base units)",
            q.lent.clone(),
        );
        registry.register(
            "sluice_queue_admitted_workloads",
            "Workloads holding quota per queue",
            q.admitted_workloads.clone(),
        );
        registry.register(
            "sluice_queue_admitted_pods",
            "Admitted pods that have not ended per queue",
            q.admitted_pods.clone(),
        );
        registry.register(
            "sluice_queue_oldest_pending_timestamp_seconds",
            "Creation time (Unix seconds) of the queue's oldest pod still behind the gate (one being admitted counts until its gate is off); absent while nothing waits",
            q.oldest_pending_timestamp.clone(),
        );
        registry.register(
            "sluice_queue_info",
            "1 per CapacityQueue, labelled with its cohort (empty: none) and queueing strategy",
            q.info.clone(),
        );
        register_cohort_gauges(registry, &q.cohorts);
    }

    fn register_events(&self, registry: &mut Registry) {
        let e = &self.events;
        registry.register(
            "sluice_events",
            "Events posted on applications and pods (why they wait, admitted, preempted...) per reason",
            e.sent.clone(),
        );
        registry.register(
            "sluice_events_dropped",
            "Events not posted because too many waited to be sent (the rate limit held them)",
            e.dropped.clone(),
        );
        registry.register(
            "sluice_events_failed",
            "Events the API server refused or did not answer in time",
            e.failed.clone(),
        );
    }

    fn register_admission(&self, registry: &mut Registry) {
        let m = self;
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
            "sluice_queue_borrowed_milli",
            "Quota a cohort queue uses above its own, borrowed from its cohort, per resource (milli-units)",
            m.borrowed.clone(),
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
        registry.register(
            "sluice_leader_lease_transitions",
            "The Lease's leaseTransitions of the term this replica holds (-1: none); names the term its admissions belong to",
            m.leader_term.clone(),
        );
    }

    fn register_preemption(&self, registry: &mut Registry) {
        let m = self;
        registry.register(
            "sluice_preemptions",
            "Preemptors whose evictions were sent, per queue and reason",
            m.preemptions.clone(),
        );
        registry.register(
            "sluice_evicted_pods",
            "Pods evicted to make room for a preemptor, per queue and reason",
            m.evicted_pods.clone(),
        );
        registry.register(
            "sluice_preemption_admission_seconds",
            "Time from a preemptor's first eviction decision to its admission",
            m.preemption_admission_seconds.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_info_names_the_version_and_commit() {
        let mut registry = Registry::default();
        let _m = ControllerMetrics::new(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let line = format!(
            r#"sluice_build_info{{version="{}",commit="{}"}} 1"#,
            env!("CARGO_PKG_VERSION"),
            crate::build_info::GIT_COMMIT
        );
        assert!(text.contains(&line), "{line} not in:\n{text}");
    }

    #[test]
    fn preemption_metrics_carry_the_names_the_readme_gives() {
        let mut registry = Registry::default();
        let m = ControllerMetrics::new(&mut registry);
        let labels = PreemptionLabels {
            queue: "q".into(),
            reason: "InQueuePriority".into(),
        };
        m.preemptions.get_or_create(&labels).inc();
        m.evicted_pods.get_or_create(&labels).inc_by(2);
        m.preemption_admission_seconds
            .get_or_create(&QueueLabels { queue: "q".into() })
            .observe(3.0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"sluice_preemptions_total{queue="q",reason="InQueuePriority"} 1"#,
            r#"sluice_evicted_pods_total{queue="q",reason="InQueuePriority"} 2"#,
            r#"sluice_preemption_admission_seconds_count{queue="q"} 1"#,
        ] {
            assert!(text.contains(line), "{line} not in:\n{text}");
        }
    }
}
