//! The queue controller: watches queues, workloads, governed pods and namespaces, runs the admission
//! decision whenever something changed, and applies it: one patch per admitted pod (the gate
//! removed), DynamicWorkloads recorded for new workloads, and statuses written only when they change.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::api::{
    ADMISSION_GATE, ADMITTED_AT_ANNOTATION, AdmissionTiming, CapacityQueue, DynamicWorkload,
    PodSetSpec, QUEUE_LABEL, RECORDED_FROM_LABEL,
};
use crate::integrations::Adapters;
use crate::leader::Term;
use crate::metrics::{ControllerMetrics, QueueLabels, QueueResourceLabels};
use crate::queue::admission::{
    Decisions, PodState, QueueTally, WorkloadKey, WorkloadSnapshot, decide,
};
use crate::queue::announcer::{self, Announcer};
use crate::queue::at_creation::{AdmitAtCreation, PassMark, VisibleToken};
use crate::queue::clock::{API_CALL_TIMEOUT, now_rfc3339};
use crate::queue::evictor::{self, Evictor};
use crate::queue::gauges;
use crate::queue::incremental::Snapshotter;
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built};
use crate::queue::status::{self, WorkloadView};
use crate::queue::writer::Writer;
use crate::resources::{ResourceList, describe_quantity};
use crate::watch_store;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("a watch ended before its first list completed: {0}")]
    Watch(String),
}

/// Why no ungate patch could be built for a pod.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UngatePatchError {
    #[error("pod {0} has no uid")]
    NoUid(String),
    #[error("pod {pod} no longer carries the gate {ADMISSION_GATE}")]
    NotGated { pod: String },
    #[error("building the ungate patch of pod {pod}: {reason}")]
    Build { pod: String, reason: String },
}

#[derive(Clone, Debug)]
pub struct ControllerSettings {
    /// How long to gather changes before a pass, so a burst of pod creations is one pass.
    pub batch_window: Duration,
    /// A pass runs at least this often, even when nothing was seen to change.
    pub resync_period: Duration,
    /// Ungate patches and status writes in flight at once.
    pub max_concurrent_writes: usize,
    /// Status writes to one object are at least this far apart (the newest status wins).
    pub status_interval: Duration,
    /// DynamicWorkload status writes per second at most (0: no limit); the newest status of each
    /// workload waits its turn, longest-waiting first.
    pub status_writes_per_second: f64,
    /// While no pod waits behind the gate, passes (which then only refresh statuses and the room
    /// for admission at creation) are at least this far apart; a pod seen gated starts one at once.
    /// Zero: passes follow every change.
    pub idle_interval: Duration,
    /// Every API call of the controller answers within this or counts as failed.
    pub api_timeout: Duration,
    /// Every pass builds and decides everything (else only what changed since the last pass, with
    /// everything again once per resync period).
    pub full_passes: bool,
    /// The longest grace period sluice's evictions (preemption, reclaim, podsReadyTimeout) give a
    /// pod; a pod asking for less gets its own.
    pub eviction_grace_period: Duration,
    /// Events posted on users' objects per second at most, after a burst of five seconds' worth
    /// (0: none are posted).
    pub events_per_second: f64,
}

impl ControllerSettings {
    /// How long a pod whose ungate patch was sent counts as admitted without confirmation: its
    /// patch and the read after it (each within the API timeout), then as long again for the pod
    /// watch to show the result. After that the next pass judges the pod by the cache again.
    pub fn in_flight_max_age(&self) -> Duration {
        self.api_timeout * 3
    }
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            batch_window: Duration::from_millis(20),
            resync_period: Duration::from_secs(30),
            max_concurrent_writes: 32,
            status_interval: Duration::from_secs(1),
            status_writes_per_second: 0.0,
            idle_interval: Duration::from_millis(250),
            api_timeout: API_CALL_TIMEOUT,
            full_passes: false,
            eviction_grace_period: Duration::from_secs(120),
            events_per_second: announcer::EVENTS_PER_SECOND,
        }
    }
}

struct Stores {
    queues: Store<CapacityQueue>,
    workloads: Store<DynamicWorkload>,
    /// Keyed by uid, without kube's per-object key (see [`crate::watch_store`]); notes what
    /// changed for the incremental passes.
    pods: watch_store::Store<CachedPod>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The DynamicWorkloads changed since the last pass, as the watch noted them.
    workload_changes: Arc<Mutex<WorkloadChanges>>,
}

/// The keys of the DynamicWorkloads the watch changed (applied to the store first), and whether a
/// (re)list replaced them all.
#[derive(Default)]
struct WorkloadChanges {
    keys: HashSet<WorkloadKey>,
    relisted: bool,
}

impl WorkloadChanges {
    fn note(&mut self, event: &watcher::Event<DynamicWorkload>) {
        match event {
            watcher::Event::Apply(dwl) | watcher::Event::Delete(dwl) => {
                self.keys.insert(WorkloadKey {
                    namespace: dwl.namespace().unwrap_or_default(),
                    name: dwl.name_any(),
                });
            }
            watcher::Event::InitDone => self.relisted = true,
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        }
    }
}

impl Stores {
    /// Waits for every first list: admitting before one is complete could miss admitted pods and
    /// over-admit.
    async fn wait_until_ready(&self) -> Result<(), ControllerError> {
        let ready = async {
            self.queues.wait_until_ready().await?;
            self.workloads.wait_until_ready().await?;
            self.namespaces.wait_until_ready().await
        };
        ready
            .await
            .map_err(|e| ControllerError::Watch(e.to_string()))?;
        self.pods
            .wait_until_ready()
            .await
            .map_err(|e| ControllerError::Watch(e.to_string()))
    }
}

/// What wakes the pass loop.
#[derive(Default)]
struct Wakers {
    /// Any change seen by a watch.
    changed: Arc<Notify>,
    /// A pod seen behind the gate: a pass is wanted at once, even while passes are idle.
    gated: Arc<Notify>,
    /// A pod that held quota seen ended or gone: the room it freed is handed over without waiting
    /// for the rest of a burst (the batch window).
    ended: Arc<Notify>,
}

/// Background tasks of one term, aborted however the term ends.
struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs the controller for one leadership term: until the term ends. Nothing is admitted (no
/// ungate patch sent, no room published for admission at creation) once the term is no longer
/// valid.
pub async fn run(
    client: Client,
    adapters: Adapters,
    metrics: ControllerMetrics,
    settings: ControllerSettings,
    at_creation: Option<Arc<AdmitAtCreation>>,
    term: Arc<Term>,
) -> Result<(), ControllerError> {
    let shutdown = term.cancelled().clone();
    // Whatever way this ends, the webhook stops admitting at creation from this controller's state.
    let _deactivate = at_creation.clone().map(Deactivate);
    let wakers = Wakers::default();
    let (stores, watches) = start_watches(&client, &wakers);
    let mut tasks = AbortOnDrop(watches);
    tokio::select! {
        _ = shutdown.cancelled() => return Ok(()),
        ready = stores.wait_until_ready() => ready?,
    }
    info!("caches synced; admitting");

    let mut controller = Controller::new(
        client,
        adapters,
        metrics,
        settings,
        stores,
        at_creation,
        term,
    );
    tasks.0.push(tokio::spawn(
        controller.writer.clone().run(shutdown.clone()),
    ));
    tasks.0.push(tokio::spawn(
        controller.announcer.clone().run(shutdown.clone()),
    ));
    loop {
        let pass_started = Instant::now();
        let waiting = controller.pass();
        // A pass neither waits for the API server nor holds the CPU: the writes it asked for run
        // meanwhile, and passes take at most about a quarter of a core however busy the cluster.
        let pause = pass_started.elapsed() * 3;
        if !controller
            .wait_for_change(waiting, &wakers, &shutdown)
            .await
        {
            break;
        }
        // Gather the rest of a burst into the same pass; but a pod that ended freed room that pods
        // may wait for: then only the pause is kept.
        tokio::select! {
            _ = tokio::time::sleep(controller.settings.batch_window.max(pause)) => {}
            _ = wakers.ended.notified() => tokio::time::sleep(pause).await,
        }
    }
    Ok(())
}

/// Starts the four watches the passes read, each feeding its store and waking the pass loop.
fn start_watches(client: &Client, wakers: &Wakers) -> (Stores, Vec<JoinHandle<()>>) {
    // Lists are consistent reads (not "any" version from an API server's cache, which may lag):
    // this term's first pass must see every pod a previous leader admitted.
    let config = watcher::Config::default();
    let changed = &wakers.changed;
    let (queues, q) = watch(
        Api::<CapacityQueue>::all(client.clone()),
        config.clone(),
        |_| {},
        |_| {},
        (changed, Vec::new()),
        "capacityqueues",
    );
    let workload_changes = Arc::new(Mutex::new(WorkloadChanges::default()));
    let noted = workload_changes.clone();
    let (workloads, w) = watch(
        Api::<DynamicWorkload>::all(client.clone()),
        config.clone(),
        |_| {},
        move |event| lock(&noted).note(event),
        (changed, Vec::new()),
        "dynamicworkloads",
    );
    let gated: Urgent<CachedPod> = (wakers.gated.clone(), shows_gated_pod);
    let ended: Urgent<CachedPod> = (wakers.ended.clone(), shows_freed_room);
    // Decoded straight into what admission reads (`CachedPod`): the full pod is never built.
    // Each event is applied to the store (its object moved in, not copied) before the pass loop
    // is woken.
    let (pods, mut writer) = watch_store::store_with_changes();
    let p = spawn_watch(
        watcher(
            Api::<CachedPod>::all(client.clone()),
            config.clone().labels(QUEUE_LABEL),
        )
        .backoff(crate::watch_backoff::watch_backoff()),
        move |event| writer.apply(event),
        changed.clone(),
        vec![gated, ended],
        "pods",
    );
    let (namespaces, n) = watch(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config,
        |_| {},
        |_| {},
        (changed, Vec::new()),
        "namespaces",
    );
    let stores = Stores {
        queues,
        workloads,
        pods,
        namespaces,
        workload_changes,
    };
    (stores, vec![q, w, p, n])
}

/// A store of `K` kept by a watch in the background: each object trimmed by `trim` before it is
/// cached; `note` sees every event once the store shows it; every event notifies `wake.0`, and
/// each of `wake.1` its own Notify of the events it picks.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    mut note: impl FnMut(&watcher::Event<K>) + Send + 'static,
    wake: (&Arc<Notify>, Vec<Urgent<K>>),
    what: &'static str,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config)
            .backoff(crate::watch_backoff::watch_backoff())
            .modify(trim),
    );
    // The reflector stream has already applied each event to its store.
    let task = spawn_watch(
        stream,
        move |event| note(&event),
        wake.0.clone(),
        wake.1,
        what,
    );
    (store, task)
}

/// Whether a pod watch event shows a pod behind sluice's gate (one that may wait for a pass).
fn shows_gated_pod(event: &watcher::Event<CachedPod>) -> bool {
    match event {
        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
            snapshot::is_gated(pod) && pod.metadata.deletion_timestamp.is_none()
        }
        _ => false,
    }
}

/// Whether a pod watch event shows a pod that held quota giving it back: an admitted pod ended
/// (Succeeded or Failed) or gone.
fn shows_freed_room(event: &watcher::Event<CachedPod>) -> bool {
    match event {
        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
            !snapshot::is_gated(pod) && matches!(pod.phase(), Some("Succeeded" | "Failed"))
        }
        watcher::Event::Delete(pod) => !snapshot::is_gated(pod),
        _ => false,
    }
}

/// A Notify to wake, and which watch events wake it.
type Urgent<K> = (Arc<Notify>, fn(&watcher::Event<K>) -> bool);

/// Runs a watch: each event goes to `apply`, then wakes `changed` and each of `urgent` whose test
/// picks it (tested before `apply` takes the event).
fn spawn_watch<K, S>(
    stream: S,
    mut apply: impl FnMut(watcher::Event<K>) + Send + 'static,
    changed: Arc<Notify>,
    urgent: Vec<Urgent<K>>,
    what: &'static str,
) -> tokio::task::JoinHandle<()>
where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    // Which of `urgent` to wake, as bits (at most a few: no allocation per event).
                    let wakes: u64 = (urgent.iter().take(64).enumerate())
                        .filter(|(_, (_, test))| test(&event))
                        .fold(0, |bits, (i, _)| bits | 1 << i);
                    apply(event);
                    for (i, (notify, _)) in urgent.iter().take(64).enumerate() {
                        if wakes & (1 << i) != 0 {
                            notify.notify_one();
                        }
                    }
                    changed.notify_one();
                }
                Err(e) => warn!(%e, what, "watch error; retrying with backoff"),
            }
        }
    })
}

struct Controller {
    adapters: Adapters,
    metrics: ControllerMetrics,
    settings: ControllerSettings,
    stores: Stores,
    ungater: Arc<Ungater>,
    /// Events on the users' objects (why they wait, admitted, preempted, requeued).
    announcer: Arc<Announcer>,
    /// The per-queue gauges' series.
    gauges: gauges::Series,
    /// Applies the evictions passes decide (preemption).
    evictor: Arc<Evictor>,
    writer: Writer,
    at_creation: Option<Arc<AdmitAtCreation>>,
    term: Arc<Term>,
    /// What each pod says about itself, read once per pod version.
    pod_memo: snapshot::PodMemo,
    /// Passes run in this term, to tell their logs apart.
    passes: u64,
    /// When an admitted workload's podsReadyTimeout next falls due (a pass then, change or not).
    ready_due: Option<std::time::SystemTime>,
    /// What the last passes built and decided, for the next one to redo only what changed.
    snapshotter: Snapshotter,
    /// When the next pass builds and decides everything (none yet: the first pass does).
    full_pass_due: Option<Instant>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns admission at creation off when dropped.
struct Deactivate(Arc<AdmitAtCreation>);

impl Drop for Deactivate {
    fn drop(&mut self) {
        self.0.deactivate();
    }
}

/// Sends ungate patches in the background, at most `slots` at once across passes.
struct Ungater {
    client: Client,
    metrics: ControllerMetrics,
    in_flight: Mutex<InFlightPods>,
    recorder: Recorder,
    slots: Semaphore,
    /// No patch is sent once the term is no longer valid.
    term: Arc<Term>,
    api_timeout: Duration,
    in_flight_max_age: Duration,
}

/// Pods this controller ungated, or is about to, that the pod watch has not yet shown without
/// their gate, by uid. They count as admitted; otherwise the next pass would admit their quota
/// twice.
#[derive(Default)]
struct InFlightPods {
    pods: HashMap<String, InFlight>,
    next_ticket: u64,
}

impl InFlightPods {
    /// Changes the pod's entry (None: forgets it) only if it is still this ungate's (`ticket`).
    fn update(&mut self, uid: &str, ticket: u64, change: impl FnOnce(&mut Option<InFlight>)) {
        let mut entry = self.pods.get(uid).copied().filter(|e| e.ticket == ticket);
        if entry.is_none() {
            return;
        }
        change(&mut entry);
        match entry {
            Some(e) => self.pods.insert(uid.to_string(), e),
            None => self.pods.remove(uid),
        };
    }
}

/// One pod in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InFlight {
    /// Which ungate counts it: an older ungate of the same pod never touches a newer entry.
    ticket: u64,
    /// When it stops counting unless confirmed: set when its patch is sent; none while it waits
    /// for a write slot (the calls ahead of it are bounded) or once the patch is known applied.
    expires: Option<Instant>,
}

/// Forgets pods the cache shows ungated or gone, and those whose ungate's outcome stayed unknown
/// past their age: the pass then sees them gated and decides again.
fn prune_in_flight(in_flight: &mut HashMap<String, InFlight>, gated: &HashSet<&str>, now: Instant) {
    in_flight.retain(|uid, entry| {
        gated.contains(uid.as_str()) && entry.expires.is_none_or(|at| now < at)
    });
}

/// What became of one ungate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UngateOutcome {
    Admitted,
    NotAdmitted,
    /// Neither the patch nor the read after it answered: counted in flight until it expires.
    Unknown,
}

/// The JSON patch that admits `pod`: it applies only to this very pod (a `test` of its uid, since
/// a pod deleted and recreated under the same name is another pod) while it still carries the
/// gate at the position the cache shows, and notes when it was admitted.
pub fn ungate_patch(
    pod: &CachedPod,
    admitted_at: &str,
) -> Result<json_patch::Patch, UngatePatchError> {
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.name_any()
    );
    let uid = pod
        .metadata
        .uid
        .as_deref()
        .ok_or_else(|| UngatePatchError::NoUid(name.clone()))?;
    let index = pod
        .admission_gate
        .ok_or_else(|| UngatePatchError::NotGated { pod: name.clone() })?;
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        json!({"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": ADMISSION_GATE}),
        json!({"op": "remove", "path": format!("/spec/schedulingGates/{index}")}),
    ];
    if pod.has_annotations {
        ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-at", "value": admitted_at}));
    } else {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {ADMITTED_AT_ANNOTATION: admitted_at}}));
    }
    serde_json::from_value(serde_json::Value::Array(ops)).map_err(|e| UngatePatchError::Build {
        pod: name,
        reason: e.to_string(),
    })
}

/// One pod to ungate, with what its metrics, logs and event need.
struct UngateItem {
    pod: Arc<CachedPod>,
    /// Its entry in flight.
    ticket: u64,
    queue: String,
    key: WorkloadKey,
    created_at_ms: i64,
    workload: Option<ObjectReference>,
}

/// What one pass reads from the caches (besides admission at creation's holds).
pub(crate) struct PassInputs<'a> {
    pub queues: &'a [Arc<CapacityQueue>],
    pub workloads: &'a [Arc<DynamicWorkload>],
    pub pods: &'a [Arc<CachedPod>],
    /// `facts[i]` of `pods[i]` (see [`snapshot::PodMemo`]).
    pub facts: &'a [Option<Arc<snapshot::PodFacts>>],
    pub namespaces: &'a [Arc<PartialObjectMeta<Namespace>>],
    /// Uids of pods whose ungate is in flight.
    pub in_flight: &'a HashSet<String>,
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
    snapshot::subtract_holds(&mut built.snapshot, holds);
    snapshot::mark_eviction_blocked(&mut built, inputs.eviction_blocked);
    if !rules.is_empty() {
        ready::apply_pending_requeues(&mut built, rules, pending);
    }
    let decisions = decide(&built.snapshot);
    (built, decisions)
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
    (built, decisions, decided)
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
fn still_waiting(in_flight: &HashSet<String>, decisions: &Decisions) -> bool {
    !in_flight.is_empty()
        || !decisions.admit.is_empty()
        || decisions.queues.values().any(QueueTally::has_waiting)
}

impl Controller {
    fn new(
        client: Client,
        adapters: Adapters,
        metrics: ControllerMetrics,
        settings: ControllerSettings,
        stores: Stores,
        at_creation: Option<Arc<AdmitAtCreation>>,
        term: Arc<Term>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "sluice".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let writer = Writer::new(
            client.clone(),
            metrics.clone(),
            settings.max_concurrent_writes,
            settings.status_interval,
            settings.status_writes_per_second,
        );
        let evictor = Arc::new(
            Evictor::new(
                client.clone(),
                metrics.clone(),
                recorder.clone(),
                term.clone(),
                settings.max_concurrent_writes,
                settings.api_timeout,
                settings.in_flight_max_age(),
            )
            .with_grace_cap(settings.eviction_grace_period),
        );
        let announcer = Arc::new(Announcer::new(
            recorder.clone(),
            metrics.events.clone(),
            settings.api_timeout,
            settings.events_per_second,
        ));
        let ungater = Arc::new(Ungater {
            client,
            metrics: metrics.clone(),
            in_flight: Mutex::new(InFlightPods::default()),
            recorder,
            slots: Semaphore::new(settings.max_concurrent_writes.max(1)),
            term: term.clone(),
            api_timeout: settings.api_timeout,
            in_flight_max_age: settings.in_flight_max_age(),
        });
        Controller {
            ungater,
            announcer,
            gauges: gauges::Series::default(),
            evictor,
            term,
            adapters,
            metrics,
            settings,
            stores,
            writer,
            at_creation,
            pod_memo: snapshot::PodMemo,
            passes: 0,
            ready_due: None,
            snapshotter: Snapshotter::default(),
            full_pass_due: None,
        }
    }

    /// Waits for what should start the next pass (`waiting`: whether a pod waits behind the gate);
    /// false once the term is over.
    async fn wait_for_change(
        &self,
        waiting: bool,
        wakers: &Wakers,
        shutdown: &CancellationToken,
    ) -> bool {
        let idle_interval = self.settings.idle_interval;
        // A podsReadyTimeout falling due before the resync period ends the wait then.
        let until_due = (self.ready_due)
            .and_then(|due| due.duration_since(std::time::SystemTime::now()).ok())
            .unwrap_or(self.settings.resync_period);
        let resync = tokio::time::sleep(until_due.min(self.settings.resync_period));
        if waiting || idle_interval.is_zero() {
            tokio::select! {
                _ = shutdown.cancelled() => false,
                _ = wakers.changed.notified() => true,
                _ = resync => true,
            }
        } else {
            // Nothing waits behind the gate: a change only moves statuses (written at most once
            // per status interval anyway) and the room for admission at creation, so passes keep
            // a calmer pace until a pod is gated.
            tokio::select! {
                _ = shutdown.cancelled() => false,
                _ = wakers.gated.notified() => true,
                _ = async {
                    tokio::time::sleep(idle_interval).await;
                    wakers.changed.notified().await;
                } => true,
                _ = resync => true,
            }
        }
    }

    /// One admission pass; true when a pod still waits behind the gate afterwards (the next pass
    /// should follow the next change closely).
    fn pass(&mut self) -> bool {
        let started = Instant::now();
        self.passes += 1;
        let _pass = info_span!("pass", pass = self.passes).entered();
        // The pod cache and what changed in it since the last pass, as one view.
        let (pods, pod_changes) = self.stores.pods.state_and_changes();
        let facts = self.pod_memo.refresh(&self.adapters, &pods);
        let in_flight = self.in_flight_now(&pods, started);
        self.evictor.prune(&pods, started);
        let queues = self.stores.queues.state();
        let full = self.settings.full_passes;
        let workloads = if full {
            self.stores.workloads.state()
        } else {
            self.feed_snapshotter(&pods, pod_changes, started);
            Vec::new()
        };
        let way = if full {
            PassWay::Full
        } else {
            PassWay::Incremental(&mut self.snapshotter)
        };
        let PassPlan {
            mark,
            holds,
            built,
            mut decisions,
            rules,
            decided,
        } = plan_pass(
            self.at_creation.as_deref(),
            PassInputs {
                queues: &queues,
                workloads: &workloads,
                pods: &pods,
                facts: &facts,
                namespaces: &self.stores.namespaces.state(),
                in_flight: &in_flight,
                eviction_blocked: &self.evictor.blocked_uids(),
            },
            started.into_std(),
            || self.evictor.for_statuses().preempted,
            way,
        );
        self.requeue_overdue(&rules, &built, &mut decisions);
        if let Some(mark) = mark {
            self.publish_room(mark, &queues, &built, &decisions);
        }
        self.start_ungates(&built, &decisions);
        self.start_evictions(&built, &decisions, started);
        self.want_records_and_statuses(&built, &decisions, decided.as_deref());
        self.want_queue_statuses(&decisions);
        self.record_pass_metrics(&decisions, started);
        self.gauges.record(&self.metrics.queues, &built, &decisions);
        let waiting = still_waiting(&in_flight, &decisions);
        debug!(
            admitted = decisions.admit.len(),
            workloads = built.snapshot.workloads.len(),
            queues_with_holds = holds.len(),
            waiting,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "admission pass"
        );
        if decided.is_some() {
            // Lent by the snapshotter: the next pass reuses them.
            self.snapshotter.give_back(built, decisions);
        }
        waiting
    }

    /// The DynamicWorkloads' records and statuses this pass wants: those of the groups it decided
    /// (`decided`, per workload; None: all), of workloads whose writes failed, and of those a
    /// preemption concerns (its record is kept, its status shows it, apart from any decision). A
    /// group whose decisions were reused has the statuses it had.
    fn want_records_and_statuses(
        &self,
        built: &Built,
        decisions: &Decisions,
        decided: Option<&[bool]>,
    ) {
        let terminating = self.terminating_namespaces();
        let preemptions = self.evictor.for_statuses();
        let retry = self.writer.take_failed();
        let look_at = |w: usize| {
            let key = &built.snapshot.workloads[w].key;
            decided.is_none_or(|d| d.get(w).copied().unwrap_or(true))
                || retry.contains(key)
                || preemptions.preempted.contains_key(key)
                || preemptions.held.contains_key(key)
        };
        self.record_workloads(built, &terminating, &preemptions, &look_at);
        self.want_workload_statuses(built, decisions, &terminating, &preemptions, &look_at);
    }

    /// Tells the snapshotter what the watches changed since the last pass. Once per resync period
    /// (and at a term's first pass) everything is built and decided again, as at a restart: a
    /// change the incremental state missed cannot outlive that.
    fn feed_snapshotter(
        &mut self,
        pods: &[Arc<CachedPod>],
        pod_changes: watch_store::Changes<CachedPod>,
        now: Instant,
    ) {
        self.snapshotter.apply_pod_changes(pods, pod_changes);
        let noted = std::mem::take(&mut *lock(&self.stores.workload_changes));
        if noted.relisted {
            self.snapshotter
                .replace_workloads(&self.stores.workloads.state());
        } else {
            for key in noted.keys {
                let reference = ObjectRef::<DynamicWorkload>::new(&key.name).within(&key.namespace);
                match self.stores.workloads.get(&reference) {
                    Some(dwl) => self.snapshotter.put_workload(dwl),
                    None => self.snapshotter.remove_workload(&key),
                }
            }
        }
        if self.full_pass_due.is_none_or(|due| now >= due) {
            self.snapshotter.invalidate();
            self.full_pass_due = Some(now + self.settings.resync_period);
        }
    }

    /// podsReadyTimeout: the admitted pods of workloads whose pods did not all run in time join the
    /// pass's evictions, and the next time one falls due is kept for the wait between passes.
    fn requeue_overdue(
        &mut self,
        rules: &HashMap<String, (i64, Option<i32>)>,
        built: &Built,
        decisions: &mut Decisions,
    ) {
        if rules.is_empty() {
            self.ready_due = None;
            return;
        }
        let now = jiff::Timestamp::now().as_millisecond();
        let overdue = ready::overdue(built, rules, now);
        for (w, pods) in &overdue.workloads {
            let key = &built.snapshot.workloads[*w].key;
            info!(workload = %key, pods = pods.len(), "podsReadyTimeout: admitted pods not running in time are evicted");
        }
        ready::add_evictions(decisions, &overdue.workloads);
        self.ready_due = (overdue.next_due)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
    }

    /// The uids of pods whose ungate is in flight, once those the cache shows ungated or gone, and
    /// those whose outcome stayed unknown too long, are forgotten.
    fn in_flight_now(&self, pods: &[Arc<CachedPod>], now: Instant) -> HashSet<String> {
        let mut guard = self.ungater.lock_in_flight();
        let gated: HashSet<&str> = pods
            .iter()
            .filter(|p| snapshot::is_gated(p))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        prune_in_flight(&mut guard.pods, &gated, now);
        guard.pods.keys().cloned().collect()
    }

    /// Tells the webhook in this process the room each queue has left after this pass, for
    /// admission at creation; nothing once the term is over.
    fn publish_room(
        &self,
        mark: PassMark,
        queues: &[Arc<CapacityQueue>],
        built: &Built,
        decisions: &Decisions,
    ) {
        let Some(at_creation) = &self.at_creation else {
            return;
        };
        let open = open_queues(queues);
        let rules = ready::rules(queues);
        let closed = if rules.is_empty() && decisions.evict.is_empty() {
            HashSet::new()
        } else {
            ready::closed_workloads(
                built,
                decisions,
                &rules,
                &self.evictor.for_statuses().preempted,
            )
        };
        // Under the term's lock: a revocation cannot slip between its check and the publish.
        let published = self.term.while_valid_until(|until| {
            at_creation.publish(
                mark,
                built,
                decisions,
                &open,
                closed,
                Some(until.into_std()),
            )
        });
        if published.is_none() {
            debug!("leadership term over: no room published for admission at creation");
        }
    }

    fn record_pass_metrics(&self, decisions: &Decisions, started: Instant) {
        self.metrics
            .pass_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        for (queue, tally) in &decisions.queues {
            let labels = QueueLabels {
                queue: queue.clone(),
            };
            self.metrics
                .pending_pods
                .get_or_create(&labels)
                .set(i64::from(tally.pending_pods));
            self.metrics
                .pending_workloads
                .get_or_create(&labels)
                .set(i64::from(tally.pending_workloads));
            // A cohort queue: every resource its quota names (0 once given back).
            for resource in tally.ceiling.iter().flat_map(|c| c.0.keys()) {
                let labels = QueueResourceLabels {
                    queue: queue.clone(),
                    resource: resource.clone(),
                };
                let milli = tally.borrowed.get(resource);
                self.metrics.borrowed.get_or_create(&labels).set(milli);
            }
        }
    }

    /// Counts the admitted pods as in flight now (so the next pass does not admit them again) and
    /// sends their ungate patches in the background.
    fn start_ungates(&self, built: &Built, decisions: &Decisions) {
        if decisions.admit.is_empty() || !self.term.is_valid() {
            return;
        }
        log_admissions(built, decisions);
        let mut items = Vec::with_capacity(decisions.admit.len());
        {
            let mut in_flight = self.ungater.lock_in_flight();
            for r in &decisions.admit {
                let pod = built.pods[r.workload][r.pod_set][r.pod].clone();
                let Some(uid) = pod.metadata.uid.clone() else {
                    continue;
                };
                let ticket = in_flight.next_ticket;
                in_flight.next_ticket += 1;
                in_flight.pods.insert(
                    uid,
                    InFlight {
                        ticket,
                        expires: None,
                    },
                );
                let workload = &built.snapshot.workloads[r.workload];
                items.push(UngateItem {
                    pod,
                    ticket,
                    queue: workload.queue.clone(),
                    key: workload.key.clone(),
                    created_at_ms: workload.pod_sets[r.pod_set].pods[r.pod].created_at,
                    workload: built.workloads[r.workload]
                        .as_ref()
                        .map(|d| d.object_ref(&())),
                });
            }
        }
        self.metrics.ungates_in_flight.inc_by(items.len() as i64);
        let ungater = self.ungater.clone();
        let concurrency = self.settings.max_concurrent_writes.max(1);
        tokio::spawn(async move { ungater.ungate_all(items, concurrency).await });
    }

    /// Sends this pass's evictions ([`Evictor::start`], while the term is valid) and notes the
    /// preemptors it admits.
    fn start_evictions(&self, built: &Built, decisions: &Decisions, now: Instant) {
        let admitted: BTreeSet<usize> = decisions.admit.iter().map(|r| r.workload).collect();
        self.evictor
            .admitted(admitted.iter().map(|w| &built.snapshot.workloads[*w].key));
        self.evictor.start(eviction_orders(built, decisions), now);
    }

    /// Namespaces being deleted: their DynamicWorkloads go with them, so writing their records or
    /// statuses would only race the namespace's own clean-up (one failed write per workload).
    fn terminating_namespaces(&self) -> HashSet<String> {
        self.stores
            .namespaces
            .state()
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_some())
            .map(|ns| ns.name_any())
            .collect()
    }

    fn queue_names(&self) -> HashSet<String> {
        (self.stores.queues.state().iter())
            .map(|q| q.name_any())
            .collect()
    }

    /// Records (or deletes) the DynamicWorkload of every workload seen only through its pods.
    /// A workload preempted whole keeps its record until its status shows the preemption
    /// (`preemptions`), even when its last pod is gone.
    fn record_workloads(
        &self,
        built: &Built,
        terminating: &HashSet<String>,
        preemptions: &evictor::ForStatuses,
        look_at: &dyn Fn(usize) -> bool,
    ) {
        let queues = self.queue_names();
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            // A part of a workload in another queue (snapshot::stray_part_key) has no ledger.
            if !look_at(w)
                || terminating.contains(&workload.key.namespace)
                || snapshot::stray_part_of(&workload.key).is_some()
            {
                continue;
            }
            let existing = built.workloads[w].as_ref();
            // A ledger is recorded only for a queue that exists and admits the namespace.
            if existing.is_none()
                && !(workload.namespace_allowed && queues.contains(&workload.queue))
            {
                continue;
            }
            if existing.is_some_and(|d| d.spec.source.is_some()) {
                continue; // recorded from an application object: its recorder owns the spec
            }
            if workload.pod_sets.iter().all(|s| s.pods.is_empty()) {
                // A workload recorded from pods goes when its last pod is gone.
                if let Some(d) = existing
                    && !preemptions.keeps(&workload.key)
                    && d.labels().get(RECORDED_FROM_LABEL).map(String::as_str) == Some("pods")
                    && let Some(uid) = d.uid()
                {
                    self.writer.want_delete(workload.key.clone(), uid);
                }
                continue;
            }
            let pod_sets: Vec<PodSetSpec> = workload
                .pod_sets
                .iter()
                .map(|s| PodSetSpec {
                    name: s.name.clone(),
                    requests: s.per_pod.to_quantities(),
                    min_count: i32::try_from(s.min_count).unwrap_or(i32::MAX),
                    max_count: None,
                })
                .collect();
            if pod_sets.is_empty() {
                continue;
            }
            // The common case, cheaply: the ledger already says what the pods say.
            if let Some(d) = existing
                && d.spec.pod_sets == pod_sets
                && d.spec.queue_name == workload.queue
                && d.spec.priority == workload.priority
            {
                self.writer.record_settled(&workload.key);
                continue;
            }
            let body = |queue: &str, priority: i32, pod_sets: &[PodSetSpec]| {
                json!({
                    "apiVersion": "sluice.dev/v1alpha1",
                    "kind": "DynamicWorkload",
                    "metadata": {
                        "name": workload.key.name,
                        "namespace": workload.key.namespace,
                        "labels": {RECORDED_FROM_LABEL: "pods", "app.kubernetes.io/managed-by": "sluice"},
                    },
                    "spec": {"queueName": queue, "priority": priority, "podSets": pod_sets},
                })
            };
            let seen =
                existing.map(|d| body(&d.spec.queue_name, d.spec.priority, &d.spec.pod_sets));
            self.writer.want_record(
                workload.key.clone(),
                body(&workload.queue, workload.priority, &pod_sets),
                seen.as_ref(),
            );
        }
    }

    fn want_workload_statuses(
        &self,
        built: &Built,
        decisions: &Decisions,
        terminating: &HashSet<String>,
        preemptions: &evictor::ForStatuses,
        look_at: &dyn Fn(usize) -> bool,
    ) {
        let now = now_rfc3339();
        let limits = ready::rules(&self.stores.queues.state());
        let mut admitted: HashMap<usize, HashSet<(usize, usize)>> = HashMap::new();
        for r in &decisions.admit {
            admitted
                .entry(r.workload)
                .or_default()
                .insert((r.pod_set, r.pod));
        }
        let none = HashSet::new();
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            // A part of a workload in another queue (snapshot::stray_part_key) has no ledger.
            if !look_at(w)
                || terminating.contains(&workload.key.namespace)
                || snapshot::stray_part_of(&workload.key).is_some()
            {
                continue;
            }
            // A workload seen only through its pods is recorded in the same round of writes,
            // before its status: it shows a status as soon as it exists.
            let seen = match &built.workloads[w] {
                Some(dwl) => dwl.status.as_ref(),
                None if workload.pod_sets.iter().any(|s| !s.pods.is_empty()) => None,
                None => continue,
            };
            let preempted = preemptions.preempted.get(&workload.key);
            if preempted.is_some() {
                let seen_by = seen.and_then(|s| s.last_preempted_by.as_deref());
                let seen_at = seen.and_then(|s| s.preempted_at.as_deref());
                self.evictor.recorded(&workload.key, seen_by, seen_at);
            }
            let newer = self.writer.newer_workload_status(&workload.key, seen);
            let old = newer.as_ref().or(seen);
            let mut view = WorkloadView {
                preempted,
                held: preemptions.held.get(&workload.key).map(String::as_str),
                ..WorkloadView::of(built, w)
            };
            // Sent back more often than its queue's requeueLimit: Failed, as an application that
            // failed (its gated pods were left out of the pass).
            let limit = limits.get(&workload.queue).and_then(|(_, l)| *l);
            let exhausted = limit.is_some_and(|l| ready::requeues(old, preempted) > l);
            if view.ended.is_none() && exhausted {
                view.ended = Some(crate::api::ApplicationEnd::Failed);
                view.requeue_exhausted = true;
            }
            let status = status::workload_status(
                &view,
                &decisions.workloads[w],
                admitted.get(&w).unwrap_or(&none),
                old,
                &now,
            );
            let ends = (view.requeue_exhausted, view.ended.is_some());
            announcer::announce(&self.announcer, built, decisions, w, ends, &status, old);
            if old != Some(&status) {
                self.writer
                    .want_workload_status(workload.key.clone(), status, seen);
            }
        }
    }

    fn want_queue_statuses(&self, decisions: &Decisions) {
        let now = now_rfc3339();
        for q in self.stores.queues.state() {
            let name = q.name_any();
            let seen = q.status.as_ref();
            let old = self.writer.queue_status(&name, seen);
            let mut status = status::queue_status(
                decisions.queues.get(&name),
                old.as_ref(),
                q.metadata.generation,
                &now,
            );
            status.usage_summary = status::usage_summary(&q.spec.quota, &status);
            if old.as_ref() != Some(&status) {
                self.writer.want_queue_status(name, status, seen);
            }
        }
    }
}

/// This pass's evictions per preemptor (in the order decided), with what sending them, their
/// events and metrics need.
pub(crate) fn eviction_orders(built: &Built, decisions: &Decisions) -> Vec<evictor::Order> {
    let reference = |w: usize| built.workloads[w].as_ref().map(|d| d.object_ref(&()));
    let mut orders: Vec<evictor::Order> = Vec::new();
    let mut position: HashMap<usize, usize> = HashMap::new();
    for eviction in &decisions.evict {
        let r = eviction.victim;
        let pod = built.pods[r.workload][r.pod_set][r.pod].clone();
        let Some(uid) = pod.metadata.uid.clone() else {
            continue;
        };
        let o = *position.entry(eviction.preemptor).or_insert_with(|| {
            let preemptor = &built.snapshot.workloads[eviction.preemptor];
            orders.push(evictor::Order {
                preemptor: preemptor.key.clone(),
                preemptor_ref: reference(eviction.preemptor),
                queue: preemptor.queue.clone(),
                reason: format!("{:?}", eviction.reason),
                needed: pending_requests(preemptor),
                victims: Vec::new(),
            });
            orders.len() - 1
        });
        orders[o].victims.push(evictor::Victim {
            pod,
            uid,
            workload: built.snapshot.workloads[r.workload].key.clone(),
            workload_ref: reference(r.workload),
        });
    }
    orders
}

/// What a preemptor waits for, described for people: the requests of its pods behind the gate.
fn pending_requests(workload: &WorkloadSnapshot) -> String {
    let mut total = ResourceList::new();
    let gated = workload.pod_sets.iter().flat_map(|s| &s.pods);
    for pod in gated.filter(|p| p.state == PodState::Gated) {
        total.add_all(&pod.requests);
    }
    let parts: Vec<String> = total
        .0
        .iter()
        .filter(|(name, amount)| name.as_str() != "pods" && **amount > 0)
        .map(|(name, amount)| format!("{} {name}", describe_quantity(name, *amount)))
        .collect();
    if parts.is_empty() {
        "room for its pods".into()
    } else {
        parts.join(", ")
    }
}

/// Logs, per workload, how many pods this pass admits, in a span naming its queue and workload
/// (only when debug logs are on: a span per workload costs on a large pass).
fn log_admissions(built: &Built, decisions: &Decisions) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let mut per_workload: BTreeMap<usize, usize> = BTreeMap::new();
    for r in &decisions.admit {
        *per_workload.entry(r.workload).or_default() += 1;
    }
    for (w, pods) in per_workload {
        let workload = &built.snapshot.workloads[w];
        let _admit =
            info_span!("admit", queue = %workload.queue, workload = %workload.key).entered();
        debug!(pods, "admitted; ungating");
    }
}

impl Ungater {
    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, InFlightPods> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update_in_flight(&self, uid: &str, ticket: u64, change: impl FnOnce(&mut Option<InFlight>)) {
        self.lock_in_flight().update(uid, ticket, change);
    }

    /// Ungates `items` (already counted in flight), then records metrics and one event per workload.
    async fn ungate_all(&self, items: Vec<UngateItem>, concurrency: usize) {
        let now = now_rfc3339();
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let count = items.len() as i64;
        let results: Vec<(UngateItem, UngateOutcome)> = stream::iter(items)
            .map(|item| {
                let now = &now;
                let span = info_span!("ungate", queue = %item.queue, workload = %item.key);
                async move {
                    let outcome = match self.slots.acquire().await {
                        Ok(_permit) => self.ungate_pod(&item.pod, item.ticket, now).await,
                        // Closed: never, the semaphore lives as long as self.
                        Err(_) => UngateOutcome::Unknown,
                    };
                    (item, outcome)
                }
                .instrument(span)
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        self.metrics.ungates_in_flight.dec_by(count);

        let mut admitted_per_workload: HashMap<String, (ObjectReference, String, u32)> =
            HashMap::new();
        for (item, outcome) in results {
            if outcome != UngateOutcome::Admitted {
                continue;
            }
            let labels = QueueLabels {
                queue: item.queue.clone(),
            };
            self.metrics.admitted_pods.get_or_create(&labels).inc();
            self.metrics
                .admission_wait_seconds
                .get_or_create(&labels)
                .observe(((now_ms - item.created_at_ms).max(0) as f64) / 1000.0);
            if let Some(reference) = item.workload {
                let key = format!(
                    "{}/{}",
                    reference.namespace.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default()
                );
                admitted_per_workload
                    .entry(key)
                    .or_insert((reference, item.queue, 0))
                    .2 += 1;
            }
        }
        for (key, (reference, queue, count)) in admitted_per_workload {
            let span = info_span!("admitted_event", queue = %queue, workload = %key);
            self.publish_admitted(reference, queue, count)
                .instrument(span)
                .await;
        }
    }

    async fn publish_admitted(&self, reference: ObjectReference, queue: String, count: u32) {
        let event = Event {
            type_: EventType::Normal,
            reason: "Admitted".into(),
            note: Some(format!("admitted {count} pod(s) in queue {queue}")),
            action: "Admit".into(),
            secondary: None,
        };
        match tokio::time::timeout(self.api_timeout, self.recorder.publish(&event, &reference))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(%e, "event not recorded"),
            Err(_) => debug!(timeout = ?self.api_timeout, "event not recorded in time"),
        }
    }

    /// Removes the gate of this very pod with one JSON patch ([`ungate_patch`]), while the term is
    /// valid. A pod not admitted is no longer counted in flight; one whose fate stayed unknown is
    /// counted until its entry expires.
    async fn ungate_pod(&self, pod: &CachedPod, ticket: u64, now: &str) -> UngateOutcome {
        let (Some(uid), Some(namespace)) = (pod.uid(), pod.namespace()) else {
            return UngateOutcome::NotAdmitted;
        };
        let forget = |entry: &mut Option<InFlight>| *entry = None;
        let name = pod.name_any();
        let patch = match ungate_patch(pod, now) {
            Ok(patch) => patch,
            Err(e) => {
                warn!(%e, "no ungate patch");
                self.update_in_flight(&uid, ticket, forget);
                return UngateOutcome::NotAdmitted;
            }
        };
        if !self.term.is_valid() {
            self.update_in_flight(&uid, ticket, forget);
            return UngateOutcome::NotAdmitted;
        }
        let expires = Instant::now() + self.in_flight_max_age;
        self.update_in_flight(&uid, ticket, |e| {
            if let Some(e) = e {
                e.expires = Some(expires);
            }
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = PatchParams::default();
        let sent = tokio::time::timeout(
            self.api_timeout,
            api.patch(&name, &params, &Patch::<()>::Json(patch)),
        )
        .await;
        let outcome = match sent {
            Ok(Ok(_)) => UngateOutcome::Admitted,
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                // Deleted between the pass and the patch (a scale-down, an application ending):
                // nothing to admit, nothing to hold.
                debug!(pod = %format!("{namespace}/{name}"), "pod gone before its ungate");
                UngateOutcome::NotAdmitted
            }
            failed => {
                // Someone changed the gates, the pod is another one now, or the patch was applied
                // and only the answer lost: ask the API server which.
                self.metrics.ungate_errors.inc();
                let outcome = self.outcome_after_failure(&api, &name, &uid).await;
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {:?}", self.api_timeout),
                };
                warn!(%error, pod = %format!("{namespace}/{name}"), ?outcome, "ungate failed");
                outcome
            }
        };
        match outcome {
            UngateOutcome::Admitted => self.update_in_flight(&uid, ticket, |e| {
                if let Some(e) = e {
                    e.expires = None; // known ungated: counted until the watch shows it
                }
            }),
            UngateOutcome::NotAdmitted => self.update_in_flight(&uid, ticket, forget),
            UngateOutcome::Unknown => {} // counted until its entry expires
        }
        outcome
    }

    /// Reads the pod after a failed patch: whether this very pod (`uid`) is now ungated.
    async fn outcome_after_failure(&self, api: &Api<Pod>, name: &str, uid: &str) -> UngateOutcome {
        match tokio::time::timeout(self.api_timeout, api.get_opt(name)).await {
            Ok(Ok(Some(current))) if current.uid().as_deref() == Some(uid) => {
                if snapshot::pod_is_gated(&current) {
                    UngateOutcome::NotAdmitted
                } else {
                    UngateOutcome::Admitted
                }
            }
            // Gone, or another pod under its name: ours is not admitted.
            Ok(Ok(_)) => UngateOutcome::NotAdmitted,
            Ok(Err(_)) | Err(_) => UngateOutcome::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::QueueingStrategy;
    use crate::queue::admission::{
        Eviction, EvictionReason, PodRef, PodSetSnapshot, PodSnapshot, QueueSnapshot, Snapshot,
    };

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

    fn workload(
        name: &str,
        pods: &[(&str, PodState, i64)],
    ) -> (WorkloadSnapshot, Vec<Arc<CachedPod>>) {
        let snapshots = pods
            .iter()
            .map(|(pod, state, cpu)| {
                let mut requests = ResourceList::new();
                requests.add("cpu", *cpu);
                requests.add("pods", 1000);
                PodSnapshot {
                    name: pod.to_string(),
                    requests: Arc::new(requests),
                    state: *state,
                    created_at: 0,
                    terminating: false,
                    eviction_blocked: false,
                }
            })
            .collect();
        let objects = pods
            .iter()
            .map(|(pod, _, _)| {
                let uid = (!pod.starts_with("no-uid")).then(|| format!("uid-{pod}"));
                Arc::new(CachedPod {
                    metadata: kube::api::ObjectMeta {
                        name: Some(pod.to_string()),
                        namespace: Some("ns".into()),
                        uid,
                        ..Default::default()
                    },
                    ..CachedPod::default()
                })
            })
            .collect();
        let snapshot = WorkloadSnapshot {
            key: WorkloadKey {
                namespace: "ns".into(),
                name: name.into(),
            },
            queue: "q".into(),
            namespace_allowed: true,
            priority: 0,
            interrupted_count: 0,
            queued_at: 0,
            pod_sets: vec![PodSetSnapshot {
                name: "main".into(),
                per_pod: ResourceList::new(),
                min_count: 1,
                pods: snapshots,
            }],
        };
        (snapshot, objects)
    }

    #[test]
    fn evictions_are_grouped_per_preemptor_with_what_it_needs() {
        let parts = [
            workload(
                "low-a",
                &[
                    ("a0", PodState::Admitted, 1000),
                    ("no-uid", PodState::Admitted, 1000),
                ],
            ),
            workload("low-b", &[("b0", PodState::Admitted, 1000)]),
            workload(
                "urgent",
                &[
                    ("u0", PodState::Gated, 1500),
                    ("u1", PodState::Gated, 500),
                    ("u2", PodState::Admitted, 8000),
                ],
            ),
        ];
        let built = Built {
            snapshot: Snapshot {
                queues: Vec::new(),
                workloads: parts.iter().map(|(w, _)| w.clone()).collect(),
            },
            pods: parts.iter().map(|(_, p)| vec![p.clone()]).collect(),
            workloads: vec![None, None, None],
            problems: Vec::new(),
            left_behind: vec![0, 0, 0],
        };
        let evict = |workload: usize, pod: usize| Eviction {
            victim: PodRef {
                workload,
                pod_set: 0,
                pod,
            },
            preemptor: 2,
            reason: EvictionReason::InQueuePriority,
        };
        let decisions = Decisions {
            evict: vec![evict(0, 0), evict(0, 1), evict(1, 0)],
            ..Decisions::default()
        };
        let orders = eviction_orders(&built, &decisions);
        assert_eq!(orders.len(), 1);
        let order = &orders[0];
        assert_eq!(order.preemptor.to_string(), "ns/urgent");
        assert_eq!(
            (
                order.queue.as_str(),
                order.reason.as_str(),
                order.needed.as_str()
            ),
            ("q", "InQueuePriority", "2 cpu")
        );
        let victims: Vec<(String, &str)> = order
            .victims
            .iter()
            .map(|v| (v.workload.to_string(), v.uid.as_str()))
            .collect();
        // A pod without uid cannot be evicted safely: left out.
        assert_eq!(
            victims,
            vec![("ns/low-a".into(), "uid-a0"), ("ns/low-b".into(), "uid-b0")]
        );
    }

    #[test]
    fn pods_a_disruption_budget_protects_are_marked_for_the_pass() {
        let (snapshot, objects) = workload(
            "low",
            &[
                ("a0", PodState::Admitted, 1000),
                ("a1", PodState::Admitted, 1000),
            ],
        );
        let mut built = Built {
            snapshot: Snapshot {
                queues: Vec::new(),
                workloads: vec![snapshot],
            },
            pods: vec![vec![objects]],
            workloads: vec![None],
            problems: Vec::new(),
            left_behind: vec![0],
        };
        snapshot::mark_eviction_blocked(&mut built, &HashSet::from(["uid-a1".to_string()]));
        let marks: Vec<bool> = built.snapshot.workloads[0].pod_sets[0]
            .pods
            .iter()
            .map(|p| p.eviction_blocked)
            .collect();
        assert_eq!(marks, vec![false, true]);
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

    #[test]
    fn a_pass_still_waits_while_anything_is_gated_admitted_now_or_in_flight() {
        let mut decisions = Decisions::default();
        assert!(!still_waiting(&HashSet::new(), &decisions));
        assert!(still_waiting(&HashSet::from(["uid".into()]), &decisions));
        decisions.queues.insert(
            "q".into(),
            QueueTally {
                pending_pods: 1,
                ..QueueTally::default()
            },
        );
        assert!(still_waiting(&HashSet::new(), &decisions));
    }

    fn gated_pod(annotations: bool) -> CachedPod {
        serde_json::from_value(gated_pod_json(annotations)).expect("pod")
    }

    #[test]
    fn an_admitted_pod_ending_or_gone_wakes_the_pass_at_once_a_gated_one_does_not() {
        let pod = |gated: bool, phase: &str| -> CachedPod {
            let gates = if gated {
                json!([{"name": ADMISSION_GATE}])
            } else {
                json!([])
            };
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                "spec": {"containers": [], "schedulingGates": gates},
                "status": {"phase": phase},
            }))
            .expect("pod")
        };
        let apply = |p: CachedPod| shows_freed_room(&watcher::Event::Apply(p));
        assert!(apply(pod(false, "Succeeded")));
        assert!(apply(pod(false, "Failed")));
        assert!(!apply(pod(false, "Running")), "still holds its quota");
        assert!(
            !apply(pod(true, "Failed")),
            "a gated pod held nothing to free"
        );
        assert!(shows_freed_room(&watcher::Event::Delete(pod(
            false, "Running"
        ))));
        assert!(!shows_freed_room(&watcher::Event::Delete(pod(
            true, "Pending"
        ))));
        assert!(!shows_freed_room(&watcher::Event::Init));
    }

    fn gated_pod_json(annotations: bool) -> serde_json::Value {
        json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "uid-a",
                "annotations": if annotations { json!({"x": "y"}) } else { json!(null) },
            },
            "spec": {
                "containers": [],
                "schedulingGates": [{"name": "other.dev/gate"}, {"name": ADMISSION_GATE}],
            },
        })
    }

    fn ops(patch: &json_patch::Patch) -> Vec<serde_json::Value> {
        match serde_json::to_value(patch).expect("patch as json") {
            serde_json::Value::Array(ops) => ops,
            other => panic!("not a list of operations: {other}"),
        }
    }

    #[test]
    fn the_ungate_patch_applies_only_to_the_pod_it_was_decided_for() {
        let patch = ungate_patch(&gated_pod(true), "2026-01-01T00:00:00Z").expect("patch");
        assert_eq!(
            ops(&patch),
            vec![
                json!({"op": "test", "path": "/metadata/uid", "value": "uid-a"}),
                json!({"op": "test", "path": "/spec/schedulingGates/1/name", "value": ADMISSION_GATE}),
                json!({"op": "remove", "path": "/spec/schedulingGates/1"}),
                json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-at", "value": "2026-01-01T00:00:00Z"}),
            ]
        );
    }

    #[test]
    fn the_ungate_patch_of_a_recreated_pod_fails_its_uid_test() {
        let patch = ungate_patch(&gated_pod(false), "2026-01-01T00:00:00Z").expect("patch");
        assert_eq!(
            ops(&patch).last(),
            Some(
                &json!({"op": "add", "path": "/metadata/annotations", "value": {ADMITTED_AT_ANNOTATION: "2026-01-01T00:00:00Z"}})
            )
        );
        // The same name, gated alike, but another uid: the patch must not apply.
        let mut recreated = gated_pod_json(false);
        recreated["metadata"]["uid"] = json!("uid-b");
        let refused = json_patch::patch(&mut recreated.clone(), &patch);
        assert!(refused.is_err(), "{refused:?}");
        let mut original = gated_pod_json(false);
        json_patch::patch(&mut original, &patch).expect("applies to the original pod");
        assert_eq!(
            original["spec"]["schedulingGates"],
            json!([{"name": "other.dev/gate"}])
        );
    }

    #[test]
    fn no_ungate_patch_for_a_pod_without_uid_or_gate() {
        let mut pod = gated_pod(false);
        pod.metadata.uid = None;
        assert!(matches!(
            ungate_patch(&pod, "t"),
            Err(UngatePatchError::NoUid(_))
        ));
        let mut pod = gated_pod(false);
        pod.admission_gate = None;
        assert!(matches!(
            ungate_patch(&pod, "t"),
            Err(UngatePatchError::NotGated { .. })
        ));
    }

    fn entry(ticket: u64, expires: Option<Instant>) -> InFlight {
        InFlight { ticket, expires }
    }

    #[test]
    fn an_ungate_whose_outcome_stayed_unknown_expires_and_is_decided_again() {
        let now = Instant::now();
        let age = ControllerSettings::default().in_flight_max_age();
        let mut in_flight = HashMap::from([("a".to_string(), entry(1, Some(now + age)))]);
        let gated = HashSet::from(["a"]);
        prune_in_flight(&mut in_flight, &gated, now + age - Duration::from_millis(1));
        assert!(in_flight.contains_key("a"), "still within its age");
        prune_in_flight(&mut in_flight, &gated, now + age);
        assert!(
            in_flight.is_empty(),
            "past its age: the pass judges the pod again"
        );
    }

    #[test]
    fn an_ungate_waiting_for_a_slot_or_known_applied_never_expires() {
        let now = Instant::now();
        let mut in_flight = HashMap::from([
            ("queued".to_string(), entry(1, None)),
            ("applied".to_string(), entry(2, None)),
        ]);
        let gated = HashSet::from(["queued", "applied"]);
        prune_in_flight(&mut in_flight, &gated, now + Duration::from_secs(86_400));
        assert_eq!(in_flight.len(), 2);
    }

    #[test]
    fn a_pod_the_cache_shows_ungated_or_gone_leaves_in_flight() {
        let now = Instant::now();
        let mut in_flight = HashMap::from([
            ("ungated".to_string(), entry(1, None)),
            ("gated".to_string(), entry(2, None)),
        ]);
        prune_in_flight(&mut in_flight, &HashSet::from(["gated"]), now);
        assert_eq!(in_flight.keys().collect::<Vec<_>>(), vec!["gated"]);
    }

    /// An Ungater on a client whose API server accepts connections and never answers.
    async fn ungater_on_a_silent_server(
        api_timeout: Duration,
    ) -> (Ungater, tokio::task::JoinHandle<()>) {
        let (client, server) = crate::test_support::silent_api_client().await;
        let term = crate::test_support::long_term();
        let ungater = Ungater {
            client: client.clone(),
            metrics: ControllerMetrics::new(&mut prometheus_client::registry::Registry::default()),
            in_flight: Mutex::new(InFlightPods::default()),
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "sluice".into(),
                    instance: None,
                },
            ),
            slots: Semaphore::new(1),
            term,
            api_timeout,
            in_flight_max_age: api_timeout * 3,
        };
        (ungater, server)
    }

    #[tokio::test]
    async fn an_ungate_whose_patch_and_read_hang_is_unknown_and_expires() {
        let (ungater, server) = ungater_on_a_silent_server(Duration::from_millis(100)).await;
        ungater
            .lock_in_flight()
            .pods
            .insert("uid-a".into(), entry(7, None));
        let sent = Instant::now();
        let outcome = ungater.ungate_pod(&gated_pod(false), 7, "t").await;
        assert_eq!(outcome, UngateOutcome::Unknown);
        let kept = ungater.lock_in_flight().pods.get("uid-a").copied();
        let expires = kept
            .and_then(|e| e.expires)
            .expect("an unknown ungate expires");
        assert!(expires >= sent + ungater.in_flight_max_age);
        server.abort();
    }

    #[tokio::test]
    async fn an_ungate_after_the_term_ended_sends_nothing_and_forgets_the_pod() {
        let (ungater, server) = ungater_on_a_silent_server(Duration::from_secs(3600)).await;
        ungater.term.revoke();
        ungater
            .lock_in_flight()
            .pods
            .insert("uid-a".into(), entry(7, None));
        // With an hour's timeout on a silent server, any call sent would hang the test.
        let outcome = ungater.ungate_pod(&gated_pod(false), 7, "t").await;
        assert_eq!(outcome, UngateOutcome::NotAdmitted);
        assert!(ungater.lock_in_flight().pods.is_empty());
        server.abort();
    }

    #[test]
    fn an_older_ungate_never_touches_a_newer_entry_of_the_same_pod() {
        let mut pods = InFlightPods::default();
        pods.pods.insert("uid-a".into(), entry(2, None));
        pods.update("uid-a", 1, |e| *e = None);
        assert_eq!(pods.pods.get("uid-a"), Some(&entry(2, None)));
        pods.update("uid-a", 2, |e| *e = None);
        assert!(pods.pods.is_empty());
    }

    #[test]
    fn an_in_flight_entry_outlives_every_call_of_its_ungate() {
        let settings = ControllerSettings::default();
        // The patch, then the read after a failed one, each up to the API timeout.
        assert!(settings.in_flight_max_age() > settings.api_timeout * 2);
    }
}
