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

mod cohort;

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
}

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
}

#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub queues: Vec<QueueSnapshot>,
    pub workloads: Vec<WorkloadSnapshot>,
}

/// A pod to ungate: `workloads[workload].pod_sets[pod_set].pods[pod]` of the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    pub workload: usize,
    pub pod_set: usize,
    pub pod: usize,
}

/// Why a workload still has pods behind the gate after the pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    QueueNotFound {
        queue: String,
    },
    NamespaceNotAllowed {
        queue: String,
    },
    /// The item would take `resource` over the quota by `missing`.
    Quota {
        queue: String,
        resource: String,
        missing: i64,
        used: i64,
        reserved: i64,
        quota: i64,
    },
    /// The item asks for more than the whole quota: it can never be admitted as the queue stands.
    NeverFits {
        queue: String,
        resource: String,
        needed: i64,
        quota: i64,
    },
    /// StrictFIFO: an earlier item that does not fit holds the line.
    BehindInStrictFifo {
        queue: String,
        blocker: WorkloadKey,
    },
    /// The item preempts: it waits for `victims` pods of lower-priority workloads to go (chosen by
    /// this pass, or already terminating), and is admitted by a later pass once they are gone.
    Preempting {
        queue: String,
        victims: u32,
    },
    /// A queue of a cohort: the item would take `resource` beyond what the queue may hold now
    /// by `missing`: `used` (usage and reservations) plus what the cohort can lend it more now
    /// (`lendable`: unused quota the cohort's queues lend, within its borrowing limit).
    Cohort {
        queue: String,
        cohort: String,
        resource: String,
        missing: i64,
        used: i64,
        quota: i64,
        lendable: i64,
    },
    /// The item fits its queue's quota but other queues of the cohort borrowed it: it waits for
    /// `victims` of their pods running on borrowed quota to go.
    Reclaiming {
        queue: String,
        cohort: String,
        victims: u32,
    },
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::QueueNotFound { queue } => write!(
                f,
                "CapacityQueue {queue:?} does not exist: create it, or label the pods with an existing queue"
            ),
            WaitReason::NamespaceNotAllowed { queue } => write!(
                f,
                "CapacityQueue {queue:?} does not admit this namespace (see its spec.namespaceSelector)"
            ),
            WaitReason::Quota {
                queue,
                resource,
                missing,
                used,
                reserved,
                quota,
            } => write!(
                f,
                "needs {} {resource} more in queue {queue}: {}/{} {resource} used, {} {resource} reserved",
                describe_quantity(resource, *missing),
                describe_quantity(resource, *used),
                describe_quantity(resource, *quota),
                describe_quantity(resource, *reserved),
            ),
            WaitReason::NeverFits {
                queue,
                resource,
                needed,
                quota,
            } => write!(
                f,
                "needs {} {resource} but queue {queue} has a quota of {} {resource}: it cannot be admitted until the quota grows",
                describe_quantity(resource, *needed),
                describe_quantity(resource, *quota),
            ),
            WaitReason::BehindInStrictFifo { queue, blocker } => {
                write!(f, "waits behind {blocker} in StrictFIFO queue {queue}")
            }
            WaitReason::Preempting { queue, victims } => write!(
                f,
                "waits for {victims} lower-priority pods to be preempted in queue {queue}"
            ),
            WaitReason::Cohort {
                queue,
                cohort,
                resource,
                missing,
                used,
                quota,
                lendable,
            } => write!(
                f,
                "needs {} {resource} more in queue {queue}: {}/{} {resource} used, and cohort {cohort} can lend it {} {resource} more now",
                describe_quantity(resource, *missing),
                describe_quantity(resource, *used),
                describe_quantity(resource, *quota),
                describe_quantity(resource, *lendable),
            ),
            WaitReason::Reclaiming {
                queue,
                cohort,
                victims,
            } => write!(
                f,
                "waits for {victims} pods of other queues of cohort {cohort} running on quota borrowed from queue {queue} to be evicted"
            ),
        }
    }
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ItemKind {
    Fill = 0,
    Ordered = 1,
}

/// Marks an absent offset or slot.
const NONE: u32 = u32::MAX;

/// One pending demand item. Small and `Copy`: vectors live in the pass's arenas (`Arena`), items
/// hold offsets into them, so building and sorting items allocates nothing per item.
#[derive(Clone, Copy)]
struct Item {
    kind: ItemKind,
    priority: i32,
    interrupted_count: i32,
    queued_at: i64,
    /// Tie-breaker inside a workload: the pod's position among the set's gated pods (elastic) or 0
    /// (gang).
    pod_rank: u32,
    /// Position of the workload in the queue's members.
    member: u32,
    pod_set: u32,
    /// The item's pods: `arena.pods[pods_start..pods_start + pods_len]`.
    pods_start: u32,
    pods_len: u32,
    /// Added to usage when admitted (the pods' requests): `arena.values[usage..usage + width]`.
    usage: u32,
    /// Added to reservations when admitted (gang members not created yet), or NONE for nothing.
    reserve: u32,
    /// For a single pod of a started workload: the slot of its pod set, whose unfilled reservation
    /// (if any is left when the pod is admitted) the pod takes over; NONE otherwise.
    slot: u32,
}

impl Item {
    /// The rank of the item: kind, priority (high first), interrupted count (high first), time.
    fn rank(&self) -> (ItemKind, i32, i32, i64) {
        // High first: `!x` is -x - 1, decreasing in x and defined for every i32.
        (
            self.kind,
            !self.priority,
            !self.interrupted_count,
            self.queued_at,
        )
    }

    /// Order inside one workload, and between workloads whose keys are equal: the position of the
    /// pod, then the order the items were produced in (member, pod set).
    fn within(&self) -> (u32, u32, u32) {
        (self.pod_rank, self.member, self.pod_set)
    }
}

/// Gang members reserved by a started workload and not admitted yet, per pod set.
struct Slot {
    left: u32,
    /// Size of one member: `arena.values[per_pod..per_pod + width]`.
    per_pod: u32,
}

/// Flat storage of one queue's pass.
#[derive(Default)]
struct Arena {
    /// Resource vectors of `width` values each.
    values: Vec<i64>,
    pods: Vec<PodRef>,
}

impl Arena {
    /// Appends a zeroed vector and returns its offset.
    fn push_zeroed(&mut self, width: usize) -> u32 {
        let at = self.values.len();
        self.values.resize(at + width, 0);
        to_u32(at)
    }

    fn slice(&self, at: u32, width: usize) -> &[i64] {
        let at = at as usize;
        &self.values[at..at + width]
    }

    fn slice_mut(&mut self, at: u32, width: usize) -> &mut [i64] {
        let at = at as usize;
        &mut self.values[at..at + width]
    }
}

/// Indexes are far below u32::MAX (a snapshot of 4 billion pods would not fit in memory anyway);
/// saturate rather than wrap should that ever change.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX - 1)
}

/// The queue's resources in a fixed order: those the quota names first (checked), then cpu and
/// memory for the status when the quota does not name them.
struct Dimensions {
    names: Vec<String>,
    limits: Vec<Option<i64>>,
    /// (name, dimension) sorted by name, to project a resource list in one merge walk.
    by_name: Vec<(String, usize)>,
}

impl Dimensions {
    fn new(quota: &ResourceList) -> Self {
        let mut names: Vec<String> = quota.0.keys().cloned().collect();
        let mut limits: Vec<Option<i64>> = quota.0.values().map(|v| Some(*v)).collect();
        for extra in ["cpu", "memory", "pods"] {
            if !quota.0.contains_key(extra) {
                names.push(extra.to_string());
                limits.push(None);
            }
        }
        let mut by_name: Vec<(String, usize)> = names
            .iter()
            .enumerate()
            .map(|(d, n)| (n.clone(), d))
            .collect();
        by_name.sort();
        Dimensions {
            names,
            limits,
            by_name,
        }
    }

    fn width(&self) -> usize {
        self.names.len()
    }

    /// Adds the list's values for the queue's dimensions into `out` (a merge of two sorted lists:
    /// no lookups, no allocation).
    fn add_projected(&self, list: &ResourceList, out: &mut [i64]) {
        let mut dims = self.by_name.iter().peekable();
        for (name, value) in &list.0 {
            while let Some((dim_name, d)) = dims.peek() {
                match dim_name.as_str().cmp(name.as_str()) {
                    std::cmp::Ordering::Less => {
                        dims.next();
                    }
                    std::cmp::Ordering::Equal => {
                        out[*d] = out[*d].saturating_add(*value);
                        dims.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if dims.peek().is_none() {
                break;
            }
        }
    }

    fn project(&self, list: &ResourceList) -> Vec<i64> {
        let mut out = vec![0i64; self.width()];
        self.add_projected(list, &mut out);
        out
    }

    fn to_list(&self, values: &[i64]) -> ResourceList {
        ResourceList(
            self.names
                .iter()
                .zip(values)
                .filter(|(_, v)| **v != 0)
                .map(|(n, v)| (n.clone(), *v))
                .collect(),
        )
    }
}

fn add_into(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_add(*v);
    }
}

fn sub_from(target: &mut [i64], values: &[i64]) {
    for (t, v) in target.iter_mut().zip(values) {
        *t = t.saturating_sub(*v);
    }
}

/// Decides which gated pods to admit. See the module documentation for the rules.
pub fn decide(snapshot: &Snapshot) -> Decisions {
    let mut decisions = Decisions {
        admit: Vec::new(),
        evict: Vec::new(),
        workloads: vec![WorkloadTally::default(); snapshot.workloads.len()],
        queues: BTreeMap::new(),
    };

    // Group workloads by queue; those whose queue is missing or closed to them just wait.
    let queue_index: std::collections::HashMap<&str, usize> = snapshot
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); snapshot.queues.len()];
    for (w, workload) in snapshot.workloads.iter().enumerate() {
        match queue_index.get(workload.queue.as_str()) {
            Some(&q) => members[q].push(w),
            None => {
                let tally = &mut decisions.workloads[w];
                tally_pods_only(workload, tally);
                if tally.pending_pods > 0 {
                    tally.waiting = Some(WaitReason::QueueNotFound {
                        queue: workload.queue.clone(),
                    });
                }
            }
        }
    }

    let mut scratch = Scratch::default();
    let mut cohorts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (q, queue) in snapshot.queues.iter().enumerate() {
        if let Some(cohort) = &queue.cohort {
            cohorts.entry(cohort.name.as_str()).or_default().push(q);
            continue;
        }
        let tally = decide_queue(snapshot, queue, &members[q], &mut decisions, &mut scratch);
        decisions.queues.insert(queue.name.clone(), tally);
    }
    for queues in cohorts.values() {
        cohort::decide_cohort(snapshot, queues, &members, &mut decisions);
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
}

/// One queue's pass, phase by phase: gather the demand (what each member holds, the reservations
/// of started gangs, one item per gang or pod), order it, admit it in order with the queue's
/// strategy, and tally.
fn decide_queue(
    snapshot: &Snapshot,
    queue: &QueueSnapshot,
    members: &[usize],
    decisions: &mut Decisions,
    scratch: &mut Scratch,
) -> QueueTally {
    let mut pass = QueuePass::new(snapshot, queue, members, scratch);
    for m in 0..members.len() {
        pass.gather_member(m);
    }
    pass.order_demand();
    let waiting = pass.admit_in_order(&mut decisions.admit, &mut decisions.evict);
    pass.tally(&mut decisions.workloads, waiting)
}

/// The state of one queue's pass: the scratch buffers (taken apart, so that the phases borrow
/// them separately) and the per-member accounts.
struct QueuePass<'a> {
    snapshot: &'a Snapshot,
    queue: &'a QueueSnapshot,
    members: &'a [usize],
    dims: Dimensions,
    width: usize,
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
    waiting: Vec<Option<WaitReason>>,
    /// StrictFIFO: the workload of the first item that did not fit.
    blocker: Option<usize>,
    in_force: Option<InForce>,
    attempts: u32,
    floor: Floor,
    /// After [`Step::Borrow`]: the queue's fair share once the item is admitted.
    borrow_key: u128,
    /// After [`Step::Reclaim`]: where the item overflows what the cohort leaves the queue.
    misfit: Option<Misfit>,
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
}

impl<'a> QueuePass<'a> {
    fn new(
        snapshot: &'a Snapshot,
        queue: &'a QueueSnapshot,
        members: &'a [usize],
        scratch: &'a mut Scratch,
    ) -> Self {
        let dims = Dimensions::new(&queue.quota);
        let width = dims.width();
        let Scratch {
            arena,
            items,
            slots,
            gated,
        } = scratch;
        arena.values.clear();
        arena.pods.clear();
        items.clear();
        slots.clear();
        let usage_at = arena.push_zeroed(width);
        let reserved_at = arena.push_zeroed(width);
        let reserve_at = arena.push_zeroed(width);
        QueuePass {
            snapshot,
            queue,
            members,
            dims,
            width,
            arena,
            items,
            slots,
            gated,
            states: vec![MemberState::default(); members.len()],
            member_used: vec![0i64; members.len() * width],
            member_reserved: vec![0i64; members.len() * width],
            usage_at,
            reserved_at,
            reserve_at,
        }
    }

    /// Gathers one member's demand: counts its admitted and gated pods; for a workload that has
    /// started, reserves its missing gang members and queues each gated pod; for one that has not,
    /// queues its minimum gang as one item. What it holds joins the queue's usage and reservations.
    fn gather_member(&mut self, m: usize) {
        let snapshot = self.snapshot;
        let w = self.members[m];
        let workload = &snapshot.workloads[w];
        let started = workload
            .pod_sets
            .iter()
            .any(|s| s.pods.iter().any(|p| p.state == PodState::Admitted));
        let mut gang = Gang {
            start: to_u32(self.arena.pods.len()),
            usage: NONE,
            reserve: NONE,
            earliest: None,
        };
        for (s, set) in workload.pod_sets.iter().enumerate() {
            let admitted_in_set = self.count_set(m, set);
            if !workload.namespace_allowed {
                continue;
            }
            sort_gated(self.gated, set, started);
            if started {
                self.queue_started_set(m, w, s, admitted_in_set);
            } else {
                self.add_set_to_gang(&mut gang, w, s);
            }
        }
        if workload.namespace_allowed && !started && self.states[m].gated > 0 && gang.usage != NONE
        {
            self.push_gang(m, w, gang);
        }
        let width = self.width;
        let (usage, reserved) = split_two(
            &mut self.arena.values,
            self.usage_at,
            self.reserved_at,
            width,
        );
        add_into(usage, &self.member_used[m * width..(m + 1) * width]);
        add_into(reserved, &self.member_reserved[m * width..(m + 1) * width]);
    }

    /// Counts a pod set's pods: the admitted ones into the member's usage, the gated ones into
    /// `gated`. Returns how many are admitted.
    fn count_set(&mut self, m: usize, set: &PodSetSnapshot) -> u32 {
        let width = self.width;
        let used = &mut self.member_used[m * width..(m + 1) * width];
        self.gated.clear();
        let (mut admitted, mut terminating) = (0u32, 0u32);
        for (p, pod) in set.pods.iter().enumerate() {
            match pod.state {
                PodState::Admitted => {
                    admitted += 1;
                    terminating += u32::from(pod.terminating);
                    self.dims.add_projected(&pod.requests, used);
                }
                PodState::Gated => self.gated.push(p),
                PodState::Ended => {}
            }
        }
        let state = &mut self.states[m];
        state.gated += to_u32(self.gated.len());
        state.admitted_before += admitted;
        state.terminating += terminating;
        admitted
    }

    /// A pod set of a started workload: quota reserved for its gang members not admitted yet (a
    /// slot), and one item per gated pod, oldest first. The first ones up to the reservation fill
    /// it (already paid for, they go first); the others are elastic.
    fn queue_started_set(&mut self, m: usize, w: usize, s: usize, admitted_in_set: u32) {
        let snapshot = self.snapshot;
        let workload = &snapshot.workloads[w];
        let set = &workload.pod_sets[s];
        let width = self.width;
        let missing = set.min_count.saturating_sub(admitted_in_set);
        let mut slot = NONE;
        if missing > 0 {
            let per_pod = self.arena.push_zeroed(width);
            self.dims
                .add_projected(&set.per_pod, self.arena.slice_mut(per_pod, width));
            let held = &mut self.member_reserved[m * width..(m + 1) * width];
            add_scaled(held, self.arena.slice(per_pod, width), i64::from(missing));
            slot = to_u32(self.slots.len());
            self.slots.push(Slot {
                left: missing,
                per_pod,
            });
        }
        for (rank, &p) in self.gated.iter().enumerate() {
            let pod = &set.pods[p];
            let usage = self.arena.push_zeroed(width);
            self.dims
                .add_projected(&pod.requests, self.arena.slice_mut(usage, width));
            let pods_start = to_u32(self.arena.pods.len());
            self.arena.pods.push(PodRef {
                workload: w,
                pod_set: s,
                pod: p,
            });
            let kind = if (rank as u32) < missing {
                ItemKind::Fill
            } else {
                ItemKind::Ordered
            };
            self.items.push(Item {
                kind,
                priority: workload.priority,
                interrupted_count: workload.interrupted_count,
                queued_at: pod.created_at,
                pod_rank: to_u32(rank),
                member: to_u32(m),
                pod_set: to_u32(s),
                pods_start,
                pods_len: 1,
                usage,
                reserve: NONE,
                slot,
            });
        }
    }

    /// A pod set of a workload that has not started, into its gang: the set's first gated pods up
    /// to its minimum, plus a reservation for the members not created yet.
    fn add_set_to_gang(&mut self, gang: &mut Gang, w: usize, s: usize) {
        let set = &self.snapshot.workloads[w].pod_sets[s];
        let width = self.width;
        if gang.usage == NONE {
            gang.usage = self.arena.push_zeroed(width);
            gang.reserve = self.arena.push_zeroed(width);
        }
        let at = |p: usize| PodRef {
            workload: w,
            pod_set: s,
            pod: p,
        };
        if let Some(&first) = self.gated.first() {
            let candidate = (set.pods[first].created_at, at(first));
            if gang.earliest.as_ref().is_none_or(|e| candidate.0 < e.0) {
                gang.earliest = Some(candidate);
            }
        }
        let take = (set.min_count as usize).min(self.gated.len());
        for &p in &self.gated[..take] {
            self.arena.pods.push(at(p));
            self.dims.add_projected(
                &set.pods[p].requests,
                self.arena.slice_mut(gang.usage, width),
            );
        }
        let missing = set.min_count.saturating_sub(take as u32);
        if missing > 0 {
            // The member's size in a vector of its own, scaled into the gang's reservation, then
            // dropped: the arena ends with the gang's vectors again.
            let per_pod = self.arena.push_zeroed(width);
            self.dims
                .add_projected(&set.per_pod, self.arena.slice_mut(per_pod, width));
            let (head, tail) = self.arena.values.split_at_mut(per_pod as usize);
            add_scaled(
                &mut head[gang.reserve as usize..gang.reserve as usize + width],
                &tail[..width],
                i64::from(missing),
            );
            self.arena.values.truncate(per_pod as usize);
        }
    }

    /// Queues the gang of a member that has not started as one item. A workload whose sets all
    /// have a minimum of zero starts with its oldest gated pod.
    fn push_gang(&mut self, m: usize, w: usize, gang: Gang) {
        let workload = &self.snapshot.workloads[w];
        let mut pods_len = to_u32(self.arena.pods.len()) - gang.start;
        if pods_len == 0
            && let Some((_, pod)) = gang.earliest
        {
            let set = &workload.pod_sets[pod.pod_set];
            self.dims.add_projected(
                &set.pods[pod.pod].requests,
                self.arena.slice_mut(gang.usage, self.width),
            );
            self.arena.pods.push(pod);
            pods_len = 1;
        }
        self.items.push(Item {
            kind: ItemKind::Ordered,
            priority: workload.priority,
            interrupted_count: workload.interrupted_count,
            queued_at: workload.queued_at,
            pod_rank: 0,
            member: to_u32(m),
            pod_set: 0,
            pods_start: gang.start,
            pods_len,
            usage: gang.usage,
            reserve: gang.reserve,
            slot: NONE,
        });
    }

    /// Puts the demand items into admission order (see [`sort_items`]).
    fn order_demand(&mut self) {
        sort_items(self.items, self.snapshot, self.members);
    }

    /// Admits the ordered items one by one while they fit. BestEffortFIFO goes on past an item
    /// that does not fit; StrictFIFO keeps everything after it waiting. An item that does not fit
    /// may preempt (see [`Self::try_preemption`]): from then on the room it is promised is held
    /// and the workloads losing pods admit nothing more in this pass. Returns, per member, the
    /// first reason it was kept waiting.
    fn admit_in_order(
        &mut self,
        admit: &mut Vec<PodRef>,
        evict: &mut Vec<Eviction>,
    ) -> Vec<Option<WaitReason>> {
        let mut progress = self.start(admit.len());
        while self.step(&mut progress, admit, evict, None) != Step::Done {}
        self.finish(progress)
    }

    /// The state of the admission in order before its first item.
    fn start(&self, first_admit: usize) -> Progress {
        Progress {
            next: 0,
            first_admit,
            waiting: vec![None; self.members.len()],
            blocker: None,
            in_force: None,
            attempts: 0,
            floor: self.floor(),
            borrow_key: 0,
            misfit: None,
        }
    }

    /// Considers the next item in order: admits it, or keeps it waiting (and may plan a
    /// preemption for it). In a cohort (`turn`), an item that needs borrowed quota or that would
    /// reclaim lent quota stays up and the cohort decides ([`Step::Borrow`], [`Step::Reclaim`]).
    fn step(
        &mut self,
        p: &mut Progress,
        admit: &mut Vec<PodRef>,
        evict: &mut Vec<Eviction>,
        turn: Option<&mut cohort::Turn>,
    ) -> Step {
        let Some(&item) = self.items.get(p.next) else {
            return Step::Done;
        };
        let m = item.member as usize;
        if let Some(first) = p.blocker {
            if p.waiting[m].is_none() {
                p.waiting[m] = Some(WaitReason::BehindInStrictFifo {
                    queue: self.queue.name.clone(),
                    blocker: self.snapshot.workloads[first].key.clone(),
                });
            }
            p.next += 1;
            return Step::Went;
        }
        let credit = self.load_reserve(&item);
        let frozen = p.in_force.as_ref().is_some_and(|f| f.frozen[m]);
        let misfit = self.misfit(&item, &self.dims.limits);
        let Some(turn) = turn else {
            match misfit {
                None if !frozen => self.take(&item, credit, admit),
                None => {}
                Some(misfit) => self.keep_waiting(p, &item, &misfit, None, admit, evict),
            }
            p.next += 1;
            return Step::Went;
        };
        let check = self.cohort_check(&item, turn);
        match (misfit, check) {
            (None, None) if !frozen => self.take_in_cohort(&item, credit, admit, turn),
            (Some(_), None) if !frozen && !turn.closed() => {
                if !turn.may_borrow {
                    p.borrow_key = self.borrow_share(&item, turn);
                    return Step::Borrow;
                }
                self.take_in_cohort(&item, credit, admit, turn);
            }
            (None, Some(over)) if !frozen && turn.may_reclaim(&item) => {
                p.misfit = Some(over);
                return Step::Reclaim;
            }
            (None, None) | (Some(_), None) if frozen => {}
            (nominal, over) => {
                let over = over.or(nominal);
                if let Some(over) = over {
                    let reason = turn.reason(self, &over);
                    match nominal {
                        Some(nominal) => {
                            self.keep_waiting(p, &item, &nominal, Some(reason), admit, evict);
                            // Room held for an in-queue preemptor is the queue's in the pool too.
                            self.held_in_cohort(turn);
                        }
                        None => self.waits(p, &item, reason),
                    }
                }
            }
        }
        p.next += 1;
        Step::Went
    }

    /// Records why an item that does not fit waits, lets it look for victims in its queue, and
    /// in StrictFIFO makes it the blocker. `reason`: the cohort's reason, instead of the quota's.
    fn keep_waiting(
        &mut self,
        p: &mut Progress,
        item: &Item,
        misfit: &Misfit,
        reason: Option<WaitReason>,
        admit: &[PodRef],
        evict: &mut Vec<Eviction>,
    ) {
        let m = item.member as usize;
        if p.waiting[m].is_none() {
            p.waiting[m] =
                Some(reason.unwrap_or_else(|| misfit.reason(&self.queue.name, &self.dims)));
        }
        if p.in_force.is_none() && self.may_preempt(item, misfit, p.attempts, p.floor) {
            p.attempts += 1;
            p.in_force = self.try_preemption(item, &admit[p.first_admit..], evict);
            if let Some(reason) = p.in_force.as_mut().and_then(|f| f.reason.take()) {
                p.waiting[m] = Some(reason);
            }
        }
        if self.queue.strategy == QueueingStrategy::StrictFIFO {
            p.blocker = Some(self.members[m]);
        }
    }

    /// Records why an item waits (when its member has no reason yet) and, in StrictFIFO, makes it
    /// the blocker.
    fn waits(&self, p: &mut Progress, item: &Item, reason: WaitReason) {
        let m = item.member as usize;
        if p.waiting[m].is_none() {
            p.waiting[m] = Some(reason);
        }
        if self.queue.strategy == QueueingStrategy::StrictFIFO {
            p.blocker = Some(self.members[m]);
        }
    }

    /// Ends the admission in order: the room held for a preemptor is released. Returns, per
    /// member, the first reason it was kept waiting.
    fn finish(&mut self, progress: Progress) -> Vec<Option<WaitReason>> {
        if let Some(in_force) = progress.in_force {
            let reserved_at = self.reserved_at;
            sub_from(
                self.arena.slice_mut(reserved_at, self.width),
                &in_force.hold,
            );
        }
        progress.waiting
    }

    /// Whether an item that does not fit looks for victims: the queue allows it, the item is a
    /// gang or an elastic pod (not a fill, already paid for) that could fit the quota at all, few
    /// enough items have tried in this pass, and some workload of lower priority holds pods or
    /// some pod is being freed.
    fn may_preempt(&self, item: &Item, misfit: &Misfit, attempts: u32, floor: Floor) -> bool {
        self.queue.preemption.within_queue == WithinQueue::LowerPriority
            && item.kind == ItemKind::Ordered
            && misfit.needed <= misfit.limit
            && attempts < MAX_PREEMPTION_ATTEMPTS
            && (floor.terminating || floor.lowest.is_some_and(|p| p < item.priority))
    }

    /// What may be taken back in this queue at all, computed once per pass: the lowest priority
    /// of a workload holding pods, and whether any pod is terminating.
    fn floor(&self) -> Floor {
        let mut floor = Floor::default();
        if self.queue.preemption.within_queue == WithinQueue::Never {
            return floor;
        }
        for (m, &w) in self.members.iter().enumerate() {
            let state = &self.states[m];
            floor.terminating |= state.terminating > 0;
            if state.admitted_before > 0 {
                let priority = self.snapshot.workloads[w].priority;
                floor.lowest = Some(floor.lowest.map_or(priority, |l| l.min(priority)));
            }
        }
        floor
    }

    /// Looks for victims for an item that does not fit ([`preemption::plan`]). With a plan, its
    /// evictions are recorded (the item stays waiting: a later pass admits it once the victims
    /// are gone), the room it is promised is held from the items after it (added to the queue's
    /// reservations until the end of the pass), and the preemptor's workload and those that lose
    /// pods or have pods terminating are frozen for the rest of the pass.
    fn try_preemption(
        &mut self,
        item: &Item,
        admitted_now: &[PodRef],
        evict: &mut Vec<Eviction>,
    ) -> Option<InForce> {
        let width = self.width;
        let mut load = self.arena.slice(self.usage_at, width).to_vec();
        add_into(&mut load, self.arena.slice(self.reserved_at, width));
        let mut need = self.arena.slice(item.usage, width).to_vec();
        add_into(&mut need, self.arena.slice(self.reserve_at, width));
        // The preemptor's own pods count as admitted: a workload of the preemptor whose pods are
        // terminating keeps its reservation for them once they are gone.
        let start = item.pods_start as usize;
        let item_pods = &self.arena.pods[start..start + item.pods_len as usize];
        let (holders, owners) = self.holders(item.priority, admitted_now.iter().chain(item_pods));
        let need = Need {
            limits: &self.dims.limits,
            load: &load,
            item: &need,
        };
        let plan = preemption::plan(&need, &holders)?;
        let in_force = self.in_force(item, &plan, &owners, &load, evict);
        let reserved_at = self.reserved_at;
        add_into(self.arena.slice_mut(reserved_at, width), &in_force.hold);
        Some(in_force)
    }

    /// The members that hold admitted pods, as the planner sees them, and each one's member index.
    /// `admitted_now`: the pods admitted by the pass so far (and the preemptor's).
    fn holders<'p>(
        &self,
        priority: i32,
        admitted_now: impl Iterator<Item = &'p PodRef>,
    ) -> (Vec<Holder>, Vec<usize>) {
        let mut now: HashMap<(usize, usize), u32> = HashMap::new();
        for r in admitted_now {
            *now.entry((r.workload, r.pod_set)).or_default() += 1;
        }
        let (mut holders, mut owners) = (Vec::new(), Vec::new());
        for (m, &w) in self.members.iter().enumerate() {
            let state = self.states[m];
            if state.admitted_before == 0 {
                continue;
            }
            let workload = &self.snapshot.workloads[w];
            let sets = workload
                .pod_sets
                .iter()
                .enumerate()
                .map(|(s, set)| HeldSet {
                    min_count: set.min_count,
                    per_pod: self.dims.project(&set.per_pod),
                    admitted_now: now.get(&(w, s)).copied().unwrap_or(0),
                    pods: self.held_pods(set),
                })
                .collect();
            holders.push(Holder {
                priority: workload.priority,
                queued_at: workload.queued_at,
                may_be_victim: workload.priority < priority && state.admitted_now == 0,
                sets,
            });
            owners.push(m);
        }
        (holders, owners)
    }

    fn held_pods(&self, set: &PodSetSnapshot) -> Vec<HeldPod> {
        set.pods
            .iter()
            .enumerate()
            .filter(|(_, pod)| pod.state == PodState::Admitted)
            .map(|(index, pod)| HeldPod {
                index,
                requests: self.dims.project(&pod.requests),
                created_at: pod.created_at,
                terminating: pod.terminating,
                blocked: pod.eviction_blocked,
            })
            .collect()
    }

    /// A plan put in force: its evictions, the room held for the preemptor (what it will take
    /// beyond what the queue holds now), the frozen members and the preemptor's reason to wait
    /// (the victims chosen now and the lower-priority pods already terminating; none when only
    /// other pods being freed make its room).
    fn in_force(
        &self,
        item: &Item,
        plan: &Plan,
        owners: &[usize],
        load: &[i64],
        evict: &mut Vec<Eviction>,
    ) -> InForce {
        let preemptor = self.members[item.member as usize];
        let mut frozen: Vec<bool> = self.states.iter().map(|s| s.terminating > 0).collect();
        // Its own later pods would take the gang places its plan counted on.
        frozen[item.member as usize] = true;
        for victim in &plan.victims {
            let m = owners[victim.holder];
            frozen[m] = true;
            evict.push(Eviction {
                victim: PodRef {
                    workload: self.members[m],
                    pod_set: victim.set,
                    pod: victim.pod,
                },
                preemptor,
                reason: EvictionReason::InQueuePriority,
            });
        }
        let terminating: u32 = (self.members.iter().zip(&self.states))
            .filter(|(w, _)| self.snapshot.workloads[**w].priority < item.priority)
            .map(|(_, s)| s.terminating)
            .sum();
        let victims = to_u32(plan.victims.len()).saturating_add(terminating);
        InForce {
            hold: (plan.after.iter().zip(load))
                .map(|(after, now)| after.saturating_sub(*now).max(0))
                .collect(),
            frozen,
            reason: (victims > 0).then(|| WaitReason::Preempting {
                queue: self.queue.name.clone(),
                victims,
            }),
        }
    }

    /// Loads the item's reservation into the vector at `reserve_at`, less the unfilled gang member
    /// whose place it takes (if any). Returns whether it takes such a place (a credit).
    fn load_reserve(&mut self, item: &Item) -> bool {
        let credit = (item.slot != NONE)
            .then(|| &self.slots[item.slot as usize])
            .filter(|slot| slot.left > 0)
            .map(|slot| slot.per_pod);
        let (width, reserve_at) = (self.width, self.reserve_at as usize);
        let (reserve, rest) = self.arena.values.split_at_mut(reserve_at + width);
        let reserve = &mut reserve[reserve_at..];
        // Item vectors all lie after the three scratch vectors.
        let value = |at: u32| {
            let at = at as usize - (reserve_at + width);
            &rest[at..at + width]
        };
        reserve.fill(0);
        if item.reserve != NONE {
            add_into(reserve, value(item.reserve));
        }
        if let Some(per_pod) = credit {
            for (r, v) in reserve.iter_mut().zip(value(per_pod)) {
                *r = r.saturating_add(-v);
            }
        }
        credit.is_some()
    }

    /// Where the item (its reservation loaded by [`Self::load_reserve`]) overflows `limits` (the
    /// quota's, or those a cohort gives the queue now).
    fn misfit(&self, item: &Item, limits: &[Option<i64>]) -> Option<Misfit> {
        let width = self.width;
        first_misfit(
            limits,
            self.arena.slice(self.usage_at, width),
            self.arena.slice(self.reserved_at, width),
            self.arena.slice(item.usage, width),
            self.arena.slice(self.reserve_at, width),
        )
    }

    /// Admits a fitting item: its usage and reservation join the queue's and its member's, the
    /// gang place it fills is taken, its pods are to be ungated.
    fn take(&mut self, item: &Item, credit: bool, admit: &mut Vec<PodRef>) {
        if credit {
            self.slots[item.slot as usize].left -= 1;
        }
        let m = item.member as usize;
        let (width, usage_at, reserved_at) = (
            self.width,
            self.usage_at as usize,
            self.reserved_at as usize,
        );
        let (item_usage, reserve_at) = (item.usage as usize, self.reserve_at as usize);
        let values = &mut self.arena.values;
        for d in 0..width {
            let add = values[item_usage + d];
            let reserve = values[reserve_at + d];
            let usage = &mut values[usage_at + d];
            *usage = usage.saturating_add(add);
            let reserved = &mut values[reserved_at + d];
            *reserved = reserved.saturating_add(reserve);
            let used = &mut self.member_used[m * width + d];
            *used = used.saturating_add(add);
            let held = &mut self.member_reserved[m * width + d];
            *held = held.saturating_add(reserve);
        }
        let start = item.pods_start as usize;
        admit.extend_from_slice(&self.arena.pods[start..start + item.pods_len as usize]);
        self.states[m].admitted_now += item.pods_len;
    }

    /// The queue's tally and each member's, after the decisions.
    fn tally(
        &self,
        workloads: &mut [WorkloadTally],
        mut waiting: Vec<Option<WaitReason>>,
    ) -> QueueTally {
        let width = self.width;
        let mut tally = QueueTally {
            usage: self.dims.to_list(self.arena.slice(self.usage_at, width)),
            reserved: self.dims.to_list(self.arena.slice(self.reserved_at, width)),
            ..QueueTally::default()
        };
        // Positions: members with pods still waiting, in the order of their first item.
        let mut position = vec![0u32; self.members.len()];
        let mut placed = 0u32;
        for item in self.items.iter() {
            let m = item.member as usize;
            let state = self.states[m];
            if position[m] == 0 && state.gated > state.admitted_now {
                placed += 1;
                position[m] = placed;
            }
        }
        for (m, &w) in self.members.iter().enumerate() {
            let workload = &self.snapshot.workloads[w];
            let state = self.states[m];
            let wt = &mut workloads[w];
            wt.admitted_pods += state.admitted_before + state.admitted_now;
            wt.pending_pods += state.gated - state.admitted_now;
            wt.used = self
                .dims
                .to_list(&self.member_used[m * width..(m + 1) * width]);
            wt.reserved = self
                .dims
                .to_list(&self.member_reserved[m * width..(m + 1) * width]);
            wt.position = (position[m] > 0).then_some(position[m]);
            if wt.pending_pods > 0 {
                wt.waiting = waiting[m].take().or_else(|| {
                    (!workload.namespace_allowed).then(|| WaitReason::NamespaceNotAllowed {
                        queue: self.queue.name.clone(),
                    })
                });
                tally.pending_workloads += 1;
            }
            if wt.admitted_pods > 0 || !wt.reserved.is_empty() {
                tally.admitted_workloads += 1;
            }
            tally.pending_pods += wt.pending_pods;
            tally.admitted_pods += wt.admitted_pods;
        }
        tally
    }
}

/// Sorts a pod set's gated pods (positions in `gated`) oldest first. Of a workload that has not
/// started only the gang's pods (its minimum, at least one) matter: those are selected first, and
/// only they are sorted.
fn sort_gated(gated: &mut Vec<usize>, set: &PodSetSnapshot, started: bool) {
    let by_age = |a: &usize, b: &usize| {
        let (pa, pb) = (&set.pods[*a], &set.pods[*b]);
        pa.created_at
            .cmp(&pb.created_at)
            .then_with(|| pa.name.cmp(&pb.name))
            .then_with(|| a.cmp(b))
    };
    if !started {
        let needed = (set.min_count as usize).max(1);
        if needed < gated.len() {
            gated.select_nth_unstable_by(needed, by_age);
            gated.truncate(needed);
        }
    }
    gated.sort_unstable_by(by_age);
}

/// Sorts the items into admission order: rank, then workload key, then position. Integers first
/// (one unstable sort on a key that is unique per item); workload keys are compared as strings only
/// inside runs of equal rank that hold more than one workload, which are rare unless many items
/// were queued in the same millisecond.
fn sort_items(items: &mut [Item], snapshot: &Snapshot, members: &[usize]) {
    items.sort_unstable_by_key(|item| (item.rank(), item.member, item.pod_rank, item.pod_set));
    let key = |item: &Item| &snapshot.workloads[members[item.member as usize]].key;
    let mut start = 0;
    while start < items.len() {
        let rank = items[start].rank();
        let mut end = start + 1;
        let mut several = false;
        while end < items.len() && items[end].rank() == rank {
            several |= items[end].member != items[start].member;
            end += 1;
        }
        if several {
            items[start..end].sort_unstable_by(|a, b| {
                key(a).cmp(key(b)).then_with(|| a.within().cmp(&b.within()))
            });
        }
        start = end;
    }
}

/// Two disjoint vectors of `width` values at offsets `a` < `b`.
fn split_two(values: &mut [i64], a: u32, b: u32, width: usize) -> (&mut [i64], &mut [i64]) {
    let (head, tail) = values.split_at_mut(b as usize);
    (
        &mut head[a as usize..a as usize + width],
        &mut tail[..width],
    )
}

fn add_scaled(target: &mut [i64], per_pod: &[i64], times: i64) {
    for (t, v) in target.iter_mut().zip(per_pod) {
        *t = t.saturating_add(v.saturating_mul(times));
    }
}

/// Where an item overflows the quota; turned into a [`WaitReason`] only when it is kept.
#[derive(Clone, Copy)]
struct Misfit {
    dimension: usize,
    needed: i64,
    after: i64,
    used: i64,
    reserved: i64,
    limit: i64,
}

impl Misfit {
    fn reason(&self, queue_name: &str, dims: &Dimensions) -> WaitReason {
        let queue = queue_name.to_string();
        let resource = dims.names[self.dimension].clone();
        if self.needed > self.limit {
            return WaitReason::NeverFits {
                queue,
                resource,
                needed: self.needed,
                quota: self.limit,
            };
        }
        WaitReason::Quota {
            queue,
            resource,
            missing: self.after - self.limit,
            used: self.used,
            reserved: self.reserved,
            quota: self.limit,
        }
    }
}

/// The first limited resource the item would overflow; None when it fits.
fn first_misfit(
    limits: &[Option<i64>],
    usage: &[i64],
    reserved: &[i64],
    item_usage: &[i64],
    item_reserve: &[i64],
) -> Option<Misfit> {
    for (d, limit) in limits.iter().enumerate() {
        let Some(limit) = *limit else { continue };
        let needed = item_usage[d].saturating_add(item_reserve[d]);
        let after = usage[d].saturating_add(reserved[d]).saturating_add(needed);
        if after > limit {
            return Some(Misfit {
                dimension: d,
                needed,
                after,
                used: usage[d],
                reserved: reserved[d],
                limit,
            });
        }
    }
    None
}
