//! Admission at creation: a governed pod whose queue has room, and in which nothing waits, is
//! admitted by the pod webhook as it is created: it never carries the gate, so it costs no ungate
//! patch and waits for no admission pass.
//!
//! Only the replica that runs the queue controller (the leader) does it, from what its last pass
//! found: the room each queue has left and the workloads that hold quota. The webhook takes room
//! under a lock and marks the pod with a token (annotation [`AT_CREATION_ANNOTATION`]); until a
//! pass sees a pod with that token in its pod cache, the pass counts the token's hold against the
//! queue's quota, so the quota is never given twice. A hold whose pod has not appeared after
//! [`HOLD_FOR`] is checked against the API server itself ([`AdmitAtCreation::overdue_holds`]): its
//! room goes back only once the API server has no such pod (its creation failed later in the API
//! server, or the pod is gone), never merely because the pod cache is late: a watch behind by more
//! than [`HOLD_FOR`] (seen under a burst of creations) would otherwise let the room be given twice.
//!
//! Order is kept: a queue in which a pod waits behind the gate (after the last pass, or gated by
//! the webhook since, within [`WAITING_GUARD`] of the pass's read of its caches) admits nothing at
//! creation, so a pod created later never overtakes one that waits. Gangs: a pod of a workload the
//! last pass saw holding quota is admitted alone (it fills a reserved place or grows the workload);
//! the first pod of a new workload holds room for its whole minimum gang, which the next pass then
//! reserves as for any workload that has started. Pods of workloads recorded from an application
//! object wait for their DynamicWorkload as before.

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::{
    ADMITTED_AT_ANNOTATION, ADMITTED_BY_ANNOTATION, AT_CREATION_ANNOTATION, CapacityQueue,
    MIN_COUNT_ANNOTATION, QUEUE_LABEL, WORKLOAD_LABEL,
};
use crate::integrations::{Adapters, PodIdentity, workload_object_name};
use crate::metrics::QueueLabels;
use crate::queue::admission::{Decisions, WorkloadKey};
use crate::queue::clock::now_rfc3339;
use crate::queue::snapshot::Built;
use crate::resources::{ResourceList, describe_quantity, pod_requests};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sluice_webhooks::{Classified, CreatedPod, RequestFacts};

/// How long room held for a pod that has not appeared in the controller's cache is held before the
/// API server is asked whether the pod exists. Short: a forged review (or a creation that failed
/// after the webhook) blocks room about this long; long enough for a created pod to reach the
/// cache (milliseconds, seconds under a burst).
pub const HOLD_FOR: Duration = Duration::from_secs(10);
/// After an unanswered check, the next one.
pub const RECHECK_AFTER: Duration = Duration::from_secs(2);
/// A pod gated by the webhook this long before a pass read its caches may not be in them yet: its
/// queue counts as one in which a pod waits.
pub const WAITING_GUARD: Duration = Duration::from_secs(1);

/// The shared state of admission at creation: written by the controller after each pass, read and
/// taken from by the pod webhook.
pub struct AdmitAtCreation {
    state: Mutex<State>,
    keys: RandomState,
    admitted: Option<Family<QueueLabels, Counter>>,
}

/// A pod admitted at creation: the token of the room held for it, and the term that admitted it.
pub struct AdmittedAtCreation {
    pub token: String,
    pub by: String,
}

#[derive(Default)]
struct State {
    /// The controller runs here and has published a pass.
    active: bool,
    /// The leadership term's deadline when the last pass published: nothing is admitted at
    /// creation from then on, whether or not the term's end has been noticed yet (None: no term).
    admit_until: Option<Instant>,
    /// `<identity>@<term generation>` of the term publishing here, written on each pod admitted.
    admitted_by: String,
    queues: HashMap<String, QueueRoom>,
    /// Workloads the last pass saw holding quota (and not ended), with their queue.
    started: HashMap<WorkloadKey, String>,
    /// Every workload the last pass saw, with the queue it is charged to: a pod naming it from
    /// another queue is refused (a workload's pods all run in one queue).
    known: HashMap<WorkloadKey, String>,
    /// Workloads nothing is admitted of at creation (Failed by requeueLimit, or losing pods to
    /// evictions): their pods wait for a pass.
    closed: HashSet<WorkloadKey>,
    /// Workloads whose first pod was admitted at creation since the last pass saw them: places of
    /// their minimum gang held and not yet taken.
    new_gangs: HashMap<WorkloadKey, NewGang>,
    holds: HashMap<String, Hold>,
    next_seq: u64,
}

struct QueueRoom {
    /// Per resource the quota names: what is left to admit.
    room: BTreeMap<String, i64>,
    /// The room as the last pass published it: one namespace's holds that no pass has seen yet
    /// take at most half of it (see [`State::within_share`]).
    published: BTreeMap<String, i64>,
    waiting: bool,
    /// When the webhook last gated a pod of this queue.
    last_gated: Option<Instant>,
    /// The queue admits pods from every namespace, else only from these (seen allowed by the pass).
    all_namespaces: bool,
    namespaces: HashSet<String>,
}

struct NewGang {
    queue: String,
    per_pod: ResourceList,
    places_left: u32,
    /// The token of the first pod's hold: the places live only as long as that hold (a pass that
    /// sees the first pod reserves them; a first pod that never appears frees them with its hold).
    token: String,
}

/// The pod a hold was taken for, as the webhook saw it: a token carried by any other pod is not
/// this hold's (a copied annotation gets no free pass).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBinding {
    pub namespace: String,
    /// The pod's name, empty when the API server generates it from `generate_name`.
    pub name: String,
    pub generate_name: String,
}

impl PodBinding {
    pub fn of(namespace: &str, pod: &Pod) -> PodBinding {
        PodBinding {
            namespace: namespace.to_string(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            generate_name: pod.metadata.generate_name.clone().unwrap_or_default(),
        }
    }

    /// Whether a stored pod named `name` in `namespace` is the one this binding was made for.
    fn names(&self, namespace: &str, name: &str) -> bool {
        namespace == self.namespace
            && if self.name.is_empty() {
                !self.generate_name.is_empty() && name.starts_with(&self.generate_name)
            } else {
                name == self.name
            }
    }
}

struct Hold {
    queue: String,
    amount: ResourceList,
    /// The requests of the one pod the hold admitted (its gang's places are held beside).
    per_pod: ResourceList,
    pod: PodBinding,
    /// A reinvocation of the webhook for this pod's creation has confirmed it once already.
    confirmed: bool,
    seq: u64,
    /// When to ask the API server whether the pod exists, unless the cache shows it first.
    check_at: Instant,
    /// A check is under way.
    checking: bool,
}

/// A hold whose pod the pod cache has not shown within [`HOLD_FOR`]: whether the pod exists is
/// to be asked of the API server, and the answer given to [`AdmitAtCreation::hold_checked`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverdueHold {
    pub token: String,
    pub pod: PodBinding,
    pub queue: String,
}

/// What the API server said of an overdue hold's pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldCheck {
    /// No pod carries the hold's token: the room (and the places of a gang it began) go back.
    Gone,
    /// The pod exists: the cache is behind; the hold stays until the cache shows the pod.
    Exists,
    /// No answer: asked again after [`RECHECK_AFTER`].
    Unknown,
}

/// A pod the pass's pod cache shows admitted with a token (see [`AdmitAtCreation::holds_for_pass`]).
pub struct VisibleToken<'a> {
    pub token: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub queue: &'a str,
}

/// What the webhook does with a pod that arrives carrying a token.
#[derive(Debug, PartialEq, Eq)]
enum Reinvocation {
    /// The webhook's second call for the pod it admitted: keep the token.
    Confirmed,
    /// The pod the hold was taken for, grown since (a sidecar injected after sluice): the hold is
    /// given back and the pod is gated.
    Grown,
    /// Not this hold's pod, a used or unknown token: judged as any new pod.
    Unknown,
}

/// What a pass hands to [`AdmitAtCreation::publish`] besides its decisions.
pub struct PassMark {
    /// `next_seq` when the pass took the holds: holds taken after it are not in the pass.
    seq: u64,
    /// When the pass began reading its caches.
    read_at: Instant,
}

impl Default for AdmitAtCreation {
    fn default() -> Self {
        AdmitAtCreation {
            state: Mutex::new(State::default()),
            keys: RandomState::new(),
            admitted: None,
        }
    }
}

/// Whether `amount` fits in `room` for every resource the quota names.
fn fits(room: &BTreeMap<String, i64>, amount: &ResourceList) -> bool {
    room.iter().all(|(name, left)| amount.get(name) <= *left)
}

impl AdmitAtCreation {
    /// Counts the pods admitted at creation in `admitted`, per queue.
    pub fn with_metrics(mut self, admitted: Family<QueueLabels, Counter>) -> Self {
        self.admitted = Some(admitted);
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A token nobody can guess from other pods' tokens (keyed hash of a sequence number).
    fn token(&self, seq: u64) -> String {
        let mut hasher = self.keys.build_hasher();
        hasher.write_u64(seq);
        format!("{:016x}{seq:x}", hasher.finish())
    }

    /// Admits the pod now if its queue has room and nothing waits in it: the token to put on the
    /// pod, or None (the pod is to be gated, which is noted: the queue now has a pod waiting).
    pub fn try_admit(
        &self,
        pod: &PodBinding,
        identity: &PodIdentity,
        requests: &ResourceList,
    ) -> Option<String> {
        self.try_admit_by(pod, identity, requests)
            .map(|admitted| admitted.token)
    }

    /// A new leadership term starts publishing here: the name written on the pods it admits.
    pub fn begin_term(&self, admitted_by: String) {
        self.lock().admitted_by = admitted_by;
    }

    /// As [`AdmitAtCreation::try_admit`], with the term that admitted the pod (read under the
    /// same lock, so the name matches the room it was admitted from).
    pub fn try_admit_by(
        &self,
        pod: &PodBinding,
        identity: &PodIdentity,
        requests: &ResourceList,
    ) -> Option<AdmittedAtCreation> {
        let mut state = self.lock();
        let seq = state.next_seq;
        let token = self.token(seq);
        let admitted = state.try_admit(&pod.namespace, identity, requests, &token);
        if admitted.is_none() {
            state.note_waiting(&identity.queue);
            return None;
        }
        admitted.map(|(queue, amount)| {
            if let Some(metric) = &self.admitted {
                metric
                    .get_or_create(&QueueLabels {
                        queue: queue.clone(),
                    })
                    .inc();
            }
            state.next_seq += 1;
            state.holds.insert(
                token.clone(),
                Hold {
                    queue,
                    amount,
                    per_pod: requests.clone(),
                    pod: pod.clone(),
                    confirmed: false,
                    seq,
                    check_at: Instant::now() + HOLD_FOR,
                    checking: false,
                },
            );
            AdmittedAtCreation {
                token,
                by: state.admitted_by.clone(),
            }
        })
    }

    /// A pod arrives carrying `token`: whether it is the webhook's reinvocation for the pod the
    /// token's hold was taken for (same namespace, name or generateName, queue; requests within
    /// the hold; confirmed once at most). A grown pod gives its hold back.
    fn reinvoked(
        &self,
        token: &str,
        pod: &PodBinding,
        queue: &str,
        requests: &ResourceList,
    ) -> Reinvocation {
        let mut state = self.lock();
        let Some(hold) = state.holds.get_mut(token) else {
            return Reinvocation::Unknown;
        };
        if hold.confirmed || hold.pod != *pod || hold.queue != queue {
            return Reinvocation::Unknown;
        }
        if fits_within(requests, &hold.per_pod) {
            hold.confirmed = true;
            return Reinvocation::Confirmed;
        }
        state.give_back(token);
        Reinvocation::Grown
    }

    /// Whether the controller runs here and has published a pass (else every pod is gated).
    pub fn is_active(&self) -> bool {
        self.lock().active
    }

    /// For a pass, after it read the pod cache and before [`AdmitAtCreation::holds_for_pass`]:
    /// `queues` (those in which the pass may admit gated pods) admit nothing at creation until the
    /// pass publishes. Their room was published by the last pass; this pass may give it to the
    /// gated pods it read (gated by another replica's webhook, unknown to this one's), so a hold
    /// taken from it meanwhile could give the same room twice.
    pub fn pause(&self, queues: impl IntoIterator<Item = impl AsRef<str>>) {
        let mut state = self.lock();
        for queue in queues {
            if let Some(room) = state.queues.get_mut(queue.as_ref()) {
                room.waiting = true;
            }
        }
    }

    /// For a pass, after it read the pod cache: drops the holds of pods the cache shows admitted
    /// (they count as admitted pods now; a token on any other pod is ignored) and returns the rest
    /// per queue (those the cache is late for included: see [`AdmitAtCreation::overdue_holds`]).
    pub fn holds_for_pass<'a>(
        &self,
        read_at: Instant,
        visible: impl IntoIterator<Item = VisibleToken<'a>>,
    ) -> (PassMark, HashMap<String, ResourceList>) {
        let mut state = self.lock();
        for seen in visible {
            let shown = state.holds.get(seen.token).is_some_and(|hold| {
                hold.queue == seen.queue && hold.pod.names(seen.namespace, seen.name)
            });
            if shown {
                state.holds.remove(seen.token);
            }
        }
        let mut per_queue: HashMap<String, ResourceList> = HashMap::new();
        for hold in state.holds.values() {
            per_queue
                .entry(hold.queue.clone())
                .or_default()
                .add_all(&hold.amount);
        }
        (
            PassMark {
                seq: state.next_seq,
                read_at,
            },
            per_queue,
        )
    }

    /// After a pass (whose queues' quotas were lowered by [`AdmitAtCreation::holds_for_pass`]'s
    /// holds): the room each queue has left, which workloads hold quota; admission at creation on.
    /// `open_queues`: the queues that admit at creation, each with whether it takes pods from
    /// every namespace. `admit_until`: the leadership term's deadline, past which nothing is
    /// admitted at creation even if no one has called [`AdmitAtCreation::deactivate`] yet.
    pub fn publish(
        &self,
        mark: PassMark,
        built: &Built,
        decisions: &Decisions,
        open_queues: &HashMap<String, bool>,
        closed: HashSet<WorkloadKey>,
        admit_until: Option<Instant>,
    ) {
        let Workloads {
            started,
            known,
            mut allowed,
        } = Workloads::of(built, decisions, &closed);
        let mut state = self.lock();
        // Holds taken while the pass ran are not in its figures.
        let mut since: HashMap<String, ResourceList> = HashMap::new();
        for hold in state.holds.values().filter(|h| h.seq >= mark.seq) {
            since
                .entry(hold.queue.clone())
                .or_default()
                .add_all(&hold.amount);
        }
        let mut queues = HashMap::new();
        for queue in &built.snapshot.queues {
            let (Some(tally), Some(all_namespaces)) = (
                decisions.queues.get(&queue.name),
                open_queues.get(&queue.name),
            ) else {
                continue;
            };
            // A flavored queue's pods are pinned to their flavor as they are admitted: they wait
            // for a pass, which chooses the flavor (admission at creation chooses none yet).
            if !queue.flavors.is_empty() {
                continue;
            }
            let taken = since.get(&queue.name);
            // A queue of a cohort admits at creation only within what it keeps for itself: room
            // it lends could be taken by another queue of the cohort at the same moment.
            let limits = tally.ceiling.as_ref().unwrap_or(&queue.quota);
            let room: BTreeMap<String, i64> = limits
                .0
                .iter()
                .map(|(name, limit)| {
                    let used = tally.usage.get(name)
                        + tally.reserved.get(name)
                        + taken.map(|t| t.get(name)).unwrap_or(0);
                    (name.clone(), limit - used)
                })
                .collect();
            let last_gated = state.queues.get(&queue.name).and_then(|q| q.last_gated);
            let gated_unseen = last_gated.is_some_and(|at| at + WAITING_GUARD > mark.read_at);
            queues.insert(
                queue.name.clone(),
                QueueRoom {
                    published: room.clone(),
                    room,
                    waiting: tally.has_waiting() || gated_unseen,
                    last_gated,
                    all_namespaces: *all_namespaces,
                    namespaces: allowed.remove(queue.name.as_str()).unwrap_or_default(),
                },
            );
        }
        // New gangs the pass saw are started workloads now (their places reserved by the pass).
        state.new_gangs.retain(|key, _| !started.contains_key(key));
        state.queues = queues;
        state.started = started;
        state.known = known;
        state.closed = closed;
        state.admit_until = admit_until;
        state.active = true;
    }

    /// The queue workload `key` is charged to, as the last pass saw it (or as a gang begun at
    /// creation since holds it); None when no pass here knows it (or the controller does not run
    /// here).
    pub fn queue_of(&self, key: &WorkloadKey) -> Option<String> {
        let state = self.lock();
        if !state.active {
            return None;
        }
        state
            .known
            .get(key)
            .or_else(|| state.new_gangs.get(key).map(|g| &g.queue))
            .cloned()
    }

    /// The holds whose pods the cache has not shown in time and that no check is under way for:
    /// each is to be checked against the API server (marked as under way until
    /// [`AdmitAtCreation::hold_checked`]).
    pub fn overdue_holds(&self) -> Vec<OverdueHold> {
        let mut state = self.lock();
        let now = Instant::now();
        let mut overdue = Vec::new();
        for (token, hold) in state.holds.iter_mut() {
            if !hold.checking && hold.check_at <= now {
                hold.checking = true;
                overdue.push(OverdueHold {
                    token: token.clone(),
                    pod: hold.pod.clone(),
                    queue: hold.queue.clone(),
                });
            }
        }
        overdue
    }

    /// The API server's answer for an overdue hold (a hold already dropped is left alone).
    pub fn hold_checked(&self, token: &str, check: HoldCheck) {
        let mut state = self.lock();
        match check {
            HoldCheck::Gone => state.give_back(token),
            HoldCheck::Exists | HoldCheck::Unknown => {
                if let Some(hold) = state.holds.get_mut(token) {
                    hold.checking = false;
                    let after = if check == HoldCheck::Exists {
                        HOLD_FOR
                    } else {
                        RECHECK_AFTER
                    };
                    hold.check_at = Instant::now() + after;
                }
            }
        }
    }

    /// The controller stopped here (leadership lost, shutdown): admit nothing at creation.
    pub fn deactivate(&self) {
        let mut state = self.lock();
        *state = State {
            next_seq: state.next_seq,
            ..State::default()
        };
    }
}

/// What a pass tells admission at creation of its workloads.
struct Workloads<'a> {
    /// Those holding quota (not ended, not closed), with their queue.
    started: HashMap<WorkloadKey, String>,
    /// Every workload, with the queue it is charged to.
    known: HashMap<WorkloadKey, String>,
    /// Per queue, the namespaces whose workloads it admits.
    allowed: HashMap<&'a str, HashSet<String>>,
}

impl<'a> Workloads<'a> {
    fn of(built: &'a Built, decisions: &Decisions, closed: &HashSet<WorkloadKey>) -> Self {
        let mut out = Workloads {
            started: HashMap::new(),
            known: HashMap::with_capacity(built.snapshot.workloads.len()),
            allowed: HashMap::new(),
        };
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            out.known
                .insert(workload.key.clone(), workload.queue.clone());
            if !workload.namespace_allowed {
                continue;
            }
            out.allowed
                .entry(workload.queue.as_str())
                .or_default()
                .insert(workload.key.namespace.clone());
            if closed.contains(&workload.key) {
                continue;
            }
            let tally = &decisions.workloads[w];
            let ended = built.workloads[w]
                .as_ref()
                .is_some_and(|d| d.spec.application_ended.is_some());
            if !ended && (tally.admitted_pods > 0 || !tally.reserved.is_empty()) {
                out.started
                    .insert(workload.key.clone(), workload.queue.clone());
            }
        }
        out
    }
}

impl State {
    /// Gives the room of `token`'s hold back to its queue, with the places of a gang it began.
    fn give_back(&mut self, token: &str) {
        let Some(hold) = self.holds.remove(token) else {
            return;
        };
        if let Some(queue) = self.queues.get_mut(&hold.queue) {
            for (name, left) in queue.room.iter_mut() {
                *left = left.saturating_add(hold.amount.get(name));
            }
        }
        self.new_gangs.retain(|_, gang| gang.token != token);
    }

    /// Whether `namespace` may hold `amount` more of `queue`'s room before a pass has seen its
    /// pods: its holds not seen yet stay within half the room the last pass published. A creation
    /// the API server refuses after this webhook (a later webhook, a quota, validation) leaves a
    /// hold no pod confirms until its check finds no such pod (after [`HOLD_FOR`]): one namespace
    /// repeating that cannot keep a shared queue full, and its own pods beyond its share wait for
    /// the pass like any other. Only in a queue another namespace uses.
    fn within_share(&self, namespace: &str, queue: &str, amount: &ResourceList) -> bool {
        let Some(room) = self.queues.get(queue) else {
            return false;
        };
        // A queue no other namespace uses (as the last pass saw it) has no one to starve.
        if room.namespaces.iter().all(|ns| ns == namespace) {
            return true;
        }
        let mut held = amount.clone();
        for hold in self.holds.values() {
            if hold.queue == queue && hold.pod.namespace == namespace {
                held.add_all(&hold.amount);
            }
        }
        room.published
            .iter()
            .all(|(name, published)| held.get(name) <= (*published).max(0) / 2)
    }

    /// A pod of `queue` is gated: the queue has a pod waiting, and later pods must not pass it.
    fn note_waiting(&mut self, queue: &str) {
        if let Some(q) = self.queues.get_mut(queue) {
            q.waiting = true;
            q.last_gated = Some(Instant::now());
        }
    }

    /// The queue and the amount to hold when the pod is admitted now.
    fn try_admit(
        &mut self,
        namespace: &str,
        identity: &PodIdentity,
        requests: &ResourceList,
        token: &str,
    ) -> Option<(String, ResourceList)> {
        if !self.active
            || self
                .admit_until
                .is_some_and(|until| Instant::now() >= until)
        {
            return None;
        }
        let queue = self.queues.get(&identity.queue)?;
        if queue.waiting || !(queue.all_namespaces || queue.namespaces.contains(namespace)) {
            return None;
        }
        let key = identity.workload.as_deref().map(|w| WorkloadKey {
            namespace: namespace.to_string(),
            name: workload_object_name(w),
        });
        if let Some(key) = &key
            && (self.closed.contains(key)
                || self.known.get(key).is_some_and(|q| *q != identity.queue))
        {
            return None; // Failed, losing pods, or another queue's: a pass judges it
        }
        let empty = ResourceList::new();
        let (amount, new_gang) = match &key {
            Some(key) if self.started.get(key) == Some(&identity.queue) => (requests.clone(), None),
            Some(key) if self.started.contains_key(key) => return None, // moved queue: let a pass judge
            Some(key) if self.new_gangs.contains_key(key) => {
                let gang = self.new_gangs.get_mut(key)?;
                if gang.queue != identity.queue {
                    return None;
                }
                if gang.places_left > 0 && fits_within(requests, &gang.per_pod) {
                    // A place of the gang whose room the first pod held.
                    gang.places_left -= 1;
                    (empty, None)
                } else {
                    (requests.clone(), None)
                }
            }
            _ if identity.recorded => return None, // its DynamicWorkload decides its gang
            _ => {
                let gang = identity.min_count.unwrap_or(1).max(1);
                let mut whole = ResourceList::new();
                whole.add_scaled(requests, i64::from(gang));
                (whole, key.map(|k| (k, gang - 1)))
            }
        };
        if !self.within_share(namespace, &identity.queue, &amount) {
            return None;
        }
        let queue = self.queues.get_mut(&identity.queue)?;
        if !fits(&queue.room, &amount) {
            return None;
        }
        for (name, left) in queue.room.iter_mut() {
            *left = left.saturating_sub(amount.get(name));
        }
        if let Some((key, places_left)) = new_gang {
            self.new_gangs.insert(
                key,
                NewGang {
                    queue: identity.queue.clone(),
                    per_pod: requests.clone(),
                    places_left,
                    token: token.to_string(),
                },
            );
        }
        Some((identity.queue.clone(), amount))
    }
}

/// Whether every request of `pod` is within `place` (a gang member's requests).
fn fits_within(pod: &ResourceList, place: &ResourceList) -> bool {
    pod.0.iter().all(|(name, value)| *value <= place.get(name))
}

impl AdmitAtCreation {
    /// Notes that a pod of `queue` is gated whatever the room: the queue has a pod waiting.
    fn try_admit_never(&self, queue: &str) {
        self.lock().note_waiting(queue);
    }
}

mod classifier;
pub use classifier::Classifier;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod quota_holes;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fixture;
