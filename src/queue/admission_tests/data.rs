//! Data locality in the pass (`admission/topology.rs`, `src/queue/data_locality.rs`): a gang
//! only on its data's nodes when required, there first when preferred, the reason, the pins.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use super::*;
use crate::queue::data_locality::{DataAsk, DataNodes, DataSource};
use crate::queue::topology::{NodeRoom, Topology, TopologyAsk};

const CACHE: &str = "app=cache";

/// Nodes `n0`, `n1`... (rack, cpus free), each with its hostname label; the data of
/// `ns`/`app=cache` on `data`.
fn nodes(nodes: &[(&str, i64)], data: &[usize]) -> Topology {
    let mut topology = Topology {
        nodes: (nodes.iter().enumerate())
            .map(|(i, (rack, cpu))| NodeRoom {
                name: format!("n{i}"),
                labels: BTreeMap::from([
                    ("rack".to_string(), rack.to_string()),
                    ("kubernetes.io/hostname".to_string(), format!("n{i}")),
                ]),
                free: ResourceList(BTreeMap::from([
                    ("cpu".to_string(), cpu * CPU),
                    ("pods".to_string(), 110_000),
                ])),
            })
            .collect(),
        ..Topology::default()
    };
    let found = DataNodes {
        nodes: data.iter().map(|i| format!("n{i}")).collect(),
        missing: None,
    };
    topology
        .data
        .insert(("ns".into(), DataSource::Pods(CACHE.into())), found);
    topology
}

fn data_ask(required: bool) -> DataAsk {
    DataAsk {
        source: DataSource::Pods(CACHE.into()),
        required,
    }
}

fn beside_data(mut pod: PodSnapshot, required: bool, rack: bool) -> PodSnapshot {
    pod.topology = Some(Arc::new(PodTopology {
        data: Some(data_ask(required)),
        ask: rack.then(|| TopologyAsk {
            key: "rack".into(),
            required: true,
        }),
        ..PodTopology::default()
    }));
    pod
}

fn data_gang(name: &str, t: i64, size: u32, cpu: i64, required: bool) -> WorkloadSnapshot {
    let pods = (0..size)
        .map(|i| {
            let p = pod(&format!("{name}-{i}"), cpu * CPU, PodState::Gated, t);
            beside_data(p, required, false)
        })
        .collect();
    workload(name, "q", 0, t, size, pods)
}

fn one_queue(workloads: Vec<WorkloadSnapshot>) -> Snapshot {
    Snapshot {
        queues: vec![queue("q", 1000 * CPU, QueueingStrategy::BestEffortFIFO)],
        workloads,
    }
}

fn pins(d: &Decisions) -> HashSet<String> {
    d.data_nodes.values().map(|v| v.to_string()).collect()
}

#[test]
fn a_gang_goes_only_to_its_data_s_nodes() {
    let s = one_queue(vec![data_gang("g", 1, 4, 2, true)]);
    let d = decide_with(&s, Some(&nodes(&[("a", 4); 4], &[2, 3])));
    assert_eq!(d.admit.len(), 4);
    assert_eq!(d.data_nodes.len(), 4, "every pod pinned");
    assert_eq!(pins(&d), HashSet::from(["n2,n3".to_string()]));
    assert!(d.domains.is_empty());
}

#[test]
fn a_gang_too_big_for_its_data_s_nodes_waits_saying_where_the_data_is() {
    let s = one_queue(vec![data_gang("g", 1, 4, 3, true)]);
    let d = decide_with(
        &s,
        Some(&nodes(&[("a", 4), ("a", 16), ("a", 4), ("a", 4)], &[2, 3])),
    );
    assert!(d.admit.is_empty(), "n1 has room but holds none of the data");
    let why = d.workloads[0].waiting.clone().expect("waits");
    assert_eq!(
        why,
        WaitReason::DataNotPlaceable {
            queue: "q".into(),
            source: "pods app=cache".into(),
            nodes: vec!["n2".into(), "n3".into()],
            room: 2,
            pods: 4,
            missing: None,
        }
    );
    assert_eq!(
        why.to_string(),
        "fits queue q but its data (pods app=cache) is on nodes n2, n3; they have room for 2 of its 4 pods"
    );
    assert!(d.evict.is_empty());
}

#[test]
fn preferred_goes_beside_the_data_when_it_fits_and_anywhere_else() {
    let fits = one_queue(vec![data_gang("g", 1, 2, 3, false)]);
    let topology = nodes(&[("a", 16), ("a", 4), ("a", 4)], &[1, 2]);
    let d = decide_with(&fits, Some(&topology));
    assert_eq!(pins(&d), HashSet::from(["n1,n2".to_string()]));
    let too_big = one_queue(vec![data_gang("g", 1, 4, 3, false)]);
    let d = decide_with(&too_big, Some(&topology));
    assert_eq!(d.admit.len(), 4, "admitted as if it had not asked");
    assert!(d.data_nodes.is_empty(), "not pinned");
}

#[test]
fn data_found_nowhere_keeps_a_required_gang_waiting_with_the_why() {
    let s = one_queue(vec![data_gang("g", 1, 1, 1, true)]);
    let mut topology = nodes(&[("a", 4)], &[]);
    topology.data.insert(
        ("ns".into(), DataSource::Pods(CACHE.into())),
        DataNodes::none("no pod of namespace ns that matches it runs on a node"),
    );
    let d = decide_with(&s, Some(&topology));
    assert!(d.admit.is_empty());
    let why = d.workloads[0].waiting.as_ref().expect("waits").to_string();
    assert_eq!(
        why,
        "fits queue q but no node holds its data (pods app=cache): no pod of namespace ns that matches it runs on a node (sluice.dev/data-locality: preferred would run it elsewhere)"
    );
    // Data of another namespace's ask is not this gang's.
    let mut elsewhere = nodes(&[("a", 4)], &[]);
    let other = DataNodes {
        nodes: BTreeSet::from(["n0".to_string()]),
        missing: None,
    };
    elsewhere
        .data
        .insert(("other".into(), DataSource::Pods(CACHE.into())), other);
    assert!(decide_with(&s, Some(&elsewhere)).admit.is_empty());
}

#[test]
fn with_a_topology_ask_the_gang_is_in_one_rack_and_on_its_data_s_nodes() {
    let gang = |size: u32| {
        let pods = (0..size)
            .map(|i| {
                beside_data(
                    pod(&format!("g-{i}"), 4 * CPU, PodState::Gated, 1),
                    true,
                    true,
                )
            })
            .collect();
        one_queue(vec![workload("g", "q", 0, 1, size, pods)])
    };
    // Racks a (n0, n1) and b (n2, n3), 4 cpus each; the data on n1 and n2.
    let topology = nodes(&[("a", 4), ("a", 4), ("b", 4), ("b", 4)], &[1, 2]);
    let d = decide_with(&gang(1), Some(&topology));
    assert_eq!(d.admit.len(), 1);
    assert_eq!(
        d.domains.values().next().map(|v| v.to_string()),
        Some("rack=a".into())
    );
    assert_eq!(
        pins(&d),
        HashSet::from(["n1".to_string()]),
        "the data nodes of its rack"
    );
    let d = decide_with(&gang(2), Some(&topology));
    assert!(d.admit.is_empty(), "no rack holds 2 pods on its data nodes");
    assert!(matches!(
        d.workloads[0].waiting,
        Some(WaitReason::DataNotPlaceable {
            room: 1,
            pods: 2,
            ..
        })
    ));
}

#[test]
fn later_pods_go_to_their_gang_s_data_nodes_and_pinned_pods_hold_room_there() {
    let pinned = |p: PodSnapshot, bound: bool| {
        let mut p = beside_data(p, true, false);
        p.topology = Some(Arc::new(PodTopology {
            data: Some(data_ask(true)),
            data_nodes: Some(Arc::from("n1")),
            bound,
            ..PodTopology::default()
        }));
        p
    };
    let started = |extra_cpu: i64| {
        let mut w = workload(
            "run",
            "q",
            0,
            0,
            1,
            vec![
                pinned(pod("run-0", 2 * CPU, PodState::Admitted, 0), false),
                beside_data(
                    pod("run-1", extra_cpu * CPU, PodState::Gated, 1),
                    true,
                    false,
                ),
            ],
        );
        w.pod_sets[0].min_count = 1;
        one_queue(vec![w])
    };
    // The data is now on n2 too; the gang was pinned to n1 (4 cpus, 2 held by run-0 unbound).
    let topology = nodes(&[("a", 16), ("a", 4), ("a", 4)], &[1, 2]);
    let d = decide_with(&started(2), Some(&topology));
    assert_eq!(
        pins(&d),
        HashSet::from(["n1".to_string()]),
        "its gang's node"
    );
    let d = decide_with(&started(4), Some(&topology));
    assert_eq!(
        pins(&d),
        HashSet::from(["n1,n2".to_string()]),
        "n1 is full: the data's now"
    );
    let d = decide_with(&started(5), Some(&topology));
    assert!(d.admit.is_empty(), "required: never n0");
}

proptest! {
    /// Whatever the nodes, the data's place and the gangs: a required gang is admitted only
    /// pinned to data nodes, every pin names only data nodes, the pods pinned to data nodes never
    /// ask more than those nodes' room, and a preferred gang that fits the quota always runs.
    #[test]
    fn never_off_the_data_nodes_never_over_their_room(
        caps in prop::collection::vec(0i64..10, 1..7),
        data_mask in 1u32..128,
        gangs in prop::collection::vec((1u32..5, 1i64..4, any::<bool>()), 1..6),
    ) {
        let racks: Vec<(&str, i64)> = caps.iter().map(|c| ("a", *c)).collect();
        let data: Vec<usize> = (0..caps.len()).filter(|i| data_mask & (1 << i) != 0).collect();
        let topology = nodes(&racks, &data);
        let hosts: BTreeSet<String> = data.iter().map(|i| format!("n{i}")).collect();
        let room: i64 = data.iter().map(|i| caps[*i] * CPU).sum();
        let biggest = data.iter().map(|i| caps[*i] * CPU).max().unwrap_or(0);
        let workloads: Vec<WorkloadSnapshot> = (gangs.iter().enumerate())
            .map(|(i, (size, cpu, required))| data_gang(&format!("g{i}"), i as i64, *size, *cpu, *required))
            .collect();
        let s = one_queue(workloads);
        let d = decide_with(&s, Some(&topology));
        let mut on_data = 0;
        for r in &d.admit {
            let p = &s.workloads[r.workload].pod_sets[0].pods[r.pod];
            let required = p.topology.as_ref().and_then(|t| t.data.as_ref()).is_some_and(|a| a.required);
            let pin = d.data_nodes.get(r);
            prop_assert!(!required || pin.is_some(), "a required pod admitted unpinned");
            if let Some(pin) = pin {
                for host in pin.split(',') {
                    prop_assert!(hosts.contains(host), "{} is not a data node", host);
                }
                prop_assert!(p.requests.0["cpu"] <= biggest);
                on_data += p.requests.0["cpu"];
            }
        }
        prop_assert!(on_data <= room, "data nodes over-filled: {} > {}", on_data, room);
        for (w, workload) in s.workloads.iter().enumerate() {
            let preferred = !workload.pod_sets[0].pods[0].topology.as_ref().and_then(|t| t.data.as_ref()).is_some_and(|a| a.required);
            if preferred {
                prop_assert!(d.admit.iter().any(|r| r.workload == w), "a preferred gang waits");
            }
        }
    }
}
