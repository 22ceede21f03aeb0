//! The pass's pure part, without I/O: the room held at creation, the queues paused while the pass
//! may admit in them, and the decision (every group, or only the changed ones). The model-based
//! test (`model_tests.rs`) runs the same glue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use tracing::{debug, warn};

use crate::api::{AdmissionTiming, CapacityQueue, DynamicWorkload};
use crate::queue::admission::{Decisions, QueueTally, WorkloadKey, decide_with};
use crate::queue::at_creation::{AdmitAtCreation, PassMark, VisibleToken};
use crate::queue::data_locality::{DataNodes, DataSource};
use crate::queue::incremental::Snapshotter;
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built};
use crate::queue::status::{self};
use crate::queue::topology::Topology;
use crate::resources::ResourceList;

/// What one pass reads from the caches (besides admission at creation's holds).
pub(crate) struct PassInputs<'a> {
    pub queues: &'a [Arc<CapacityQueue>],
    /// The ResourceFlavors the queues' flavors name.
    pub flavors: &'a [Arc<crate::api::ResourceFlavor>],
    pub workloads: &'a [Arc<DynamicWorkload>],
    pub pods: &'a [Arc<CachedPod>],
    /// `facts[i]` of `pods[i]` (see [`snapshot::PodMemo`]).
    pub facts: &'a [Option<Arc<snapshot::PodFacts>>],
    pub namespaces: &'a [Arc<PartialObjectMeta<Namespace>>],
    /// The nodes (trimmed: labels, allocatable, cordon), for gangs that ask for a topology domain.
    pub nodes: &'a [Arc<k8s_openapi::api::core::v1::Node>],
    /// Pods sluice does not govern, bound to a node (read with `nodes` only).
    pub bound_elsewhere: &'a [Arc<crate::queue::bound_pods::BoundPod>],
    /// Where the data of the gated pods' data asks is (`controller/data.rs`).
    pub data: &'a HashMap<(String, DataSource), DataNodes>,
    /// Uids of pods whose ungate is in flight.
    pub in_flight: &'a snapshot::InFlight,
    /// Uids of pods a PodDisruptionBudget protects from eviction.
    pub eviction_blocked: &'a HashSet<String>,
}

/// What a pass decided, before anything is applied: the mark for [`AdmitAtCreation::publish`]
/// (None without admission at creation), the snapshot, the decisions, the podsReadyTimeout rules.
pub(crate) struct PassPlan {
    pub mark: Option<PassMark>,
    /// Room admission at creation holds for pods the cache does not show yet, per queue (already
    /// taken off the snapshot's quotas).
    pub holds: HashMap<String, ResourceList>,
    pub built: Built,
    pub decisions: Decisions,
    pub rules: HashMap<String, (i64, Option<i32>)>,
    /// Per workload of `built`, whether this pass decided its group; None: it decided every group
    /// (a full pass). Otherwise `built` and `decisions` are lent by the [`Snapshotter`], to be
    /// given back after the pass.
    /// (A workload of a group whose decisions were reused has the status it had.)
    pub decided: Option<Vec<bool>>,
}

/// How a pass builds its snapshot and decides.
pub(crate) enum PassWay<'a> {
    /// Everything, from the inputs.
    Full,
    /// Only what changed since the last pass: the [`Snapshotter`] was told of every pod and
    /// DynamicWorkload change (the inputs' pods and workloads are not read again); the queues,
    /// namespaces, in-flight and protected pods, requeues and holds reach it here.
    Incremental(&'a mut Snapshotter),
}

/// The pure part of a pass, after the caches were read at `read_at`: admission at creation's holds
/// taken (and those of pods the cache shows dropped), the snapshot built, the holds taken off
/// their queues' quotas, the pods a disruption budget protects marked, pending requeues
/// (`pending_requeues`, asked only when a queue has a podsReadyTimeout) applied, and the decision,
/// all of it or only what changed (`way`). The controller applies the plan; the model-based test
/// (`queue::model_tests`) runs this same glue, both ways.
pub(crate) fn plan_pass(
    at_creation: Option<&AdmitAtCreation>,
    inputs: PassInputs<'_>,
    read_at: std::time::Instant,
    pending_requeues: impl FnOnce() -> HashMap<WorkloadKey, status::Preemption>,
    way: PassWay<'_>,
) -> PassPlan {
    let (mark, holds) = take_holds(at_creation, &inputs, read_at);
    let rules = ready::rules(inputs.queues);
    let pending = if rules.is_empty() {
        HashMap::new()
    } else {
        pending_requeues()
    };
    let ((built, decisions), decided) = match way {
        PassWay::Full => (decide_all(&inputs, &holds, &rules, &pending), None),
        PassWay::Incremental(snapshotter) => {
            let (built, decisions, decided) =
                decide_changed(snapshotter, &inputs, &holds, &rules, pending);
            ((built, decisions), Some(decided))
        }
    };
    PassPlan {
        mark,
        holds,
        built,
        decisions,
        rules,
        decided,
    }
}

/// Admission at creation's part of a pass, after the pod cache was read at `read_at`: pauses the
/// queues that may admit gated pods, drops the holds of pods the cache shows, and returns the
/// mark for [`AdmitAtCreation::publish`] and the holds left per queue.
pub(crate) fn take_holds(
    at_creation: Option<&AdmitAtCreation>,
    inputs: &PassInputs<'_>,
    read_at: std::time::Instant,
) -> (Option<PassMark>, HashMap<String, ResourceList>) {
    let Some(at_creation) = at_creation else {
        return (None, HashMap::new());
    };
    at_creation.pause(queues_admitting_gated(
        inputs.queues,
        inputs.pods,
        inputs.facts,
    ));
    let visible = inputs.facts.iter().flatten().filter_map(|f| {
        Some(VisibleToken {
            token: f.at_creation_token.as_deref()?,
            namespace: &f.key.namespace,
            name: &f.name,
            queue: &f.queue,
        })
    });
    let (mark, holds) = at_creation.holds_for_pass(read_at, visible);
    (Some(mark), holds)
}

/// The full build and decision over every input.
pub(crate) fn decide_all(
    inputs: &PassInputs<'_>,
    holds: &HashMap<String, ResourceList>,
    rules: &HashMap<String, (i64, Option<i32>)>,
    pending: &HashMap<WorkloadKey, status::Preemption>,
) -> (Built, Decisions) {
    let mut built = snapshot::build_from_facts(
        inputs.queues,
        inputs.workloads,
        inputs.pods,
        inputs.facts,
        inputs.namespaces,
        inputs.in_flight,
    );
    for problem in &built.problems {
        warn!(problem, "object skipped in admission pass");
    }
    snapshot::resolve_flavors(&mut built.snapshot, inputs.flavors);
    snapshot::subtract_holds(&mut built.snapshot, holds);
    snapshot::mark_eviction_blocked(&mut built, inputs.eviction_blocked);
    if !rules.is_empty() {
        ready::apply_pending_requeues(&mut built, rules, pending);
    }
    // The nodes' room only when a gated pod asks for a topology domain: no work per node else.
    let topology = wants_topology(inputs.pods, inputs.facts).then(|| nodes_room(inputs));
    let decisions = decide_with(&built.snapshot, topology.as_ref());
    (built, decisions)
}

/// Whether a gated pod asks for a topology domain (the pass then is a full one: the nodes' room
/// is shared by every queue, see `admission/topology.rs`).
pub(crate) fn wants_topology(
    pods: &[Arc<CachedPod>],
    facts: &[Option<Arc<snapshot::PodFacts>>],
) -> bool {
    (pods.iter().zip(facts)).any(|(pod, facts)| {
        pod.admission_gate.is_some()
            && facts
                .as_deref()
                .and_then(|f| f.topology.as_deref())
                .is_some_and(|t| t.asks())
    })
}

/// Each node's room: its allocatable less the requests of the pods bound to it that have not
/// ended, governed or not.
fn nodes_room(inputs: &PassInputs<'_>) -> Topology {
    let bound = (inputs.pods.iter().zip(inputs.facts)).filter_map(|(pod, facts)| {
        let facts = facts.as_deref()?;
        let ended = matches!(pod.phase(), Some("Succeeded" | "Failed"));
        let requests = facts.requests.as_ref().ok()?;
        (!ended).then_some((facts.node_name.as_deref()?, &**requests))
    });
    let elsewhere = inputs.bound_elsewhere.iter().filter_map(|p| p.holds());
    let mut topology = Topology::from_nodes(inputs.nodes, bound.chain(elsewhere));
    topology.data = inputs.data.clone();
    topology
}

/// The same through the [`Snapshotter`]: the workloads that changed built again, the groups that
/// changed decided again, the rest reused; the whole lent for what acts on it (to be given back:
/// [`Snapshotter::give_back`]), with per workload whether this pass decided its group.
pub(crate) fn decide_changed(
    snapshotter: &mut Snapshotter,
    inputs: &PassInputs<'_>,
    holds: &HashMap<String, ResourceList>,
    rules: &HashMap<String, (i64, Option<i32>)>,
    pending: HashMap<WorkloadKey, status::Preemption>,
) -> (Built, Decisions, Vec<bool>) {
    snapshotter.set_queues(inputs.queues.to_vec());
    snapshotter.set_flavors(inputs.flavors.to_vec());
    snapshotter.set_namespaces(inputs.namespaces.to_vec());
    snapshotter.set_in_flight(inputs.in_flight.clone());
    snapshotter.set_eviction_blocked(inputs.eviction_blocked.clone());
    snapshotter.set_pending_requeues(rules.clone(), pending);
    snapshotter.set_holds(holds.clone());
    let (problems, stats) = snapshotter.pass();
    for problem in &problems {
        warn!(problem, "object skipped in admission pass");
    }
    debug!(
        built = stats.built,
        decided = stats.decided,
        reused = stats.reused,
        "incremental pass"
    );
    let decided = snapshotter.decider.decided_mask();
    let (built, decisions) = snapshotter.lend();
    log_waiting_queues(&decisions, holds);
    (built, decisions, decided)
}

/// At debug, a pass's figures for each queue in which something waits: what an operator (or the
/// churn run's auditor) compares with its own count when a pod waits longer than expected. Room
/// held at creation lowers the queue's quota for the pass and shows nowhere else.
fn log_waiting_queues(decisions: &Decisions, holds: &HashMap<String, ResourceList>) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for (queue, tally) in decisions.queues.iter().filter(|(_, t)| t.has_waiting()) {
        debug!(
            queue,
            usage = ?tally.usage.0,
            reserved = ?tally.reserved.0,
            borrowed = ?tally.borrowed.0,
            lent = ?tally.lent.0,
            held_at_creation = ?holds.get(queue).map(|h| &h.0),
            pending_pods = tally.pending_pods,
            admitted_pods = tally.admitted_pods,
            "queue after the pass"
        );
    }
}

/// The queues in which a pass over `pods` may admit a gated pod: the queue of each workload with a
/// gated pod (its first pod's, as the snapshot groups them), and every queue of such a queue's
/// cohort (a pass may lend it their room).
fn queues_admitting_gated(
    queues: &[Arc<CapacityQueue>],
    pods: &[Arc<CachedPod>],
    facts: &[Option<Arc<snapshot::PodFacts>>],
) -> HashSet<String> {
    let mut first: HashMap<&WorkloadKey, &str> = HashMap::new();
    let mut gated: HashSet<&WorkloadKey> = HashSet::new();
    for (pod, fact) in pods.iter().zip(facts) {
        let Some(fact) = fact else {
            continue;
        };
        first.entry(&fact.key).or_insert(fact.queue.as_str());
        if snapshot::is_gated(pod) {
            gated.insert(&fact.key);
        }
    }
    let mut names: HashSet<String> = gated
        .iter()
        .filter_map(|key| first.get(key))
        .map(|q| q.to_string())
        .collect();
    let cohorts: HashSet<&str> = queues
        .iter()
        .filter(|q| names.contains(&q.name_any()))
        .filter_map(|q| q.spec.cohort.as_deref())
        .collect();
    names.extend(
        queues
            .iter()
            .filter(|q| {
                q.spec
                    .cohort
                    .as_deref()
                    .is_some_and(|c| cohorts.contains(c))
            })
            .map(|q| q.name_any()),
    );
    names
}

/// The queues that admit at creation, each with whether it takes pods from every namespace.
pub(crate) fn open_queues(queues: &[Arc<CapacityQueue>]) -> HashMap<String, bool> {
    queues
        .iter()
        .filter(|q| q.spec.admission == AdmissionTiming::AtCreation)
        .map(|q| (q.name_any(), q.spec.namespace_selector.is_none()))
        .collect()
}

/// Whether the next change may admit something: a queue with something still gated, pods admitted
/// now, or ungates still in flight from earlier passes. (The same per-queue test admission at
/// creation uses; a gated pod of a queue that does not exist yet waits for the queue, whose
/// creation starts a pass within the idle interval.)
pub(super) fn still_waiting(in_flight: &snapshot::InFlight, decisions: &Decisions) -> bool {
    !in_flight.is_empty()
        || !decisions.admit.is_empty()
        || decisions.queues.values().any(QueueTally::has_waiting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::QueueingStrategy;
    use crate::api::{ADMISSION_GATE, QUEUE_LABEL};
    use crate::integrations::Adapters;
    use crate::queue::admission::{QueueSnapshot, Snapshot};
    use crate::queue::bound_pods::BoundPod;
    use serde_json::json;
    #[test]
    fn room_held_at_creation_comes_off_its_queues_quota_only() {
        let quota = |cpu: i64| {
            let mut r = ResourceList::new();
            r.add("cpu", cpu);
            r
        };
        let queue = |name: &str| QueueSnapshot {
            name: name.into(),
            quota: quota(4000),
            strategy: QueueingStrategy::BestEffortFIFO,
            preemption: Default::default(),
            cohort: None,
            flavors: Vec::new(),
        };
        let mut snapshot = Snapshot {
            queues: vec![queue("a"), queue("b")],
            workloads: Vec::new(),
        };
        let mut held = quota(1500);
        held.add("memory", 1); // not in the quota: nothing to take it from
        snapshot::subtract_holds(&mut snapshot, &HashMap::from([("a".to_string(), held)]));
        assert_eq!(snapshot.queues[0].quota, quota(2500));
        assert_eq!(snapshot.queues[1].quota, quota(4000));
    }

    /// Issue 23: the queues a pass pauses admission at creation in (see `AdmitAtCreation::pause`).
    #[test]
    fn a_pass_pauses_the_queues_of_gated_workloads_and_their_cohorts_only() {
        let queue = |name: &str, cohort: Option<&str>| -> Arc<CapacityQueue> {
            let mut spec = json!({"quota": {"cpu": "4"}});
            if let Some(cohort) = cohort {
                spec["cohort"] = json!(cohort);
            }
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))
                    .expect("queue"),
            )
        };
        let queues = [
            queue("solo", None),
            queue("idle", None),
            queue("a", Some("c")),
            queue("b", Some("c")),
            queue("other", Some("d")),
        ];
        let pod = |name: &str, queue: &str, workload: &str, gated: bool| -> Arc<CachedPod> {
            let gates = if gated {
                json!([{"name": ADMISSION_GATE}])
            } else {
                json!([])
            };
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns",
                        "labels": {QUEUE_LABEL: queue, "sluice.dev/workload": workload}},
                    "spec": {"schedulingGates": gates, "containers": [{"name": "c", "image": "i"}]}
                }))
                .expect("pod"),
            )
        };
        let pods = [
            pod("s1", "solo", "ws", true),
            pod("i1", "idle", "wi", false),
            // A workload's queue is its first pod's: a gated pod labelled "other" pauses "b".
            pod("b1", "b", "wb", false),
            pod("b2", "other", "wb", true),
        ];
        let facts = snapshot::PodMemo.refresh(&Adapters::default(), &pods);
        let paused = queues_admitting_gated(&queues, &pods, &facts);
        let mut paused: Vec<&str> = paused.iter().map(String::as_str).collect();
        paused.sort();
        assert_eq!(paused, ["a", "b", "solo"]);
    }

    /// A node's room: allocatable less every pod bound there that has not ended, sluice's own and
    /// the ones it does not govern.
    #[test]
    fn a_nodes_room_is_less_every_bound_pod_governed_or_not() {
        let node = |name: &str| -> Arc<k8s_openapi::api::core::v1::Node> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name},
                    "status": {"allocatable": {"cpu": "8"}}}))
                .expect("node"),
            )
        };
        let spec = |node: &str, cpu: &str| {
            json!({"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}}}]})
        };
        let governed = |name: &str, node: &str, cpu: &str, phase: &str| -> Arc<CachedPod> {
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "ns", "labels": {QUEUE_LABEL: "q"}},
                    "spec": spec(node, cpu), "status": {"phase": phase}}))
                .expect("pod"),
            )
        };
        let other = |name: &str, node: &str, cpu: &str| {
            let pod = json!({"metadata": {"name": name, "namespace": "kube-system"},
                "spec": spec(node, cpu)});
            Arc::new(serde_json::from_value::<BoundPod>(pod).expect("bound pod"))
        };
        let nodes = [node("n1"), node("n2")];
        let pods = [
            governed("a", "n1", "2", "Running"),
            governed("done", "n1", "3", "Succeeded"),
        ];
        let facts = snapshot::PodMemo.refresh(&Adapters::default(), &pods);
        let bound_elsewhere = [other("ds", "n1", "1"), other("svc", "n2", "500m")];
        let (data, in_flight, blocked) = (HashMap::new(), Default::default(), HashSet::new());
        let inputs = PassInputs {
            queues: &[],
            flavors: &[],
            workloads: &[],
            pods: &pods,
            facts: &facts,
            namespaces: &[],
            nodes: &nodes,
            bound_elsewhere: &bound_elsewhere,
            data: &data,
            in_flight: &in_flight,
            eviction_blocked: &blocked,
        };
        let room = nodes_room(&inputs);
        let free: Vec<(&str, i64)> = (room.nodes.iter())
            .map(|n| (n.name.as_str(), n.free.get("cpu")))
            .collect();
        assert_eq!(free, [("n1", 5000), ("n2", 7500)]);
    }

    #[test]
    fn a_pass_still_waits_while_anything_is_gated_admitted_now_or_in_flight() {
        let mut decisions = Decisions::default();
        assert!(!still_waiting(&Default::default(), &decisions));
        assert!(still_waiting(
            &["uid".to_string()].into_iter().collect(),
            &decisions
        ));
        decisions.queues.insert(
            "q".into(),
            QueueTally {
                pending_pods: 1,
                ..QueueTally::default()
            },
        );
        assert!(still_waiting(&Default::default(), &decisions));
    }
}
