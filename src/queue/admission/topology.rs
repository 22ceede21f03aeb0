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
//! - Data locality (`sluice.dev/data-pods` / `-claim`, `src/queue/data_locality.rs`): the nodes
//!   its data is on narrow them too (required: only there, or it waits with `DataNotPlaceable`;
//!   preferred: there when the gang fits, else as if it had not asked); a later pod of a started
//!   gang goes to its gang's data nodes first. The pods are pinned to the data nodes the gang
//!   may use (within its domain, when it asks for one too).

use std::cell::RefCell;

use super::arena::{Item, ItemKind, NONE};
use super::*;
use crate::queue::data_locality::{
    DataAsk, DataNodes, HOSTNAME_LABEL, nodes_annotation, split_nodes,
};
use crate::queue::topology::{
    NodeRoom, Placed, Rooms, Shortfall, Topology, TopologyAsk, domain_annotation, split_domain,
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

    /// Where the data of `namespace`'s `ask` was found (None: not looked up).
    fn data_nodes(&self, namespace: &str, ask: &DataAsk) -> Option<&'a DataNodes> {
        let nodes = self.nodes?;
        nodes.data.get(&(namespace.to_string(), ask.source.clone()))
    }
}

/// The nodes' room less what admitted pods pinned to a domain or to data nodes and not bound yet
/// take, and the members not created yet of started gangs pinned so.
fn held_rooms(snapshot: &Snapshot, nodes: &Topology) -> Rooms {
    let mut rooms = Rooms::new(nodes);
    for workload in &snapshot.workloads {
        let domain = workload_domain(workload, None);
        let data = workload_data_nodes(workload);
        if domain.is_none() && data.is_none() {
            continue;
        }
        let gang_ok = pin_filter(domain.as_deref(), data.as_deref());
        // A gang that has stopped holds no places.
        let stopped = !workload.has_started();
        for set in &workload.pod_sets {
            let mut admitted = 0usize;
            for pod in set.pods.iter().filter(|p| p.state == PodState::Admitted) {
                admitted += 1;
                let Some(t) = pod.topology.as_deref() else {
                    continue;
                };
                if !t.bound && (t.domain.is_some() || t.data_nodes.is_some()) {
                    let pod_ok = pin_filter(t.domain.as_deref(), t.data_nodes.as_deref());
                    rooms.hold_where(&pod_ok, &pod.requests);
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
                if !rooms.hold_where(&gang_ok, &set.per_pod) {
                    break;
                }
            }
        }
    }
    rooms
}

/// The nodes a pin allows: those of its domain (`<key>=<value>`) and, pinned beside its data,
/// those of its hostnames.
fn pin_filter<'p>(domain: Option<&'p str>, data: Option<&'p str>) -> impl Fn(&NodeRoom) -> bool {
    let domain = domain.and_then(split_domain);
    let hosts: Option<Vec<&str>> = data.map(|d| split_nodes(d).collect());
    move |n: &NodeRoom| {
        domain.is_none_or(|(k, v)| n.labels.get(k).is_some_and(|l| l == v))
            && hosts.as_ref().is_none_or(|h| {
                (n.labels.get(HOSTNAME_LABEL)).is_some_and(|l| h.contains(&l.as_str()))
            })
    }
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

/// The data nodes a started workload's pods were pinned to: its first admitted pod's.
fn workload_data_nodes(workload: &WorkloadSnapshot) -> Option<Arc<str>> {
    (workload.pod_sets.iter())
        .flat_map(|s| s.pods.iter())
        .filter(|p| p.state == PodState::Admitted)
        .find_map(|p| p.topology.as_deref()?.data_nodes.clone())
}

/// Whether a node may take an item's pods.
type NodeOk<'f> = &'f dyn Fn(&NodeRoom) -> bool;

/// What an item's pods ask for (the first pod that asks each).
struct Asks {
    topology: Option<TopologyAsk>,
    data: Option<DataAsk>,
}

/// Where an item goes: the nodes its demand was placed on, and what its pods are pinned to.
#[derive(Clone, Debug)]
pub(super) struct Pinned {
    placed: Placed,
    /// `<key>=<value>` of its topology domain.
    domain: Option<Arc<str>>,
    /// The hostnames of the data nodes it may use.
    data: Option<Arc<str>>,
}

impl<'a> QueuePass<'a> {
    fn pod_at(&self, r: &PodRef) -> &'a PodSnapshot {
        let snapshot = self.snapshot;
        &snapshot.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
    }

    /// The item's asks, and its demand: its pods' requests, then (a gang) one per member not
    /// created yet.
    fn demand(&self, item: &Item) -> Option<(Asks, Vec<&'a ResourceList>)> {
        let start = item.pods_start as usize;
        let pods = &self.arena.pods[start..start + item.pods_len as usize];
        let asks = Asks {
            topology: (pods.iter()).find_map(|r| self.pod_at(r).topology.as_ref()?.ask.clone()),
            data: (pods.iter()).find_map(|r| self.pod_at(r).topology.as_ref()?.data.clone()),
        };
        if asks.topology.is_none() && asks.data.is_none() {
            return None;
        }
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
        Some((asks, demand))
    }

    /// Whether a node may take the item's pods: their own constraints and their flavor's labels.
    fn node_filter(&self, item: &Item) -> impl Fn(&NodeRoom) -> bool + use<'a> {
        let start = item.pods_start as usize;
        let pods = &self.arena.pods[start..start + item.pods_len as usize];
        let snapshot = self.snapshot;
        let placements: Vec<&'a crate::queue::placement::Placement> = (pods.iter())
            .filter_map(|r| {
                let pod = &snapshot.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod];
                pod.placement.as_deref()
            })
            .collect();
        let flavor_labels =
            (self.queue.flavors.get(usize::from(item.flavor))).map(|f| &f.node_labels);
        move |n: &NodeRoom| {
            placements.iter().all(|p| p.matches_node(&n.labels))
                && flavor_labels.is_none_or(|l| l.iter().all(|(k, v)| n.labels.get(k) == Some(v)))
        }
    }

    /// One try at placing `demand` on the nodes `node_ok` accepts: within one domain when a
    /// topology is asked (the gang's `pinned` one first), else on those nodes. With `data`, the
    /// pods are pinned to the chosen domain's nodes `data` accepts as well.
    fn try_place(
        &self,
        (asks, demand): (&Asks, &[&'a ResourceList]),
        node_ok: &dyn Fn(&NodeRoom) -> bool,
        pinned_value: Option<&str>,
        data: Option<&dyn Fn(&NodeRoom) -> bool>,
    ) -> Result<Pinned, Shortfall> {
        let ok = |n: &NodeRoom| node_ok(n) && data.is_none_or(|d| d(n));
        let none = Shortfall {
            domains: 0,
            most: 0,
        };
        self.rooms
            .with(|rooms| {
                let (placed, domain) = match &asks.topology {
                    None => (rooms.place_on(demand, &ok)?, None),
                    Some(ask) => {
                        let mut found = rooms.place(&ask.key, demand, &ok, pinned_value);
                        if found.is_err() && pinned_value.is_some() && !ask.required {
                            found = rooms.place(&ask.key, demand, &ok, None);
                        }
                        let placed = found?;
                        let domain = (ask.key.clone(), placed.domain.clone());
                        (placed, Some(domain))
                    }
                };
                let data = data.map(|_| {
                    let in_domain = |n: &NodeRoom| {
                        (domain.as_ref()).is_none_or(|(k, v)| n.labels.get(k) == Some(v))
                    };
                    let hosts = (rooms.nodes().iter())
                        .filter(|n| ok(n) && in_domain(n))
                        .filter_map(|n| n.labels.get(HOSTNAME_LABEL).map(String::as_str));
                    Arc::from(nodes_annotation(hosts))
                });
                Ok(Pinned {
                    placed,
                    domain: domain.map(|(k, v)| Arc::from(domain_annotation(&k, &v))),
                    data,
                })
            })
            .unwrap_or(Err(none))
    }

    /// Where the item goes: Ok(Some) a domain or data nodes with room for it, Ok(None) no
    /// pinning (nothing asked, a preferred ask that fits nowhere, or a fill of a pinned gang:
    /// see [`Self::gang_pin`]), Err why a required ask fits nowhere.
    fn find_place(&self, item: &Item) -> Result<Option<Pinned>, WaitReason> {
        let Some((asks, demand)) = self.demand(item) else {
            return Ok(None);
        };
        let first = &self.arena.pods[item.pods_start as usize];
        let workload = &self.snapshot.workloads[first.workload];
        let later = item.reserve == NONE;
        let pinned = (asks.topology.as_ref())
            .filter(|_| later)
            .and_then(|ask| workload_domain(workload, Some(&ask.key)));
        let pinned_value = pinned.as_deref().and_then(split_domain).map(|(_, v)| v);
        let node_ok = self.node_filter(item);
        let wanted = (&asks, demand.as_slice());
        if let Some(data) = &asks.data {
            match self.beside_data(item, wanted, (&node_ok, pinned_value), data) {
                Ok(pinned) => return Ok(Some(pinned)),
                Err(reason) if data.required => return Err(reason),
                Err(_) => {}
            }
        }
        let Some(ask) = &asks.topology else {
            return Ok(None);
        };
        match self.try_place(wanted, &node_ok, pinned_value, None) {
            Ok(pinned) => Ok(Some(pinned)),
            Err(_) if !ask.required => Ok(None),
            Err(short) => Err(WaitReason::NoTopologyDomain {
                queue: self.queue.name.clone(),
                key: ask.key.clone(),
                pods: u32::try_from(demand.len()).unwrap_or(u32::MAX),
                most: short.most,
                domains: short.domains,
                pinned,
            }),
        }
    }

    /// The item placed on its data's nodes: a later pod of a started gang on its gang's data
    /// nodes first, then on the nodes its data is on now. Err why it fits on none.
    fn beside_data(
        &self,
        item: &Item,
        wanted: (&Asks, &[&'a ResourceList]),
        (node_ok, pinned_value): (NodeOk<'_>, Option<&str>),
        data: &DataAsk,
    ) -> Result<Pinned, WaitReason> {
        let first = &self.arena.pods[item.pods_start as usize];
        let workload = &self.snapshot.workloads[first.workload];
        let recorded = (item.reserve == NONE)
            .then(|| workload_data_nodes(workload))
            .flatten();
        let mut most = 0;
        if let Some(recorded) = recorded.as_deref() {
            let gang_ok = pin_filter(None, Some(recorded));
            match self.try_place(wanted, node_ok, pinned_value, Some(&gang_ok)) {
                Ok(pinned) => return Ok(pinned),
                Err(short) => most = short.most,
            }
        }
        let found = self.rooms.data_nodes(&workload.key.namespace, data);
        if let Some(found) = found.filter(|f| !f.nodes.is_empty()) {
            let on_data = |n: &NodeRoom| {
                found.nodes.contains(&n.name) && n.labels.contains_key(HOSTNAME_LABEL)
            };
            match self.try_place(wanted, node_ok, pinned_value, Some(&on_data)) {
                Ok(pinned) => return Ok(pinned),
                Err(short) => most = most.max(short.most),
            }
        }
        let missing = match found {
            None => Some("where it is has not been looked up yet".to_string()),
            Some(found) => found.missing.clone(),
        };
        Err(WaitReason::DataNotPlaceable {
            queue: self.queue.name.clone(),
            source: data.source.to_string(),
            nodes: (found.iter().flat_map(|f| f.nodes.iter().cloned())).collect(),
            room: most,
            pods: u32::try_from(wanted.1.len()).unwrap_or(u32::MAX),
            missing,
        })
    }

    /// The pins of the gang whose reserved member a fill takes the place of (its room was held
    /// with the gang): its domain and its data nodes, when it has either.
    fn gang_pin(&self, item: &Item) -> Option<(Option<String>, Option<Arc<str>>)> {
        if item.kind != ItemKind::Fill {
            return None;
        }
        let (asks, _) = self.demand(item)?;
        let first = self.arena.pods.get(item.pods_start as usize)?;
        let workload = &self.snapshot.workloads[first.workload];
        let domain = (asks.topology.as_ref()).and_then(|a| workload_domain(workload, Some(&a.key)));
        let data = asks.data.and_then(|_| workload_data_nodes(workload));
        (domain.is_some() || data.is_some()).then_some((domain, data))
    }

    /// An item that fits its quota and asks for a domain or its data's nodes but fits none waits
    /// (true), saying why: in a flavored queue, why per flavor (`flavors`: no flavor's nodes
    /// could hold it either). No preemption: evicting pods of the queue frees quota, not room on
    /// given nodes.
    pub(super) fn waits_for_domain(
        &mut self,
        p: &mut Progress,
        item: &Item,
        flavors: Option<&WaitReason>,
    ) -> bool {
        if !item.topology || self.placeable.take() == Some((item.pods_start, item.flavor)) {
            return false;
        }
        match self.plan_topology(item) {
            Ok(()) => false,
            Err(reason) => {
                self.waits(p, item, flavors.cloned().unwrap_or(reason));
                true
            }
        }
    }

    /// Before an item that fits its quota is taken: Err why it fits no domain (it waits).
    pub(super) fn plan_topology(&mut self, item: &Item) -> Result<(), WaitReason> {
        self.planned = None;
        if !item.topology || self.gang_pin(item).is_some() {
            return Ok(());
        }
        if let Some(pinned) = self.find_place(item)? {
            self.planned = Some((item.pods_start, pinned));
        }
        Ok(())
    }

    /// As the item is taken: its room taken (found again, since other queues of a cohort may
    /// have taken room since it was planned), its pods pinned there.
    pub(super) fn commit_topology(&mut self, item: &Item) {
        if !item.topology {
            return;
        }
        let start = item.pods_start as usize;
        let pods: Vec<PodRef> = self.arena.pods[start..start + item.pods_len as usize].to_vec();
        if let Some((domain, data)) = self.gang_pin(item) {
            self.pin(&pods, domain.map(Arc::from), data);
            return;
        }
        let planned = self.planned.take().filter(|(at, _)| *at == item.pods_start);
        let found = match self.find_place(item) {
            Ok(Some(pinned)) => Some(pinned),
            _ => planned.map(|(_, pinned)| pinned),
        };
        let (Some(pinned), Some((_, demand))) = (found, self.demand(item)) else {
            return;
        };
        self.rooms
            .with(|rooms| rooms.commit(&pinned.placed, &demand));
        self.pin(&pods, pinned.domain, pinned.data);
    }

    fn pin(&mut self, pods: &[PodRef], domain: Option<Arc<str>>, data: Option<Arc<str>>) {
        if let Some(domain) = domain {
            (self.domains).extend(pods.iter().map(|p| (*p, Arc::clone(&domain))));
        }
        if let Some(data) = data {
            (self.data_pins).extend(pods.iter().map(|p| (*p, Arc::clone(&data))));
        }
    }

    /// Hands the domains and data nodes the pass pinned pods to to the decisions.
    pub(super) fn record_domains(
        &mut self,
        domains: &mut HashMap<PodRef, Arc<str>>,
        data_nodes: &mut HashMap<PodRef, Arc<str>>,
    ) {
        domains.extend(self.domains.drain(..));
        data_nodes.extend(self.data_pins.drain(..));
    }
}

impl WaitReason {
    /// [`WaitReason::NoTopologyDomain`] and [`WaitReason::DataNotPlaceable`].
    pub(super) fn fmt_topology(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let WaitReason::DataNotPlaceable { .. } = self {
            return self.fmt_data(f);
        }
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

impl WaitReason {
    /// [`WaitReason::DataNotPlaceable`].
    fn fmt_data(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let WaitReason::DataNotPlaceable {
            queue,
            source,
            nodes,
            room,
            pods,
            missing,
        } = self
        else {
            return Ok(());
        };
        if nodes.is_empty() {
            let why = missing.as_deref().unwrap_or("no node found");
            return write!(
                f,
                "fits queue {queue} but no node holds its data ({source}): {why} (sluice.dev/data-locality: preferred would run it elsewhere)"
            );
        }
        const SHOWN: usize = 8;
        let mut listed = nodes
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if nodes.len() > SHOWN {
            listed.push_str(&format!(" and {} more", nodes.len() - SHOWN));
        }
        write!(
            f,
            "fits queue {queue} but its data ({source}) is on nodes {listed}; they have room for {room} of its {pods} pods"
        )
    }
}
