//! Property test of the incremental pass (`queue::incremental`): random clusters changed by random
//! steps (pods added, removed, ungated, ended, deleted; DynamicWorkloads recorded and removed;
//! quotas changed; ungates in flight; pods protected by a disruption budget; room held by admission
//! at creation; podsReadyTimeout requeues pending), with an incremental pass now and then. After every pass,
//! what the incremental pass built and decided, workload by workload, queue by queue, and the pods
//! it admits and evicts in order, is exactly what the full pass (`snapshot::build_from_facts` over
//! every pod, then `decide`) builds and decides over the same cluster.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use serde_json::json;

use crate::api::{ADMISSION_GATE, CapacityQueue, DynamicWorkload};
use crate::queue::admission::{Decisions, WorkloadKey, decide};
use crate::queue::incremental::Snapshotter;
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built};
use crate::queue::status::Preemption;
use crate::resources::ResourceList;

const QUEUES: [(&str, Option<&str>, &str); 3] = [
    ("solo", None, "StrictFIFO"),
    ("a", Some("c"), "BestEffortFIFO"),
    ("b", Some("c"), "BestEffortFIFO"),
];
/// Queue names pods may carry: the three queues and one that does not exist.
const QUEUE_NAMES: [&str; 4] = ["solo", "a", "b", "missing"];

#[derive(Clone, Debug)]
struct PodDef {
    ns: usize,
    workload: usize,
    queue: usize,
    set: usize,
    min: u32,
    half_cpus: i64,
    priority: i32,
    /// 0 gated, 1 running, 2 succeeded, 3 running and being deleted.
    state: u8,
    created: u8,
}

#[derive(Clone, Debug)]
enum Op {
    AddPod(PodDef),
    Remove(prop::sample::Index),
    Restate(prop::sample::Index, u8),
    Quota(usize, i64),
    Record {
        ns: usize,
        workload: usize,
        queue: usize,
        priority: i32,
        min: u32,
    },
    Unrecord(usize, usize),
    InFlight(prop::sample::Index),
    /// A pod a disruption budget protects, or no longer.
    Block(prop::sample::Index),
    /// Room admission at creation holds in a queue (0: none).
    Hold(usize, i64),
    /// A podsReadyTimeout requeue sent for a workload, not shown by its status yet (or no more).
    Requeue(usize, usize, u8),
    Pass,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let pod = (
        (0..2usize, 0..5usize, 0..4usize, 0..2usize, 0..3u32),
        (1..4i64, 0..3i32, 0..3u8, 0..4u8),
    )
        .prop_map(
            |((ns, workload, queue, set, min), (half_cpus, priority, state, created))| PodDef {
                ns,
                workload,
                queue,
                set,
                min,
                half_cpus,
                priority,
                state,
                created,
            },
        );
    prop_oneof![
        5 => pod.prop_map(Op::AddPod),
        1 => any::<prop::sample::Index>().prop_map(Op::Remove),
        3 => (any::<prop::sample::Index>(), 0..4u8).prop_map(|(i, s)| Op::Restate(i, s)),
        1 => (0..3usize, 1..12i64).prop_map(|(q, c)| Op::Quota(q, c)),
        1 => (0..2usize, 0..5usize, 0..4usize, 0..3i32, 0..3u32).prop_map(
            |(ns, workload, queue, priority, min)| Op::Record { ns, workload, queue, priority, min }
        ),
        1 => (0..2usize, 0..5usize).prop_map(|(ns, w)| Op::Unrecord(ns, w)),
        1 => any::<prop::sample::Index>().prop_map(Op::InFlight),
        1 => any::<prop::sample::Index>().prop_map(Op::Block),
        1 => (0..3usize, 0..4i64).prop_map(|(q, h)| Op::Hold(q, h)),
        1 => (0..2usize, 0..5usize, 0..3u8).prop_map(|(ns, w, at)| Op::Requeue(ns, w, at)),
        2 => Just(Op::Pass),
    ]
}

fn pod_object(uid: &str, def: &PodDef) -> Arc<CachedPod> {
    let gates = if def.state == 0 {
        json!([{"name": ADMISSION_GATE}])
    } else {
        json!([])
    };
    let phase = match def.state {
        0 => "Pending",
        2 => "Succeeded",
        _ => "Running",
    };
    let mut metadata = json!({
        "name": format!("p-{uid}"), "namespace": format!("ns{}", def.ns), "uid": uid,
        "resourceVersion": "1",
        "creationTimestamp": format!("2026-11-23T00:00:0{}Z", def.created),
        "labels": {"sluice.dev/queue": QUEUE_NAMES[def.queue],
            "sluice.dev/workload": format!("w{}", def.workload),
            "sluice.dev/pod-set": format!("s{}", def.set)},
    });
    if def.min > 0 {
        metadata["annotations"] = json!({"sluice.dev/min-count": def.min.to_string()});
    }
    if def.state == 3 {
        metadata["deletionTimestamp"] = json!("2026-11-23T00:01:00Z");
    }
    let pod: Pod = serde_json::from_value(json!({
            "metadata": metadata,
            "spec": {"priority": def.priority, "schedulingGates": gates,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{}m", def.half_cpus * 500)}}}]},
            "status": {"phase": phase},
        }))
        .expect("pod");
    Arc::new(CachedPod::from_pod(pod))
}

fn queue_object(q: usize, quota_halves: i64) -> Arc<CapacityQueue> {
    let (name, cohort, strategy) = QUEUES[q];
    let mut spec =
        json!({"quota": {"cpu": format!("{}m", quota_halves * 500)}, "queueingStrategy": strategy});
    if let Some(c) = cohort {
        spec["cohort"] = json!(c);
    } else {
        // The queue outside the cohort sends back workloads whose pods do not run in time, once.
        spec["podsReadyTimeout"] = json!("5m");
        spec["requeueLimit"] = json!(1);
    }
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": name}, "spec": spec}),
        )
        .expect("queue"),
    )
}

fn dwl_object(
    ns: usize,
    workload: usize,
    queue: usize,
    priority: i32,
    min: u32,
) -> Arc<DynamicWorkload> {
    Arc::new(
        serde_json::from_value(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "metadata": {"name": format!("w{workload}"), "namespace": format!("ns{ns}"),
                "creationTimestamp": "2026-11-23T00:00:02Z"},
            "spec": {"queueName": QUEUE_NAMES[queue], "priority": priority,
                "podSets": [{"name": "s0", "requests": {"cpu": "1"}, "minCount": min}]}}),
        )
        .expect("dwl"),
    )
}

/// The cluster as the API server holds it.
struct World {
    quotas: [i64; 3],
    pods: BTreeMap<String, (PodDef, Arc<CachedPod>)>,
    dwls: BTreeMap<WorkloadKey, Arc<DynamicWorkload>>,
    in_flight: HashSet<String>,
    blocked: HashSet<String>,
    holds: HashMap<String, ResourceList>,
    requeues: HashMap<WorkloadKey, Preemption>,
    next: u32,
}

impl World {
    fn queues(&self) -> Vec<Arc<CapacityQueue>> {
        (0..3).map(|q| queue_object(q, self.quotas[q])).collect()
    }

    /// Applies one step to the world and, as the watches would, to the incremental state.
    fn apply(&mut self, op: &Op, inc: &mut Snapshotter) {
        match op {
            Op::AddPod(def) => {
                self.next += 1;
                let uid = format!("u{:04}", self.next);
                let pod = pod_object(&uid, def);
                inc.put_pod(pod.clone());
                self.pods.insert(uid, (def.clone(), pod));
            }
            Op::Remove(i) => {
                if let Some(uid) = self.pick(i) {
                    self.pods.remove(&uid);
                    inc.remove_pod(&uid);
                }
            }
            Op::Restate(i, state) => {
                if let Some(uid) = self.pick(i)
                    && let Some((def, pod)) = self.pods.get_mut(&uid)
                {
                    def.state = *state;
                    *pod = pod_object(&uid, def);
                    inc.put_pod(pod.clone());
                }
            }
            Op::Quota(q, halves) => {
                self.quotas[*q] = *halves;
                inc.set_queues(self.queues());
            }
            Op::Record {
                ns,
                workload,
                queue,
                priority,
                min,
            } => {
                let dwl = dwl_object(*ns, *workload, *queue, *priority, *min);
                let key = WorkloadKey {
                    namespace: format!("ns{ns}"),
                    name: format!("w{workload}"),
                };
                inc.put_workload(dwl.clone());
                self.dwls.insert(key, dwl);
            }
            Op::Unrecord(ns, workload) => {
                let key = WorkloadKey {
                    namespace: format!("ns{ns}"),
                    name: format!("w{workload}"),
                };
                self.dwls.remove(&key);
                inc.remove_workload(&key);
            }
            Op::InFlight(i) => {
                if let Some(uid) = self.pick(i)
                    && !self.in_flight.remove(&uid)
                {
                    self.in_flight.insert(uid);
                }
                inc.set_in_flight(self.in_flight.iter().cloned().collect());
            }
            Op::Block(_) | Op::Hold(..) | Op::Requeue(..) => self.apply_pass_input(op, inc),
            Op::Pass => {}
        }
    }

    /// The steps that change what a pass reads beside pods and DynamicWorkloads: protected pods,
    /// holds, pending requeues.
    fn apply_pass_input(&mut self, op: &Op, inc: &mut Snapshotter) {
        match op {
            Op::Block(i) => {
                if let Some(uid) = self.pick(i)
                    && !self.blocked.remove(&uid)
                {
                    self.blocked.insert(uid);
                }
                inc.set_eviction_blocked(self.blocked.clone());
            }
            Op::Hold(q, halves) => {
                let queue = QUEUES[*q].0.to_string();
                if *halves == 0 {
                    self.holds.remove(&queue);
                } else {
                    let held = ResourceList::from_quantities(&BTreeMap::from([(
                        "cpu".to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!(
                            "{}m",
                            halves * 500
                        )),
                    )]))
                    .expect("cpu");
                    self.holds.insert(queue, held);
                }
                inc.set_holds(self.holds.clone());
            }
            Op::Requeue(ns, workload, at) => {
                let key = WorkloadKey {
                    namespace: format!("ns{ns}"),
                    name: format!("w{workload}"),
                };
                if *at == 0 {
                    self.requeues.remove(&key);
                } else {
                    let preemption = Preemption {
                        by: key.to_string(),
                        reason: ready::REASON.to_string(),
                        queue: "solo".into(),
                        needed: String::new(),
                        pods: 1,
                        at: format!("2026-11-23T00:00:0{at}Z"),
                    };
                    self.requeues.insert(key, preemption);
                }
                inc.set_pending_requeues(ready::rules(&self.queues()), self.requeues.clone());
            }
            _ => {}
        }
    }

    fn pick(&self, i: &prop::sample::Index) -> Option<String> {
        (!self.pods.is_empty()).then(|| {
            let at = i.index(self.pods.len());
            self.pods.keys().nth(at).cloned().unwrap_or_default()
        })
    }

    /// The full pass: every pod (in name order, as the incremental state keeps them), built and
    /// decided.
    fn full(&self) -> (Built, Decisions) {
        let pods: Vec<Arc<CachedPod>> = self.pods.values().map(|(_, p)| p.clone()).collect();
        let facts: Vec<_> = pods.iter().map(|p| p.facts.clone()).collect();
        let dwls: Vec<_> = self.dwls.values().cloned().collect();
        let queues = self.queues();
        let in_flight = self.in_flight.iter().cloned().collect();
        let mut built = snapshot::build_from_facts(&queues, &dwls, &pods, &facts, &[], &in_flight);
        snapshot::subtract_holds(&mut built.snapshot, &self.holds);
        snapshot::mark_eviction_blocked(&mut built, &self.blocked);
        ready::apply_pending_requeues(&mut built, &ready::rules(&queues), &self.requeues);
        let decisions = decide(&built.snapshot);
        (built, decisions)
    }
}

/// What a pass built and decided, by names rather than positions.
#[derive(Debug, PartialEq)]
pub(super) struct Outcome {
    workloads: BTreeMap<WorkloadKey, String>,
    queues: String,
    admit: Vec<String>,
    evict: Vec<String>,
}

pub(super) fn outcome(built: &Built, decisions: &Decisions) -> Outcome {
    let s = &built.snapshot;
    let pod = |r: &crate::queue::admission::PodRef| {
        let w = &s.workloads[r.workload];
        let set = &w.pod_sets[r.pod_set];
        format!("{}/{}/{}", w.key, set.name, set.pods[r.pod].name)
    };
    Outcome {
        workloads: (s.workloads.iter().enumerate())
            .map(|(w, snap)| {
                let dwl = built.workloads[w]
                    .as_ref()
                    .map(|d| d.spec.queue_name.clone());
                let seen = format!(
                    "{snap:?} {:?} left {} dwl {dwl:?}",
                    decisions.workloads[w], built.left_behind[w]
                );
                (snap.key.clone(), seen)
            })
            .collect(),
        queues: format!("{:?} {:?}", s.queues, decisions.queues),
        admit: decisions.admit.iter().map(pod).collect(),
        evict: (decisions.evict.iter())
            .map(|e| {
                let preemptor = &s.workloads[e.preemptor].key;
                format!("{} for {preemptor} {:?}", pod(&e.victim), e.reason)
            })
            .collect(),
    }
}

fn check(world: &World, inc: &mut Snapshotter) -> Result<(), TestCaseError> {
    inc.pass();
    let (built, decisions) = inc.decider.assemble();
    let (full_built, full_decisions) = world.full();
    prop_assert_eq!(
        outcome(&built, &decisions),
        outcome(&full_built, &full_decisions)
    );
    // What the controller acts on: the same, lent rather than copied, then given back.
    let (lent, lent_decisions) = inc.lend();
    prop_assert_eq!(outcome(&lent, &lent_decisions), outcome(&built, &decisions));
    inc.give_back(lent, lent_decisions);
    Ok(())
}

proptest! {
    #[test]
    fn an_incremental_pass_builds_and_decides_what_the_full_pass_does(
        quotas in prop::array::uniform3(1..12i64),
        ops in prop::collection::vec(op_strategy(), 1..60),
    ) {
        let mut world = World {
            quotas,
            pods: BTreeMap::new(),
            dwls: BTreeMap::new(),
            in_flight: HashSet::new(),
            blocked: HashSet::new(),
            holds: HashMap::new(),
            requeues: HashMap::new(),
            next: 0,
        };
        let mut inc = Snapshotter::default();
        inc.set_queues(world.queues());
        inc.set_pending_requeues(ready::rules(&world.queues()), HashMap::new());
        check(&world, &mut inc)?;
        for op in &ops {
            world.apply(op, &mut inc);
            if matches!(op, Op::Pass) {
                check(&world, &mut inc)?;
            }
        }
        check(&world, &mut inc)?;
        // A restart's full pass over the same state decides the same.
        inc.invalidate();
        check(&world, &mut inc)?;
    }
}

/// Workload `i`: one pod of half a cpu in queue `i % 3`, in `state` (see [`PodDef`]).
fn one_pod_workload(i: usize, state: u8) -> PodDef {
    PodDef {
        ns: 0,
        workload: i,
        queue: i % 3,
        set: 0,
        min: 1,
        half_cpus: 1,
        priority: 0,
        state,
        created: 0,
    }
}

#[test]
fn a_pass_after_a_lend_never_given_back_starts_over_and_decides_the_same() {
    let mut inc = Snapshotter::default();
    inc.set_queues((0..3).map(|q| queue_object(q, 2)).collect());
    for i in 0..6 {
        inc.put_pod(pod_object(
            &format!("u{i}"),
            &one_pod_workload(i, (i % 2) as u8),
        ));
    }
    inc.pass();
    let (built, decisions) = inc.decider.assemble();
    let before = outcome(&built, &decisions);
    // Lent and given back: the next pass reuses everything.
    let (lent, lent_decisions) = inc.lend();
    inc.give_back(lent, lent_decisions);
    let (_, reused) = inc.pass();
    assert_eq!((reused.built, reused.decided), (0, 0));
    // Lent and dropped (a pass that panicked half way): the next pass builds everything again.
    drop(inc.lend());
    let (_, again) = inc.pass();
    assert_eq!((again.built, again.decided), (6, 2));
    let (built, decisions) = inc.decider.assemble();
    assert_eq!(outcome(&built, &decisions), before);
    // Given back something else: the same.
    let (mut lent, lent_decisions) = inc.lend();
    lent.pods.pop();
    inc.give_back(lent, lent_decisions);
    let (_, again) = inc.pass();
    assert_eq!(again.built, 6);
    let (built, decisions) = inc.decider.assemble();
    assert_eq!(outcome(&built, &decisions), before);
}

#[test]
fn a_pass_after_one_change_decides_only_the_group_of_the_change() {
    let world_quotas = [4, 4, 4];
    let mut inc = Snapshotter::default();
    inc.set_queues((0..3).map(|q| queue_object(q, world_quotas[q])).collect());
    let defs: Vec<PodDef> = (0..6).map(|i| one_pod_workload(i, 0)).collect();
    for (i, def) in defs.iter().enumerate() {
        let pod = pod_object(&format!("u{i}"), def);
        inc.put_pod(pod.clone());
    }
    let (_, first) = inc.pass();
    assert_eq!((first.built, first.decided), (6, 2), "solo, and cohort c");
    let (_, idle) = inc.pass();
    assert_eq!((idle.built, idle.decided, idle.reused), (0, 0, 2));
    let mut ended = defs[0].clone();
    ended.state = 2;
    let pod = pod_object("u0", &ended);
    inc.put_pod(pod.clone());
    let (_, one) = inc.pass();
    assert_eq!(
        (one.built, one.decided, one.reused),
        (1, 1, 1),
        "the solo queue only"
    );
    // Its workloads are the ones whose statuses the controller looks at again.
    let (built, _) = inc.decider.assemble();
    let fresh: Vec<bool> = (built.snapshot.workloads.iter())
        .map(|w| w.queue == "solo")
        .collect();
    assert_eq!(inc.decider.decided_mask(), fresh);
    inc.invalidate();
    inc.pass();
    assert!(
        inc.decider.decided_mask().iter().all(|d| *d),
        "a full pass decides all"
    );
}

#[test]
fn a_namespace_relabelled_builds_everything_again_the_same_labels_do_not() {
    let namespace = |labels: serde_json::Value| {
        Arc::new(
            serde_json::from_value::<
                kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>,
            >(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "ns0", "labels": labels}}))
            .expect("namespace"),
        )
    };
    let mut inc = Snapshotter::default();
    inc.set_queues((0..3).map(|q| queue_object(q, 2)).collect());
    inc.set_namespaces(vec![namespace(json!({"team": "a"}))]);
    for i in 0..3 {
        inc.put_pod(pod_object(&format!("u{i}"), &one_pod_workload(i, 0)));
    }
    inc.pass();
    // Another copy of the same namespace (a watch event that changed nothing the pass reads).
    inc.set_namespaces(vec![namespace(json!({"team": "a"}))]);
    assert_eq!(inc.pass().1.built, 0);
    // Relabelled: which queues admit its pods may change, so every workload is built again.
    inc.set_namespaces(vec![namespace(json!({"team": "b"}))]);
    assert_eq!(inc.pass().1.built, 3);
}
