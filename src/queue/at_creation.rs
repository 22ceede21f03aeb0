//! Admission at creation: a governed pod whose queue has room, and in which nothing waits, is
//! admitted by the pod webhook as it is created: it never carries the gate, so it costs no ungate
//! patch and waits for no admission pass.
//!
//! Only the replica that runs the queue controller (the leader) does it, from what its last pass
//! found: the room each queue has left and the workloads that hold quota. The webhook takes room
//! under a lock and marks the pod with a token (annotation [`AT_CREATION_ANNOTATION`]); until a
//! pass sees a pod with that token in its pod cache, the pass counts the token's hold against the
//! queue's quota, so the quota is never given twice. A hold whose pod never appears (its creation
//! failed later in the API server) gives its room back after [`HOLD_FOR`].
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
use sluice_webhooks::{Classified, RequestFacts};

/// How long room held for a pod that has not appeared in the controller's cache stays held. Short:
/// a forged review (or a creation that failed after the webhook) blocks room no longer than this;
/// long enough for a created pod to reach the cache (milliseconds, seconds under a burst).
pub const HOLD_FOR: Duration = Duration::from_secs(10);
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
    at: Instant,
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
                    at: Instant::now(),
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
    /// (they count as admitted pods now; a token on any other pod is ignored) and those too old,
    /// with the gang places of a first pod that never appeared, and returns the rest per queue.
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
        let expired: Vec<String> = state
            .holds
            .iter()
            .filter(|(_, hold)| hold.at.elapsed() >= HOLD_FOR)
            .map(|(token, _)| token.clone())
            .collect();
        for token in expired {
            state.holds.remove(&token);
            // Its pod never appeared: the places held for the rest of its gang go too.
            state.new_gangs.retain(|_, gang| gang.token != token);
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
    /// hold no pod confirms until [`HOLD_FOR`] runs out: one namespace repeating that cannot keep a
    /// shared queue full, and its own pods beyond its share wait for the pass like any other. Only
    /// in a queue another namespace uses.
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

/// The pod classifier the webhook serves: the adapters, plus admission at creation when the
/// controller runs in this process.
pub struct Classifier {
    pub adapters: Adapters,
    pub at_creation: Option<Arc<AdmitAtCreation>>,
    /// The queues, for their `spec.preemption.maxPriority` (None: no cap is checked).
    pub queues: Option<Store<CapacityQueue>>,
}

impl Classifier {
    /// Refuses a pod of `queue` whose priority is above the queue's `maxPriority`. The API
    /// server's Priority admission has set `spec.priority` from the pod's PriorityClass before the
    /// webhooks run; a pod without one counts as 0, as the controller counts it. A queue not known
    /// (yet) caps nothing here: the controller counts no pod above its queue's cap.
    fn refuse_above_max_priority(
        &self,
        namespace: &str,
        pod: &Pod,
        queue: &str,
    ) -> Result<(), String> {
        let Some(cap) = self
            .queues
            .as_ref()
            .and_then(|queues| queues.get(&ObjectRef::new(queue)))
            .and_then(|q| q.spec.preemption().max_priority)
        else {
            return Ok(());
        };
        let spec = pod.spec.as_ref();
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        if priority <= cap {
            return Ok(());
        }
        let class = match spec.and_then(|s| s.priority_class_name.as_deref()) {
            Some(class) if !class.is_empty() => format!("PriorityClass {class:?}"),
            _ => "no PriorityClass".to_string(),
        };
        Err(format!(
            "sluice: pod {namespace}/{name} has priority {priority} ({class}) but CapacityQueue {queue:?} accepts pods of priority {cap} at most (spec.preemption.maxPriority): a higher priority could evict the queue's other workloads. Give the pod (or its application's pod templates) a priorityClassName whose value is at most {cap} (kubectl get priorityclasses lists them), or ask the queue's owner to raise its maxPriority",
            name = pod_display_name(pod),
        ))
    }
}

impl Classifier {
    /// The identity `pod` has with sluice's `labels` on it (a namespace default queue...); None
    /// when it does not match the labels' queue.
    fn identity_with(&self, pod: &Pod, labels: &BTreeMap<String, String>) -> Option<PodIdentity> {
        let queue = labels.get(QUEUE_LABEL)?;
        let mut labelled = pod.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.adapters
            .identify(&labelled)
            .filter(|i| &i.queue == queue)
    }

    /// The identity [`Classifier::classify_request`] worked out for this request, or (called
    /// without it) [`Classifier::identity_with`] now.
    fn identity_of<'f>(
        &self,
        facts: &'f RequestFacts,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
    ) -> Option<Cow<'f, PodIdentity>> {
        match facts.get::<PodIdentity>() {
            Some(identity) => Some(Cow::Borrowed(identity)),
            None => self.identity_with(pod, labels).map(Cow::Owned),
        }
    }

    /// Refuses a pod whose queue is not the queue its workload is charged to: every pod counts in
    /// the queue its own label names, so a workload's pods all run in one queue (a pod joining
    /// another queue's workload would otherwise be accounted nowhere or twice). Known from the
    /// controller's last pass, so only where the controller runs; elsewhere such a pod is gated
    /// and its pass never admits it.
    fn refuse_other_queue(
        &self,
        namespace: &str,
        pod: &Pod,
        identity: &PodIdentity,
    ) -> Result<(), String> {
        let Some(at_creation) = &self.at_creation else {
            return Ok(());
        };
        // A pod that is its own workload (no workload of its own named): a pod of that name in
        // another queue was deleted, or its creation failed; the pass judges it.
        let Some(workload) = identity
            .workload
            .as_deref()
            .filter(|w| pod.metadata.name.as_deref() != Some(*w))
        else {
            return Ok(());
        };
        let key = WorkloadKey {
            namespace: namespace.to_string(),
            name: workload_object_name(workload),
        };
        match at_creation.queue_of(&key) {
            Some(theirs) if theirs != identity.queue => Err(format!(
                "sluice: pod {namespace}/{name} names queue {ours:?} ({QUEUE_LABEL}) but belongs to workload {key}, which runs in queue {theirs:?}: a workload's pods all run in one queue, the queue their own label names. Create the pod with {QUEUE_LABEL}={theirs:?}, or give it a workload of its own (another {WORKLOAD_LABEL}, or another application)",
                name = pod_display_name(pod),
                ours = identity.queue,
            )),
            _ => Ok(()),
        }
    }
}

impl Classifier {
    /// Refuses a pod that could never be admitted: its gang (its `sluice.dev/min-count`, or 1)
    /// needs more than its queue could ever give it (its quota, plus what its cohort lends). Left
    /// waiting, it would wait forever, and at the head of a StrictFIFO queue block every pod
    /// behind it. A queue not known (yet) is judged by the controller.
    fn refuse_never_fits(
        &self,
        namespace: &str,
        pod: &Pod,
        identity: &PodIdentity,
    ) -> Result<(), String> {
        let Some(queues) = &self.queues else {
            return Ok(());
        };
        let Some(queue) = queues.get(&ObjectRef::new(&identity.queue)) else {
            return Ok(());
        };
        let Some(Ok(per_pod)) = pod.spec.as_ref().map(pod_requests) else {
            return Ok(()); // refused with its own message
        };
        let gang = identity.min_count.unwrap_or(1).max(1);
        let mut need = ResourceList::new();
        if need.try_add_scaled(&per_pod, i64::from(gang)).is_err() {
            return Err(format!(
                "sluice: pod {namespace}/{name} asks for a gang of {gang} ({MIN_COUNT_ANNOTATION}) of pods too large to count: lower the minimum",
                name = pod_display_name(pod),
            ));
        }
        let Ok(most) = crate::queue::ceiling::ceiling(&queue, &queues.state()) else {
            return Ok(()); // an unreadable queue is reported by the controller
        };
        match crate::queue::ceiling::exceeded(&need, &most) {
            None => Ok(()),
            Some(over) => Err(format!(
                "sluice: pod {namespace}/{name} could never start: its gang of {gang} pod(s) {what}. Lower its requests or its minimum ({MIN_COUNT_ANNOTATION}), or ask for a larger quota",
                name = pod_display_name(pod),
                what = crate::queue::ceiling::describe_exceeded(&queue, &over),
            )),
        }
    }
}

impl sluice_webhooks::PodClassifier for Classifier {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        self.adapters.classify(pod)
    }

    fn classify_in(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        Ok(self
            .classify_request(namespace, pod)?
            .map(|classified| classified.labels))
    }

    fn classify_request(&self, namespace: &str, pod: &Pod) -> Result<Option<Classified>, String> {
        let labels = self.adapters.classify_in(namespace, pod)?;
        if let Some(queue) = labels.as_ref().and_then(|l| l.get(QUEUE_LABEL)) {
            self.refuse_above_max_priority(namespace, pod, queue)?;
        }
        // Worked out once for the request (it copies the pod), kept for the calls after this one.
        let identity = labels.as_ref().and_then(|l| self.identity_with(pod, l));
        if let Some(identity) = &identity {
            self.refuse_other_queue(namespace, pod, identity)?;
            self.refuse_never_fits(namespace, pod, identity)?;
        }
        // The API server validates the pod only after this webhook: a governed pod's requests are
        // judged here, or a negative request would count as room.
        if labels.is_some()
            && let Some(claims) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref())
            && !claims.is_empty()
        {
            return Err(format!(
                "sluice: pod {namespace}/{name} is governed by a queue but asks for devices through dynamic resource allocation (spec.resourceClaims: {claims}), which sluice cannot count against a quota yet, so it would escape its queue's limits. Ask for the device as an extended resource in the container's resources (e.g. nvidia.com/gpu), or run the pod outside sluice's queues",
                name = pod_display_name(pod),
                claims = claims
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
        if labels.is_some()
            && let Some(Err(e)) = pod.spec.as_ref().map(pod_requests)
        {
            return Err(format!(
                "sluice: pod {namespace}/{name} is governed by queue {queue:?} but its resources cannot be counted: {e}. Fix the pod's requests and limits, then create it again",
                name = pod_display_name(pod),
                queue = labels
                    .as_ref()
                    .and_then(|l| l.get(QUEUE_LABEL))
                    .map(String::as_str)
                    .unwrap_or(""),
            ));
        }
        let facts = identity.map(RequestFacts::new).unwrap_or_default();
        Ok(labels.map(|labels| Classified { labels, facts }))
    }

    fn judge_resize(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        judge_resize(namespace, old, new)
    }

    fn judge_update(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        self.adapters.judge_identity_change(namespace, old, new)
    }

    fn gated_warnings(
        &self,
        namespace: &str,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
        facts: &RequestFacts,
    ) -> Vec<String> {
        let (Some(queues), Some(identity)) = (&self.queues, self.identity_of(facts, pod, labels))
        else {
            return Vec::new();
        };
        let queue = queues.get(&ObjectRef::new(&identity.queue));
        // A namespace not seen yet is given the benefit of the doubt: no warning.
        let admits_namespace = match (
            queue
                .as_ref()
                .and_then(|q| q.spec.namespace_selector.as_ref()),
            self.adapters.namespace_labels(namespace),
        ) {
            (Some(selector), Some(labels)) => {
                crate::queue::snapshot::selector_matches(selector, &labels)
            }
            _ => true,
        };
        crate::submit_warnings::for_pod(
            namespace,
            pod,
            &identity,
            queue.as_deref(),
            admits_namespace,
        )
    }

    fn admit_at_creation(
        &self,
        namespace: &str,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
        facts: &RequestFacts,
    ) -> Option<BTreeMap<String, String>> {
        let at_creation = self.at_creation.as_ref().filter(|a| a.is_active())?;
        let identity = self.identity_of(facts, pod, labels);
        let requests = pod.spec.as_ref().map(pod_requests);
        let (Some(identity), Some(Ok(requests))) = (identity, requests) else {
            return None; // the controller will say what is wrong
        };
        if has_gates(pod) {
            // Someone else holds the pod too: it waits behind sluice's gate as well.
            at_creation.try_admit_never(&identity.queue);
            return None;
        }
        let binding = PodBinding::of(namespace, pod);
        // The webhook called again for the same creation (reinvocation): already admitted, if the
        // token is this pod's own and the pod did not grow since.
        if let Some(token) = pod.annotations().get(AT_CREATION_ANNOTATION) {
            match at_creation.reinvoked(token, &binding, &identity.queue, &requests) {
                Reinvocation::Confirmed => {
                    let mut annotations = BTreeMap::new();
                    annotations.insert(AT_CREATION_ANNOTATION.to_string(), token.clone());
                    return Some(annotations);
                }
                Reinvocation::Grown => {
                    at_creation.try_admit_never(&identity.queue);
                    return None;
                }
                Reinvocation::Unknown => {}
            }
        }
        let admitted = at_creation.try_admit_by(&binding, &identity, &requests)?;
        let mut annotations = BTreeMap::new();
        annotations.insert(AT_CREATION_ANNOTATION.to_string(), admitted.token);
        annotations.insert(ADMITTED_AT_ANNOTATION.to_string(), now_rfc3339());
        annotations.insert(ADMITTED_BY_ANNOTATION.to_string(), admitted.by);
        Some(annotations)
    }
}

/// Refuses an in-place resize that grows an admitted pod's requests: quota is taken only through
/// the gate (a pass or admission at creation), and a resize has neither. Shrinking is free.
fn judge_resize(namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
    let name = new.metadata.name.as_deref().unwrap_or("<unnamed>");
    let queue = old
        .labels()
        .get(QUEUE_LABEL)
        .map(String::as_str)
        .unwrap_or("");
    let count = |pod: &Pod| -> Result<ResourceList, String> {
        let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
        pod_requests(spec).map_err(|e| e.to_string())
    };
    let (before, after) = (count(old), count(new));
    let after = after.map_err(|e| {
        format!(
            "sluice: pod {namespace}/{name} in queue {queue:?}: the resize cannot be counted: {e}"
        )
    })?;
    // An old pod sluice could not count holds nothing sluice knows of: any size is growth.
    let before = before.unwrap_or_default();
    let grown: Vec<String> = after
        .0
        .iter()
        .filter(|(resource, value)| **value > before.get(resource))
        .map(|(resource, value)| {
            format!(
                "{resource} {} -> {}",
                describe_quantity(resource, before.get(resource)),
                describe_quantity(resource, *value)
            )
        })
        .collect();
    if grown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "sluice: pod {namespace}/{name} runs on the quota of queue {queue:?}; an in-place resize may shrink it but not grow it ({}), because quota is only given through sluice's gate. Create a pod with the larger requests instead: it waits until the queue has room",
        grown.join(", ")
    ))
}

/// A pod's name for a message; a pod being created may only have a generateName.
fn pod_display_name(pod: &Pod) -> &str {
    pod.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(pod.metadata.generate_name.as_deref())
        .unwrap_or("<unnamed>")
}

fn has_gates(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

impl AdmitAtCreation {
    /// Notes that a pod of `queue` is gated whatever the room: the queue has a pod waiting.
    fn try_admit_never(&self, queue: &str) {
        self.lock().note_waiting(queue);
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod quota_holes;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fixture;
