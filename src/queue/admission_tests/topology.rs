//! Topology-aware gangs in the pass (`admission/topology.rs`): one domain for a whole gang, the
//! domain's real room, pinned later pods, the reasons.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::queue::placement::Placement;
use crate::queue::topology::{NodeRoom, Topology, TopologyAsk};

/// Racks of nodes: (rack, cpus free per node).
fn racks(nodes: &[(&str, i64)]) -> Topology {
    Topology {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, (rack, cpu))| NodeRoom {
                name: format!("n{i}"),
                labels: BTreeMap::from([("rack".to_string(), rack.to_string())]),
                free: ResourceList(BTreeMap::from([
                    ("cpu".to_string(), cpu * CPU),
                    ("pods".to_string(), 110_000),
                ])),
            })
            .collect(),
        ..Topology::default()
    }
}

fn asking(mut pod: PodSnapshot, required: bool) -> PodSnapshot {
    pod.topology = Some(Arc::new(PodTopology {
        ask: Some(TopologyAsk {
            key: "rack".into(),
            required,
        }),
        ..PodTopology::default()
    }));
    pod
}

fn pinned(mut pod: PodSnapshot, rack: &str, bound: bool) -> PodSnapshot {
    pod.topology = Some(Arc::new(PodTopology {
        ask: Some(TopologyAsk {
            key: "rack".into(),
            required: true,
        }),
        domain: Some(format!("rack={rack}")),
        bound,
        ..PodTopology::default()
    }));
    pod
}

/// A gang of `size` gated pods of `cpu` each asking for one rack.
fn rack_gang(
    name: &str,
    queue: &str,
    t: i64,
    size: u32,
    cpu: i64,
    required: bool,
) -> WorkloadSnapshot {
    let pods = (0..size)
        .map(|i| {
            asking(
                pod(&format!("{name}-{i}"), cpu * CPU, PodState::Gated, t),
                required,
            )
        })
        .collect();
    workload(name, queue, 0, t, size, pods)
}

fn big_queue(name: &str) -> QueueSnapshot {
    queue(name, 1000 * CPU, QueueingStrategy::BestEffortFIFO)
}

fn domains(d: &Decisions) -> HashSet<String> {
    d.domains.values().map(|v| v.to_string()).collect()
}

#[test]
fn a_gang_is_admitted_whole_in_the_one_rack_with_room() {
    let s = Snapshot {
        queues: vec![big_queue("q")],
        workloads: vec![rack_gang("g", "q", 1, 4, 4, true)],
    };
    let d = decide_with(&s, Some(&racks(&[("a", 4), ("a", 4), ("b", 8), ("b", 8)])));
    assert_eq!(d.admit.len(), 4);
    assert_eq!(d.domains.len(), 4, "every pod pinned");
    assert_eq!(domains(&d), HashSet::from(["rack=b".to_string()]));
}

#[test]
fn a_gang_that_fits_the_queue_but_no_rack_waits_saying_so() {
    let s = Snapshot {
        queues: vec![big_queue("q")],
        workloads: vec![rack_gang("g", "q", 1, 8, 4, true)],
    };
    let d = decide_with(&s, Some(&racks(&[("a", 8), ("a", 12), ("b", 4)])));
    assert!(d.admit.is_empty());
    let why = d.workloads[0].waiting.clone().expect("waits");
    assert_eq!(
        why,
        WaitReason::NoTopologyDomain {
            queue: "q".into(),
            key: "rack".into(),
            pods: 8,
            most: 5,
            domains: 2,
            pinned: None,
        }
    );
    assert_eq!(
        why.to_string(),
        "fits queue q but no single rack has room for its 8 pods; the most any rack has room for is 5 (of 2 rack values its pods may run in)"
    );
    assert!(d.evict.is_empty(), "no preemption makes room on nodes");
}

#[test]
fn without_the_nodes_a_required_gang_waits_and_a_preferred_one_goes_unpinned() {
    let s = Snapshot {
        queues: vec![big_queue("q")],
        workloads: vec![
            rack_gang("r", "q", 1, 2, 1, true),
            rack_gang("p", "q", 2, 2, 1, false),
        ],
    };
    let d = decide(&s);
    assert_eq!(admitted_names(&s, &d), vec!["p-0", "p-1"]);
    assert!(d.domains.is_empty());
    let why = d.workloads[0].waiting.as_ref().expect("waits").to_string();
    assert!(
        why.contains("no node its pods may run on has the label rack"),
        "{why}"
    );
}

#[test]
fn room_taken_by_one_queue_is_gone_for_the_next() {
    let s = Snapshot {
        queues: vec![big_queue("q1"), big_queue("q2")],
        workloads: vec![
            rack_gang("g1", "q1", 1, 2, 4, true),
            rack_gang("g2", "q2", 2, 2, 4, true),
        ],
    };
    let d = decide_with(&s, Some(&racks(&[("a", 8), ("b", 8)])));
    assert_eq!(d.admit.len(), 4);
    assert_eq!(domains(&d).len(), 2, "one rack each");
    let three = Snapshot {
        workloads: vec![
            rack_gang("g1", "q1", 1, 2, 4, true),
            rack_gang("g2", "q2", 2, 2, 4, true),
            rack_gang("g3", "q2", 3, 1, 1, true),
        ],
        ..s
    };
    let d = decide_with(&three, Some(&racks(&[("a", 8), ("b", 8)])));
    assert_eq!(d.admit.len(), 4, "g3 finds no room left");
}

#[test]
fn pods_pinned_but_not_bound_and_reserved_members_hold_their_room() {
    // Running gang in rack b: one pod bound (its room already off the node), one not bound yet,
    // one member not created (minimum 3): 2 of rack b's 3 cpus held.
    let running = workload(
        "run",
        "q",
        0,
        0,
        3,
        vec![
            pinned(pod("run-0", CPU, PodState::Admitted, 0), "b", true),
            pinned(pod("run-1", CPU, PodState::Admitted, 0), "b", false),
        ],
    );
    let s = Snapshot {
        queues: vec![big_queue("q")],
        workloads: vec![running, rack_gang("g", "q", 1, 2, 1, true)],
    };
    let d = decide_with(&s, Some(&racks(&[("a", 1), ("b", 3)])));
    assert!(d.admit.is_empty(), "rack b has 1 cpu left, rack a 1");
    let d = decide_with(&s, Some(&racks(&[("a", 1), ("b", 4)])));
    assert_eq!(domains(&d), HashSet::from(["rack=b".to_string()]));
}

#[test]
fn later_pods_follow_their_gangs_rack_or_wait() {
    let started = |extra_cpu: i64| {
        let mut w = workload(
            "run",
            "q",
            0,
            0,
            1,
            vec![
                pinned(pod("run-0", CPU, PodState::Admitted, 0), "a", true),
                asking(pod("run-1", extra_cpu * CPU, PodState::Gated, 1), true),
            ],
        );
        w.pod_sets[0].min_count = 1;
        Snapshot {
            queues: vec![big_queue("q")],
            workloads: vec![w],
        }
    };
    let nodes = racks(&[("a", 2), ("b", 16)]);
    let s = started(2);
    let d = decide_with(&s, Some(&nodes));
    assert_eq!(domains(&d), HashSet::from(["rack=a".to_string()]));
    let s = started(3);
    let d = decide_with(&s, Some(&nodes));
    assert!(d.admit.is_empty(), "required: only its gang's rack");
    let why = d.workloads[0].waiting.as_ref().expect("waits").to_string();
    assert!(
        why.contains("its gang's domain rack=a has no room"),
        "{why}"
    );
}

#[test]
fn a_pods_own_node_selector_narrows_the_racks() {
    let mut gang = rack_gang("g", "q", 1, 2, 4, true);
    for p in &mut gang.pod_sets[0].pods {
        p.placement = Some(Arc::new(Placement {
            node_selector: BTreeMap::from([("rack".to_string(), "a".to_string())]),
            terms: Vec::new(),
        }));
    }
    let s = Snapshot {
        queues: vec![big_queue("q")],
        workloads: vec![gang],
    };
    // Rack b has room, but the pods would only run in rack a: never charged to b.
    let d = decide_with(&s, Some(&racks(&[("a", 4), ("b", 16)])));
    assert!(d.admit.is_empty());
    let d = decide_with(&s, Some(&racks(&[("a", 8), ("b", 16)])));
    assert_eq!(domains(&d), HashSet::from(["rack=a".to_string()]));
}

#[test]
fn quota_still_comes_first() {
    let s = Snapshot {
        queues: vec![queue("q", 4 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads: vec![rack_gang("g", "q", 1, 2, 4, true)],
    };
    let d = decide_with(&s, Some(&racks(&[("a", 16)])));
    assert!(d.admit.is_empty());
    assert!(matches!(
        d.workloads[0].waiting,
        Some(WaitReason::NeverFits { .. })
    ));
}

proptest! {
    /// Whatever the gangs and racks: every admitted gang asking for a rack is in one rack, and
    /// no node is given more than its room.
    #[test]
    fn admitted_gangs_are_never_split_nor_over_fill_a_node(
        caps in prop::collection::vec((0usize..3, 0i64..10), 1..7),
        gangs in prop::collection::vec((1u32..5, 1i64..4), 1..6),
    ) {
        let nodes: Vec<(String, i64)> = caps.iter().map(|(r, c)| (format!("r{r}"), *c)).collect();
        let refs: Vec<(&str, i64)> = nodes.iter().map(|(r, c)| (r.as_str(), *c)).collect();
        let topology = racks(&refs);
        let workloads: Vec<WorkloadSnapshot> = gangs.iter().enumerate()
            .map(|(i, (size, cpu))| rack_gang(&format!("g{i}"), "q", i as i64, *size, *cpu, true))
            .collect();
        let s = Snapshot { queues: vec![big_queue("q")], workloads };
        let d = decide_with(&s, Some(&topology));
        let mut per_rack: BTreeMap<String, i64> = BTreeMap::new();
        for (w, workload) in s.workloads.iter().enumerate() {
            let admitted: Vec<&PodRef> = d.admit.iter().filter(|r| r.workload == w).collect();
            let racks: HashSet<&str> = admitted.iter().map(|r| &*d.domains[*r]).collect();
            prop_assert!(admitted.is_empty() || admitted.len() == workload.pod_sets[0].pods.len());
            prop_assert!(racks.len() <= 1, "gang {} split over {:?}", w, racks);
            for r in admitted {
                let cpu = workload.pod_sets[0].pods[r.pod].requests.0["cpu"];
                *per_rack.entry(d.domains[r].to_string()).or_default() += cpu;
            }
        }
        for (rack, used) in per_rack {
            let room: i64 = nodes.iter().filter(|(r, _)| format!("rack={r}") == rack).map(|(_, c)| c * CPU).sum();
            prop_assert!(used <= room, "{} over-filled: {} > {}", rack, used, room);
        }
    }
}

/// A queue of two flavors, `spot` then `ondemand`, each of `cpu` cpus and pinned to nodes labelled
/// `tier=<flavor>`.
fn tiered_queue(cpu: i64) -> QueueSnapshot {
    let flavor = |name: &str| {
        Arc::new(FlavorSnapshot {
            name: name.into(),
            quota: ResourceList(BTreeMap::from([("cpu".to_string(), cpu * CPU)])),
            node_labels: BTreeMap::from([("tier".to_string(), name.to_string())]),
            tolerations: Vec::new(),
            defined: true,
        })
    };
    QueueSnapshot {
        flavors: vec![flavor("spot"), flavor("ondemand")],
        quota: ResourceList::new(),
        ..big_queue("q")
    }
}

/// The queue of [`tiered_queue`] (100 cpus per flavor) and a gang `g` of `size` pods of `cpu`
/// cpus asking for one rack.
fn tiered_gang(size: u32, cpu: i64) -> Snapshot {
    Snapshot {
        queues: vec![tiered_queue(100)],
        workloads: vec![rack_gang("g", "q", 1, size, cpu, true)],
    }
}

/// Racks of nodes of a tier: (tier, rack, cpus free per node).
fn tiered_racks(nodes: &[(&str, &str, i64)]) -> Topology {
    let mut topology = racks(&nodes.iter().map(|(_, r, c)| (*r, *c)).collect::<Vec<_>>());
    for (node, (tier, _, _)) in topology.nodes.iter_mut().zip(nodes) {
        node.labels.insert("tier".into(), tier.to_string());
    }
    topology
}

#[test]
fn a_gang_whose_first_flavor_has_quota_but_no_rack_with_room_goes_to_the_next_flavor() {
    let s = tiered_gang(2, 3);
    // spot's racks have 2-cpu nodes only: no node holds a 3-cpu pod. ondemand's rack holds both.
    let nodes = tiered_racks(&[
        ("spot", "s1", 2),
        ("spot", "s1", 2),
        ("spot", "s2", 2),
        ("ondemand", "o1", 4),
        ("ondemand", "o1", 4),
    ]);
    let d = decide_with(&s, Some(&nodes));
    assert_eq!(admitted_names(&s, &d), vec!["g-0", "g-1"]);
    assert_eq!(domains(&d), HashSet::from(["rack=o1".to_string()]));
    let flavors: HashSet<&str> = d.flavors.values().map(|f| f.name.as_str()).collect();
    assert_eq!(
        flavors,
        HashSet::from(["ondemand"]),
        "charged where it runs"
    );
}

#[test]
fn a_gang_no_flavors_nodes_can_hold_waits_saying_why_per_flavor() {
    let s = tiered_gang(3, 3);
    // spot: no node holds a 3-cpu pod; ondemand: one rack, room for 2 of the 3 pods.
    let nodes = tiered_racks(&[
        ("spot", "s1", 2),
        ("ondemand", "o1", 4),
        ("ondemand", "o1", 4),
    ]);
    let d = decide_with(&s, Some(&nodes));
    assert!(d.admit.is_empty());
    assert!(d.evict.is_empty(), "no preemption makes room on nodes");
    let why = d.workloads[0].waiting.as_ref().expect("waits").to_string();
    assert_eq!(
        why,
        "no flavor of queue q has room; tried \
         spot: fits queue q but no single rack has room for its 3 pods; the most any rack has room for is 0 (of 1 rack values its pods may run in); \
         ondemand: fits queue q but no single rack has room for its 3 pods; the most any rack has room for is 2 (of 1 rack values its pods may run in)"
    );
}

#[test]
fn a_gang_that_fits_its_first_flavors_racks_stays_there() {
    let s = tiered_gang(2, 1);
    let nodes = tiered_racks(&[("spot", "s1", 2), ("ondemand", "o1", 4)]);
    let d = decide_with(&s, Some(&nodes));
    assert_eq!(admitted_names(&s, &d), vec!["g-0", "g-1"]);
    let flavors: HashSet<&str> = d.flavors.values().map(|f| f.name.as_str()).collect();
    assert_eq!(flavors, HashSet::from(["spot"]));
    assert_eq!(domains(&d), HashSet::from(["rack=s1".to_string()]));
}
