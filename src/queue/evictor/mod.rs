//! Applies the evictions an admission pass decides (preemption inside a queue), off the admission
//! path: each victim pod evicted through the Eviction API, so that PodDisruptionBudgets are
//! honoured, with a precondition on its uid (a pod recreated under the same name is never
//! evicted); at most once while the eviction is in flight; only while the leadership term is
//! valid; every call bounded by the API timeout.
//!
//! What it learns feeds the next passes: pods being evicted (never evicted twice), pods a
//! PodDisruptionBudget protects (not evicted again for [`BLOCKED_FOR`]; their preemptor waits and
//! says so), and the preemptions each victim workload's status must record. A preemptor with more
//! than one victim first asks the API server whether every eviction would be allowed (a dry run):
//! when a budget protects one of them, none is evicted, so no victim is ever lost for a preemptor
//! that still could not be admitted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::policy::v1::Eviction as EvictionBody;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, PostParams};
use kube::core::Status;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::leader::Term;
use crate::metrics::{ControllerMetrics, PreemptionLabels, QueueLabels};
use crate::queue::admission::WorkloadKey;
use crate::queue::clock::now_rfc3339;
use crate::queue::pod_cache::CachedPod;
use crate::queue::status::Preemption;

mod orders;

pub(crate) use orders::{Order, Victim, held_message, plan};

/// How long a pod whose eviction a PodDisruptionBudget refused is left alone before it may be
/// chosen again.
pub const BLOCKED_FOR: Duration = Duration::from_secs(15);
/// The API server's default `terminationGracePeriodSeconds`.
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// The longest grace period an eviction gives unless the controller is told otherwise.
const DEFAULT_MAX_GRACE_SECONDS: i64 = 120;
/// How long a preemption is kept for its victim's status when the watch never shows it recorded
/// (the status write keeps failing, the workload is gone).
const PREEMPTION_KEPT_FOR: Duration = Duration::from_secs(600);
/// How long a preemptor's first eviction is remembered when it is never admitted.
const PREEMPTOR_KEPT_FOR: Duration = Duration::from_secs(3600);

/// What became of one eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Evicted,
    /// A PodDisruptionBudget refused it (429), with the API server's message.
    Blocked(String),
    /// The pod is gone, or another pod has its name: nothing to evict.
    Gone,
    /// No answer, or another error: counted in flight until its entry expires.
    Unknown(String),
}

fn outcome_of(result: Result<Result<Status, kube::Error>, tokio::time::error::Elapsed>) -> Outcome {
    match result {
        Ok(Ok(_)) => Outcome::Evicted,
        Ok(Err(kube::Error::Api(s))) if s.code == 429 => Outcome::Blocked(s.message.clone()),
        // 404: gone already; 409: the uid precondition failed (another pod under its name).
        Ok(Err(kube::Error::Api(s))) if s.code == 404 || s.code == 409 => Outcome::Gone,
        Ok(Err(e)) => Outcome::Unknown(e.to_string()),
        Err(_) => Outcome::Unknown("no answer in time".into()),
    }
}

/// The Eviction of `pod` guarded by its uid. (kube's `Api::evict` sends the delete options under
/// `delete_options`, which the API server does not read: its uid precondition would be lost.)
/// The grace period is the pod's own, capped at `max_grace_seconds`: a victim that ignores SIGTERM
/// with a day-long `terminationGracePeriodSeconds` would otherwise keep its quota (and its
/// preemptor, and its cohort's reclaim) waiting that long.
fn eviction_body(pod: &CachedPod, uid: &str, max_grace_seconds: i64) -> EvictionBody {
    EvictionBody {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            grace_period_seconds: Some(
                pod.grace_seconds
                    .unwrap_or(DEFAULT_GRACE_SECONDS)
                    .clamp(0, max_grace_seconds.max(0)),
            ),
            ..DeleteOptions::default()
        }),
    }
}

/// See [`Evictor::for_statuses`].
#[derive(Default)]
pub(crate) struct ForStatuses {
    pub preempted: HashMap<WorkloadKey, Preemption>,
    pub held: HashMap<WorkloadKey, String>,
    /// Workloads whose pods are being evicted and whose preemption is not recorded yet: their
    /// record stays even if their last pod is already gone.
    pub victims_in_flight: HashSet<WorkloadKey>,
}

impl ForStatuses {
    /// Whether a workload's record must stay though its pods are gone: its preemption is being
    /// sent or not yet shown in its status.
    pub fn keeps(&self, workload: &WorkloadKey) -> bool {
        self.preempted.contains_key(workload) || self.victims_in_flight.contains(workload)
    }
}

/// What the evictor remembers between passes.
#[derive(Default)]
struct Ledger {
    /// Pods being evicted, or evicted and not yet shown terminating by the cache: uid → expiry.
    evicting: HashMap<String, Instant>,
    /// Pods a PodDisruptionBudget protects: uid → (until, why).
    blocked: HashMap<String, (Instant, String)>,
    /// The newest preemption of each victim workload, until its status shows it.
    preempted: HashMap<WorkloadKey, (Preemption, Instant)>,
    /// Preemptors: when their first eviction was decided, and their queue.
    preempting_since: HashMap<WorkloadKey, (Instant, String)>,
    /// Preemptors held back by a budget in the last pass, with their message.
    held: HashMap<WorkloadKey, String>,
    /// Victim workloads of evictions sent and not yet recorded: workload → expiry.
    victims_in_flight: HashMap<WorkloadKey, Instant>,
    /// Preemptors one of whose victims a budget protected: until when, and their message (the
    /// pass may choose other victims meanwhile, or none and the preemptor waits).
    refused: HashMap<WorkloadKey, (Instant, String)>,
}

/// Evicts in the background, at most `slots` calls at once.
pub(crate) struct Evictor {
    client: Client,
    metrics: ControllerMetrics,
    recorder: Recorder,
    term: Arc<Term>,
    slots: Semaphore,
    api_timeout: Duration,
    /// How long an eviction counts as in flight without the cache showing the pod terminating.
    max_age: Duration,
    /// The longest grace period an eviction gives (`--eviction-grace-period`).
    max_grace_seconds: i64,
    ledger: Mutex<Ledger>,
}

impl Evictor {
    pub(crate) fn new(
        client: Client,
        metrics: ControllerMetrics,
        recorder: Recorder,
        term: Arc<Term>,
        concurrency: usize,
        api_timeout: Duration,
        max_age: Duration,
    ) -> Self {
        Evictor {
            client,
            metrics,
            recorder,
            term,
            slots: Semaphore::new(concurrency.max(1)),
            api_timeout,
            max_age,
            max_grace_seconds: DEFAULT_MAX_GRACE_SECONDS,
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// Evictions give a pod at most `max_grace` to stop (default 120 s).
    pub(crate) fn with_grace_cap(mut self, max_grace: Duration) -> Self {
        self.max_grace_seconds = i64::try_from(max_grace.as_secs()).unwrap_or(i64::MAX);
        self
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before a pass: forgets evictions the cache shows done (the pod terminating or gone) or
    /// whose outcome stayed unknown too long, and budgets' refusals that have run out.
    pub(crate) fn prune(&self, pods: &[Arc<CachedPod>], now: Instant) {
        // Only evictions under way need the live pods (no eviction is started between this check
        // and the prune: passes start them, one at a time, after their prune): most passes have
        // none, and skip a read of every pod's uid.
        let evicting = !self.ledger().evicting.is_empty();
        let live: HashSet<&str> = if evicting {
            pods.iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.uid.as_deref())
                .collect()
        } else {
            HashSet::new()
        };
        let mut ledger = self.ledger();
        prune_evicting(&mut ledger.evicting, &live, now);
        ledger.blocked.retain(|_, (until, _)| now < *until);
        ledger.victims_in_flight.retain(|_, until| now < *until);
        ledger.refused.retain(|_, (until, _)| now < *until);
        ledger
            .preempted
            .retain(|_, (_, at)| at.elapsed() < PREEMPTION_KEPT_FOR);
        ledger
            .preempting_since
            .retain(|_, (at, _)| at.elapsed() < PREEMPTOR_KEPT_FOR);
    }

    /// What this pass's statuses need: the preemptions not yet shown recorded by the watch, and
    /// the preemptors held back by a budget (both empty but while preemptions happen).
    pub(crate) fn for_statuses(&self) -> ForStatuses {
        let ledger = self.ledger();
        ForStatuses {
            preempted: ledger
                .preempted
                .iter()
                .map(|(k, (p, _))| (k.clone(), p.clone()))
                .collect(),
            held: ledger
                .refused
                .iter()
                .map(|(k, (_, message))| (k.clone(), message.clone()))
                .chain(ledger.held.clone())
                .collect(),
            victims_in_flight: ledger.victims_in_flight.keys().cloned().collect(),
        }
    }

    /// The uids of pods a budget protects now: the pass must not choose them
    /// (`PodSnapshot::eviction_blocked`).
    pub(crate) fn blocked_uids(&self) -> HashSet<String> {
        let ledger = self.ledger();
        if ledger.blocked.is_empty() {
            return HashSet::new();
        }
        ledger.blocked.keys().cloned().collect()
    }

    /// The watch shows the workload's status recording `recorded` (its `preemptedAt` and
    /// `lastPreemptedBy`): the preemption need not be kept any more.
    pub(crate) fn recorded(&self, workload: &WorkloadKey, by: Option<&str>, at: Option<&str>) {
        let mut ledger = self.ledger();
        if let Some((p, _)) = ledger.preempted.get(workload)
            && Some(p.by.as_str()) == by
            && Some(p.at.as_str()) == at
        {
            ledger.preempted.remove(workload);
        }
    }

    /// This pass admits pods of these workloads: for the preemptors among them, the time since
    /// their first eviction was decided.
    pub(crate) fn admitted<'a>(&self, workloads: impl Iterator<Item = &'a WorkloadKey>) {
        let mut since = Vec::new();
        {
            let mut ledger = self.ledger();
            if ledger.preempting_since.is_empty() {
                return;
            }
            since.extend(workloads.filter_map(|k| ledger.preempting_since.remove(k)));
        }
        for (at, queue) in since {
            self.metrics
                .preemption_admission_seconds
                .get_or_create(&QueueLabels { queue })
                .observe(at.elapsed().as_secs_f64());
        }
    }

    /// Starts one pass's evictions (while the term is valid): counts the new ones in flight,
    /// notes which preemptors wait on a budget, and sends the rest in the background.
    pub(crate) fn start(self: &Arc<Self>, orders: Vec<Order>, now: Instant) {
        let mut batches = Vec::new();
        {
            let mut ledger = self.ledger();
            let evicting: HashSet<String> = ledger.evicting.keys().cloned().collect();
            let plan = plan(&orders, &evicting, &ledger.blocked, now);
            ledger.held = plan
                .held
                .iter()
                .map(|(o, why)| (orders[*o].preemptor.clone(), why.clone()))
                .collect();
            if !self.term.is_valid() {
                return;
            }
            for (o, victims) in plan.send {
                let mut order = orders[o].clone();
                order.victims = victims
                    .into_iter()
                    .map(|v| orders[o].victims[v].clone())
                    .collect();
                for victim in &order.victims {
                    ledger
                        .evicting
                        .insert(victim.uid.clone(), now + self.max_age);
                    ledger
                        .victims_in_flight
                        .insert(victim.workload.clone(), now + self.max_age);
                }
                ledger
                    .preempting_since
                    .entry(order.preemptor.clone())
                    .or_insert_with(|| (now, order.queue.clone()));
                batches.push(order);
            }
        }
        for order in batches {
            let labels = PreemptionLabels {
                queue: order.queue.clone(),
                reason: order.reason.clone(),
            };
            self.metrics.preemptions.get_or_create(&labels).inc();
            let evictor = self.clone();
            let span = info_span!("preempt", queue = %order.queue, preemptor = %order.preemptor);
            tokio::spawn(async move { evictor.preempt(order).await }.instrument(span));
        }
    }

    /// Evicts one preemptor's victims: all of them only if a dry run says no budget refuses any
    /// (when there is more than one), then records what happened.
    async fn preempt(&self, order: Order) {
        info!(
            victims = order.victims.len(),
            needed = %order.needed,
            "preempting: evicting lower-priority pods"
        );
        debug!(victims = ?order.victims.iter().map(|v| pod_name(&v.pod)).collect::<Vec<_>>(), reason = %order.reason, "preemption victims");
        if order.victims.len() > 1 {
            let dry = self.evict_all(&order, true).await;
            if let Some((victim, why)) = first_blocked(&order, &dry) {
                self.blocked(&order, victim, why).await;
                // A refusal before anything was evicted: none of them is in flight any more.
                self.forget(&order.victims);
                return;
            }
        }
        let outcomes = self.evict_all(&order, false).await;
        self.record(&order, &outcomes).await;
    }

    /// Evicts (or, `dry_run`, asks whether it may evict) each victim, at most `slots` at once.
    async fn evict_all(&self, order: &Order, dry_run: bool) -> Vec<Outcome> {
        stream::iter(order.victims.clone())
            .map(|victim| async move {
                match self.slots.acquire().await {
                    Ok(_permit) => self.evict(&victim, dry_run).await,
                    Err(_) => Outcome::Unknown("closed".into()),
                }
            })
            .buffered(order.victims.len().max(1))
            .collect()
            .await
    }

    /// One eviction of this very pod (its uid), while the term is valid.
    async fn evict(&self, victim: &Victim, dry_run: bool) -> Outcome {
        let (Some(namespace), name) = (victim.pod.namespace(), victim.pod.name_any()) else {
            return Outcome::Gone;
        };
        if !self.term.is_valid() {
            return Outcome::Unknown("the leadership term is over".into());
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = PostParams {
            dry_run,
            ..PostParams::default()
        };
        let body = eviction_body(&victim.pod, &victim.uid, self.max_grace_seconds);
        let call = api.create_subresource::<_, Status>("eviction", &name, &params, &body);
        outcome_of(tokio::time::timeout(self.api_timeout, call).await)
    }

    fn forget(&self, victims: &[Victim]) {
        let mut ledger = self.ledger();
        for victim in victims {
            ledger.evicting.remove(&victim.uid);
        }
    }

    /// After the evictions: pods gone or refused leave the in-flight set (an unknown outcome stays
    /// until it expires), metrics and events say what was evicted, and each victim workload's
    /// preemption is kept for its status.
    async fn record(&self, order: &Order, outcomes: &[Outcome]) {
        let now = now_rfc3339();
        let mut per_workload: BTreeMap<WorkloadKey, (Option<ObjectReference>, u32)> =
            BTreeMap::new();
        let labels = PreemptionLabels {
            queue: order.queue.clone(),
            reason: order.reason.clone(),
        };
        let mut evicted_pods = Vec::new();
        for (victim, outcome) in order.victims.iter().zip(outcomes) {
            match outcome {
                Outcome::Evicted => {
                    self.metrics.evicted_pods.get_or_create(&labels).inc();
                    evicted_pods.push(victim.pod.object_ref(&()));
                    per_workload
                        .entry(victim.workload.clone())
                        .or_insert((victim.workload_ref.clone(), 0))
                        .1 += 1;
                }
                Outcome::Blocked(why) => {
                    self.blocked(order, victim, why).await;
                }
                Outcome::Gone => self.forget(std::slice::from_ref(victim)),
                Outcome::Unknown(e) => {
                    warn!(error = %e, pod = %pod_name(&victim.pod), "eviction failed; retried once it expires")
                }
            }
        }
        let count = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
        info!(
            evicted = evicted_pods.len(),
            already_gone = count(|o| matches!(o, Outcome::Gone)),
            blocked = count(|o| matches!(o, Outcome::Blocked(_))),
            unknown = count(|o| matches!(o, Outcome::Unknown(_))),
            "preemption: evictions done"
        );
        // The preemptions are kept before any event is sent: a pass running meanwhile must already
        // keep the record of a workload whose last pod just went (and write its status).
        self.record_preemptions(order, per_workload, &now).await;
        {
            let mut ledger = self.ledger();
            for victim in &order.victims {
                ledger.victims_in_flight.remove(&victim.workload);
            }
        }
        let note = format!(
            "evicted to make room for {} in queue {} ({})",
            order.preemptor, order.queue, order.reason
        );
        for pod in evicted_pods {
            self.publish(&pod, "Preempted", note.clone(), EventType::Normal)
                .await;
        }
    }

    /// Keeps each victim workload's preemption for its status and tells it and the preemptor.
    async fn record_preemptions(
        &self,
        order: &Order,
        per_workload: BTreeMap<WorkloadKey, (Option<ObjectReference>, u32)>,
        now: &str,
    ) {
        let evicted: u32 = per_workload.values().map(|(_, n)| n).sum();
        if evicted == 0 {
            return;
        }
        let victims: Vec<String> = per_workload.keys().map(|k| k.to_string()).collect();
        let mut notes = Vec::new();
        for (workload, (reference, pods)) in per_workload {
            let preemption = Preemption {
                by: order.preemptor.to_string(),
                reason: order.reason.clone(),
                queue: order.queue.clone(),
                needed: order.needed.clone(),
                pods,
                at: now.to_string(),
            };
            notes.extend(reference.map(|r| (r, preemption.message())));
            self.ledger()
                .preempted
                .insert(workload, (preemption, Instant::now()));
        }
        for (reference, note) in notes {
            self.publish(&reference, "Preempted", note, EventType::Normal)
                .await;
        }
        if let Some(reference) = &order.preemptor_ref {
            let note = format!(
                "evicted {evicted} pod(s) of {} in queue {} ({}) to make room for {}",
                victims.join(", "),
                order.queue,
                order.reason,
                order.needed
            );
            self.publish(reference, "Preempting", note, EventType::Normal)
                .await;
        }
    }

    /// A budget refused a victim's eviction: it is left alone for a while, and the pod and the
    /// preemptor say so.
    async fn blocked(&self, order: &Order, victim: &Victim, why: &str) {
        let pod = pod_name(&victim.pod);
        warn!(%pod, why, "a PodDisruptionBudget blocks the eviction; the preemptor waits or another victim is chosen");
        {
            let mut ledger = self.ledger();
            let until = Instant::now() + BLOCKED_FOR;
            ledger.evicting.remove(&victim.uid);
            ledger
                .blocked
                .insert(victim.uid.clone(), (until, held_message(&pod, why)));
            ledger
                .refused
                .insert(order.preemptor.clone(), (until, held_message(&pod, why)));
        }
        let note = format!(
            "not evicted for {} in queue {}: a PodDisruptionBudget blocks it ({why})",
            order.preemptor, order.queue
        );
        self.publish(
            &victim.pod.object_ref(&()),
            "EvictionBlocked",
            note,
            EventType::Warning,
        )
        .await;
        if let Some(reference) = &order.preemptor_ref {
            self.publish(
                reference,
                "EvictionBlocked",
                held_message(&pod, why),
                EventType::Warning,
            )
            .await;
        }
    }

    async fn publish(
        &self,
        reference: &ObjectReference,
        reason: &str,
        note: String,
        type_: EventType,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Preempt".into(),
            secondary: None,
        };
        match tokio::time::timeout(self.api_timeout, self.recorder.publish(&event, reference)).await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(%e, "event not recorded"),
            Err(_) => debug!(timeout = ?self.api_timeout, "event not recorded in time"),
        }
    }
}

/// The first victim a (dry-run) eviction found protected by a budget.
fn first_blocked<'a>(order: &'a Order, outcomes: &'a [Outcome]) -> Option<(&'a Victim, &'a str)> {
    order
        .victims
        .iter()
        .zip(outcomes)
        .find_map(|(v, o)| match o {
            Outcome::Blocked(why) => Some((v, why.as_str())),
            _ => None,
        })
}

fn pod_name(pod: &CachedPod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Forgets evictions of pods the cache shows terminating or gone (not in `live`), and those whose
/// outcome stayed unknown past their expiry: the next pass judges them by the cache again.
fn prune_evicting(evicting: &mut HashMap<String, Instant>, live: &HashSet<&str>, now: Instant) {
    evicting.retain(|uid, expires| live.contains(uid.as_str()) && now < *expires);
}

#[cfg(test)]
mod tests;
