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
/// Each domain keeps what its nodes have left (computed again after room is taken from one), so
/// that [`Rooms::place`] skips the domains that cannot change its answer: the worst case of a
/// pass is thousands of gangs that fit their quota but no domain, and each used to try every node
/// of every domain.
#[derive(Clone, Debug, Default)]
pub struct Rooms {
    nodes: Vec<NodeRoom>,
    /// Per label key asked for: its domains, built at the key's first use.
    domains: HashMap<String, KeyDomains>,
    /// Skip the domains none of whose nodes fits any pod (off only in tests, for the reference).
    skip_full: bool,
}

/// The domains of one label key.
#[derive(Clone, Debug, Default)]
struct KeyDomains {
    domains: Vec<Domain>,
    /// Per node, the position of its domain (None: the node lacks the label).
    of_node: Vec<Option<usize>>,
}

/// One domain: its value, its nodes, and (None: to be computed again) their room left.
#[derive(Clone, Debug)]
struct Domain {
    value: String,
    nodes: Vec<usize>,
    room: Option<DomainRoom>,
}

/// What a domain's nodes have left: in all, and the most any one of them has (per resource).
#[derive(Clone, Debug)]
struct DomainRoom {
    total: ResourceList,
    most: ResourceList,
}

impl DomainRoom {
    fn of(nodes: &[NodeRoom], members: &[usize]) -> DomainRoom {
        let (mut total, mut most) = (ResourceList::new(), ResourceList::new());
        for &i in members {
            for (r, v) in &nodes[i].free.0 {
                *total.0.entry(r.clone()).or_insert(0) += (*v).max(0);
                let m = most.0.entry(r.clone()).or_insert(*v);
                *m = (*m).max(*v);
            }
        }
        DomainRoom { total, most }
    }

    /// At most how many of the pods the domain can hold, whatever the nodes a filter leaves: none
    /// when no pod fits on its roomiest node in every resource, else no more than the smallest
    /// pods whose sum fits in its total room, resource by resource.
    fn holds_at_most(&self, needs: &Needs) -> usize {
        if needs.count > 0 && !needs.pods.iter().any(|p| fits(&self.most, p)) {
            return 0;
        }
        let mut bound = needs.count;
        for (r, sums) in &needs.sums {
            let room = self.total.0.get(*r).copied().unwrap_or(0);
            bound = bound.min(sums.partition_point(|sum| *sum <= room));
        }
        bound
    }
}

/// A gang's needs for [`DomainRoom::holds_at_most`]: per resource asked for, the running sums of
/// its pods' requests, smallest first.
struct Needs<'a> {
    pods: &'a [&'a ResourceList],
    count: usize,
    sums: BTreeMap<&'a str, Vec<i64>>,
}

impl<'a> Needs<'a> {
    fn of(pods: &'a [&'a ResourceList]) -> Needs<'a> {
        let mut by_resource: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for pod in pods {
            for (r, v) in pod.0.iter().filter(|(_, v)| **v > 0) {
                by_resource.entry(r.as_str()).or_default().push(*v);
            }
        }
        let sums = (by_resource.into_iter())
            .map(|(r, mut values)| {
                // Pods that do not ask for `r` take none of it: the smallest of all.
                values.resize(pods.len(), 0);
                values.sort_unstable();
                let mut sum = 0i64;
                let sums = values.iter().map(|v| {
                    sum = sum.saturating_add(*v);
                    sum
                });
                (r, sums.collect())
            })
            .collect();
        Needs {
            pods,
            count: pods.len(),
            sums,
        }
    }
}

impl Rooms {
    pub fn new(topology: &Topology) -> Rooms {
        Rooms {
            nodes: topology.nodes.clone(),
            domains: HashMap::new(),
            skip_full: true,
        }
    }

    /// The nodes and their room left.
    pub fn nodes(&self) -> &[NodeRoom] {
        &self.nodes
    }

    /// The domains of `key`: each value and the nodes that carry it, by value.
    fn domains_of(&mut self, key: &str) {
        let nodes = &self.nodes;
        self.domains.entry(key.to_string()).or_insert_with(|| {
            let mut by_value: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (i, node) in nodes.iter().enumerate() {
                if let Some(value) = node.labels.get(key) {
                    by_value.entry(value).or_default().push(i);
                }
            }
            let mut of_node = vec![None; nodes.len()];
            let domains = (by_value.into_iter().enumerate())
                .map(|(d, (v, members))| {
                    for &i in &members {
                        of_node[i] = Some(d);
                    }
                    Domain {
                        value: v.to_string(),
                        nodes: members,
                        room: None,
                    }
                })
                .collect();
            KeyDomains { domains, of_node }
        });
    }

    /// Room was taken off node `i`: the bounds of its domains are computed again when next read.
    fn taken_from(&mut self, i: usize) {
        for key in self.domains.values_mut() {
            if let Some(Some(d)) = key.of_node.get(i) {
                key.domains[*d].room = None;
            }
        }
    }

    /// The best domain of `key` for `pods`: among the domains (values of `key`, only `only` when
    /// given) of the nodes `node_ok` accepts, those where every pod fits first-fit on a node
    /// (largest first); of those the tightest (least cpu left), then the first by name.
    ///
    /// Exact, but it skips what cannot change the answer: first the domains that might hold the
    /// whole gang (by their bound, [`DomainRoom::holds_at_most`]) are searched; only when none
    /// does are the others searched, and then only those that might hold more of its pods than
    /// the most found so far (the shortfall's figures).
    pub fn place(
        &mut self,
        key: &str,
        pods: &[&ResourceList],
        node_ok: &dyn Fn(&NodeRoom) -> bool,
        only: Option<&str>,
    ) -> Result<Placed, Shortfall> {
        self.domains_of(key);
        let Some(all) = self.domains.get_mut(key) else {
            return Err(Shortfall {
                domains: 0,
                most: 0,
            });
        };
        let needs = Needs::of(pods);
        let mut bounds = Vec::with_capacity(all.domains.len());
        for (d, domain) in all.domains.iter_mut().enumerate() {
            if only.is_some_and(|o| o != domain.value) {
                continue;
            }
            let room =
                (domain.room).get_or_insert_with(|| DomainRoom::of(&self.nodes, &domain.nodes));
            let bound = if self.skip_full {
                room.holds_at_most(&needs)
            } else {
                pods.len()
            };
            bounds.push((d, bound));
        }
        let all = &self.domains[key].domains;
        let order = largest_first(pods);
        let mut best: Option<(i64, Placed)> = None;
        let mut short = Shortfall {
            domains: 0,
            most: 0,
        };
        let mut members = Vec::new();
        let mut search = |d: usize, short: &mut Shortfall| -> Option<(Vec<Option<usize>>, i64)> {
            members.clear();
            (members).extend(
                all[d]
                    .nodes
                    .iter()
                    .copied()
                    .filter(|&i| node_ok(&self.nodes[i])),
            );
            if members.is_empty() {
                return None;
            }
            short.domains += 1;
            let (placed, left) = self.first_fit(&members, pods, &order);
            let count = placed.iter().filter(|n| n.is_some()).count();
            short.most = short.most.max(u32::try_from(count).unwrap_or(u32::MAX));
            (count == pods.len()).then_some((placed, left))
        };
        for &(d, _) in bounds.iter().filter(|(_, bound)| *bound >= pods.len()) {
            let Some((placed, left)) = search(d, &mut short) else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| left < *b) {
                let nodes = placed.into_iter().flatten().collect();
                let domain = all[d].value.clone();
                best = Some((left, Placed { domain, nodes }));
            }
        }
        if let Some((_, placed)) = best {
            return Ok(placed);
        }
        for &(d, bound) in bounds.iter().filter(|(_, bound)| *bound < pods.len()) {
            if bound > short.most as usize {
                search(d, &mut short);
            } else if all[d].nodes.iter().any(|&i| node_ok(&self.nodes[i])) {
                short.domains += 1;
            }
        }
        Err(short)
    }

    /// Takes the placed pods' requests off their nodes.
    pub fn commit(&mut self, placed: &Placed, pods: &[&ResourceList]) {
        for (node, pod) in placed.nodes.iter().zip(pods) {
            if let Some(room) = self.nodes.get_mut(*node) {
                subtract(&mut room.free, pod);
                self.taken_from(*node);
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
        let node = (self.nodes.iter()).position(|n| node_ok(n) && fits(&n.free, pod));
        let Some(i) = node else {
            return false;
        };
        subtract(&mut self.nodes[i].free, pod);
        self.taken_from(i);
        true
    }

    /// Puts one pod on the first node of `key=value` where it fits (a pod admitted there and not
    /// bound yet; one that fits nowhere is not counted: the scheduler cannot place it either).
    /// Returns whether it fitted.
    pub fn hold(&mut self, key: &str, value: &str, pod: &ResourceList) -> bool {
        let node = (self.nodes.iter())
            .position(|n| n.labels.get(key).is_some_and(|v| v == value) && fits(&n.free, pod));
        let Some(i) = node else {
            return false;
        };
        subtract(&mut self.nodes[i].free, pod);
        self.taken_from(i);
        true
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
