//! The per-queue gauges an operator alerts on (quota, used, reserved, borrowed, lent, admitted,
//! the oldest wait, the queue's cohort), set after each pass from what it decided. Base units:
//! cores, bytes, GPUs, pods (sluice counts in milli-units). A queue that is gone loses its series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::metrics::{QueueGauges, QueueInfoLabels, QueueLabels, QueueResourceLabels};
use crate::queue::admission::{Decisions, PodState};
use crate::queue::snapshot::Built;

/// The series each queue had at the last pass, to remove those of queues (or resources) gone.
#[derive(Default)]
pub(crate) struct Series {
    known: Mutex<BTreeMap<String, (BTreeSet<String>, QueueInfoLabels)>>,
}

/// Per queue: milli-units to base units.
fn base(milli: i64) -> f64 {
    milli as f64 / 1000.0
}

/// Per queue, the creation time (ms since the epoch) of its longest-waiting gated pod.
pub(crate) fn oldest_waiting(built: &Built, decisions: &Decisions) -> BTreeMap<String, i64> {
    let mut oldest: BTreeMap<String, i64> = BTreeMap::new();
    for (w, workload) in built.snapshot.workloads.iter().enumerate() {
        let waits = decisions
            .workloads
            .get(w)
            .is_some_and(|t| t.pending_pods > 0);
        if !waits {
            continue;
        }
        let first = workload
            .pod_sets
            .iter()
            .flat_map(|s| s.pods.iter())
            .filter(|p| p.state == PodState::Gated)
            .map(|p| p.created_at)
            .min();
        if let Some(at) = first {
            let slot = oldest.entry(workload.queue.clone()).or_insert(at);
            *slot = (*slot).min(at);
        }
    }
    oldest
}

impl Series {
    /// Sets every queue's gauges from this pass.
    pub(crate) fn record(&self, gauges: &QueueGauges, built: &Built, decisions: &Decisions) {
        let oldest = oldest_waiting(built, decisions);
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut now_known = BTreeMap::new();
        for queue in &built.snapshot.queues {
            let Some(tally) = decisions.queues.get(&queue.name) else {
                // Not decided by this pass: its series stay as they were.
                if let Some(old) = known.get(&queue.name) {
                    now_known.insert(queue.name.clone(), old.clone());
                }
                continue;
            };
            let labels = QueueLabels {
                queue: queue.name.clone(),
            };
            let resources: BTreeSet<String> = queue
                .quota
                .0
                .keys()
                .chain(tally.usage.0.keys())
                .cloned()
                .collect();
            for resource in &resources {
                let l = QueueResourceLabels {
                    queue: queue.name.clone(),
                    resource: resource.clone(),
                };
                gauges.quota.get_or_create(&l).set(base(queue.quota.get(resource)));
                gauges.used.get_or_create(&l).set(base(tally.usage.get(resource)));
                gauges
                    .reserved
                    .get_or_create(&l)
                    .set(base(tally.reserved.get(resource)));
                gauges
                    .borrowed
                    .get_or_create(&l)
                    .set(base(tally.borrowed.get(resource)));
                gauges.lent.get_or_create(&l).set(base(tally.lent.get(resource)));
            }
            gauges
                .admitted_workloads
                .get_or_create(&labels)
                .set(i64::from(tally.admitted_workloads));
            gauges
                .admitted_pods
                .get_or_create(&labels)
                .set(i64::from(tally.admitted_pods));
            match oldest.get(&queue.name) {
                Some(at) => {
                    gauges
                        .oldest_pending_timestamp
                        .get_or_create(&labels)
                        .set(*at as f64 / 1000.0);
                }
                None => {
                    gauges.oldest_pending_timestamp.remove(&labels);
                }
            }
            let info = QueueInfoLabels {
                queue: queue.name.clone(),
                cohort: queue
                    .cohort
                    .as_ref()
                    .map(|c| c.name.clone())
                    .unwrap_or_default(),
                strategy: format!("{:?}", queue.strategy),
            };
            gauges.info.get_or_create(&info).set(1);
            now_known.insert(queue.name.clone(), (resources, info));
        }
        for (queue, (resources, info)) in known.iter() {
            let now = now_known.get(queue);
            for resource in resources {
                if now.is_some_and(|(r, _)| r.contains(resource)) {
                    continue;
                }
                let l = QueueResourceLabels {
                    queue: queue.clone(),
                    resource: resource.clone(),
                };
                for family in [
                    &gauges.quota,
                    &gauges.used,
                    &gauges.reserved,
                    &gauges.borrowed,
                    &gauges.lent,
                ] {
                    family.remove(&l);
                }
            }
            if now.is_none_or(|(_, i)| i != info) {
                gauges.info.remove(info);
            }
            if now.is_none() {
                let l = QueueLabels {
                    queue: queue.clone(),
                };
                gauges.admitted_workloads.remove(&l);
                gauges.admitted_pods.remove(&l);
                gauges.oldest_pending_timestamp.remove(&l);
            }
        }
        *known = now_known;
    }
}
