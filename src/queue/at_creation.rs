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

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::adapters::{Adapters, PodIdentity, workload_object_name};
use crate::api::{ADMITTED_AT_ANNOTATION, QUEUE_LABEL};
use crate::metrics::QueueLabels;
use crate::queue::admission::{Decisions, WorkloadKey};
use crate::queue::resources::{ResourceList, pod_requests};
use crate::queue::snapshot::Built;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The annotation a pod admitted at creation carries: the token of the room held for it.
pub const AT_CREATION_ANNOTATION: &str = "sluice.dev/admitted-at-creation";
/// How long room held for a pod that has not appeared in the controller's cache stays held.
pub const HOLD_FOR: Duration = Duration::from_secs(30);
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

#[derive(Default)]
struct State {
    /// The controller runs here and has published a pass.
    active: bool,
    queues: HashMap<String, QueueRoom>,
    /// Workloads the last pass saw holding quota (and not ended), with their queue.
    started: HashMap<WorkloadKey, String>,
    /// Workloads whose first pod was admitted at creation since the last pass saw them: places of
    /// their minimum gang held and not yet taken.
    new_gangs: HashMap<WorkloadKey, NewGang>,
    holds: HashMap<String, Hold>,
    next_seq: u64,
}

struct QueueRoom {
    /// Per resource the quota names: what is left to admit.
    room: BTreeMap<String, i64>,
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
}

struct Hold {
    queue: String,
    amount: ResourceList,
    seq: u64,
    at: Instant,
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
        namespace: &str,
        identity: &PodIdentity,
        requests: &ResourceList,
    ) -> Option<String> {
        let mut state = self.lock();
        let admitted = state.try_admit(namespace, identity, requests);
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
            let seq = state.next_seq;
            state.next_seq += 1;
            let token = self.token(seq);
            state.holds.insert(
                token.clone(),
                Hold {
                    queue,
                    amount,
                    seq,
                    at: Instant::now(),
                },
            );
            token
        })
    }

    /// Whether the controller runs here and has published a pass (else every pod is gated).
    pub fn is_active(&self) -> bool {
        self.lock().active
    }

    /// Whether `token` is one this process handed out and still holds room for.
    fn holds(&self, token: &str) -> bool {
        self.lock().holds.contains_key(token)
    }

    /// For a pass, after it read the pod cache: drops the holds of pods the cache shows (they
    /// count as admitted pods now) and those too old, and returns the rest per queue.
    pub fn holds_for_pass(
        &self,
        read_at: Instant,
        visible_tokens: &HashSet<&str>,
    ) -> (PassMark, HashMap<String, ResourceList>) {
        let mut state = self.lock();
        state.holds.retain(|token, hold| {
            !visible_tokens.contains(token.as_str()) && hold.at.elapsed() < HOLD_FOR
        });
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
    /// every namespace.
    pub fn publish(
        &self,
        mark: PassMark,
        built: &Built,
        decisions: &Decisions,
        open_queues: &HashMap<String, bool>,
    ) {
        let mut started = HashMap::new();
        let mut allowed: HashMap<&str, HashSet<String>> = HashMap::new();
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            if !workload.namespace_allowed {
                continue;
            }
            allowed
                .entry(workload.queue.as_str())
                .or_default()
                .insert(workload.key.namespace.clone());
            let tally = &decisions.workloads[w];
            let ended = built.workloads[w]
                .as_ref()
                .is_some_and(|d| d.spec.application_ended.is_some());
            if !ended && (tally.admitted_pods > 0 || !tally.reserved.is_empty()) {
                started.insert(workload.key.clone(), workload.queue.clone());
            }
        }
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
            let room = queue
                .quota
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
        state.active = true;
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

impl State {
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
    ) -> Option<(String, ResourceList)> {
        if !self.active {
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
        let queue = self.queues.get_mut(&identity.queue)?;
        if !fits(&queue.room, &amount) {
            return None;
        }
        for (name, left) in queue.room.iter_mut() {
            *left -= amount.get(name);
        }
        if let Some((key, places_left)) = new_gang {
            self.new_gangs.insert(
                key,
                NewGang {
                    queue: identity.queue.clone(),
                    per_pod: requests.clone(),
                    places_left,
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
        self.adapters.classify_in(namespace, pod)
    }

    fn admit_at_creation(
        &self,
        namespace: &str,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
    ) -> Option<BTreeMap<String, String>> {
        let at_creation = self.at_creation.as_ref().filter(|a| a.is_active())?;
        let mut annotations = BTreeMap::new();
        // The webhook called again for the same creation (reinvocation): already admitted.
        if let Some(token) = pod.annotations().get(AT_CREATION_ANNOTATION)
            && at_creation.holds(token)
            && !has_gates(pod)
        {
            annotations.insert(AT_CREATION_ANNOTATION.to_string(), token.clone());
            return Some(annotations);
        }
        let queue = labels.get(QUEUE_LABEL)?;
        // The identity the pod has with sluice's labels on it (a namespace default queue...).
        let mut labelled = pod.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let identity = self
            .adapters
            .identify(&labelled)
            .filter(|i| &i.queue == queue);
        let requests = pod.spec.as_ref().map(pod_requests);
        let (Some(identity), Some(Ok(requests))) = (identity, requests) else {
            return None; // the controller will say what is wrong
        };
        if has_gates(pod) {
            // Someone else holds the pod too: it waits behind sluice's gate as well.
            at_creation.try_admit_never(&identity.queue);
            return None;
        }
        let token = at_creation.try_admit(namespace, &identity, &requests)?;
        annotations.insert(AT_CREATION_ANNOTATION.to_string(), token);
        annotations.insert(
            ADMITTED_AT_ANNOTATION.to_string(),
            crate::queue::controller::now_rfc3339(),
        );
        Some(annotations)
    }
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
