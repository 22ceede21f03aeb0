//! The admission decision: a pure function from a snapshot of queues, workloads and pods to the pods
//! to ungate. No I/O, no clock: everything it needs is in the snapshot, so it is unit-tested,
//! property-tested and benchmarked without a cluster.
//!
//! Accounting per queue:
//! - usage: requests of admitted pods that have not ended;
//! - reservations: for every workload that has started (holds at least one admitted pod), the
//!   members of its minimum gang that are not admitted yet (not created, or created and gated).
//!
//! Pending demand items, per queue:
//! - fill: a gated pod of a started workload that takes the place of one of its reserved gang
//!   members (already paid for by the reservation; any later pod of the set takes over what is
//!   left of it when the first ones do not fit);
//! - gang: the minimum gang of a workload that has not started: its gated pods up to each pod set's
//!   minimum, plus reservations for the members not created yet. All or nothing;
//! - elastic: any other gated pod of a started workload, one by one.
//!
//! Order: fills first; then priority (high first), interrupted count (high first: finish what was
//! started), the time the item was queued (the workload's for a gang, the pod's for an elastic pod),
//! then names. Fit: usage + reservations + the item ≤ quota for every resource the quota names.
//! StrictFIFO stops at the first item that does not fit; BestEffortFIFO goes on.
//!
//! Preemption (`withinQueue: LowerPriority`, the default; `src/queue/preemption.rs` chooses the
//! victims): a gang or an elastic pod that does not fit may take quota back from admitted pods of
//! lower-priority workloads of its queue. The first items that do not fit, in admission order (at
//! most eight, `MAX_PREEMPTION_ATTEMPTS`; in StrictFIFO only the head), look for victims; the first
//! that finds them is the queue's one preemptor of the pass. Its victims go to
//! `Decisions::evict`; it is not admitted in this pass (it waits, `WaitReason::Preempting`) but by
//! a later one, once they are gone, so victims and preemptor never hold quota together. For the
//! rest of the pass the room it is promised is held from the items after it, and its workload,
//! the workloads losing pods and those with pods terminating admit nothing more. Terminating pods
//! count as freed room, so the passes while victims terminate choose no second round.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::api::QueueingStrategy;
use crate::queue::preemption::{self, HeldPod, HeldSet, Holder, Need, Plan};
use crate::resources::{ResourceList, describe_quantity};

mod arena;
mod cohort;
mod fit;
mod flavor;
mod gangs;
mod memo;
mod order;
mod preempt;
mod reasons;
mod topology;

pub use memo::{Memo, decide_again};
pub use reasons::WaitReason;
use reasons::Waiting;

use arena::{Arena, Dimensions, Item, Slot};
use fit::Misfit;
use memo::Gather;

/// Identifies a workload: its namespace and DynamicWorkload name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct QueueSnapshot {
    pub name: String,
    pub quota: ResourceList,
    pub strategy: QueueingStrategy,
    pub preemption: PreemptionPolicy,
    /// The cohort it shares unused quota with; None: it shares nothing.
    pub cohort: Option<CohortMembership>,
    /// Its quota per flavor, tried in this order (`spec.flavors`); empty: `quota` is the queue's
    /// one implicit flavor, which pins nothing. With flavors, `quota` is not read, and the
    /// cohort's limits name flavored resources ([`flavored_resource`]).
    pub flavors: Vec<Arc<FlavorSnapshot>>,
}

/// One flavor of a queue: its quota and where its pods run (its ResourceFlavor).
#[derive(Clone, Debug, PartialEq)]
pub struct FlavorSnapshot {
    pub name: String,
    pub quota: ResourceList,
    /// Node labels the flavor's pods are pinned to (added to their `spec.nodeSelector`).
    pub node_labels: BTreeMap<String, String>,
    /// Tolerations added to the flavor's pods (for the taints of its nodes).
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// Whether its ResourceFlavor exists (node labels and tolerations known): a flavor without
    /// one admits nothing, since its pods could not be pinned.
    pub defined: bool,
}

/// How a resource of a flavor is named among a flavored queue's resources (the quota of each
/// flavor is its own): `<flavor>:<resource>`. A resource name never holds a `:` (a Kubernetes
/// qualified name), so the two parts read back unambiguously.
pub fn flavored_resource(flavor: &str, resource: &str) -> String {
    format!("{flavor}:{resource}")
}

/// The flavor and the resource of a name made by [`flavored_resource`]; None for a plain one.
pub fn split_flavored(name: &str) -> Option<(&str, &str)> {
    name.split_once(':')
}

/// At most this many flavors per queue (the CRD says so too): an item's allowed flavors are a
/// 16-bit mask.
pub const MAX_FLAVORS: usize = 16;

/// A queue's place in a cohort (`spec.cohort` and the fields that go with it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CohortMembership {
    pub name: String,
    /// Per resource, how much above its quota the queue may use; a resource absent: no limit.
    pub borrowing_limit: ResourceList,
    /// Per resource, how much of its quota the queue lends; a resource absent: all of it.
    pub lending_limit: ResourceList,
    pub reclaim: ReclaimPolicy,
    /// Fair-sharing weight in thousandths (1000: weight 1; 0: borrows last).
    pub weight_milli: i64,
}

impl CohortMembership {
    /// A membership with no limits, reclaim Any and weight 1.
    pub fn new(name: &str) -> Self {
        CohortMembership {
            name: name.to_string(),
            borrowing_limit: ResourceList::new(),
            lending_limit: ResourceList::new(),
            reclaim: ReclaimPolicy::Any,
            weight_milli: 1000,
        }
    }
}

/// Whether a queue's waiting work may evict other queues' workloads running on borrowed quota to
/// take its own quota back (`spec.preemption.reclaimWithinCohort`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReclaimPolicy {
    Never,
    LowerPriority,
    #[default]
    Any,
}

/// Whether a waiting item may take quota back from admitted pods of its own queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WithinQueue {
    /// Nothing admitted is ever taken back: higher priority only goes first in the line.
    Never,
    /// A waiting item may preempt admitted pods of lower-priority workloads of the queue.
    #[default]
    LowerPriority,
}

/// A queue's preemption settings (`spec.preemption`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreemptionPolicy {
    pub within_queue: WithinQueue,
}

#[derive(Clone, Debug)]
pub struct WorkloadSnapshot {
    pub key: WorkloadKey,
    pub queue: String,
    /// False when the queue's namespaceSelector does not admit the workload's namespace.
    pub namespace_allowed: bool,
    pub priority: i32,
    pub interrupted_count: i32,
    /// When the workload was queued (milliseconds since the epoch).
    pub queued_at: i64,
    pub pod_sets: Vec<PodSetSnapshot>,
}

impl WorkloadSnapshot {
    /// Whether its gang has started: an admitted pod that is not terminating. One whose admitted
    /// pods are all terminating (evicted by a preemption or a reclaim, or deleted) has stopped:
    /// the places of its gang are no longer held (its pods' own requests still count until they
    /// are gone), and its gated pods need the whole minimum again.
    pub fn has_started(&self) -> bool {
        (self.pod_sets.iter())
            .flat_map(|s| &s.pods)
            .any(|p| p.state == PodState::Admitted && !p.terminating)
    }
}

#[derive(Clone, Debug)]
pub struct PodSetSnapshot {
    pub name: String,
    /// What one pod of the set is expected to request (reservations for pods not created yet).
    pub per_pod: ResourceList,
    pub min_count: u32,
    pub pods: Vec<PodSnapshot>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    /// Carries the admission gate.
    Gated,
    /// Gate removed, not ended: holds quota.
    Admitted,
    /// Succeeded or Failed: holds nothing.
    Ended,
}

#[derive(Clone, Debug)]
pub struct PodSnapshot {
    pub name: String,
    /// Shared with the pod's cached facts: a pass over 100k pods copies no request lists (most
    /// pods of a workload ask the same, and a `ResourceList` is a B-tree with its own key strings).
    pub requests: Arc<ResourceList>,
    pub state: PodState,
    /// When the pod was created (milliseconds since the epoch).
    pub created_at: i64,
    /// An Admitted pod with a deletionTimestamp: it still holds quota (usage counts it until it
    /// is gone or ended), but it is already being freed: preemption plans count it as freed room
    /// and never pick it again.
    pub terminating: bool,
    /// A PodDisruptionBudget refused its eviction a moment ago (the controller keeps such refusals
    /// for a while): preemption must not pick it (nor its workload whole) until then.
    pub eviction_blocked: bool,
    /// The flavor sluice admitted the pod in (its `sluice.dev/flavor` annotation, which only
    /// sluice writes); None for a gated pod or one admitted without flavors. In a flavored
    /// queue an admitted pod whose flavor the queue does not list is charged to its first one.
    pub flavor: Option<Arc<str>>,
    /// The pod's own node constraints (nodeSelector, required node affinity); None: none. A
    /// flavor whose node labels they exclude is never chosen for the pod: it would not run there.
    pub placement: Option<Arc<crate::queue::placement::Placement>>,
    /// Its topology ask and the domain sluice pinned it to; None (most pods): neither.
    pub topology: Option<Arc<PodTopology>>,
}

impl PodSnapshot {
    /// A pod known only by its requests, state and creation time: not terminating, no refused
    /// eviction, no flavor, node constraints or topology (what tests and benchmarks start from).
    pub fn plain(
        name: impl Into<String>,
        requests: Arc<ResourceList>,
        state: PodState,
        created_at: i64,
    ) -> PodSnapshot {
        PodSnapshot {
            name: name.into(),
            requests,
            state,
            created_at,
            terminating: false,
            eviction_blocked: false,
            flavor: None,
            placement: None,
            topology: None,
        }
    }
}

/// A pod's part in topology-aware admission (`src/queue/topology.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTopology {
    /// `sluice.dev/topology-required` or `-preferred` (a key the webhook checked).
    pub ask: Option<crate::queue::topology::TopologyAsk>,
    /// An admitted pod: the domain it was pinned to (`sluice.dev/topology-domain`, which only
    /// sluice writes: `<key>=<value>`).
    pub domain: Option<String>,
    /// Whether it is bound to a node (its room is then counted on that node already).
    pub bound: bool,
    /// `sluice.dev/data-pods` / `-claim` (`src/queue/data_locality.rs`): where its data is.
    pub data: Option<crate::queue::data_locality::DataAsk>,
    /// An admitted pod: the hostnames it was pinned to beside its data (`sluice.dev/data-nodes`,
    /// which only sluice writes).
    pub data_nodes: Option<Arc<str>>,
}

impl PodTopology {
    /// Whether the pod asks where it runs (a topology domain or its data's nodes).
    pub fn asks(&self) -> bool {
        self.ask.is_some() || self.data.is_some()
    }
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub queues: Vec<QueueSnapshot>,
    pub workloads: Vec<WorkloadSnapshot>,
}

#[cfg(test)]
impl Snapshot {
    /// The index of the workload named `name` (a test knows the names of its workloads).
    pub fn position_of(&self, name: &str) -> usize {
        (self.workloads.iter())
            .position(|w| w.key.name == name)
            .unwrap_or_else(|| panic!("no workload {name} in the snapshot"))
    }
}

/// A pod to ungate: `workloads[workload].pod_sets[pod_set].pods[pod]` of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub workload: usize,
    pub pod_set: usize,
    pub pod: usize,
}

/// Totals of one queue after the pass (the decisions included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueTally {
    pub usage: ResourceList,
    pub reserved: ResourceList,
    pub pending_workloads: u32,
    pub admitted_workloads: u32,
    pub pending_pods: u32,
    pub admitted_pods: u32,
    /// Usage and reservations above the quota, borrowed from the cohort.
    pub borrowed: ResourceList,
    /// What other queues of the cohort use of this queue's unused quota.
    pub lent: ResourceList,
    /// A queue of a cohort: the most it may hold before pods must wait for a pass (its quota less
    /// what it lends: room the other queues cannot take concurrently). None: its quota.
    pub ceiling: Option<ResourceList>,
}

impl QueueTally {
    /// Whether anything of the queue still waits behind the gate after the pass.
    pub fn has_waiting(&self) -> bool {
        self.pending_pods > 0 || self.pending_workloads > 0
    }
}

/// Per workload, after the pass (the decisions included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadTally {
    pub used: ResourceList,
    pub reserved: ResourceList,
    pub pending_pods: u32,
    pub admitted_pods: u32,
    /// Set when pods still wait.
    pub waiting: Option<WaitReason>,
    /// What of `used` and `reserved` is above the queue's quota (borrowed from its cohort).
    pub borrowed: ResourceList,
    /// 1-based place of its first waiting item in its queue's admission order; None when nothing
    /// of it waits in order (or it waits outside any queue).
    pub position: Option<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct Decisions {
    /// Pods to ungate, in the order they were admitted.
    pub admit: Vec<PodRef>,
    /// Admitted pods to evict (through the Eviction API), so that a preemptor can be admitted by
    /// a later pass once they are gone.
    pub evict: Vec<Eviction>,
    /// Indexed like `Snapshot::workloads`.
    pub workloads: Vec<WorkloadTally>,
    /// The flavor each admitted pod of a flavored queue was admitted in (written to the pod with
    /// its admission: node selector, tolerations, `sluice.dev/flavor`).
    pub flavors: HashMap<PodRef, Arc<FlavorSnapshot>>,
    /// The topology domain each admitted pod of a gang that asked for one was pinned to
    /// (`<key>=<value>`: written to its nodeSelector and `sluice.dev/topology-domain`).
    pub domains: HashMap<PodRef, Arc<str>>,
    /// The nodes each admitted pod of a gang that asked for its data's nodes was pinned to
    /// (hostnames, comma-separated: written to its required node affinity and
    /// `sluice.dev/data-nodes`).
    pub data_nodes: HashMap<PodRef, Arc<str>>,
    pub queues: BTreeMap<String, QueueTally>,
}

/// An admitted pod to take quota back from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eviction {
    pub victim: PodRef,
    /// The workload that needs the room: an index into `Snapshot::workloads`.
    pub preemptor: usize,
    pub reason: EvictionReason,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionReason {
    /// A higher-priority item of the same queue (`spec.preemption.withinQueue: LowerPriority`).
    InQueuePriority,
    /// A queue of the cohort takes back its quota that the victim's queue borrowed
    /// (`spec.preemption.reclaimWithinCohort`).
    CohortReclaim,
    /// The victim's own admitted pods did not all run within its queue's `spec.podsReadyTimeout`
    /// (the victim is its own preemptor).
    PodsReadyTimeout,
}

/// Decides which gated pods to admit. See the module documentation for the rules.
pub fn decide(snapshot: &Snapshot) -> Decisions {
    decide_with(snapshot, None)
}

/// As [`decide`], with the nodes' room for the gangs that ask for a topology domain (None: such
/// gangs wait, saying no node has their label).
pub fn decide_with(
    snapshot: &Snapshot,
    nodes: Option<&crate::queue::topology::Topology>,
) -> Decisions {
    // Group workloads by queue; those whose queue is missing or closed to them just wait.
    let queue_index: std::collections::HashMap<&str, usize> = snapshot
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); snapshot.queues.len()];
    let mut orphans = Vec::new();
    for (w, workload) in snapshot.workloads.iter().enumerate() {
        match queue_index.get(workload.queue.as_str()) {
            Some(&q) => members[q].push(w),
            None => orphans.push(w),
        }
    }
    decide_gathered(
        snapshot,
        nodes,
        &members,
        orphans.into_iter(),
        Gathering::Afresh,
        Vec::new(),
    )
}

/// How a pass's queues gather their demand.
enum Gathering<'m> {
    /// From scratch, in buffers shared from queue to queue: nothing is kept.
    Afresh,
    /// In a memo's buffers, one set per queue, kept for the next pass: per queue, every member
    /// (None) or only the members that changed (see `memo.rs`).
    Kept(&'m mut [Scratch], &'m [Option<Vec<usize>>]),
}

/// The pass over the queues' `members` (indexes into the workloads, per queue); `orphans`: the
/// workloads whose queue does not exist. `previous`: tallies of a pass before over the same
/// workloads (or none), whose lists and reasons are taken where the new ones are equal, rather
/// than made again (see [`reasons::reuse_list`]).
fn decide_gathered(
    snapshot: &Snapshot,
    nodes: Option<&crate::queue::topology::Topology>,
    members: &[Vec<usize>],
    orphans: impl Iterator<Item = usize>,
    gathering: Gathering,
    mut previous: Vec<WorkloadTally>,
) -> Decisions {
    let rooms = topology::SharedRooms::new(snapshot, nodes);
    let mut decisions = Decisions {
        admit: Vec::new(),
        evict: Vec::new(),
        flavors: HashMap::new(),
        domains: HashMap::new(),
        data_nodes: HashMap::new(),
        workloads: vec![WorkloadTally::default(); snapshot.workloads.len()],
        queues: BTreeMap::new(),
    };
    for w in orphans {
        let workload = &snapshot.workloads[w];
        let tally = &mut decisions.workloads[w];
        tally_pods_only(workload, tally);
        if tally.pending_pods > 0 {
            tally.waiting = Some(WaitReason::QueueNotFound {
                queue: workload.queue.clone(),
            });
        }
    }

    let (scratches, changed): (&mut [Scratch], &[Option<Vec<usize>>]) = match gathering {
        Gathering::Afresh => (&mut [], &[]),
        Gathering::Kept(scratches, changed) => (scratches, changed),
    };
    let kept = !scratches.is_empty();
    let gather_of = |q: usize| match changed.get(q) {
        None => Gather::All,
        Some(None) => Gather::Keep,
        Some(Some(members)) => Gather::Changed(members),
    };
    let mut shared = Scratch::default();
    let mut cohorts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (q, queue) in snapshot.queues.iter().enumerate() {
        if let Some(cohort) = &queue.cohort {
            cohorts.entry(cohort.name.as_str()).or_default().push(q);
            continue;
        }
        let scratch = if kept { &mut scratches[q] } else { &mut shared };
        let tally = decide_queue(
            (snapshot, &rooms),
            queue,
            &members[q],
            &mut decisions,
            (scratch, gather_of(q)),
            &mut previous,
        );
        decisions.queues.insert(queue.name.clone(), tally);
    }
    for queues in cohorts.values() {
        let mut fresh: Vec<Scratch> = Vec::new();
        let theirs: Vec<(&mut Scratch, Gather)> = if kept {
            // In the order of `queues` (ascending, as they were pushed).
            (scratches.iter_mut().enumerate())
                .filter(|(q, _)| queues.contains(q))
                .map(|(q, scratch)| (scratch, gather_of(q)))
                .collect()
        } else {
            fresh.resize_with(queues.len(), Scratch::default);
            fresh.iter_mut().map(|s| (s, Gather::All)).collect()
        };
        let (queues, members) = (queues.as_slice(), members);
        let decided = (&mut decisions, previous.as_mut_slice());
        cohort::decide_cohort((snapshot, &rooms), (queues, members), decided, theirs);
    }
    decisions
}

/// Buffers reused from queue to queue.
#[derive(Default)]
struct Scratch {
    arena: Arena,
    items: Vec<Item>,
    slots: Vec<Slot>,
    gated: Vec<usize>,
    /// A memo's: what the last pass gathered (see `memo.rs`).
    kept: memo::Kept,
}

/// Counts pods and usage of a workload that takes no part in any queue's pass.
fn tally_pods_only(workload: &WorkloadSnapshot, tally: &mut WorkloadTally) {
    for set in &workload.pod_sets {
        for pod in &set.pods {
            match pod.state {
                PodState::Gated => tally.pending_pods += 1,
                PodState::Admitted => {
                    tally.admitted_pods += 1;
                    tally.used.add_all(&pod.requests);
                }
                PodState::Ended => {}
            }
        }
    }
}

/// Per member workload of a queue, during the pass.
#[derive(Clone, Copy, Default)]
struct MemberState {
    gated: u32,
    admitted_before: u32,
    admitted_now: u32,
    /// Admitted pods being deleted (counted in `admitted_before` too).
    terminating: u32,
    /// A flavored queue: some of its pods' own node constraints exclude every flavor.
    unplaceable: bool,
}

/// One queue's pass, phase by phase: gather the demand (what each member holds, the reservations
/// of started gangs, one item per gang or pod), order it, admit it in order with the queue's
/// strategy, and tally.
fn decide_queue(
    (snapshot, rooms): (&Snapshot, &topology::SharedRooms),
    queue: &QueueSnapshot,
    members: &[usize],
    decisions: &mut Decisions,
    (scratch, gather): (&mut Scratch, Gather),
    previous: &mut [WorkloadTally],
) -> QueueTally {
    let mut pass = QueuePass::prepared((snapshot, rooms), queue, members, scratch, gather);
    let waiting = pass.admit_in_order(&mut decisions.admit, &mut decisions.evict);
    pass.record_flavors(&mut decisions.flavors);
    pass.record_domains(&mut decisions.domains, &mut decisions.data_nodes);
    pass.tally((&mut decisions.workloads, previous), waiting)
}

/// The state of one queue's pass: the scratch buffers (taken apart, so that the phases borrow
/// them separately) and the per-member accounts.
struct QueuePass<'a> {
    snapshot: &'a Snapshot,
    queue: &'a QueueSnapshot,
    members: &'a [usize],
    dims: Dimensions,
    width: usize,
    /// The size of an item's vectors: one `width` vector per flavor, each in its flavor's block.
    item_width: usize,
    arena: &'a mut Arena,
    items: &'a mut Vec<Item>,
    slots: &'a mut Vec<Slot>,
    /// The gated pods of the pod set being gathered (positions in the set).
    gated: &'a mut Vec<usize>,
    states: Vec<MemberState>,
    /// Per member: used and reserved, projected, `width` values each.
    member_used: Vec<i64>,
    member_reserved: Vec<i64>,
    /// Scratch vectors of the arena: the queue's usage and reservations, and one item's
    /// reservation after credits.
    usage_at: u32,
    reserved_at: u32,
    reserve_at: u32,
    /// A flavored queue: the pods admitted by the pass and the flavor each was admitted in.
    chosen: Vec<(PodRef, u8)>,
    /// The nodes' room, shared by every queue of the pass (see `topology.rs`).
    rooms: &'a topology::SharedRooms<'a>,
    /// The domain the item being stepped was found room in, and the pods admitted into domains.
    planned: Option<(u32, topology::Pinned)>,
    /// The item (its first pod and flavor) that choosing its flavor just found room for: the
    /// step takes it without searching again (nothing took room in between).
    placeable: Option<(u32, u8)>,
    domains: Vec<(PodRef, Arc<str>)>,
    /// The pods admitted beside their data, and the hostnames they were pinned to.
    data_pins: Vec<(PodRef, Arc<str>)>,
}

/// At most this many items of a queue look for victims in one pass (the first ones in admission
/// order that do not fit); the first that finds them is the pass's only preemptor in the queue.
const MAX_PREEMPTION_ATTEMPTS: u32 = 8;

/// See [`QueuePass::floor`].
#[derive(Clone, Copy, Default)]
struct Floor {
    lowest: Option<i32>,
    terminating: bool,
}

/// A preemption plan in force for the rest of a queue's pass.
struct InForce {
    /// Room promised to the preemptor, held from the items after it (added to the reservations).
    hold: Vec<i64>,
    /// Per member: admits nothing more in this pass (it loses pods, has pods terminating, or is
    /// the preemptor).
    frozen: Vec<bool>,
    /// The preemptor's reason to wait, when it waits on lower-priority pods.
    reason: Option<WaitReason>,
}

/// Where one queue's admission in order stands (see [`QueuePass::step`]).
struct Progress {
    /// The next item to consider.
    next: usize,
    /// `Decisions::admit` before the queue's first admission of the pass.
    first_admit: usize,
    /// Per member, the first reason it was kept waiting.
    waiting: Vec<Option<Waiting>>,
    /// StrictFIFO: the workload of the first item that did not fit.
    blocker: Option<usize>,
    in_force: Option<InForce>,
    attempts: u32,
    floor: Floor,
    /// After [`Step::Borrow`]: the queue's fair share once the item is admitted.
    borrow_key: u128,
    /// After [`Step::Reclaim`]: where the item overflows what the cohort leaves the queue.
    misfit: Option<Misfit>,
    /// After [`Step::Reclaim`]: the item in the flavor it reclaims for (its reservation loaded).
    up: Option<arena::Item>,
}

/// What one [`QueuePass::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Every item has been considered.
    Done,
    /// The item was admitted or kept waiting; the next one is up.
    Went,
    /// (A cohort's queue.) The item fits only with quota borrowed from the cohort: the cohort
    /// chooses which queue borrows first. The item stays up.
    Borrow,
    /// (A cohort's queue.) The item fits the queue's quota, but the cohort lent that quota out:
    /// the cohort may reclaim it. The item stays up.
    Reclaim,
}

/// The minimum gang of a workload that has not started, built set by set.
struct Gang {
    /// Its pods: `arena.pods[start..]`.
    start: u32,
    /// Its usage and reservation vectors; NONE until its first pod set.
    usage: u32,
    reserve: u32,
    /// The oldest gated pod: the gang of a workload whose sets all have a minimum of zero.
    earliest: Option<(i64, PodRef)>,
    /// The flavors all of its pods may run in.
    allowed: u16,
    /// Some pod of it asks for a topology domain.
    topology: bool,
}
