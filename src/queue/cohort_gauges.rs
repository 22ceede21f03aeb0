//! The per-cohort gauges (`sluice_cohort_*`): each cohort's pool (the sum of its queues' quotas),
//! what its queues use, reserve and borrow, what waits and since when. Kept from each queue's last
//! decided figures, so an incremental pass that decides only some queues of a cohort still sums
//! them all; a cohort without queues loses its series.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::metrics::{CohortGauges, CohortLabels, CohortResourceLabels};
use crate::queue::admission::{QueueSnapshot, QueueTally};
use crate::queue::series::{remove_resources_gone, resources_of, set_per_resource, set_timestamp};
use crate::resources::ResourceList;

/// One queue's share of its cohort's figures, as its last decided pass left them.
#[derive(Clone, Debug, Default, PartialEq)]
struct Share {
    cohort: String,
    quota: ResourceList,
    used: ResourceList,
    reserved: ResourceList,
    borrowed: ResourceList,
    pending_workloads: u32,
    pending_pods: u32,
    /// Creation (ms since the epoch) of the queue's oldest pod behind the gate.
    oldest: Option<i64>,
}

/// A cohort's sums.
#[derive(Clone, Debug, Default, PartialEq)]
struct Sums {
    quota: ResourceList,
    used: ResourceList,
    reserved: ResourceList,
    borrowed: ResourceList,
    pending_workloads: i64,
    pending_pods: i64,
    oldest: Option<i64>,
}

/// Per queue of a cohort, its share; per cohort, the resources it has series for.
type State = (BTreeMap<String, Share>, BTreeMap<String, BTreeSet<String>>);

#[derive(Default)]
pub(crate) struct CohortSeries {
    state: Mutex<State>,
}

impl CohortSeries {
    /// Updates the shares of the queues this pass decided (`decided`: queue, tally, oldest gated
    /// pod), forgets queues no longer in `queues`, and sets every cohort's gauges.
    pub(crate) fn record<'a>(
        &self,
        gauges: &CohortGauges,
        queues: &[QueueSnapshot],
        decided: impl IntoIterator<Item = (&'a QueueSnapshot, &'a QueueTally, Option<i64>)>,
    ) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (shares, known) = &mut *state;
        for (queue, tally, oldest) in decided {
            match &queue.cohort {
                Some(cohort) => {
                    shares.insert(
                        queue.name.clone(),
                        share(&cohort.name, queue, tally, oldest),
                    );
                }
                None => {
                    shares.remove(&queue.name);
                }
            }
        }
        let present: BTreeSet<&str> = queues.iter().map(|q| q.name.as_str()).collect();
        shares.retain(|name, _| present.contains(name.as_str()));
        let sums = sum_by_cohort(shares.values());
        let mut now_known = BTreeMap::new();
        for (cohort, sums) in &sums {
            now_known.insert(cohort.clone(), set(gauges, cohort, sums));
        }
        remove_gone(gauges, known, &now_known);
        *known = now_known;
    }
}

fn share(cohort: &str, queue: &QueueSnapshot, tally: &QueueTally, oldest: Option<i64>) -> Share {
    Share {
        cohort: cohort.to_string(),
        quota: queue.quota.clone(),
        used: tally.usage.clone(),
        reserved: tally.reserved.clone(),
        borrowed: tally.borrowed.clone(),
        pending_workloads: tally.pending_workloads,
        pending_pods: tally.pending_pods,
        oldest,
    }
}

/// Each cohort's sums over its queues' shares.
fn sum_by_cohort<'a>(shares: impl IntoIterator<Item = &'a Share>) -> BTreeMap<String, Sums> {
    let mut sums: BTreeMap<String, Sums> = BTreeMap::new();
    for s in shares {
        let sum = sums.entry(s.cohort.clone()).or_default();
        for (into, from) in [
            (&mut sum.quota, &s.quota),
            (&mut sum.used, &s.used),
            (&mut sum.reserved, &s.reserved),
            (&mut sum.borrowed, &s.borrowed),
        ] {
            for (resource, value) in &from.0 {
                into.add(resource, *value);
            }
        }
        sum.pending_workloads += i64::from(s.pending_workloads);
        sum.pending_pods += i64::from(s.pending_pods);
        sum.oldest = match (sum.oldest, s.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    sums
}

/// Sets one cohort's series; returns the resources it has series for.
fn set(gauges: &CohortGauges, cohort: &str, sums: &Sums) -> BTreeSet<String> {
    let resources = resources_of(&sums.quota, &sums.used);
    set_per_resource(
        &resources,
        |resource| resource_labels(cohort, resource),
        &[
            (&gauges.quota, &sums.quota),
            (&gauges.used, &sums.used),
            (&gauges.reserved, &sums.reserved),
            (&gauges.borrowed, &sums.borrowed),
        ],
    );
    let l = CohortLabels {
        cohort: cohort.to_string(),
    };
    gauges
        .pending_workloads
        .get_or_create(&l)
        .set(sums.pending_workloads);
    gauges.pending_pods.get_or_create(&l).set(sums.pending_pods);
    set_timestamp(&gauges.oldest_pending_timestamp, &l, sums.oldest);
    resources
}

fn resource_labels(cohort: &str, resource: &str) -> CohortResourceLabels {
    CohortResourceLabels {
        cohort: cohort.to_string(),
        resource: resource.to_string(),
    }
}

fn remove_gone(
    gauges: &CohortGauges,
    known: &BTreeMap<String, BTreeSet<String>>,
    now_known: &BTreeMap<String, BTreeSet<String>>,
) {
    for (cohort, resources) in known {
        let now = now_known.get(cohort);
        remove_resources_gone(
            resources,
            now,
            |resource| resource_labels(cohort, resource),
            &[
                &gauges.quota,
                &gauges.used,
                &gauges.reserved,
                &gauges.borrowed,
            ],
        );
        if now.is_none() {
            let l = CohortLabels {
                cohort: cohort.clone(),
            };
            gauges.pending_workloads.remove(&l);
            gauges.pending_pods.remove(&l);
            gauges.oldest_pending_timestamp.remove(&l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(cores: i64) -> ResourceList {
        let mut l = ResourceList::new();
        l.add("cpu", cores * 1000);
        l
    }

    fn queue(name: &str, cohort: Option<&str>, quota: i64) -> QueueSnapshot {
        QueueSnapshot {
            name: name.into(),
            quota: cpu(quota),
            strategy: crate::api::QueueingStrategy::BestEffortFIFO,
            preemption: crate::queue::admission::PreemptionPolicy::default(),
            cohort: cohort.map(crate::queue::admission::CohortMembership::new),
            flavors: Vec::new(),
        }
    }

    fn tally(used: i64, pending_pods: u32) -> QueueTally {
        QueueTally {
            usage: cpu(used),
            pending_pods,
            pending_workloads: u32::from(pending_pods > 0),
            ..QueueTally::default()
        }
    }

    fn encoded(gauges: &CohortGauges) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        crate::metrics::register_cohort_gauges(&mut registry, gauges);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn a_cohort_sums_its_queues_even_those_this_pass_did_not_decide() {
        let gauges = CohortGauges::default();
        let series = CohortSeries::default();
        let queues = vec![
            queue("a", Some("research"), 4),
            queue("b", Some("research"), 6),
            queue("solo", None, 8),
        ];
        let (ta, tb, ts) = (tally(5, 0), tally(2, 3), tally(8, 1));
        series.record(
            &gauges,
            &queues,
            [
                (&queues[0], &ta, None),
                (&queues[1], &tb, Some(7_000)),
                (&queues[2], &ts, Some(1_000)),
            ],
        );
        let text = encoded(&gauges);
        assert!(
            text.contains("sluice_cohort_quota{cohort=\"research\",resource=\"cpu\"} 10.0"),
            "{text}"
        );
        assert!(
            text.contains("sluice_cohort_used{cohort=\"research\",resource=\"cpu\"} 7.0"),
            "{text}"
        );
        assert!(
            text.contains("sluice_cohort_pending_pods{cohort=\"research\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "sluice_cohort_oldest_pending_timestamp_seconds{cohort=\"research\"} 7.0"
            ),
            "{text}"
        );
        assert!(
            !text.contains("cohort=\"\""),
            "a queue without a cohort is in none: {text}"
        );
        // Only b decided next: a's share stays.
        let tb = tally(1, 0);
        series.record(&gauges, &queues, [(&queues[1], &tb, None)]);
        let text = encoded(&gauges);
        assert!(
            text.contains("sluice_cohort_used{cohort=\"research\",resource=\"cpu\"} 6.0"),
            "{text}"
        );
        assert!(
            !text.contains("sluice_cohort_oldest_pending_timestamp_seconds{"),
            "{text}"
        );
        // Both queues gone: the cohort's series go.
        series.record(&gauges, &queues[2..], []);
        let text = encoded(&gauges);
        assert!(!text.contains("research"), "{text}");
    }
}
