//! Topology-aware gangs in the pass: an item some of whose pods ask for a topology domain
//! (`sluice.dev/topology-required` / `-preferred`) is admitted, once it fits its quota, only
//! into one domain of the node label they name whose nodes have room for all of it
//! ([`crate::queue::topology::Rooms::place`]); its pods are pinned there. The nodes' room is
//! shared by every queue of the pass ([`SharedRooms`]) and built only when the first such item
//! comes up: a pass with no topology ask does no work per node.
//!
//! - A gang that has not started: its gated pods and its members not created yet (their room
//!   is held in the domain too) in one domain.
//! - A later pod of a started workload: its gang's domain (required: only there; preferred:
//!   there first); a pod filling a reserved member goes to the gang's domain without a check
//!   (its room was held with the gang).
//! - A pod's own nodeSelector and required node affinity, and its flavor's node labels, narrow
//!   the nodes, so a pod is never charged to a domain it would not run in.

use std::cell::RefCell;

use super::arena::{Item, ItemKind, NONE};
use super::*;
use crate::queue::topology::{
    NodeRoom, Placed, Rooms, Topology, TopologyAsk, domain_annotation, split_domain,
};

/// At most this many members not created yet of one gang are placed (a gang's minimum is the
/// user's figure; beyond this its quota reservation alone answers).
const MAX_UNCREATED: usize = 10_000;

/// The nodes' room for one pass, built at the first use.
pub(super) struct SharedRooms<'a> {
    snapshot: &'a Snapshot,
    nodes: Option<&'a Topology>,
    rooms: RefCell<Option<Rooms>>,
}

impl<'a> SharedRooms<'a> {
    pub(super) fn new(snapshot: &'a Snapshot, nodes: Option<&'a Topology>) -> Self {
        SharedRooms {
            snapshot,
            nodes,
            rooms: RefCell::new(None),
        }
    }

    /// Runs `f` on the rooms (None without nodes).
    fn with<R>(&self, f: impl FnOnce(&mut Rooms) -> R) -> Option<R> {
        let nodes = self.nodes?;
        let mut rooms = self.rooms.borrow_mut();
        let rooms = rooms.get_or_insert_with(|| held_rooms(self.snapshot, nodes));
        Some(f(rooms))
    }
}

/// The nodes' room less what admitted pods pinned to a domain and not bound yet take, and the
/// members not created yet of started gangs pinned to a domain.
fn held_rooms(snapshot: &Snapshot, nodes: &Topology) -> Rooms {
    let mut rooms = Rooms::new(nodes);
    for workload in &snapshot.workloads {
        let Some(domain) = workload_domain(workload, None) else {
            continue;
        };
        let Some((key, value)) = split_domain(&domain) else {
            continue;
        };
        // A gang that has stopped holds no places.
        let stopped = !workload.has_started();
        for set in &workload.pod_sets {
            let mut admitted = 0usize;
            for pod in set.pods.iter().filter(|p| p.state == PodState::Admitted) {
                admitted += 1;
                let Some(t) = pod.topology.as_deref() else {
                    continue;
                };
                if let (false, Some((k, v))) = (t.bound, t.domain.as_deref().and_then(split_domain))
                {
                    rooms.hold(k, v, &pod.requests);
                }
            }
            let missing = if stopped {
                0
            } else {
                (set.min_count as usize)
                    .saturating_sub(admitted)
                    .min(MAX_UNCREATED)
            };
            for _ in 0..missing {
                if !rooms.hold(key, value, &set.per_pod) {
                    break;
                }
            }
        }
    }
    rooms
}

/// The domain a started workload's pods were pinned to (of `key` when given): its first
/// admitted pod's that has one.
fn workload_domain(workload: &WorkloadSnapshot, key: Option<&str>) -> Option<String> {
    (workload.pod_sets.iter())
        .flat_map(|s| s.pods.iter())
        .filter(|p| p.state == PodState::Admitted)
        .filter_map(|p| p.topology.as_deref()?.domain.clone())
        .find(|d| key.is_none_or(|k| split_domain(d).is_some_and(|(dk, _)| dk == k)))
}

impl<'a> QueuePass<'a> {
    fn pod_at(&self, r: &PodRef) -> &'a PodSnapshot {
        let snapshot = self.snapshot;
        &snapshot.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
    }

    /// The item's ask, and its demand: its pods' requests, then (a gang) one per member not
    /// created yet.
    fn demand(&self, item: &Item) -> Option<(TopologyAsk, Vec<&'a ResourceList>)> {
        let start = item.pods_start as usize;
        let pods = &self.arena.pods[start..start + item.pods_len as usize];
        let ask = (pods.iter()).find_map(|r| self.pod_at(r).topology.as_ref()?.ask.clone())?;
        let mut demand: Vec<&'a ResourceList> =
            pods.iter().map(|r| &*self.pod_at(r).requests).collect();
        let first = pods.first()?;
        if item.reserve != NONE {
            let snapshot = self.snapshot;
            for (s, set) in snapshot.workloads[first.workload]
                .pod_sets
                .iter()
                .enumerate()
            {
                let created = pods.iter().filter(|r| r.pod_set == s).count();
                let missing = (set.min_count as usize).saturating_sub(created);
                demand.extend(std::iter::repeat_n(
                    &set.per_pod,
                    missing.min(MAX_UNCREATED),
                ));
            }
        }
        Some((ask, demand))
    }

    /// Where the item goes: Ok(Some) a domain with room for it, Ok(None) no pinning (nothing
    /// asked, a preferred ask that fits nowhere, or a fill of a pinned gang: see
    /// [`Self::gang_domain`]), Err why a required ask fits nowhere.
    fn find_domain(&self, item: &Item) -> Result<Option<Placed>, WaitReason> {
        let Some((ask, demand)) = self.demand(item) else {
            return Ok(None);
        };
        let start = item.pods_start as usize;
        let pods = &self.arena.pods[start..start + item.pods_len as usize];
        let pinned = (item.reserve == NONE)
            .then(|| workload_domain(&self.snapshot.workloads[pods[0].workload], Some(&ask.key)))
            .flatten();
        let pinned_value = pinned.as_deref().and_then(split_domain).map(|(_, v)| v);
        let placements: Vec<_> = (pods.iter())
            .filter_map(|r| self.pod_at(r).placement.as_deref())
            .collect();
        let flavor_labels =
            (self.queue.flavors.get(usize::from(item.flavor))).map(|f| &f.node_labels);
        let node_ok = |n: &NodeRoom| {
            placements.iter().all(|p| p.matches_node(&n.labels))
                && flavor_labels.is_none_or(|l| l.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
        };
        let place = |only: Option<&str>| {
            self.rooms
                .with(|rooms| rooms.place(&ask.key, &demand, &node_ok, only))
                .unwrap_or(Err(crate::queue::topology::Shortfall {
                    domains: 0,
                    most: 0,
                }))
        };
        let mut found = place(pinned_value);
        if found.is_err() && pinned_value.is_some() && !ask.required {
            found = place(None);
        }
        match found {
            Ok(placed) => Ok(Some(placed)),
            Err(_) if !ask.required => Ok(None),
            Err(short) => Err(WaitReason::NoTopologyDomain {
                queue: self.queue.name.clone(),
                key: ask.key,
                pods: u32::try_from(demand.len()).unwrap_or(u32::MAX),
                most: short.most,
                domains: short.domains,
                pinned,
            }),
        }
    }

    /// The domain of the gang whose reserved member a fill takes the place of (its room was held
    /// with the gang).
    fn gang_domain(&self, item: &Item) -> Option<String> {
        if item.kind != ItemKind::Fill {
            return None;
        }
        let (ask, _) = self.demand(item)?;
        let first = self.arena.pods.get(item.pods_start as usize)?;
        workload_domain(&self.snapshot.workloads[first.workload], Some(&ask.key))
    }

    /// An item that fits its quota and asks for a domain but fits none waits (true), saying why.
    /// No preemption: evicting pods of the queue frees quota, not room in one domain.
    pub(super) fn waits_for_domain(&mut self, p: &mut Progress, item: &Item) -> bool {
        if !item.topology {
            return false;
        }
        match self.plan_topology(item) {
            Ok(()) => false,
            Err(reason) => {
                self.waits(p, item, reason);
                true
            }
        }
    }

    /// Before an item that fits its quota is taken: Err why it fits no domain (it waits).
    pub(super) fn plan_topology(&mut self, item: &Item) -> Result<(), WaitReason> {
        self.planned = None;
        if !item.topology || self.gang_domain(item).is_some() {
            return Ok(());
        }
        if let Some(placed) = self.find_domain(item)? {
            self.planned = Some((item.pods_start, placed));
        }
        Ok(())
    }

    /// As the item is taken: its domain's room taken (found again, since other queues of a
    /// cohort may have taken room since it was planned), its pods pinned there.
    pub(super) fn commit_topology(&mut self, item: &Item) {
        if !item.topology {
            return;
        }
        let start = item.pods_start as usize;
        let pods: Vec<PodRef> = self.arena.pods[start..start + item.pods_len as usize].to_vec();
        if let Some(domain) = self.gang_domain(item) {
            let domain: Arc<str> = Arc::from(domain);
            self.domains
                .extend(pods.iter().map(|p| (*p, Arc::clone(&domain))));
            return;
        }
        let planned = self.planned.take().filter(|(at, _)| *at == item.pods_start);
        let placed = match self.find_domain(item) {
            Ok(Some(placed)) => Some(placed),
            _ => planned.map(|(_, placed)| placed),
        };
        let (Some(placed), Some((ask, demand))) = (placed, self.demand(item)) else {
            return;
        };
        self.rooms.with(|rooms| rooms.commit(&placed, &demand));
        let domain: Arc<str> = Arc::from(domain_annotation(&ask.key, &placed.domain));
        self.domains
            .extend(pods.iter().map(|p| (*p, Arc::clone(&domain))));
    }

    /// Hands the domains the pass pinned pods to to the decisions.
    pub(super) fn record_domains(&mut self, domains: &mut HashMap<PodRef, Arc<str>>) {
        domains.extend(self.domains.drain(..));
    }
}

impl WaitReason {
    /// [`WaitReason::NoTopologyDomain`].
    pub(super) fn fmt_topology(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let WaitReason::NoTopologyDomain {
            queue,
            key,
            pods,
            most,
            domains,
            pinned,
        } = self
        else {
            return Ok(());
        };
        match pinned {
            Some(domain) => write!(
                f,
                "fits queue {queue} but its gang's domain {domain} has no room for it (sluice.dev/topology-required keeps the gang in one {key})"
            ),
            None if *domains == 0 => write!(
                f,
                "fits queue {queue} but no node its pods may run on has the label {key} (asked by sluice.dev/topology-required): label the nodes, or ask with sluice.dev/topology-preferred"
            ),
            None => write!(
                f,
                "fits queue {queue} but no single {key} has room for its {pods} pods; the most any {key} has room for is {most} (of {domains} {key} values its pods may run in)"
            ),
        }
    }
}
