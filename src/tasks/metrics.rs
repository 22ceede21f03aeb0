//! Prometheus metrics of the Task and TaskCluster controllers.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::TaskPhase;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutorLabels {
    pub executor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishedLabels {
    pub executor: String,
    /// Success, Failed or Killed.
    pub phase: String,
}

#[derive(Clone)]
pub struct TaskMetrics {
    /// Tasks started, per executor.
    pub started: Family<ExecutorLabels, Counter>,
    /// Tasks ended, per executor and final phase.
    pub finished: Family<FinishedLabels, Counter>,
    /// Seconds from start to end, per executor.
    pub duration_seconds: Family<ExecutorLabels, Histogram>,
    /// Worker pods created and deleted by the TaskCluster controller.
    pub workers_created: Counter,
    pub workers_deleted: Counter,
}

impl TaskMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = TaskMetrics {
            started: Family::default(),
            finished: Family::default(),
            duration_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.05, 2.0, 16))
            }),
            workers_created: Counter::default(),
            workers_deleted: Counter::default(),
        };
        registry.register(
            "sluice_tasks_started",
            "Tasks started per executor",
            m.started.clone(),
        );
        registry.register(
            "sluice_tasks_finished",
            "Tasks ended per executor and phase",
            m.finished.clone(),
        );
        registry.register(
            "sluice_task_duration_seconds",
            "Time from a Task's start to its end",
            m.duration_seconds.clone(),
        );
        registry.register(
            "sluice_task_workers_created",
            "TaskCluster worker pods created",
            m.workers_created.clone(),
        );
        registry.register(
            "sluice_task_workers_deleted",
            "TaskCluster worker pods deleted (idle, retired or ended)",
            m.workers_deleted.clone(),
        );
        m
    }
}

impl TaskMetrics {
    pub fn record_started(&self, executor: &str) {
        self.started
            .get_or_create(&ExecutorLabels {
                executor: executor.to_string(),
            })
            .inc();
    }

    /// A Task ended in `phase`, after running `ran_for` seconds when it had started.
    pub fn record_finished(&self, executor: &str, phase: TaskPhase, ran_for: Option<f64>) {
        self.finished
            .get_or_create(&FinishedLabels {
                executor: executor.to_string(),
                phase: phase.to_string(),
            })
            .inc();
        if let Some(seconds) = ran_for {
            self.duration_seconds
                .get_or_create(&ExecutorLabels {
                    executor: executor.to_string(),
                })
                .observe(seconds);
        }
    }
}
