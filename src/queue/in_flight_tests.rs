//! A pod whose ungate is in flight (decided, patched, not yet seen ungated by the watch) counts as
//! admitted where its pass pinned it: in its flavor, in its gang's topology domain. The cache still
//! shows it gated and unpinned, so without its pins the next pass charged it to the queue's first
//! flavor and placed the rest of its gang as if it were nowhere (issue 37's e2e saw gangs split
//! over two racks).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::api::{
    ADMISSION_GATE, CapacityQueue, MIN_COUNT_ANNOTATION, QUEUE_LABEL, ResourceFlavor,
    TOPOLOGY_REQUIRED_ANNOTATION, WORKLOAD_LABEL,
};
use crate::queue::admission::{Decisions, decide_with};
use crate::queue::pod_cache::CachedPod;
use crate::queue::snapshot::{self, Built, InFlight, Pins};
use crate::queue::topology::{NodeRoom, Topology};
use crate::resources::ResourceList;

/// A gated pod of workload `workload` in queue `q`, with `annotations`.
fn gated(name: &str, workload: &str, cpu: &str, annotations: serde_json::Value) -> Arc<CachedPod> {
    let pod = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name,
            "creationTimestamp": "2026-11-29T00:00:00Z",
            "labels": {QUEUE_LABEL: "q", WORKLOAD_LABEL: workload},
            "annotations": annotations},
        "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Pending"},
    });
    Arc::new(CachedPod::from_pod(
        serde_json::from_value(pod).expect("pod"),
    ))
}

fn queue(spec: serde_json::Value) -> Arc<CapacityQueue> {
    let queue = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
        "metadata": {"name": "q"}, "spec": spec});
    Arc::new(serde_json::from_value(queue).expect("queue"))
}

/// The names of the pods a pass admits, with the domain and flavor each is pinned to.
fn admitted(built: &Built, decisions: &Decisions) -> BTreeMap<String, (String, String)> {
    (decisions.admit.iter())
        .map(|r| {
            let pod = &built.pods[r.workload][r.pod_set][r.pod];
            let domain = decisions.domains.get(r).map(|d| d.to_string());
            let flavor = decisions.flavors.get(r).map(|f| f.name.clone());
            (
                pod.metadata.name.clone().unwrap_or_default(),
                (domain.unwrap_or_default(), flavor.unwrap_or_default()),
            )
        })
        .collect()
}

/// Rack r1: two nodes of 2 cpu; rack r2: two of 3 cpu.
fn racks() -> Topology {
    let node = |i: usize, rack: &str, cpu: i64| NodeRoom {
        name: format!("n{i}"),
        labels: BTreeMap::from([("rack".to_string(), rack.to_string())]),
        free: ResourceList(BTreeMap::from([
            ("cpu".to_string(), cpu * 1000),
            ("pods".to_string(), 110_000),
        ])),
    };
    Topology {
        nodes: vec![
            node(0, "r1", 2),
            node(1, "r1", 2),
            node(2, "r2", 3),
            node(3, "r2", 3),
        ],
        ..Topology::default()
    }
}

/// The e2e's gang: 4 pods of 1.5 cpu asking for one rack (only r2 holds them), created one by one.
/// The first was admitted into r2 and its ungate is in flight when the other three come: they go
/// to r2 as well, not to r1, the tighter fit for one pod alone.
#[test]
fn the_rest_of_a_gang_joins_the_domain_its_first_pod_in_flight_was_pinned_to() {
    let asks = json!({MIN_COUNT_ANNOTATION: "4", TOPOLOGY_REQUIRED_ANNOTATION: "rack"});
    let pods: Vec<Arc<CachedPod>> = (0..4)
        .map(|i| gated(&format!("a-{i}"), "a", "1500m", asks.clone()))
        .collect();
    let mut in_flight = InFlight::default();
    let pins = Pins {
        domain: Some(Arc::from("rack=r2")),
        ..Pins::default()
    };
    in_flight.insert("a-0".into(), pins);
    let queues = [queue(json!({"quota": {"cpu": "20"}}))];
    let built = snapshot::build(&queues, &[], &pods, &[], &in_flight);
    let decisions = decide_with(&built.snapshot, Some(&racks()));
    let expected: BTreeMap<String, (String, String)> = (1..4)
        .map(|i| (format!("a-{i}"), ("rack=r2".into(), String::new())))
        .collect();
    assert_eq!(admitted(&built, &decisions), expected);
}

/// A pod admitted in flavor `b` and in flight is charged to `b`, not to the queue's first flavor:
/// `b` (4 cpu) then has 2 cpu left and `a` (2 cpu) all of its own, so a 3-cpu pod fits neither
/// and waits. Charged to `a`, it let the 3-cpu pod into `b`: 5 cpu of a 4-cpu flavor.
#[test]
fn a_pod_in_flight_is_charged_to_the_flavor_it_was_admitted_in() {
    let flavors: Vec<Arc<ResourceFlavor>> = ["a", "b"]
        .iter()
        .map(|name| {
            let flavor = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ResourceFlavor",
                "metadata": {"name": name}, "spec": {"nodeLabels": {"pool": name}}});
            Arc::new(serde_json::from_value(flavor).expect("flavor"))
        })
        .collect();
    let queues = [queue(json!({"flavors": [
        {"name": "a", "quota": {"cpu": "2"}},
        {"name": "b", "quota": {"cpu": "4"}},
    ]}))];
    let pods = vec![
        gated("first", "w1", "2", json!({})),
        gated("big", "w2", "3", json!({})),
    ];
    let mut in_flight = InFlight::default();
    let pins = Pins {
        flavor: Some(Arc::from("b")),
        ..Pins::default()
    };
    in_flight.insert("first".into(), pins);
    let mut built = snapshot::build(&queues, &[], &pods, &[], &in_flight);
    snapshot::resolve_flavors(&mut built.snapshot, &flavors);
    let decisions = decide_with(&built.snapshot, None);
    assert_eq!(admitted(&built, &decisions), BTreeMap::new());
    let usage = &decisions.queues["q"].usage;
    assert_eq!(
        (usage.get("a:cpu"), usage.get("b:cpu")),
        (0, 2000),
        "{usage:?}"
    );
}
