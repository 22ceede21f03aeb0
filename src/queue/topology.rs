//! Topology-aware gangs: a workload may ask that its gang run within one domain of a node label
//! (a zone, a rack, a host): `sluice.dev/topology-required: <label key>` (or `-preferred`) on its
//! pods. Admission then checks the domain's real room, node by node: each node's allocatable less
//! the requests of the governed pods bound to it and of those admitted to the domain but not
//! bound yet, and places the gang's pods first-fit (largest first) so that no node and no domain
//! is over-filled. Pure: the controller builds a [`Topology`] from its Node watch; the admission
//! pass asks [`Rooms::place`] and [`Rooms::commit`]s what it admits.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::Node;

use crate::api::{TOPOLOGY_PREFERRED_ANNOTATION, TOPOLOGY_REQUIRED_ANNOTATION};
use crate::queue::data_locality::{DataNodes, DataSource};
use crate::resources::{ResourceList, parse_quantity};

/// What a pod asks for: its gang in one domain of the node label `key`, or else no admission
/// (`required`), or else admission without pinning (preferred).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyAsk {
    pub key: String,
    pub required: bool,
}

impl TopologyAsk {
    /// The ask a pod's annotations make (required wins over preferred). Err: the key is not a
    /// valid label key; the message says which annotation and what to do.
    pub fn of(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Option<TopologyAsk>, String> {
        let Some(annotations) = annotations else {
            return Ok(None);
        };
        for (name, required) in [
            (TOPOLOGY_REQUIRED_ANNOTATION, true),
            (TOPOLOGY_PREFERRED_ANNOTATION, false),
        ] {
            if let Some(key) = annotations.get(name) {
                let key = key.trim();
                check_label_key(key).map_err(|why| {
                    format!(
                        "annotation {name}: {key:?} is not a node label key ({why}); set it to the node label whose values are the domains, e.g. topology.kubernetes.io/zone or kubernetes.io/hostname"
                    )
                })?;
                return Ok(Some(TopologyAsk {
                    key: key.to_string(),
                    required,
                }));
            }
        }
        Ok(None)
    }
}

pub use crate::queue::placement::check_label_key;

/// The value of `sluice.dev/topology-domain` for a domain: `<key>=<value>`.
pub fn domain_annotation(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// The key and value of a `sluice.dev/topology-domain` annotation.
pub fn split_domain(annotation: &str) -> Option<(&str, &str)> {
    annotation.split_once('=')
}

/// One schedulable node: its labels and its room (allocatable less what is bound to it).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRoom {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub free: ResourceList,
}

/// The nodes' room as the controller sees it (no pinned-but-unbound pod subtracted yet).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    pub nodes: Vec<NodeRoom>,
    /// Where the data of each (namespace, data ask) of the gated pods is (see
    /// `src/queue/data_locality.rs`); an ask missing here has no data nodes found.
    pub data: HashMap<(String, DataSource), DataNodes>,
}

impl Topology {
    /// The room of each schedulable node: its allocatable less the requests of the pods `bound`
    /// to it (node name, requests). An unreadable quantity counts as no room.
    pub fn from_nodes<'a>(
        nodes: &[std::sync::Arc<Node>],
        bound: impl Iterator<Item = (&'a str, &'a ResourceList)>,
    ) -> Topology {
        let mut rooms: Vec<NodeRoom> = nodes
            .iter()
            .filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            })
            .filter_map(|n| {
                let allocatable = n.status.as_ref()?.allocatable.as_ref()?;
                let free = ResourceList(
                    allocatable
                        .iter()
                        .filter_map(|(r, q)| Some((r.clone(), parse_quantity(&q.0).ok()?)))
                        .collect(),
                );
                Some(NodeRoom {
                    name: n.metadata.name.clone()?,
                    labels: n.metadata.labels.clone().unwrap_or_default(),
                    free,
                })
            })
            .collect();
        rooms.sort_by(|a, b| a.name.cmp(&b.name));
        for (node, requests) in bound {
            if let Ok(i) = rooms.binary_search_by(|r| r.name.as_str().cmp(node)) {
                subtract(&mut rooms[i].free, requests);
            }
        }
        Topology {
            nodes: rooms,
            data: HashMap::new(),
        }
    }
}

/// Where a gang goes: its domain, and the node each of its pods (in the order given) fits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub domain: String,
    pub nodes: Vec<usize>,
}

/// Why a gang fits no domain: how many domains were tried and the most of its pods any held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub domains: u32,
    pub most: u32,
}

/// The nodes' room during a pass: what the pass admits into a domain is taken off its nodes.
#[derive(Clone, Debug, Default)]
pub struct Rooms {
    pub nodes: Vec<NodeRoom>,
    /// Per label key asked for: its domains (value, nodes), built at the key's first use.
    domains: HashMap<String, Vec<(String, Vec<usize>)>>,
}

impl Rooms {
    pub fn new(topology: &Topology) -> Rooms {
        Rooms {
            nodes: topology.nodes.clone(),
            domains: HashMap::new(),
        }
    }

    /// The domains of `key`: each value and the nodes that carry it, by value.
    fn domains_of(&mut self, key: &str) -> &[(String, Vec<usize>)] {
        let nodes = &self.nodes;
        self.domains.entry(key.to_string()).or_insert_with(|| {
            let mut by_value: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (i, node) in nodes.iter().enumerate() {
                if let Some(value) = node.labels.get(key) {
                    by_value.entry(value).or_default().push(i);
                }
            }
            (by_value.into_iter())
                .map(|(v, members)| (v.to_string(), members))
                .collect()
        })
    }

    /// The best domain of `key` for `pods`: among the domains (values of `key`, only `only` when
    /// given) of the nodes `node_ok` accepts, those where every pod fits first-fit on a node
    /// (largest first); of those the tightest (least cpu left), then the first by name.
    pub fn place(
        &mut self,
        key: &str,
        pods: &[&ResourceList],
        node_ok: &dyn Fn(&NodeRoom) -> bool,
        only: Option<&str>,
    ) -> Result<Placed, Shortfall> {
        self.domains_of(key);
        let all = self.domains.get(key).map(Vec::as_slice).unwrap_or_default();
        let order = largest_first(pods);
        let mut best: Option<(i64, Placed)> = None;
        let (mut most, mut tried) = (0u32, 0u32);
        let mut members = Vec::new();
        for (value, nodes) in all.iter().filter(|(v, _)| only.is_none_or(|o| o == v)) {
            members.clear();
            members.extend(nodes.iter().copied().filter(|&i| node_ok(&self.nodes[i])));
            if members.is_empty() {
                continue;
            }
            tried += 1;
            let (placed, left) = self.first_fit(&members, pods, &order);
            let count = placed.iter().filter(|n| n.is_some()).count();
            most = most.max(u32::try_from(count).unwrap_or(u32::MAX));
            if count < pods.len() {
                continue;
            }
            if best.as_ref().is_none_or(|(b, _)| left < *b) {
                let nodes = placed.into_iter().flatten().collect();
                best = Some((
                    left,
                    Placed {
                        domain: value.to_string(),
                        nodes,
                    },
                ));
            }
        }
        best.map(|(_, placed)| placed).ok_or(Shortfall {
            domains: tried,
            most,
        })
    }

    /// Takes the placed pods' requests off their nodes.
    pub fn commit(&mut self, placed: &Placed, pods: &[&ResourceList]) {
        for (node, pod) in placed.nodes.iter().zip(pods) {
            if let Some(room) = self.nodes.get_mut(*node) {
                subtract(&mut room.free, pod);
            }
        }
    }

    /// The pods placed first-fit (largest first) on the nodes `node_ok` accepts, as one domain
    /// (named ""): Err how many of them fit.
    pub fn place_on(
        &self,
        pods: &[&ResourceList],
        node_ok: &dyn Fn(&NodeRoom) -> bool,
    ) -> Result<Placed, Shortfall> {
        let members: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| node_ok(&self.nodes[i]))
            .collect();
        let (placed, _) = self.first_fit(&members, pods, &largest_first(pods));
        let count = placed.iter().filter(|n| n.is_some()).count();
        if count < pods.len() {
            return Err(Shortfall {
                domains: u32::from(!members.is_empty()),
                most: u32::try_from(count).unwrap_or(u32::MAX),
            });
        }
        Ok(Placed {
            domain: String::new(),
            nodes: placed.into_iter().flatten().collect(),
        })
    }

    /// Puts one pod on the first node `node_ok` accepts where it fits; whether it fitted.
    pub fn hold_where(&mut self, node_ok: &dyn Fn(&NodeRoom) -> bool, pod: &ResourceList) -> bool {
        let node = (self.nodes.iter_mut()).find(|n| node_ok(n) && fits(&n.free, pod));
        let fitted = node.is_some();
        if let Some(node) = node {
            subtract(&mut node.free, pod);
        }
        fitted
    }

    /// Puts one pod on the first node of `key=value` where it fits (a pod admitted there and not
    /// bound yet; one that fits nowhere is not counted: the scheduler cannot place it either).
    /// Returns whether it fitted.
    pub fn hold(&mut self, key: &str, value: &str, pod: &ResourceList) -> bool {
        let node = (self.nodes.iter_mut())
            .find(|n| n.labels.get(key).is_some_and(|v| v == value) && fits(&n.free, pod));
        let fitted = node.is_some();
        if let Some(node) = node {
            subtract(&mut node.free, pod);
        }
        fitted
    }

    /// First-fit of `pods` (visited in `order`) on the `members` nodes: the node of each pod
    /// (None: it fits nowhere), and the cpu left on them after.
    fn first_fit(
        &self,
        members: &[usize],
        pods: &[&ResourceList],
        order: &[usize],
    ) -> (Vec<Option<usize>>, i64) {
        // What the gang takes of each node, only for the nodes it lands on (no copy of the rest).
        let mut taken: Vec<Option<ResourceList>> = vec![None; members.len()];
        let mut placed = vec![None; pods.len()];
        for &p in order {
            let free = |at: usize| &self.nodes[members[at]].free;
            let at =
                (0..members.len()).find(|&at| fits_less(free(at), taken[at].as_ref(), pods[p]));
            if let Some(at) = at {
                taken[at]
                    .get_or_insert_with(ResourceList::new)
                    .add_all(pods[p]);
                placed[p] = Some(members[at]);
            }
        }
        let cpu = |l: &ResourceList| l.0.get("cpu").copied().unwrap_or(0);
        let left = (members.iter().zip(&taken))
            .map(|(&i, t)| cpu(&self.nodes[i].free) - t.as_ref().map_or(0, cpu))
            .sum();
        (placed, left)
    }
}

/// Pod positions, largest request first (cpu, then memory, then the first in the list).
fn largest_first(pods: &[&ResourceList]) -> Vec<usize> {
    let size = |p: &ResourceList| {
        (
            p.0.get("cpu").copied().unwrap_or(0),
            p.0.get("memory").copied().unwrap_or(0),
        )
    };
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|&a, &b| size(pods[b]).cmp(&size(pods[a])).then(a.cmp(&b)));
    order
}

/// Whether `pod` fits in `free` less `taken`.
fn fits_less(free: &ResourceList, taken: Option<&ResourceList>, pod: &ResourceList) -> bool {
    let Some(taken) = taken else {
        return fits(free, pod);
    };
    pod.0.iter().all(|(r, v)| {
        *v <= 0
            || free
                .0
                .get(r)
                .is_some_and(|f| f.saturating_sub(taken.0.get(r).copied().unwrap_or(0)) >= *v)
    })
}

/// Whether `pod` fits in `free`: every resource it asks for is there (one a node lacks: none).
pub fn fits(free: &ResourceList, pod: &ResourceList) -> bool {
    pod.0
        .iter()
        .all(|(r, v)| *v <= 0 || free.0.get(r).is_some_and(|f| f >= v))
}

fn subtract(free: &mut ResourceList, requests: &ResourceList) {
    for (r, v) in &requests.0 {
        if let Some(f) = free.0.get_mut(r) {
            *f = f.saturating_sub(*v);
        }
    }
}

#[cfg(test)]
#[path = "topology_tests.rs"]
mod tests;
