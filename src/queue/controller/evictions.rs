//! Eviction orders: the pods a pass takes back, grouped per preemptor with what it needs, handed to
//! the [`Evictor`](crate::queue::evictor::Evictor) off the pass.

use std::collections::{BTreeSet, HashMap};

use kube::Resource;
use tokio::time::Instant;

use super::Controller;
use super::statuses::pending_requests;
use crate::queue::admission::Decisions;
use crate::queue::evictor::{self};
use crate::queue::snapshot::Built;

impl Controller {
    /// Sends this pass's evictions ([`Evictor::start`], while the term is valid) and notes the
    /// preemptors it admits.
    pub(super) fn start_evictions(&self, built: &Built, decisions: &Decisions, now: Instant) {
        let admitted: BTreeSet<usize> = decisions.admit.iter().map(|r| r.workload).collect();
        self.evictor
            .admitted(admitted.iter().map(|w| &built.snapshot.workloads[*w].key));
        self.evictor.start(eviction_orders(built, decisions), now);
    }
}

/// This pass's evictions per preemptor (in the order decided), with what sending them, their
/// events and metrics need.
pub(crate) fn eviction_orders(built: &Built, decisions: &Decisions) -> Vec<evictor::Order> {
    let reference = |w: usize| built.workloads[w].as_ref().map(|d| d.object_ref(&()));
    let mut orders: Vec<evictor::Order> = Vec::new();
    let mut position: HashMap<usize, usize> = HashMap::new();
    for eviction in &decisions.evict {
        let r = eviction.victim;
        let pod = built.pods[r.workload][r.pod_set][r.pod].clone();
        let Some(uid) = pod.metadata.uid.clone() else {
            continue;
        };
        let o = *position.entry(eviction.preemptor).or_insert_with(|| {
            let preemptor = &built.snapshot.workloads[eviction.preemptor];
            orders.push(evictor::Order {
                preemptor: preemptor.key.clone(),
                preemptor_ref: reference(eviction.preemptor),
                queue: preemptor.queue.clone(),
                reason: format!("{:?}", eviction.reason),
                needed: pending_requests(preemptor),
                victims: Vec::new(),
            });
            orders.len() - 1
        });
        orders[o].victims.push(evictor::Victim {
            pod,
            uid,
            workload: built.snapshot.workloads[r.workload].key.clone(),
            workload_ref: reference(r.workload),
        });
    }
    orders
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::admission::{PodState, WorkloadSnapshot};
    use crate::queue::pod_cache::CachedPod;
    use crate::queue::snapshot;
    use crate::resources::ResourceList;
    use std::collections::HashSet;
    use std::sync::Arc;

    use crate::queue::admission::{Eviction, EvictionReason, PodRef, PodSnapshot, Snapshot};
    fn workload(
        name: &str,
        pods: &[(&str, PodState, i64)],
    ) -> (WorkloadSnapshot, Vec<Arc<CachedPod>>) {
        let snapshots = pods
            .iter()
            .map(|(pod, state, cpu)| {
                let mut requests = ResourceList::new();
                requests.add("cpu", *cpu);
                requests.add("pods", 1000);
                PodSnapshot::plain(*pod, Arc::new(requests), *state, 0)
            })
            .collect();
        let objects = pods
            .iter()
            .map(|(pod, _, _)| {
                let uid = (!pod.starts_with("no-uid")).then(|| format!("uid-{pod}"));
                Arc::new(CachedPod {
                    metadata: kube::api::ObjectMeta {
                        name: Some(pod.to_string()),
                        namespace: Some("ns".into()),
                        uid,
                        ..Default::default()
                    },
                    ..CachedPod::default()
                })
            })
            .collect();
        let snapshot = crate::queue::admission_tests::one_set_workload(
            name,
            "main",
            ResourceList::new(),
            1,
            snapshots,
        );
        (snapshot, objects)
    }

    #[test]
    fn evictions_are_grouped_per_preemptor_with_what_it_needs() {
        let parts = [
            workload(
                "low-a",
                &[
                    ("a0", PodState::Admitted, 1000),
                    ("no-uid", PodState::Admitted, 1000),
                ],
            ),
            workload("low-b", &[("b0", PodState::Admitted, 1000)]),
            workload(
                "urgent",
                &[
                    ("u0", PodState::Gated, 1500),
                    ("u1", PodState::Gated, 500),
                    ("u2", PodState::Admitted, 8000),
                ],
            ),
        ];
        let built = Built {
            snapshot: Snapshot {
                queues: Vec::new(),
                workloads: parts.iter().map(|(w, _)| w.clone()).collect(),
            },
            pods: parts.iter().map(|(_, p)| vec![p.clone()]).collect(),
            workloads: vec![None, None, None],
            problems: Vec::new(),
            left_behind: vec![0, 0, 0],
        };
        let evict = |workload: usize, pod: usize| Eviction {
            victim: PodRef {
                workload,
                pod_set: 0,
                pod,
            },
            preemptor: 2,
            reason: EvictionReason::InQueuePriority,
        };
        let decisions = Decisions {
            evict: vec![evict(0, 0), evict(0, 1), evict(1, 0)],
            ..Decisions::default()
        };
        let orders = eviction_orders(&built, &decisions);
        assert_eq!(orders.len(), 1);
        let order = &orders[0];
        assert_eq!(order.preemptor.to_string(), "ns/urgent");
        assert_eq!(
            (
                order.queue.as_str(),
                order.reason.as_str(),
                order.needed.as_str()
            ),
            ("q", "InQueuePriority", "2 cpu")
        );
        let victims: Vec<(String, &str)> = order
            .victims
            .iter()
            .map(|v| (v.workload.to_string(), v.uid.as_str()))
            .collect();
        // A pod without uid cannot be evicted safely: left out.
        assert_eq!(
            victims,
            vec![("ns/low-a".into(), "uid-a0"), ("ns/low-b".into(), "uid-b0")]
        );
    }

    #[test]
    fn pods_a_disruption_budget_protects_are_marked_for_the_pass() {
        let (snapshot, objects) = workload(
            "low",
            &[
                ("a0", PodState::Admitted, 1000),
                ("a1", PodState::Admitted, 1000),
            ],
        );
        let mut built = Built {
            snapshot: Snapshot {
                queues: Vec::new(),
                workloads: vec![snapshot],
            },
            pods: vec![vec![objects]],
            workloads: vec![None],
            problems: Vec::new(),
            left_behind: vec![0],
        };
        snapshot::mark_eviction_blocked(&mut built, &HashSet::from(["uid-a1".to_string()]));
        let marks: Vec<bool> = built.snapshot.workloads[0].pod_sets[0]
            .pods
            .iter()
            .map(|p| p.eviction_blocked)
            .collect();
        assert_eq!(marks, vec![false, true]);
    }
}
