//! The per-queue gauges an operator alerts on (quota, used, reserved, borrowed, lent, admitted,
//! the oldest wait, the queue's cohort), set after each pass from what it decided. Base units:
//! cores, bytes, GPUs, pods (sluice counts in milli-units). A queue that is gone loses its series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::metrics::{QueueGauges, QueueInfoLabels, QueueLabels, QueueResourceLabels};
use crate::queue::admission::{Decisions, PodState, QueueSnapshot, QueueTally};
use crate::queue::series::{remove_resources_gone, resources_of, set_per_resource, set_timestamp};
use crate::queue::snapshot::Built;

/// The series each queue had at the last pass, to remove those of queues (or resources) gone.
#[derive(Default)]
pub(crate) struct Series {
    known: Mutex<Known>,
    cohorts: crate::queue::cohort_gauges::CohortSeries,
}

/// Per queue: the resources it has series for, and its info labels.
type Known = BTreeMap<String, (BTreeSet<String>, QueueInfoLabels)>;

/// Per queue, the creation time (ms since the epoch) of its longest-waiting pod still behind the
/// gate. A pod this pass admits counts until its gate is off: a pod the controller "admits" pass
/// after pass while its ungate keeps failing (a policy refusing the patch, a broken RBAC) is still
/// a pod gated in a queue with room, which is what `SluiceGatedWithRoom` is for.
pub(crate) fn oldest_waiting(built: &Built) -> BTreeMap<String, i64> {
    let mut oldest: BTreeMap<String, i64> = BTreeMap::new();
    for workload in &built.snapshot.workloads {
        let first = workload
            .pod_sets
            .iter()
            .flat_map(|set| set.pods.iter())
            .filter(|pod| pod.state == PodState::Gated)
            .map(|pod| pod.created_at)
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
        let oldest = oldest_waiting(built);
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
            let resources = resources_of(&queue.quota, &tally.usage);
            set_resources(gauges, queue, tally, &resources);
            gauges
                .admitted_workloads
                .get_or_create(&labels)
                .set(i64::from(tally.admitted_workloads));
            gauges
                .admitted_pods
                .get_or_create(&labels)
                .set(i64::from(tally.admitted_pods));
            set_timestamp(
                &gauges.oldest_pending_timestamp,
                &labels,
                oldest.get(&queue.name).copied(),
            );
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
        remove_gone(gauges, &known, &now_known);
        *known = now_known;
        let decided = built.snapshot.queues.iter().filter_map(|queue| {
            let tally = decisions.queues.get(&queue.name)?;
            Some((queue, tally, oldest.get(&queue.name).copied()))
        });
        self.cohorts
            .record(&gauges.cohorts, &built.snapshot.queues, decided);
    }
}

/// The per-resource gauges of one queue.
fn set_resources(
    gauges: &QueueGauges,
    queue: &QueueSnapshot,
    tally: &QueueTally,
    resources: &BTreeSet<String>,
) {
    set_per_resource(
        resources,
        |resource| resource_labels(&queue.name, resource),
        &[
            (&gauges.quota, &queue.quota),
            (&gauges.used, &tally.usage),
            (&gauges.reserved, &tally.reserved),
            (&gauges.borrowed, &tally.borrowed),
            (&gauges.lent, &tally.lent),
        ],
    );
}

fn resource_labels(queue: &str, resource: &str) -> QueueResourceLabels {
    QueueResourceLabels {
        queue: queue.to_string(),
        resource: resource.to_string(),
    }
}

/// Removes the series of queues, resources and info labels the last pass had and this one has not.
fn remove_gone(gauges: &QueueGauges, known: &Known, now_known: &Known) {
    for (queue, (resources, info)) in known.iter() {
        let now = now_known.get(queue);
        remove_resources_gone(
            resources,
            now.map(|(r, _)| r),
            |resource| resource_labels(queue, resource),
            &[
                &gauges.quota,
                &gauges.used,
                &gauges.reserved,
                &gauges.borrowed,
                &gauges.lent,
            ],
        );
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(gauges: &QueueGauges) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("q_used", "", gauges.used.clone());
        registry.register("q_info", "", gauges.info.clone());
        registry.register("q_admitted", "", gauges.admitted_pods.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    fn info(queue: &str, cohort: &str) -> QueueInfoLabels {
        QueueInfoLabels {
            queue: queue.into(),
            cohort: cohort.into(),
            strategy: "BestEffortFIFO".into(),
        }
    }

    #[test]
    fn a_gone_queue_resource_or_cohort_loses_its_series_and_the_rest_stay() {
        let gauges = QueueGauges::default();
        for (queue, resource) in [("a", "cpu"), ("a", "memory"), ("b", "cpu")] {
            let l = QueueResourceLabels {
                queue: queue.into(),
                resource: resource.into(),
            };
            gauges.used.get_or_create(&l).set(1.5);
        }
        for q in ["a", "b"] {
            gauges
                .admitted_pods
                .get_or_create(&QueueLabels { queue: q.into() })
                .set(1);
        }
        gauges.info.get_or_create(&info("a", "c1")).set(1);
        gauges.info.get_or_create(&info("b", "")).set(1);
        let resources = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let before: Known = BTreeMap::from([
            (
                "a".to_string(),
                (resources(&["cpu", "memory"]), info("a", "c1")),
            ),
            ("b".to_string(), (resources(&["cpu"]), info("b", ""))),
        ]);
        // Queue a dropped memory from its quota and moved to cohort c2; queue b is gone.
        gauges.info.get_or_create(&info("a", "c2")).set(1);
        let after: Known =
            BTreeMap::from([("a".to_string(), (resources(&["cpu"]), info("a", "c2")))]);
        remove_gone(&gauges, &before, &after);
        let text = encoded(&gauges);
        assert!(
            text.contains(r#"q_used{queue="a",resource="cpu"} 1.5"#),
            "{text}"
        );
        assert!(!text.contains(r#"resource="memory""#), "{text}");
        assert!(!text.contains(r#"queue="b""#), "{text}");
        assert!(
            text.contains(r#"cohort="c2""#) && !text.contains(r#"cohort="c1""#),
            "{text}"
        );
    }
}
