//! Long: one model-based test read as a whole: the cluster kept in memory, the operations on it
//! and the invariants checked after each step mean little apart.
//!
//! A model-based property test of the quota promise: admission at creation (the real pod webhook,
//! [`sluice_webhooks::mutate_pod`] with the real [`Classifier`]) and admission passes (the controller's own glue, [`plan_pass`], then
//! [`AdmitAtCreation::publish`], the ungates and the eviction orders it decided), driven by random
//! sequences of operations against a "cluster" kept in memory: what the API server stored, the
//! creations the webhook answered but the API server has not stored yet, the ungate patches in
//! flight, two replicas of sluice of which one leads.
//!
//! After every step: per queue, the requests of admitted pods (stored and ungated, answered
//! admitted at creation but not stored yet, or decided by a pass and not ungated yet) stay within
//! the queue's quota (a cohort's queue: within its quota plus its borrowing limit; a queue with
//! flavors: each flavor within its own), per cohort within the sum of its quotas; after every pass, per queue, usage + reserved + holds ≤ quota and
//! the pass's usage is exactly the pods the cluster shows admitted (no pod counted twice, none
//! admitted twice).
//!
//! What the model leaves out, on purpose: nodes (no topology or data locality) and time. A hold whose pod never appears stays held (the
//! real one is given back once, after `HOLD_FOR`, the API server says no such pod exists:
//! `controller/holds.rs`), a pod gated by the webhook keeps its queue
//! waiting until the next pass (`WAITING_GUARD`), the pod cache is the API server's state (no
//! watch lag), and a leadership change lets the old term's answered creations and ungate patches
//! land or fail before the new leader's first pass (the lease duration outlasts them).
//!
//! `PROPTEST_CASES` sets the number of cases (default 500), e.g. `PROPTEST_CASES=10000 cargo test
//! -p sluice --lib model_tests` for a long run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::core::PartialObjectMeta;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::json;
use sluice_webhooks::{GateSettings, mutate_pod, validate_identity, validate_pod};

use crate::api::{
    ADMISSION_ANNOTATIONS, ADMISSION_GATE, AT_CREATION_ANNOTATION, CapacityQueue,
    FLAVOR_ANNOTATION, MIN_COUNT_ANNOTATION, PROTECTED_LABEL_PREFIX, QUEUE_LABEL, ResourceFlavor,
    WORKLOAD_LABEL,
};
use crate::integrations::Adapters;
use crate::queue::admission::FlavorSnapshot;
use crate::queue::at_creation::{AdmitAtCreation, Classifier};
use crate::queue::controller::{
    PassInputs, PassPlan, PassWay, decide_all, eviction_orders, open_queues, plan_pass,
    ungate_patch,
};
use crate::queue::incremental::Snapshotter;
use crate::queue::incremental_tests::outcome;
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready::closed_workloads;
use crate::queue::snapshot::{self, PodMemo};
use crate::resources::pod_requests;

const CONTROLLER: &str = "system:serviceaccount:sluice-system:sluice";
const NAMESPACES: [&str; 2] = ["ns1", "ns2"];
/// (name, cpu quota in millicores, cohort, borrowing limit, admission).
type QueueDef = (
    &'static str,
    i64,
    Option<&'static str>,
    Option<i64>,
    &'static str,
);
const QUEUES: [QueueDef; 3] = [
    ("solo", 4000, None, None, "AtCreation"),
    ("a", 3000, Some("c"), Some(2000), "AtCreation"),
    ("b", 2000, Some("c"), None, "InPass"),
];
/// A queue with flavors (tried in this order), each with its cpu quota in millicores: a creation
/// whose `queue` is `QUEUES.len()` names it.
const FLAVORED: (&str, [(&str, i64); 2]) = ("f", [("x", 1500), ("y", 3000)]);

/// The name of queue `i` of a creation.
fn queue_name(i: usize) -> &'static str {
    QUEUES.get(i).map_or(FLAVORED.0, |q| q.0)
}

/// One step of the world.
/// A pod created through the webhook of replica `replica` (the leader or not).
#[derive(Clone, Debug)]
struct Creation {
    replica: bool,
    ns: usize,
    queue: usize,
    /// cpu in half cores; negative values are hostile input.
    half_cpus: i64,
    /// (workload, min count): a pod of a gang.
    gang: Option<(u8, u32)>,
    high_priority: bool,
    /// Carries the token of an earlier pod (a copied annotation), if any.
    replay: Option<prop::sample::Index>,
    then: Then,
}

#[derive(Clone, Debug)]
enum Op {
    /// A pod is created through a webhook.
    Create(Creation),
    /// The webhook is called again for an answered creation not stored yet, `grow` half cores
    /// larger (a sidecar injected after sluice's webhook).
    Reinvoke {
        pending: prop::sample::Index,
        grow: i64,
    },
    /// The API server stores an answered creation, or (`fail`) never does.
    Land {
        pending: prop::sample::Index,
        fail: bool,
    },
    /// A pod ends (deleted, or finished and gone).
    End { pod: prop::sample::Index },
    /// The leader's admission pass.
    Pass,
    /// The leader's admission pass, with a creation (`Op::Create`) answered by the leader's
    /// webhook between the pass's reading of its caches and its publication of the room left.
    PassAround(Box<Op>),
    /// The oldest `count` ungate patches in flight reach the API server.
    Ungate { count: usize },
    /// The last pass's evictions are carried out.
    Preempt,
    /// The leader loses its term; its answered creations and ungates land (or fail, `land`
    /// false) before the other replica's term begins.
    LeaderChange { land: bool },
    /// A user updates a stored pod through the validating webhook: moves it to workload
    /// `workload` and sets its minimum to `min` (issue 31, hole 2). Applied if the webhook allows.
    Relabel {
        pod: prop::sample::Index,
        workload: u8,
        min: u32,
    },
}

/// What the API server does with the pod after the webhooks answered.
#[derive(Clone, Copy, Debug)]
enum Then {
    Store,
    /// Answered, stored later (or never) by a [`Op::Land`].
    Later,
    /// Never stored (another admission plugin refused it, a timeout).
    Fail,
}

/// A creation (to the leader's webhook when `to_leader` says so).
fn create_strategy(to_leader: BoxedStrategy<bool>) -> impl Strategy<Value = Op> {
    let then = prop_oneof![
        6 => Just(Then::Store),
        3 => Just(Then::Later),
        1 => Just(Then::Fail),
    ];
    (
        to_leader,
        0..NAMESPACES.len(),
        0..=QUEUES.len(),
        prop_oneof![8 => 1i64..=6, 1 => -2i64..=0],
        // A gang's minimum; now and then an absurd one (a pod joining a started workload with
        // a minimum far above what fits must not grow its gang: issue 31, hole 4).
        proptest::option::weighted(0.3, (0u8..3, prop_oneof![9 => 1u32..=3, 1 => Just(100u32)])),
        any::<bool>(),
        proptest::option::weighted(0.15, any::<prop::sample::Index>()),
        then,
    )
        .prop_map(
            |(replica, ns, queue, half_cpus, gang, high_priority, replay, then)| {
                Op::Create(Creation {
                    replica,
                    ns,
                    queue,
                    half_cpus,
                    gang,
                    high_priority,
                    replay,
                    then,
                })
            },
        )
}

fn create_to_leader() -> impl Strategy<Value = Op> {
    create_strategy(Just(true).boxed())
}

fn op() -> impl Strategy<Value = Op> {
    let create = create_strategy(any::<bool>().boxed());
    prop_oneof![
        10 => create,
        2 => (any::<prop::sample::Index>(), 0i64..=2)
            .prop_map(|(pending, grow)| Op::Reinvoke { pending, grow }),
        4 => (any::<prop::sample::Index>(), proptest::bool::weighted(0.2))
            .prop_map(|(pending, fail)| Op::Land { pending, fail }),
        3 => any::<prop::sample::Index>().prop_map(|pod| Op::End { pod }),
        4 => Just(Op::Pass),
        1 => create_to_leader().prop_map(|c| Op::PassAround(Box::new(c))),
        3 => (1usize..4).prop_map(|count| Op::Ungate { count }),
        2 => Just(Op::Preempt),
        1 => any::<bool>().prop_map(|land| Op::LeaderChange { land }),
        1 => (any::<prop::sample::Index>(), 0u8..3, prop_oneof![1u32..=3, Just(100u32)])
            .prop_map(|(pod, workload, min)| Op::Relabel { pod, workload, min }),
    ]
}

/// One replica of sluice: its webhook's state and the caches its controller keeps between passes.
struct Replica {
    at_creation: Arc<AdmitAtCreation>,
    classifier: Classifier,
    memo: PodMemo,
    /// Its incremental passes' state, and the pods (by uid) it was last told of.
    snapshotter: Snapshotter,
    told: BTreeMap<String, Pod>,
}

impl Replica {
    /// As the pod watch would: its incremental state learns the pods that changed since it was
    /// last told (`full`: the stored pods, `pods`: the same as its cache decodes them).
    fn tell(&mut self, full: &[Pod], pods: &[Arc<CachedPod>]) {
        for (pod, cached) in full.iter().zip(pods) {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            if self.told.get(&uid) != Some(pod) {
                self.snapshotter.put_pod(cached.clone());
                self.told.insert(uid, pod.clone());
            }
        }
        let stored: HashSet<&str> = full
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let gone: Vec<String> = (self.told.keys())
            .filter(|uid| !stored.contains(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            self.snapshotter.remove_pod(&uid);
            self.told.remove(&uid);
        }
    }

    fn new() -> Replica {
        let at_creation = Arc::new(AdmitAtCreation::default());
        Replica {
            classifier: Classifier {
                ledgers: None,
                adapters: Adapters::default(),
                at_creation: Some(at_creation.clone()),
                queues: None,
            },
            at_creation,
            memo: PodMemo,
            snapshotter: Snapshotter::default(),
            told: BTreeMap::new(),
        }
    }
}

/// A creation the webhook answered, not stored yet.
struct Answered {
    namespace: String,
    pod: Pod,
    /// The replica (term) whose webhook answered.
    replica: usize,
}

struct World {
    queues: Vec<Arc<CapacityQueue>>,
    flavors: Vec<Arc<ResourceFlavor>>,
    namespaces: Vec<Arc<PartialObjectMeta<Namespace>>>,
    gate: GateSettings,
    replicas: [Replica; 2],
    leader: usize,
    /// What the API server stored, by uid.
    stored: BTreeMap<String, Pod>,
    answered: Vec<Answered>,
    /// Ungate patches decided and not sent yet (pods as the pass saw them, and the flavor each
    /// was admitted in), oldest first.
    ungates: Vec<(Arc<CachedPod>, Option<Arc<FlavorSnapshot>>)>,
    /// Victims of the last pass's evictions, by uid.
    evictions: Vec<String>,
    /// Tokens handed out so far, for replays.
    tokens: Vec<String>,
    next: u64,
    passes: u32,
    stats: Stats,
}

/// What a run went through, to show the model reaches every kind of step.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    admitted_at_creation: u32,
    replays_admitted_anew: u32,
    refused: u32,
    admitted_by_passes: u32,
    evicted: u32,
    ungated: u32,
    leader_changes: u32,
    /// Passes that counted a queue's usage + reserved + holds above its limit (see [`World::pass`]).
    over_reserved: u32,
    /// Updates of a pod that the webhook let through and that changed it (an unchanged identity).
    relabelled: u32,
    /// Pods a pass admitted in a flavor other than the flavored queue's first.
    admitted_in_later_flavor: u32,
}

fn queue(
    name: &str,
    cpu: i64,
    cohort: Option<&str>,
    borrow: Option<i64>,
    admission: &str,
) -> Arc<CapacityQueue> {
    let mut spec = json!({"quota": {"cpu": format!("{cpu}m")}, "admission": admission});
    if let Some(cohort) = cohort {
        spec["cohort"] = json!(cohort);
    }
    if let Some(borrow) = borrow {
        spec["borrowingLimit"] = json!({"cpu": format!("{borrow}m")});
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": name, "uid": format!("q-{name}")},
            "spec": spec,
        }))
        .expect("queue"),
    )
}

/// An AdmissionRequest for creating `pod` in `namespace`, as the API server sends it.
fn create_request(namespace: &str, pod: &Pod) -> AdmissionRequest<Pod> {
    let review: AdmissionReview<Pod> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "review", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE", "namespace": namespace, "name": pod.metadata.name,
            "userInfo": {"username": "someone"}, "object": pod, "dryRun": false,
        }
    }))
    .expect("review");
    review.try_into().expect("request")
}

fn requests_cpu(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| pod_requests(s).ok())
        .map(|r| r.get("cpu"))
        .unwrap_or(0)
}

fn gated(pod: &Pod) -> bool {
    snapshot::pod_is_gated(pod)
}

fn queue_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(QUEUE_LABEL)
        .map(String::as_str)
}

impl World {
    fn new() -> World {
        World {
            queues: QUEUES
                .iter()
                .map(|(n, c, co, b, a)| queue(n, *c, *co, *b, a))
                .chain([flavored_queue()])
                .collect(),
            flavors: FLAVORED
                .1
                .iter()
                .map(|(name, _)| {
                    let flavor = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ResourceFlavor",
                        "metadata": {"name": name}, "spec": {"nodeLabels": {"pool": name}}});
                    Arc::new(serde_json::from_value(flavor).expect("flavor"))
                })
                .collect(),
            namespaces: NAMESPACES
                .iter()
                .map(|n| {
                    Arc::new(serde_json::from_value(json!({"metadata": {"name": n}})).expect("ns"))
                })
                .collect(),
            gate: GateSettings {
                gate_name: ADMISSION_GATE.into(),
                protected_label_prefix: PROTECTED_LABEL_PREFIX.into(),
                governed_label: QUEUE_LABEL.into(),
                controller_usernames: vec![CONTROLLER.into()],
                admission_annotations: ADMISSION_ANNOTATIONS
                    .iter()
                    .map(|a| a.to_string())
                    .collect(),
            },
            replicas: [Replica::new(), Replica::new()],
            leader: 0,
            stored: BTreeMap::new(),
            answered: Vec::new(),
            ungates: Vec::new(),
            evictions: Vec::new(),
            tokens: Vec::new(),
            next: 0,
            passes: 0,
            stats: Stats::default(),
        }
    }

    /// The webhooks of `replica` on a pod being created: the pod as mutated, or None (refused).
    fn webhooks(&mut self, replica: usize, namespace: &str, pod: &Pod) -> Option<Pod> {
        let classifier = &self.replicas[replica].classifier;
        let response = mutate_pod(&create_request(namespace, pod), classifier, &self.gate);
        if !response.allowed {
            self.stats.refused += 1;
            return None;
        }
        let mut value = serde_json::to_value(pod).expect("pod");
        if let Some(patch) = &response.patch {
            let patch: json_patch::Patch = serde_json::from_slice(patch).expect("patch");
            json_patch::patch(&mut value, &patch).expect("the webhook's patch applies");
        }
        // The validating webhook is registered for UPDATE only (manifests/install): a creation
        // goes through the mutation alone.
        let mutated: Pod = serde_json::from_value(value).expect("pod");
        if let Some(token) = mutated
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(AT_CREATION_ANNOTATION))
            .filter(|_| !gated(&mutated))
        {
            let copied = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(AT_CREATION_ANNOTATION));
            if copied.is_some_and(|c| c != token) {
                self.stats.replays_admitted_anew += 1;
            }
            self.tokens.push(token.clone());
            self.stats.admitted_at_creation += 1;
        }
        Some(mutated)
    }

    /// The API server stores `pod`.
    fn store(&mut self, namespace: &str, mut pod: Pod) {
        self.next += 1;
        let uid = format!("uid-{}", self.next);
        pod.metadata.namespace = Some(namespace.to_string());
        pod.metadata.uid = Some(uid.clone());
        pod.metadata.resource_version = Some("1".into());
        let at = jiff::Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(self.next as i64);
        pod.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
        self.stored.insert(uid, pod);
    }

    fn new_pod(&mut self, creation: &Creation) -> (String, Pod) {
        self.next += 1;
        let mut labels = json!({QUEUE_LABEL: queue_name(creation.queue)});
        let mut annotations = json!({});
        if let Some((workload, min)) = creation.gang {
            // Workloads are shared across queues: a pod may name a workload another queue's pods
            // started (issue 31, hole 1). Every pod must count in the queue its own label names.
            labels[WORKLOAD_LABEL] = json!(format!("w{workload}"));
            annotations[MIN_COUNT_ANNOTATION] = json!(min.to_string());
        }
        if let Some(replay) = (creation.replay).filter(|_| !self.tokens.is_empty()) {
            annotations[AT_CREATION_ANNOTATION] = json!(replay.get(&self.tokens));
        }
        let pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p{}", self.next), "labels": labels, "annotations": annotations},
            "spec": {"priority": if creation.high_priority { 10 } else { 0 },
                "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": format!("{}m", creation.half_cpus * 500)}}}]},
        }))
        .expect("pod");
        (NAMESPACES[creation.ns].to_string(), pod)
    }

    /// A creation through the webhook of the leader (`to_leader`) or the other replica.
    fn create(&mut self, creation: &Creation, to_leader: bool) {
        let (namespace, pod) = self.new_pod(creation);
        let replica = if to_leader {
            self.leader
        } else {
            1 - self.leader
        };
        let Some(pod) = self.webhooks(replica, &namespace, &pod) else {
            return;
        };
        match creation.then {
            Then::Store => self.store(&namespace, pod),
            Then::Later => self.answered.push(Answered {
                namespace,
                pod,
                replica,
            }),
            Then::Fail => {}
        }
    }

    /// The webhook called again for an answered creation, the pod `grow` half cores larger.
    fn reinvoke(&mut self, pending: &prop::sample::Index, grow: i64) {
        if self.answered.is_empty() {
            return;
        }
        let i = pending.index(self.answered.len());
        let Answered {
            namespace,
            mut pod,
            replica,
        } = self.answered.remove(i);
        let cpu = requests_cpu(&pod) + grow * 500;
        if let Some(container) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            container.resources =
                serde_json::from_value(json!({"requests": {"cpu": format!("{cpu}m")}})).ok();
        }
        if let Some(pod) = self.webhooks(replica, &namespace, &pod) {
            self.answered.push(Answered {
                namespace,
                pod,
                replica,
            });
        }
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Create(creation) => self.create(creation, creation.replica),
            Op::Reinvoke { pending, grow } => self.reinvoke(pending, *grow),
            Op::Land { pending, fail } => {
                if self.answered.is_empty() {
                    return;
                }
                let answered = self.answered.remove(pending.index(self.answered.len()));
                if !fail {
                    self.store(&answered.namespace, answered.pod);
                }
            }
            Op::End { pod } => {
                if self.stored.is_empty() {
                    return;
                }
                let uid = pod
                    .get(&self.stored.keys().cloned().collect::<Vec<_>>())
                    .clone();
                self.stored.remove(&uid);
            }
            Op::Pass => self.pass(None),
            Op::PassAround(during) => self.pass(Some(during)),
            Op::Ungate { count } => {
                for pod in self
                    .ungates
                    .drain(..(*count).min(self.ungates.len()))
                    .collect::<Vec<_>>()
                {
                    self.ungate(&pod);
                }
            }
            Op::Preempt => {
                for uid in std::mem::take(&mut self.evictions) {
                    if self.stored.remove(&uid).is_some() {
                        self.stats.evicted += 1;
                    }
                }
            }
            Op::Relabel { pod, workload, min } => self.relabel(pod, *workload, *min),
            Op::LeaderChange { land } => {
                self.replicas[self.leader].at_creation.deactivate();
                for answered in std::mem::take(&mut self.answered) {
                    if *land {
                        self.store(&answered.namespace, answered.pod);
                    }
                }
                for pod in std::mem::take(&mut self.ungates) {
                    if *land {
                        self.ungate(&pod);
                    }
                }
                self.evictions.clear();
                self.leader = 1 - self.leader;
                self.stats.leader_changes += 1;
            }
        }
    }

    /// A user's update of a stored pod's workload label and minimum, through the validating
    /// webhook (gate and sluice's labels, then where the pod belongs); stored if allowed.
    fn relabel(&mut self, pod: &prop::sample::Index, workload: u8, min: u32) {
        if self.stored.is_empty() {
            return;
        }
        let uids: Vec<String> = self.stored.keys().cloned().collect();
        let uid = pod.get(&uids).clone();
        let old = self.stored[&uid].clone();
        let mut new = old.clone();
        new.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(WORKLOAD_LABEL.into(), format!("w{workload}"));
        new.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(MIN_COUNT_ANNOTATION.into(), min.to_string());
        let review: AdmissionReview<Pod> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "review", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "UPDATE", "namespace": old.metadata.namespace, "name": old.metadata.name,
                "userInfo": {"username": "someone"}, "object": new, "oldObject": old,
            }
        }))
        .expect("review");
        let request: AdmissionRequest<Pod> = review.try_into().expect("request");
        let classifier = &self.replicas[self.leader].classifier;
        let allowed = validate_pod(&request, &self.gate).allowed
            && validate_identity(&request, classifier, &self.gate).allowed;
        if !allowed {
            self.stats.refused += 1;
            return;
        }
        if old != new {
            self.stats.relabelled += 1;
        }
        self.next += 1;
        new.metadata.resource_version = Some(self.next.to_string());
        self.stored.insert(uid, new);
    }

    /// An ungate patch reaches the API server: applied only to the very pod it was decided for.
    fn ungate(&mut self, (decided, flavor): &(Arc<CachedPod>, Option<Arc<FlavorSnapshot>>)) {
        let Some(uid) = decided.metadata.uid.as_deref() else {
            return;
        };
        let Some(current) = self.stored.get_mut(uid) else {
            return;
        };
        let Ok(patch) = ungate_patch(
            decided,
            "2026-01-01T00:00:00Z",
            "model@1",
            flavor.as_deref(),
        ) else {
            return;
        };
        let mut value = serde_json::to_value(&*current).expect("pod");
        if json_patch::patch(&mut value, &patch).is_ok() {
            let mut pod: Pod = serde_json::from_value(value).expect("pod");
            self.next += 1;
            pod.metadata.resource_version = Some(self.next.to_string());
            *current = pod;
            self.stats.ungated += 1;
        }
    }

    /// The leader's pass, glued as the controller glues it ([`plan_pass`], then publish, ungates,
    /// evictions); checks the pass's own figures.
    fn pass(&mut self, during: Option<&Op>) {
        self.passes += 1;
        let leading = self.leader;
        let read_at = Instant::now();
        // The pods as the API server holds them, and as the controller's cache decodes them (in
        // name order, as the incremental state keeps a workload's pods).
        let mut full: Vec<Pod> = self.stored.values().cloned().collect();
        full.sort_by(|a, b| {
            (&a.metadata.name, &a.metadata.uid).cmp(&(&b.metadata.name, &b.metadata.uid))
        });
        let pods: Vec<Arc<CachedPod>> = full
            .iter()
            .cloned()
            .map(|p| Arc::new(CachedPod::from_pod(p)))
            .collect();
        let in_flight = self.in_flight();
        let leader = &mut self.replicas[self.leader];
        let facts = leader.memo.refresh(&leader.classifier.adapters, &pods);
        leader.tell(&full, &pods);
        let blocked = HashSet::new();
        let no_data = std::collections::HashMap::new();
        let inputs = || PassInputs {
            queues: &self.queues,
            flavors: &self.flavors,
            workloads: &[],
            pods: &pods,
            facts: &facts,
            namespaces: &self.namespaces,
            nodes: &[],
            bound_elsewhere: &[],
            data: &no_data,
            in_flight: &in_flight,
            eviction_blocked: &blocked,
        };
        let PassPlan {
            mark,
            holds,
            built,
            decisions,
            rules,
            ..
        } = plan_pass(
            Some(&leader.at_creation),
            inputs(),
            read_at,
            HashMap::new,
            PassWay::Incremental(&mut leader.snapshotter),
        );
        // The full pass over the same inputs and holds decides the same.
        let (full_built, full_decisions) = decide_all(&inputs(), &holds, &rules, &HashMap::new());
        assert_eq!(
            outcome(&built, &decisions),
            outcome(&full_built, &full_decisions),
            "the incremental pass decided otherwise than the full pass"
        );
        if let Some(Op::Create(creation)) = during {
            self.create(creation, true);
        }
        let leader = &mut self.replicas[self.leader];
        if let Some(mark) = mark {
            let until = Instant::now() + Duration::from_secs(3600);
            let closed = closed_workloads(&built, &decisions, &rules, &HashMap::new());
            let open = open_queues(&self.queues);
            (leader.at_creation).publish(mark, &built, &decisions, &open, closed, Some(until));
        }
        self.check_pass(&full, &built, &decisions, &holds, &in_flight);
        self.check_pass_flavors(&full, &built, &decisions, &in_flight);
        self.evictions = eviction_orders(&built, &decisions)
            .into_iter()
            .flat_map(|o| o.victims.into_iter().map(|v| v.uid))
            .collect();
        // Lent by the leader's incremental state, as the controller's pass gives them back.
        self.replicas[leading]
            .snapshotter
            .give_back(built, decisions);
    }

    /// In flight: ungates decided and not applied, of pods the cache still shows gated, where
    /// their pass pinned them.
    fn in_flight(&self) -> snapshot::InFlight {
        let mut in_flight = snapshot::InFlight::default();
        for (pod, flavor) in &self.ungates {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            if self.stored.get(&uid).is_some_and(gated) {
                let flavor = flavor.as_ref().map(|f| Arc::from(f.name.as_str()));
                let pins = snapshot::Pins {
                    flavor,
                    ..snapshot::Pins::default()
                };
                in_flight.insert(uid, pins);
            }
        }
        in_flight
    }

    /// Checks a pass's decisions and figures: no pod admitted twice, its usage exactly the pods the
    /// pass read admitted, a queue that admits within its limit; queues its ungates.
    fn check_pass(
        &mut self,
        pods: &[Pod],
        built: &snapshot::Built,
        decisions: &crate::queue::admission::Decisions,
        holds: &HashMap<String, crate::resources::ResourceList>,
        in_flight: &snapshot::InFlight,
    ) {
        // No pod admitted twice: each once, gated, not in flight already.
        let mut seen = HashSet::new();
        for r in &decisions.admit {
            let pod = &built.pods[r.workload][r.pod_set][r.pod];
            let uid = pod.metadata.uid.clone().expect("stored pods have uids");
            assert!(
                snapshot::is_gated(pod),
                "pass {} admits {uid}, which is not gated",
                self.passes
            );
            assert!(
                !in_flight.contains(&uid),
                "pass {} admits {uid} again while its ungate is in flight",
                self.passes
            );
            assert!(
                seen.insert(uid.clone()),
                "pass {} admits {uid} twice",
                self.passes
            );
            let flavor = decisions.flavors.get(r).cloned();
            if flavor.as_ref().is_some_and(|f| f.name != FLAVORED.1[0].0) {
                self.stats.admitted_in_later_flavor += 1;
            }
            self.ungates.push((pod.clone(), flavor));
            self.stats.admitted_by_passes += 1;
        }
        // The pass's usage is exactly what the cluster shows admitted, each pod once.
        for (q, tally) in &decisions.queues {
            let admitted = admitted_cpu(pods, q, in_flight);
            let decided: i64 = decisions
                .admit
                .iter()
                .filter(|r| built.snapshot.workloads[r.workload].queue == *q)
                .filter_map(|r| {
                    built.pods[r.workload][r.pod_set][r.pod]
                        .metadata
                        .uid
                        .as_ref()
                })
                .filter_map(|uid| self.stored.get(uid))
                .map(requests_cpu)
                .sum();
            assert_eq!(
                cpu_of(&tally.usage, q),
                admitted + decided,
                "pass {}: queue {q}'s usage is not the pods the cluster shows admitted",
                self.passes
            );
            let held = holds.get(q).map(|h| cpu_of(h, q)).unwrap_or(0);
            let (usage, reserved) = (cpu_of(&tally.usage, q), cpu_of(&tally.reserved, q));
            // What the pass counts may exceed the limit without anything running over it (the
            // independent check in World::check judges that): a started gang's missing members
            // are reserved whatever the room (its minimum raised by a later pod, or admitted
            // members ended), and a pod that took a gang place at creation counts in usage while
            // the first pod's hold, which paid for that place, lives. That only blocks the queue.
            // A pass that admits in the queue fits everything.
            if usage + reserved + held > limit(q) {
                let admitted_here = decisions
                    .admit
                    .iter()
                    .any(|r| built.snapshot.workloads[r.workload].queue == *q);
                assert!(
                    !admitted_here,
                    "pass {}: queue {q} admits with usage {usage} + reserved {reserved} + holds {held} > {}",
                    self.passes,
                    limit(q)
                );
                self.stats.over_reserved += 1;
            }
        }
    }

    /// A flavored queue's usage per flavor is exactly the pods the cluster shows admitted in it
    /// (ungated with its `sluice.dev/flavor`, or in flight where their pass pinned them).
    fn check_pass_flavors(
        &self,
        pods: &[Pod],
        built: &snapshot::Built,
        decisions: &crate::queue::admission::Decisions,
        in_flight: &snapshot::InFlight,
    ) {
        let Some(tally) = decisions.queues.get(FLAVORED.0) else {
            return;
        };
        let mut expected: BTreeMap<String, i64> = BTreeMap::new();
        for pod in pods.iter().filter(|p| queue_of(p) == Some(FLAVORED.0)) {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let pinned = in_flight.pins(uid).and_then(|p| p.flavor.as_deref());
            if !gated(pod) || in_flight.contains(uid) {
                *expected.entry(charged_flavor(pod, pinned)).or_default() += requests_cpu(pod);
            }
        }
        for r in &decisions.admit {
            let Some(flavor) = decisions.flavors.get(r) else {
                continue;
            };
            let pod = &built.pods[r.workload][r.pod_set][r.pod];
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let cpu = self.stored.get(uid).map(requests_cpu).unwrap_or(0);
            *expected.entry(flavor.name.clone()).or_default() += cpu;
        }
        for (flavor, _) in FLAVORED.1 {
            assert_eq!(
                tally.usage.get(&format!("{flavor}:cpu")),
                expected.get(flavor).copied().unwrap_or(0),
                "pass {}: flavor {flavor}'s usage is not the pods admitted in it",
                self.passes
            );
        }
    }

    /// The quota promise, from the cluster alone: what runs or may run without another decision.
    fn check(&self) -> Result<(), String> {
        let mut per_queue: BTreeMap<&str, i64> = BTreeMap::new();
        let mut per_flavor: BTreeMap<String, i64> = BTreeMap::new();
        let ungating: HashMap<&str, Option<&str>> = self
            .ungates
            .iter()
            .filter_map(|(p, f)| {
                Some((
                    p.metadata.uid.as_deref()?,
                    f.as_ref().map(|f| f.name.as_str()),
                ))
            })
            .collect();
        for (uid, pod) in &self.stored {
            let pinned = ungating.get(uid.as_str()).copied();
            if !gated(pod) || pinned.is_some() {
                *per_queue.entry(queue_of(pod).unwrap_or("")).or_default() += requests_cpu(pod);
                if queue_of(pod) == Some(FLAVORED.0) {
                    let flavor = charged_flavor(pod, pinned.flatten());
                    *per_flavor.entry(flavor).or_default() += requests_cpu(pod);
                }
            }
        }
        for answered in self.answered.iter().filter(|a| !gated(&a.pod)) {
            *per_queue
                .entry(queue_of(&answered.pod).unwrap_or(""))
                .or_default() += requests_cpu(&answered.pod);
        }
        for (q, used) in &per_queue {
            if *used > limit(q) {
                return Err(format!(
                    "queue {q} holds {used}m cpu, more than its limit {}m",
                    limit(q)
                ));
            }
        }
        for (flavor, quota) in FLAVORED.1 {
            let used = per_flavor.get(flavor).copied().unwrap_or(0);
            if used > quota {
                return Err(format!(
                    "flavor {flavor} of queue {} holds {used}m cpu, more than its quota {quota}m",
                    FLAVORED.0
                ));
            }
        }
        let cohort: i64 = QUEUES
            .iter()
            .filter(|q| q.2.is_some())
            .map(|q| per_queue.get(q.0).copied().unwrap_or(0))
            .sum();
        let quotas: i64 = QUEUES.iter().filter(|q| q.2.is_some()).map(|q| q.1).sum();
        if cohort > quotas {
            return Err(format!(
                "cohort c holds {cohort}m cpu, more than its quotas' {quotas}m"
            ));
        }
        Ok(())
    }
}

/// The cpu of the pods of queue `q` a pass read as admitted: ungated, or their ungate in flight.
fn admitted_cpu(pods: &[Pod], q: &str, in_flight: &snapshot::InFlight) -> i64 {
    pods.iter()
        .filter(|p| queue_of(p) == Some(q))
        .filter(|p| !gated(p) || (p.metadata.uid.as_ref()).is_some_and(|u| in_flight.contains(u)))
        .map(requests_cpu)
        .sum()
}

/// The flavored queue: its flavors' quotas, as the CRD has them.
fn flavored_queue() -> Arc<CapacityQueue> {
    let flavors: Vec<serde_json::Value> = (FLAVORED.1.iter())
        .map(|(name, cpu)| json!({"name": name, "quota": {"cpu": format!("{cpu}m")}}))
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": FLAVORED.0, "uid": format!("q-{}", FLAVORED.0)},
            "spec": {"flavors": flavors},
        }))
        .expect("queue"),
    )
}

/// The flavor an admitted pod of the flavored queue is charged in: the one its pass pinned it to
/// while in flight, else its `sluice.dev/flavor` when the queue lists it, else the first (as the
/// pass charges it).
fn charged_flavor(pod: &Pod, in_flight: Option<&str>) -> String {
    let annotated = (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get(FLAVOR_ANNOTATION))
        .map(String::as_str);
    let listed = |f: &&str| FLAVORED.1.iter().any(|(name, _)| name == f);
    let flavor = in_flight.or(annotated).filter(listed);
    flavor.unwrap_or(FLAVORED.1[0].0).to_string()
}

/// A list's cpu for queue `q`: a flavored queue's summed over its flavors.
fn cpu_of(list: &crate::resources::ResourceList, q: &str) -> i64 {
    if q != FLAVORED.0 {
        return list.get("cpu");
    }
    (FLAVORED.1.iter())
        .map(|(flavor, _)| list.get(&format!("{flavor}:cpu")))
        .sum()
}

/// The most queue `q` may hold: its quota, plus its borrowing limit (or the rest of its cohort).
fn limit(q: &str) -> i64 {
    if q == FLAVORED.0 {
        return FLAVORED.1.iter().map(|(_, cpu)| cpu).sum();
    }
    let Some((_, quota, cohort, borrow, _)) = QUEUES.iter().find(|x| x.0 == q) else {
        return 0; // no such queue: nothing of it may run
    };
    match cohort {
        None => *quota,
        Some(c) => {
            let cohort: i64 = QUEUES.iter().filter(|x| x.2 == Some(c)).map(|x| x.1).sum();
            borrow.map_or(cohort, |b| (quota + b).min(cohort))
        }
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(500)
}

/// Runs `ops` from an empty cluster, checking the promise after every step.
fn run(ops: &[Op]) -> Result<Stats, TestCaseError> {
    let mut world = World::new();
    for (i, op) in ops.iter().enumerate() {
        world.step(op);
        if let Err(breach) = world.check() {
            return Err(TestCaseError::fail(format!(
                "after step {i} ({op:?}): {breach}"
            )));
        }
    }
    Ok(world.stats)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..=60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn the_quota_promise_holds_under_any_sequence_of_creations_passes_and_failures(ops in ops()) {
        run(&ops)?;
    }
}

/// The generator reaches every kind of step the promise is tested under (else the property
/// above could pass by never getting there).
#[test]
fn the_model_reaches_admission_at_creation_replays_passes_evictions_and_leader_changes() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut total = Stats::default();
    for _ in 0..200 {
        let ops = ops().new_tree(&mut runner).expect("ops").current();
        let stats = run(&ops).expect("the promise holds");
        total.admitted_at_creation += stats.admitted_at_creation;
        total.replays_admitted_anew += stats.replays_admitted_anew;
        total.refused += stats.refused;
        total.admitted_by_passes += stats.admitted_by_passes;
        total.evicted += stats.evicted;
        total.ungated += stats.ungated;
        total.leader_changes += stats.leader_changes;
        total.over_reserved += stats.over_reserved;
        total.admitted_in_later_flavor += stats.admitted_in_later_flavor;
    }
    eprintln!("model coverage over 200 sequences: {total:?}");
    let Stats {
        admitted_at_creation,
        replays_admitted_anew,
        refused,
        admitted_by_passes,
        evicted,
        ungated,
        leader_changes,
        admitted_in_later_flavor,
        ..
    } = total;
    for (what, count) in [
        ("admitted at creation", admitted_at_creation),
        (
            "replayed tokens admitted anew under a token of their own",
            replays_admitted_anew,
        ),
        ("refused (negative requests)", refused),
        ("admitted by passes", admitted_by_passes),
        ("evicted", evicted),
        ("ungated", ungated),
        ("leader changes", leader_changes),
        ("admitted in a later flavor", admitted_in_later_flavor),
    ] {
        assert!(count > 0, "no pod {what} in 200 sequences");
    }
}

/// Found by the property above (shrunk by hand), then closed by issue 31 (hole 4): a later pod
/// raising a started gang's minimum once had the missing members reserved whatever the room
/// (usage + reserved above queue "a"'s limit: 3 cpu quota + 2 borrowing limit). A set's minimum is
/// now its earliest pod's: the later pods are elastic, admitted one by one as room allows, and
/// nothing is reserved for them.
#[test]
fn a_later_pod_raising_a_started_gangs_minimum_reserves_nothing() {
    let create = |half_cpus: i64, gang: Option<(u8, u32)>| {
        Op::Create(Creation {
            replica: false,
            ns: 0,
            queue: 1,
            half_cpus,
            gang,
            high_priority: false,
            replay: None,
            then: Then::Store,
        })
    };
    let ops = vec![
        create(3, Some((1, 1))), // 1.5 cpu, a gang of one: admitted
        create(2, None),         // 1 cpu: admitted
        Op::Pass,
        Op::Ungate { count: 2 },
        create(3, Some((1, 3))), // the gang's minimum is 3 now: 2 places of 1.5 reserved
        Op::Pass,
        Op::Ungate { count: 2 },
        create(3, Some((1, 3))),
        Op::Pass,
        Op::Ungate { count: 2 },
    ];
    let stats = run(&ops).expect("the promise holds");
    assert_eq!(
        stats.admitted_by_passes, 3,
        "1.5 + 1 + 1.5 cpu fit in 5: the later gang pod is admitted alone, the last waits: {stats:?}"
    );
    assert_eq!(stats.over_reserved, 0, "{stats:?}");
}

/// Found by the property above (a 50,000-case run): a gang's first pod admitted at creation holds
/// room for its whole minimum gang; a second pod takes one of those places at creation and is
/// stored first. Until the first pod appears (or its hold expires), the pass counts the second pod
/// in usage and in the first pod's hold: counted twice, which only lowers the queue's room.
#[test]
fn a_gang_place_taken_at_creation_counts_twice_until_the_first_pod_appears() {
    let create = |half_cpus: i64, min: u32, then: Then| {
        Op::Create(Creation {
            replica: true,
            ns: 1,
            queue: 0,
            half_cpus,
            gang: Some((2, min)),
            high_priority: false,
            replay: None,
            then,
        })
    };
    let ops = vec![
        Op::Pass,
        create(4, 2, Then::Later), // 2 cpu, gang of 2: 4 cpu held, not stored yet
        create(1, 1, Then::Store), // takes the second place, stored
        Op::Pass,                  // usage 0.5 + holds 4 > 4
        Op::Land {
            pending: only_one(),
            fail: false,
        },
        Op::Pass,
    ];
    let stats = run(&ops).expect("the promise holds");
    assert_eq!(stats.admitted_at_creation, 2, "{stats:?}");
    assert_eq!(
        stats.over_reserved, 1,
        "only while the first pod is not stored: {stats:?}"
    );
}

/// An index for a choice among one.
fn only_one() -> prop::sample::Index {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    any::<prop::sample::Index>()
        .new_tree(&mut runner)
        .expect("an index")
        .current()
}

/// Found by the property above (shrunk by proptest): pods gated by the replica that does not lead
/// (its webhook admits nothing at creation) are unknown to the leader's webhook, which found the
/// queue with room and nothing waiting at the last publication. A pass that reads them admits them
/// from that room; a pod the leader's webhook admitted at creation while the pass ran took the same
/// room: 4.5 cpu in a 4 cpu queue. Fixed: the pass pauses admission at creation in the queues where
/// it may admit gated pods (`AdmitAtCreation::pause`) until it publishes.
#[test]
fn a_pass_and_admission_at_creation_never_give_the_same_room_twice() {
    let create = |to_leader: bool, half_cpus: i64| {
        Op::Create(Creation {
            replica: to_leader,
            ns: 0,
            queue: 0,
            half_cpus,
            gang: None,
            high_priority: false,
            replay: None,
            then: Then::Store,
        })
    };
    let ops = vec![
        create(false, 1),
        create(false, 1),
        Op::Pass,         // admits both: 1 cpu used, 3 cpu published
        create(false, 3), // 1.5 cpu gated by the other replica
        Op::PassAround(Box::new(create(true, 4))), // admits it; 2 cpu asked at creation meanwhile
        Op::Ungate { count: 3 },
        Op::Pass,
    ];
    run(&ops).expect("the promise holds");
}
