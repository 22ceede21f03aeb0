//! The scavenger capacity, as a pure function of the nodes and pods: the allocatable of Ready,
//! schedulable nodes × the threshold, minus the requests of every running or admitted ordinary
//! pod. What scavengers may use is that, less what they use already.

use crate::resources::ResourceList;

/// What the capacity needs of a node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    pub allocatable: ResourceList,
    /// Its Ready condition is True.
    pub ready: bool,
    /// Not cordoned (`spec.unschedulable`) and without a NoSchedule/NoExecute taint.
    pub schedulable: bool,
}

/// What the capacity needs of a pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodFacts {
    /// Its requests as the scheduler counts them (equal lists are one shared copy:
    /// `queue::pod_cache::shared_requests`).
    pub requests: std::sync::Arc<ResourceList>,
    /// A scavenger pod: created with the scavenger PriorityClass (immutable, and only a
    /// ScavengerJob's Job may create such a pod: the scavenger webhook refuses anyone else).
    pub scavenger: bool,
    /// Holds or is about to hold room: not Succeeded or Failed, and bound to a node or not gated
    /// (a gated pod waits for its queue and holds nothing yet).
    pub holds_room: bool,
    /// The ScavengerJob it belongs to (the value of its `sluice.dev/scavenger-job` label), for
    /// scavenger pods.
    pub scavenger_job: Option<String>,
}

/// The cluster's scavenger capacity at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capacity {
    /// Allocatable of the Ready, schedulable nodes.
    pub allocatable: ResourceList,
    /// The threshold, e.g. 0.7.
    pub threshold: f64,
    /// `allocatable × threshold`, per resource.
    pub limit: ResourceList,
    /// Requests of running or admitted ordinary (non-scavenger) pods.
    pub ordinary: ResourceList,
    /// Requests of scavenger pods that hold room.
    pub in_use: ResourceList,
}

impl Capacity {
    /// What scavengers may use in all: `limit − ordinary`, per resource of `limit`, never below 0.
    pub fn for_scavengers(&self) -> ResourceList {
        let mut out = ResourceList::new();
        for (name, limit) in &self.limit.0 {
            out.0
                .insert(name.clone(), (limit - self.ordinary.get(name)).max(0));
        }
        out
    }

    /// What is left for more scavengers: `for_scavengers − in_use`, never below 0.
    pub fn free(&self) -> ResourceList {
        let mut out = self.for_scavengers();
        for (name, value) in out.0.iter_mut() {
            *value = (*value - self.in_use.get(name)).max(0);
        }
        out
    }

    /// Whether `demand` fits in what is left. A resource no node offers never fits.
    pub fn fits(&self, demand: &ResourceList) -> bool {
        fits_within(demand, &self.free())
    }

    /// The resources on which scavengers use more than they may, with the excess. Only resources
    /// the nodes offer count (a pod could not be scheduled on another).
    pub fn over(&self) -> ResourceList {
        let allowed = self.for_scavengers();
        let mut out = ResourceList::new();
        for (name, used) in &self.in_use.0 {
            let Some(allowed) = allowed.0.get(name) else {
                continue;
            };
            let excess = used - allowed;
            if *used > 0 && excess > 0 {
                out.0.insert(name.clone(), excess);
            }
        }
        out
    }
}

/// Whether every nonzero entry of `demand` is within `room` (a resource missing from `room` has none).
pub fn fits_within(demand: &ResourceList, room: &ResourceList) -> bool {
    demand
        .0
        .iter()
        .all(|(name, want)| *want <= 0 || *want <= room.get(name))
}

/// Scales milli-units by the threshold, rounding down (never more than the threshold allows).
fn scaled(value: i64, threshold: f64) -> i64 {
    let product = value as f64 * threshold;
    if product >= i64::MAX as f64 {
        i64::MAX
    } else {
        product.floor().max(0.0) as i64
    }
}

/// The capacity of `nodes` and `pods` at `threshold` (clamped to 0..=1). Pure.
pub fn capacity<'a>(
    nodes: &[NodeFacts],
    pods: impl IntoIterator<Item = &'a PodFacts>,
    threshold: f64,
) -> Capacity {
    let threshold = if threshold.is_finite() {
        threshold.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mut allocatable = ResourceList::new();
    for node in nodes.iter().filter(|n| n.ready && n.schedulable) {
        allocatable.add_all(&node.allocatable);
    }
    let limit = ResourceList(
        allocatable
            .0
            .iter()
            .map(|(name, value)| (name.clone(), scaled(*value, threshold)))
            .collect(),
    );
    let mut ordinary = ResourceList::new();
    let mut in_use = ResourceList::new();
    for pod in pods.into_iter().filter(|p| p.holds_room) {
        if pod.scavenger {
            in_use.add_all(&pod.requests);
        } else {
            ordinary.add_all(&pod.requests);
        }
    }
    Capacity {
        allocatable,
        threshold,
        limit,
        ordinary,
        in_use,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn list(pairs: &[(&str, i64)]) -> ResourceList {
        ResourceList(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect())
    }

    fn node(cpu: i64, ready: bool, schedulable: bool) -> NodeFacts {
        NodeFacts {
            allocatable: list(&[("cpu", cpu), ("memory", cpu * 1000)]),
            ready,
            schedulable,
        }
    }

    fn pod(cpu: i64, scavenger: bool, holds_room: bool) -> PodFacts {
        PodFacts {
            requests: list(&[("cpu", cpu), ("pods", 1000)]).into(),
            scavenger,
            holds_room,
            scavenger_job: None,
        }
    }

    #[test]
    fn only_ready_schedulable_nodes_count_and_the_threshold_scales_them() {
        let nodes = [
            node(4000, true, true),
            node(4000, true, true),
            node(4000, false, true),
            node(4000, true, false),
        ];
        let c = capacity(&nodes, &[], 0.7);
        assert_eq!(c.allocatable.get("cpu"), 8000);
        assert_eq!(c.limit.get("cpu"), 5600);
        assert_eq!(c.free().get("cpu"), 5600);
    }

    #[test]
    fn ordinary_pods_that_hold_room_shrink_it_and_gated_or_ended_ones_do_not() {
        let nodes = [node(10_000, true, true)];
        let pods = [
            pod(2000, false, true),
            pod(3000, false, false),
            pod(1000, true, true),
            pod(500, true, false),
        ];
        let c = capacity(&nodes, &pods, 0.7);
        assert_eq!(c.ordinary.get("cpu"), 2000);
        assert_eq!(c.in_use.get("cpu"), 1000);
        assert_eq!(c.for_scavengers().get("cpu"), 5000);
        assert_eq!(c.free().get("cpu"), 4000);
        assert!(c.fits(&list(&[("cpu", 4000)])));
        assert!(!c.fits(&list(&[("cpu", 4001)])));
        assert!(c.over().is_empty());
    }

    #[test]
    fn a_resource_no_node_offers_never_fits() {
        let c = capacity(&[node(10_000, true, true)], &[], 1.0);
        assert!(!c.fits(&list(&[("nvidia.com/gpu", 1000)])));
        assert!(c.fits(&list(&[("nvidia.com/gpu", 0), ("cpu", 1)])));
    }

    #[test]
    fn scavengers_above_what_ordinary_work_leaves_are_over_by_the_excess() {
        let nodes = [node(10_000, true, true)];
        let pods = [pod(6000, false, true), pod(3000, true, true)];
        let c = capacity(&nodes, &pods, 0.7);
        assert_eq!(c.for_scavengers().get("cpu"), 1000);
        assert_eq!(c.over().get("cpu"), 2000);
        assert_eq!(c.free().get("cpu"), 0);
        // Ordinary work above the threshold leaves scavengers nothing, never a negative amount.
        let c = capacity(&nodes, &[pod(9000, false, true)], 0.7);
        assert_eq!(c.for_scavengers().get("cpu"), 0);
    }

    #[test]
    fn hostile_thresholds_are_clamped() {
        let nodes = [node(1000, true, true)];
        assert_eq!(capacity(&nodes, &[], 7.0).limit.get("cpu"), 1000);
        assert_eq!(capacity(&nodes, &[], -1.0).limit.get("cpu"), 0);
        assert_eq!(capacity(&nodes, &[], f64::NAN).limit.get("cpu"), 0);
        let huge = [NodeFacts {
            allocatable: list(&[("cpu", i64::MAX)]),
            ready: true,
            schedulable: true,
        }];
        assert_eq!(capacity(&huge, &[], 1.0).limit.get("cpu"), i64::MAX);
    }
}
