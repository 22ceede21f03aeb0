use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn node(name: &str, rack: &str, cpu: i64) -> NodeRoom {
    NodeRoom {
        name: name.into(),
        labels: BTreeMap::from([("rack".to_string(), rack.to_string())]),
        free: ResourceList(BTreeMap::from([
            ("cpu".to_string(), cpu * 1000),
            ("pods".to_string(), 110_000),
        ])),
    }
}

fn pod(cpu: i64) -> ResourceList {
    ResourceList(BTreeMap::from([
        ("cpu".to_string(), cpu * 1000),
        ("pods".to_string(), 1000),
    ]))
}

fn rooms(nodes: Vec<NodeRoom>) -> Rooms {
    Rooms::new(&Topology {
        nodes,
        ..Topology::default()
    })
}

fn any(_: &NodeRoom) -> bool {
    true
}

#[test]
fn asks_are_read_and_bad_keys_refused_with_what_to_do() {
    let ask = |k: &str, v: &str| {
        let a = BTreeMap::from([(k.to_string(), v.to_string())]);
        TopologyAsk::of(Some(&a))
    };
    assert_eq!(
        ask(TOPOLOGY_REQUIRED_ANNOTATION, "topology.kubernetes.io/zone"),
        Ok(Some(TopologyAsk {
            key: "topology.kubernetes.io/zone".into(),
            required: true
        }))
    );
    assert_eq!(
        ask(TOPOLOGY_PREFERRED_ANNOTATION, "rack"),
        Ok(Some(TopologyAsk {
            key: "rack".into(),
            required: false
        }))
    );
    assert_eq!(ask("other", "x"), Ok(None));
    assert_eq!(TopologyAsk::of(None), Ok(None));
    for bad in [
        "",
        "a/",
        "/a",
        "Upper.example/x",
        "-x",
        "x-",
        "a b",
        &"x".repeat(64),
        "a/b/c",
    ] {
        let err = ask(TOPOLOGY_REQUIRED_ANNOTATION, bad).expect_err(bad);
        assert!(err.contains("e.g. topology.kubernetes.io/zone"), "{err}");
    }
}

#[test]
fn domains_round_trip_through_the_annotation() {
    let a = domain_annotation("topology.kubernetes.io/zone", "eu-1a");
    assert_eq!(
        split_domain(&a),
        Some(("topology.kubernetes.io/zone", "eu-1a"))
    );
    assert_eq!(split_domain("garbage"), None);
}

#[test]
fn a_gang_goes_whole_into_the_one_rack_with_room() {
    let mut r = rooms(vec![
        node("a1", "a", 4),
        node("a2", "a", 4),
        node("b1", "b", 8),
        node("b2", "b", 8),
    ]);
    let pods = [pod(4), pod(4), pod(4), pod(4)];
    let refs: Vec<&ResourceList> = pods.iter().collect();
    let placed = r.place("rack", &refs, &any, None).expect("rack b fits");
    assert_eq!(placed.domain, "b");
    assert!(placed.nodes.iter().all(|&n| n >= 2));
}

#[test]
fn the_tightest_rack_wins_and_nothing_is_split() {
    let mut r = rooms(vec![
        node("a1", "a", 16),
        node("b1", "b", 4),
        node("c1", "c", 3),
    ]);
    let pods = [pod(2), pod(2)];
    let refs: Vec<&ResourceList> = pods.iter().collect();
    assert_eq!(
        r.place("rack", &refs, &any, None).expect("fits").domain,
        "b"
    );
    let big = [pod(4), pod(4), pod(4), pod(4), pod(4)];
    let refs: Vec<&ResourceList> = big.iter().collect();
    assert_eq!(
        r.place("rack", &refs, &any, None),
        Err(Shortfall {
            domains: 3,
            most: 4
        })
    );
}

#[test]
fn room_is_per_node_not_per_rack_sum() {
    // 2 + 2 cpu free in rack a, but a 3 cpu pod fits on neither node.
    let mut r = rooms(vec![node("a1", "a", 2), node("a2", "a", 2)]);
    let pods = [pod(3)];
    let refs: Vec<&ResourceList> = pods.iter().collect();
    assert_eq!(
        r.place("rack", &refs, &any, None),
        Err(Shortfall {
            domains: 1,
            most: 0
        })
    );
}

#[test]
fn committed_room_is_gone_for_the_next_gang() {
    let mut r = rooms(vec![node("a1", "a", 4), node("b1", "b", 4)]);
    let pods = [pod(4)];
    let refs: Vec<&ResourceList> = pods.iter().collect();
    let first = r.place("rack", &refs, &any, None).expect("fits");
    r.commit(&first, &refs);
    let second = r.place("rack", &refs, &any, None).expect("fits");
    assert_ne!(first.domain, second.domain);
    r.commit(&second, &refs);
    assert!(r.place("rack", &refs, &any, None).is_err());
}

#[test]
fn only_and_node_constraints_narrow_the_domains() {
    let mut r = rooms(vec![node("a1", "a", 8), node("b1", "b", 8)]);
    let pods = [pod(1)];
    let refs: Vec<&ResourceList> = pods.iter().collect();
    assert_eq!(
        r.place("rack", &refs, &any, Some("b")).expect("b").domain,
        "b"
    );
    let not_a = |n: &NodeRoom| n.name != "a1";
    assert_eq!(r.place("rack", &refs, &not_a, None).expect("b").domain, "b");
    assert_eq!(
        r.place("zone", &refs, &any, None),
        Err(Shortfall {
            domains: 0,
            most: 0
        }),
        "no node has the key"
    );
}

#[test]
fn a_resource_the_node_lacks_does_not_fit() {
    let mut r = rooms(vec![node("a1", "a", 8)]);
    let mut gpu = pod(1);
    gpu.0.insert("nvidia.com/gpu".into(), 1000);
    assert!(r.place("rack", &[&gpu], &any, None).is_err());
}

#[test]
fn full_racks_are_skipped_with_the_same_shortfall_and_room_taken_is_seen() {
    // r1 is full, r2 has room for one of the three pods, r3's only node is filtered out.
    let mut r = rooms(vec![
        node("n1", "r1", 0),
        node("n2", "r1", 1),
        node("n3", "r2", 4),
        node("n4", "r3", 4),
    ]);
    let big = pod(4);
    let pods = [&big, &big, &big];
    let not_n4 = |n: &NodeRoom| n.name != "n4";
    let short = r.place("rack", &pods, &not_n4, None).unwrap_err();
    assert_eq!(
        short,
        Shortfall {
            domains: 2,
            most: 1
        }
    );
    // Room taken after the bounds were computed is seen: r3 fills, and nothing fits anywhere.
    let one = [&big];
    let placed = r
        .place("rack", &one, &any, Some("r3"))
        .expect("r3 has room");
    r.commit(&placed, &one);
    let placed = r.place("rack", &one, &any, None).expect("r2 has room");
    assert_eq!(placed.domain, "r2");
    r.commit(&placed, &one);
    let short = r.place("rack", &one, &any, None).unwrap_err();
    assert_eq!(
        short,
        Shortfall {
            domains: 3,
            most: 0
        }
    );
    // A hold takes room too.
    let mut r = rooms(vec![node("n1", "r1", 4)]);
    assert!(r.place("rack", &one, &any, None).is_ok());
    assert!(r.hold("rack", "r1", &big));
    assert!(r.place("rack", &one, &any, None).is_err());
}

#[test]
fn hold_takes_room_on_the_first_node_of_the_domain_that_fits() {
    let mut r = rooms(vec![node("a1", "a", 2), node("a2", "a", 4)]);
    r.hold("rack", "a", &pod(3));
    assert_eq!(r.nodes[0].free.0["cpu"], 2000);
    assert_eq!(r.nodes[1].free.0["cpu"], 1000);
    r.hold("rack", "a", &pod(9));
    assert_eq!(r.nodes[1].free.0["cpu"], 1000, "fits nowhere: not counted");
}

proptest! {
    /// Skipping the domains none of whose nodes fits any pod changes nothing: gang after gang,
    /// with some nodes filtered out, the search finds the same domain and nodes, or the same
    /// shortfall, as the search that tries every domain.
    #[test]
    fn skipping_full_domains_finds_what_the_whole_search_finds(
        caps in prop::collection::vec((0usize..4, 0i64..9), 1..12),
        gangs in prop::collection::vec(prop::collection::vec(1i64..6, 1..5), 1..8),
        excluded in 0usize..12,
    ) {
        let nodes: Vec<NodeRoom> = caps.iter().enumerate()
            .map(|(i, (rack, cpu))| node(&format!("n{i}"), &format!("r{rack}"), *cpu))
            .collect();
        let mut skipping = rooms(nodes.clone());
        let mut whole = rooms(nodes);
        whole.skip_full = false;
        let excluded = format!("n{excluded}");
        let node_ok = |n: &NodeRoom| n.name != excluded;
        for sizes in &gangs {
            let pods: Vec<ResourceList> = sizes.iter().map(|s| pod(*s)).collect();
            let refs: Vec<&ResourceList> = pods.iter().collect();
            let found = skipping.place("rack", &refs, &node_ok, None);
            prop_assert_eq!(&found, &whole.place("rack", &refs, &node_ok, None));
            if let Ok(placed) = found {
                skipping.commit(&placed, &refs);
                whole.commit(&placed, &refs);
            }
        }
    }

    /// A placement never over-fills a node, puts every pod of the gang in the one domain it
    /// names, and a gang is refused only when no domain held all of it.
    #[test]
    fn placements_never_overfill_and_never_split(
        caps in prop::collection::vec((0usize..3, 0i64..9), 1..8),
        sizes in prop::collection::vec(1i64..5, 1..6),
    ) {
        let nodes: Vec<NodeRoom> = caps.iter().enumerate()
            .map(|(i, (rack, cpu))| node(&format!("n{i}"), &format!("r{rack}"), *cpu))
            .collect();
        let mut r = rooms(nodes);
        let pods: Vec<ResourceList> = sizes.iter().map(|s| pod(*s)).collect();
        let refs: Vec<&ResourceList> = pods.iter().collect();
        for _ in 0..3 {
            match r.place("rack", &refs, &any, None) {
                Ok(placed) => {
                    prop_assert_eq!(placed.nodes.len(), refs.len());
                    for &n in &placed.nodes {
                        prop_assert_eq!(&r.nodes[n].labels["rack"], &placed.domain);
                    }
                    r.commit(&placed, &refs);
                    for n in &r.nodes {
                        prop_assert!(n.free.0["cpu"] >= 0, "node {} over-filled", n.name);
                    }
                }
                Err(short) => {
                    prop_assert!((short.most as usize) < refs.len());
                    // Reference: a domain whose total room is below the gang's never fits, and
                    // one whose biggest node holds the whole gang always does.
                    let total: i64 = sizes.iter().sum::<i64>() * 1000;
                    for n in &r.nodes {
                        prop_assert!(n.free.0["cpu"] < total, "{} alone could hold the gang", n.name);
                    }
                    break;
                }
            }
        }
    }
}

#[test]
fn node_room_is_allocatable_less_bound_pods_and_cordoned_nodes_have_none() {
    let node = |name: &str, cordoned: bool, cpu: &str| -> std::sync::Arc<Node> {
        std::sync::Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"rack": "a"}},
                "spec": {"unschedulable": cordoned},
                "status": {"allocatable": {"cpu": cpu, "pods": "110", "memory": "lots"}},
            }))
            .expect("node"),
        )
    };
    let nodes = [
        node("b", false, "4"),
        node("a", false, "2"),
        node("c", true, "8"),
    ];
    let two = pod(2);
    let bound = [("b", &two), ("gone", &two)];
    let topology = Topology::from_nodes(&nodes, bound.iter().map(|(n, r)| (*n, *r)));
    let names: Vec<&str> = topology.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "sorted, the cordoned node left out");
    assert_eq!(topology.nodes[1].free.0["cpu"], 2000);
    assert_eq!(topology.nodes[1].free.0["pods"], 109_000);
    assert!(
        !topology.nodes[0].free.0.contains_key("memory"),
        "unreadable: no room"
    );
}

#[test]
fn room_held_on_given_nodes_is_gone_for_the_domains_and_for_placing_on_nodes() {
    let mut r = rooms(vec![node("n0", "a", 4), node("n1", "b", 4)]);
    let one = pod(3);
    // The bounds of rack a are computed, then its node's room is held: a is full now.
    assert!(r.place("rack", &[&one], &any, Some("a")).is_ok());
    assert!(r.hold_where(&|n: &NodeRoom| n.name == "n0", &pod(2)));
    assert!(r.place("rack", &[&one], &any, Some("a")).is_err());
    assert!(
        !r.hold_where(&|n: &NodeRoom| n.name == "n0", &pod(3)),
        "no room left"
    );
    // Placing on nodes: only those the filter accepts, first-fit; a shortfall says how many fit.
    let on_n1 = |n: &NodeRoom| n.name == "n1";
    let placed = r
        .place_on(&[&pod(2), &pod(2)], &on_n1)
        .expect("n1 holds both");
    assert_eq!(placed.nodes, vec![1, 1]);
    let short = r
        .place_on(&[&pod(3), &pod(3)], &on_n1)
        .expect_err("n1 holds one");
    assert_eq!((short.domains, short.most), (1, 1));
}
