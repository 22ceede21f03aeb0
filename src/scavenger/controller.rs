//! The ScavengerJob controller (leader only): each pass gathers the nodes, the pods, the
//! ScavengerJobs and their Jobs from watches, asks the pure core what to do (`run::observe`,
//! `plan::plan_evictions`, `plan::plan_starts`, `run::next_status`) and applies it: creates and
//! deletes Jobs, writes statuses by server-side apply, records events and metrics.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::events::{EventType, Recorder};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::capacity::{Capacity, capacity};
use super::facts::{job_facts, node_facts};
use super::metrics::{ReasonLabels, ScavengerMetrics};
use super::mounts::Mounts;
use super::plan::{Held, Running, Waiting, plan_evictions, plan_starts};
use super::pod::WatchedPod;
use super::run::{RunState, Step, next_status, observe};
use crate::api::{
    CapacityQueue, FIELD_MANAGER, SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS, ScavengerJob,
    ScavengerJobStatus, ScavengerPhase,
};
use crate::resources::ResourceList;
use crate::watch_store;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ScavengerSettings {
    /// The share of the nodes' allocatable scavengers may use with ordinary work (0..=1).
    pub threshold: f64,
    /// How long a run's pods may take to be scheduled before its Job is removed.
    pub start_timeout: Duration,
    /// How long a ScavengerJob whose start could not be scheduled waits before the next try.
    pub retry_after: Duration,
    /// A pass runs at least this often (the ramp and the start bound advance with time).
    pub resync: Duration,
}

impl Default for ScavengerSettings {
    fn default() -> Self {
        ScavengerSettings {
            threshold: 0.7,
            start_timeout: Duration::from_secs(60),
            retry_after: Duration::from_secs(30),
            resync: Duration::from_secs(5),
        }
    }
}

/// The watches a pass reads from.
struct Stores {
    nodes: Store<Node>,
    /// Keyed by uid, without kube's per-object key (see [`crate::watch_store`]).
    pods: watch_store::Store<WatchedPod>,
    jobs: Store<Job>,
    scavengers: Store<ScavengerJob>,
    queues: Store<CapacityQueue>,
    mounts: Mounts,
    /// Job pods seen being deleted while they ran: `namespace/job` → (pods, seconds when last seen).
    deleted: DeletedPods,
}

type DeletedPods = Arc<Mutex<HashMap<String, (Vec<String>, i64)>>>;

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    changed: &Arc<Notify>,
    seen: impl Fn(&K) + Send + Sync + 'static,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (store, stream) = crate::watch_backoff::reflected(api, config, trim);
    drive(stream, |_| {}, seen, changed, shutdown);
    store
}

/// As [`watch`], into a [`watch_store`] (the cache of every running pod: the largest one).
fn watch_pods(
    api: Api<WatchedPod>,
    config: watcher::Config,
    changed: &Arc<Notify>,
    seen: impl Fn(&WatchedPod) + Send + Sync + 'static,
    shutdown: &CancellationToken,
) -> watch_store::Store<WatchedPod> {
    let (store, mut writer) = watch_store::store();
    let stream = watcher(api, config).backoff(crate::watch_backoff::watch_backoff());
    drive(
        stream,
        move |event| writer.apply(event),
        seen,
        changed,
        shutdown,
    );
    store
}

/// Runs a watch until `shutdown`: each event shows its object to `seen`, then goes to `apply`,
/// then wakes `changed`.
fn drive<K, S>(
    stream: S,
    mut apply: impl FnMut(watcher::Event<K>) + Send + 'static,
    seen: impl Fn(&K) + Send + Sync + 'static,
    changed: &Arc<Notify>,
    shutdown: &CancellationToken,
) where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let changed = changed.clone();
    tokio::spawn(shutdown.clone().run_until_cancelled_owned(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => debug!(error = %e, "scavenger watch"),
                Ok(event) => {
                    if let watcher::Event::Apply(k) | watcher::Event::InitApply(k) = &event {
                        seen(k);
                    }
                    apply(event);
                }
            }
            changed.notify_one();
        }
    }));
}

/// The watches of one term; they stop when `shutdown` is cancelled (the term ends), so that a
/// replica that leads many terms does not keep a watch and a cache of every pod per term.
fn start_watches(client: &Client, changed: &Arc<Notify>, shutdown: &CancellationToken) -> Stores {
    let all = watcher::Config::default();
    let deleted = DeletedPods::default();
    let remember = deleted.clone();
    let remember_deleted = move |pod: &WatchedPod| {
        if let Some((job, pod)) = pod.deleted_while_running.clone() {
            let mut map = remember.lock().unwrap_or_else(|e| e.into_inner());
            let (pods, at) = map.entry(job).or_default();
            if !pods.contains(&pod) {
                pods.push(pod);
            }
            *at = now().0;
        }
    };
    Stores {
        nodes: watch(
            Api::<Node>::all(client.clone()),
            all.clone(),
            |_| {},
            changed,
            |_| {},
            shutdown,
        ),
        // Pods that ended hold nothing: never cached; the rest decoded into what is read
        // (`WatchedPod`: the full pod never exists).
        pods: watch_pods(
            Api::<WatchedPod>::all(client.clone()),
            all.clone()
                .fields("status.phase!=Succeeded,status.phase!=Failed"),
            changed,
            remember_deleted,
            shutdown,
        ),
        jobs: watch(
            Api::<Job>::all(client.clone()),
            all.clone().labels(SCAVENGER_JOB_LABEL),
            |_| {},
            changed,
            |_| {},
            shutdown,
        ),
        scavengers: watch(
            Api::<ScavengerJob>::all(client.clone()),
            all.clone(),
            |_| {},
            changed,
            |_| {},
            shutdown,
        ),
        queues: watch(
            Api::<CapacityQueue>::all(client.clone()),
            all,
            |_| {},
            changed,
            |_| {},
            shutdown,
        ),
        mounts: Mounts::watch(client, Some(changed.clone()), Some(shutdown)),
        deleted,
    }
}

/// Runs the controller until `shutdown`.
pub async fn run(
    client: Client,
    settings: ScavengerSettings,
    metrics: ScavengerMetrics,
    shutdown: CancellationToken,
) {
    let changed = Arc::new(Notify::new());
    let stores = start_watches(&client, &changed, &shutdown);
    let ready = async {
        stores.nodes.wait_until_ready().await?;
        stores.pods.wait_until_ready().await?;
        stores.jobs.wait_until_ready().await?;
        stores.scavengers.wait_until_ready().await?;
        stores.queues.wait_until_ready().await?;
        stores.mounts.wait_until_ready().await?;
        Ok::<(), anyhow::Error>(())
    };
    tokio::select! {
        _ = shutdown.cancelled() => return,
        r = ready => if let Err(e) = r { warn!(error = %e, "scavenger watches stopped"); return; },
    }
    info!(
        threshold = settings.threshold,
        "ScavengerJob controller running"
    );
    let recorder = crate::events::recorder(client.clone(), "sluice-scavenger");
    let mut controller = Controller {
        client,
        settings,
        metrics,
        recorder,
        stores,
        memory: Memory::default(),
    };
    loop {
        controller.pass().await;
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = changed.notified() => {
                // Gather a burst of changes into one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ = tokio::time::sleep(controller.settings.resync) => {}
        }
    }
}

/// What the controller remembers between passes of one term.
#[derive(Default)]
struct Memory {
    /// Statuses written that the watch may not show yet, by uid.
    written: HashMap<String, (ScavengerJobStatus, i64)>,
    /// Jobs created this term, by `namespace/name`, with the time: a Job the watch does not show
    /// yet is not one deleted from outside.
    created: HashMap<String, i64>,
    /// Not before: a start that was unschedulable waits until then, by uid.
    retry_at: HashMap<String, i64>,
}

struct Controller {
    client: Client,
    settings: ScavengerSettings,
    metrics: ScavengerMetrics,
    recorder: Recorder,
    stores: Stores,
    memory: Memory,
}

/// One ScavengerJob as this pass sees it.
struct Seen {
    sj: Arc<ScavengerJob>,
    key: String,
    namespace: String,
    status: ScavengerJobStatus,
    demand: Result<ResourceList, String>,
}

fn now() -> (i64, String) {
    let t = jiff::Timestamp::now();
    (t.as_second(), t.to_string())
}

fn seconds(text: Option<&str>) -> Option<i64> {
    text.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
}

impl Controller {
    fn capacity(&self) -> Capacity {
        let nodes: Vec<_> = self
            .stores
            .nodes
            .state()
            .iter()
            .map(|n| node_facts(n))
            .collect();
        let pods = self.stores.pods.state();
        capacity(
            &nodes,
            pods.iter().map(|p| &p.facts),
            self.settings.threshold,
        )
    }

    fn quotas(&self) -> BTreeMap<String, ResourceList> {
        self.stores
            .queues
            .state()
            .iter()
            .filter_map(|q| {
                let quota = q.spec.scavenger_quota.as_ref()?;
                ResourceList::from_quantities(quota)
                    .ok()
                    .map(|l| (q.name_any(), l))
            })
            .collect()
    }

    /// The ScavengerJobs with the newest status this controller knows of. Forgets what it no
    /// longer needs (Jobs the watch shows by now, pauses that are over).
    fn seen(&mut self, now: i64) -> Vec<Seen> {
        self.memory.created.retain(|_, at| now - *at < 120);
        self.memory.retry_at.retain(|_, at| *at > now);
        self.stores
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (_, at)| now - *at < 600);
        let mut out = Vec::new();
        for sj in self.stores.scavengers.state() {
            let uid = sj.uid().unwrap_or_default();
            let stored = sj.status.clone().unwrap_or_default();
            let status = match self.memory.written.get(&uid) {
                Some((written, at)) if *written != stored && now - at < 30 => written.clone(),
                _ => {
                    self.memory.written.remove(&uid);
                    stored
                }
            };
            let namespace = sj.namespace().unwrap_or_default();
            out.push(Seen {
                key: format!("{namespace}/{}", sj.name_any()),
                namespace,
                demand: super::spec::demand(&sj.spec),
                status,
                sj,
            });
        }
        out
    }

    // Long: one pass reads as the list of its steps, each a call.
    async fn pass(&mut self) {
        let (now, now_text) = now();
        let capacity = self.capacity();
        self.metrics
            .set_capacity(&capacity.for_scavengers(), &capacity.in_use);
        let quotas = self.quotas();
        let mut steps: Vec<(usize, Step)> = Vec::new();
        let seen = self.seen(now);
        let (mut running, mut waiting) = (Vec::new(), Vec::new());
        for (i, s) in seen.iter().enumerate() {
            if s.status.phase.is_final() {
                continue;
            }
            if let Some(problem) = self.invalid(s) {
                steps.push((i, Step::Fail(problem)));
                continue;
            }
            let demand = s.demand.clone().unwrap_or_default();
            if s.status.phase == ScavengerPhase::Running {
                match self.judge_run(s, now) {
                    Some(step) => steps.push((i, step)),
                    None => {
                        let started =
                            seconds(s.status.running_timestamps.last().map(String::as_str))
                                .unwrap_or(now);
                        running.push((
                            i,
                            Running {
                                key: s.key.clone(),
                                demand,
                                queue: s.sj.spec.queue_name.clone(),
                                started,
                                duration: super::spec::duration(&s.sj.spec.duration)
                                    .unwrap_or(Duration::from_secs(1800)),
                                interrupted_count: s.status.interrupted_count,
                            },
                        ));
                    }
                }
            } else {
                let uid = s.sj.uid().unwrap_or_default();
                waiting.push((
                    i,
                    Waiting {
                        key: s.key.clone(),
                        interrupted_count: s.status.interrupted_count,
                        created: s
                            .sj
                            .creation_timestamp()
                            .map(|t| t.0.as_second())
                            .unwrap_or(now),
                        demand,
                        queue: s.sj.spec.queue_name.clone(),
                        not_before: self.memory.retry_at.get(&uid).copied().unwrap_or(0),
                    },
                ));
            }
        }
        let plain_running: Vec<Running> = running.iter().map(|(_, r)| r.clone()).collect();
        let evict = plan_evictions(&plain_running, &capacity, &quotas, now);
        for (i, r) in &running {
            if evict.contains(&r.key) {
                steps.push((*i, Step::Interrupt(format!(
                    "sluice stopped it to give the room back to ordinary work (least progress in its duration window first; {})",
                    describe_over(&capacity)
                ))));
            } else {
                let duration_secs = r.duration.as_secs();
                steps.push((
                    *i,
                    Step::Progress {
                        started: r.started,
                        duration_secs,
                    },
                ));
            }
        }
        // Room freed this pass is counted once the pods are gone: no starts until then.
        if evict.is_empty() {
            let plain_waiting: Vec<Waiting> = waiting.iter().map(|(_, w)| w.clone()).collect();
            let (start, held) =
                plan_starts(&plain_waiting, &plain_running, &capacity, &quotas, now);
            for (i, w) in &waiting {
                if start.contains(&w.key) {
                    steps.push((*i, Step::Start { job: String::new() }));
                } else if let Some(why) = held.get(&w.key) {
                    steps.push((*i, Step::Wait(waiting_message(why, &w.demand, now))));
                }
            }
        }
        for (i, step) in steps {
            self.apply(&seen[i], step, now, &now_text).await;
        }
    }

    /// Why a ScavengerJob cannot go on at all: its spec (stored before the webhook judged it) or a
    /// mount that is gone.
    fn invalid(&self, s: &Seen) -> Option<String> {
        if let Err(e) = super::spec::check(&s.sj.spec) {
            return Some(format!("invalid spec: {e}"));
        }
        super::spec::check_mounts(&s.sj.spec, &s.namespace, &|kind, name| {
            self.stores.mounts.exists(kind, &s.namespace, name)
        })
        .err()
        .map(|e| format!("a mount is missing: {e}"))
    }

    /// What the current run of a Running ScavengerJob calls for; None while it starts or runs.
    fn judge_run(&self, s: &Seen, now: i64) -> Option<Step> {
        let Some(job_name) = s.status.job_name.clone() else {
            return Some(Step::Interrupt("its Job is not recorded".into()));
        };
        let job_key = format!("{}/{job_name}", s.namespace);
        let job = self
            .stores
            .jobs
            .get(&reflector::ObjectRef::new(&job_name).within(&s.namespace));
        let Some(job) = job else {
            let fresh = self
                .memory
                .created
                .get(&job_key)
                .is_some_and(|at| now - at < 60);
            return (!fresh).then(|| Step::Interrupt(format!("its Job {job_name} was deleted")));
        };
        if job.metadata.deletion_timestamp.is_some() {
            return Some(Step::Interrupt(format!("its Job {job_name} was deleted")));
        }
        let pods: Vec<_> = self
            .stores
            .pods
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(s.namespace.as_str()))
            .filter_map(|p| p.job.as_deref())
            .filter(|(job, _)| *job == job_name)
            .map(|(_, run)| run.clone())
            .collect();
        let bound = self.settings.start_timeout.as_secs() as i64;
        let mut facts = job_facts(&job);
        facts.pods_deleted_while_running = self
            .stores
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&job_key)
            .map(|(pods, _)| pods.clone())
            .unwrap_or_default();
        match observe(&facts, &pods, s.sj.spec.parallelism, now, bound) {
            RunState::Starting | RunState::Running => None,
            RunState::Completed => Some(Step::Complete),
            RunState::Failed(m) => Some(Step::Fail(m)),
            RunState::Interrupted(m) => Some(Step::Interrupt(m)),
            RunState::Unschedulable(m) => Some(Step::Requeue(m)),
        }
    }

    // Long: one match over the steps, each with its Job action, event and metric.
    async fn apply(&mut self, s: &Seen, step: Step, now: i64, now_text: &str) {
        let uid = s.sj.uid().unwrap_or_default();
        let step = match step {
            Step::Start { .. } => {
                let run = s.status.running_timestamps.len() + 1;
                match self.create_job(s, run, now).await {
                    Ok(job) => {
                        self.metrics.started.inc();
                        if s.status.running_timestamps.is_empty()
                            && let Some(created) = s.sj.creation_timestamp()
                        {
                            let waited = (jiff::Timestamp::now() - created.0)
                                .total(jiff::Unit::Second)
                                .unwrap_or(0.0);
                            self.metrics.first_start_seconds.observe(waited.max(0.0));
                        }
                        self.event(
                            s,
                            EventType::Normal,
                            "Started",
                            format!("run {run} started as Job {job}"),
                        )
                        .await;
                        Step::Start { job }
                    }
                    Err(e) => {
                        warn!(scavengerjob = %s.key, error = %e, "could not create its Job");
                        Step::Wait(format!("could not create its Job: {e}"))
                    }
                }
            }
            Step::Interrupt(m) => {
                self.delete_job(s).await;
                let by = if m.starts_with("sluice stopped") {
                    "sluice"
                } else {
                    "outside"
                };
                self.metrics
                    .interrupted
                    .get_or_create(&ReasonLabels { by: by.into() })
                    .inc();
                self.event(s, EventType::Warning, "Interrupted", m.clone())
                    .await;
                Step::Interrupt(m)
            }
            Step::Requeue(m) => {
                self.delete_job(s).await;
                self.metrics.unschedulable.inc();
                let retry = now + self.settings.retry_after.as_secs() as i64;
                self.memory.retry_at.insert(uid.clone(), retry);
                self.event(s, EventType::Warning, "Unschedulable", m.clone())
                    .await;
                Step::Requeue(m)
            }
            Step::Fail(m) => {
                if m.starts_with("a mount is missing") || m.starts_with("invalid spec") {
                    self.delete_job(s).await;
                }
                self.metrics.failed.inc();
                self.event(s, EventType::Warning, "Failed", m.clone()).await;
                Step::Fail(m)
            }
            Step::Complete => {
                self.metrics.finished.inc();
                self.event(
                    s,
                    EventType::Normal,
                    "Completed",
                    "every pod finished".into(),
                )
                .await;
                Step::Complete
            }
            other => other,
        };
        let status = next_status(&s.status, &step, now, now_text);
        if s.status == status {
            return;
        }
        // Conditions' times change with their status only; a message-only change is written too.
        if let Err(e) = self.write_status(s, &status).await {
            warn!(scavengerjob = %s.key, error = %e, "could not write the status");
            return;
        }
        self.memory.written.insert(uid, (status, now));
    }

    async fn create_job(&mut self, s: &Seen, run: usize, now: i64) -> Result<String, String> {
        let job = super::job::job(&s.sj, run)?;
        // The PriorityClass is optional in an install (off by default): without it the Job's
        // pods would be refused by the API server, and the Job would only say so in its events.
        let classes = Api::<PriorityClass>::all(self.client.clone());
        match classes.get_opt(SCAVENGER_PRIORITY_CLASS).await {
            Ok(Some(_)) => {}
            Ok(None) => return Err(missing_priority_class_message()),
            Err(e) => {
                return Err(format!(
                    "reading the PriorityClass {SCAVENGER_PRIORITY_CLASS}: {e}"
                ));
            }
        }
        let name = job.name_any();
        let api = Api::<Job>::namespaced(self.client.clone(), &s.namespace);
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            // Created by an earlier attempt (the names are deterministic).
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(format!("creating Job {}/{name}: {e}", s.namespace)),
        }
        self.memory
            .created
            .insert(format!("{}/{name}", s.namespace), now);
        info!(scavengerjob = %s.key, job = %name, run, "started");
        Ok(name)
    }

    /// Deletes the current run's Job and its pods (and any other Job of this ScavengerJob left
    /// behind by an earlier term).
    async fn delete_job(&self, s: &Seen) {
        let api = Api::<Job>::namespaced(self.client.clone(), &s.namespace);
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        let name = s.sj.name_any();
        for job in self.stores.jobs.state().iter().filter(|j| {
            j.namespace().as_deref() == Some(s.namespace.as_str())
                && j.labels().get(SCAVENGER_JOB_LABEL) == Some(&name)
                && j.metadata.deletion_timestamp.is_none()
                && !is_finished(j)
        }) {
            match api.delete(&job.name_any(), &params).await {
                Ok(_) => info!(scavengerjob = %s.key, job = %job.name_any(), "Job removed"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => warn!(scavengerjob = %s.key, error = %e, "could not remove its Job"),
            }
        }
        if let Some(job) = &s.status.job_name {
            match api.delete(job, &params).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(e) => warn!(scavengerjob = %s.key, error = %e, "could not remove its Job"),
            }
        }
    }

    async fn write_status(&self, s: &Seen, status: &ScavengerJobStatus) -> Result<(), kube::Error> {
        let body = json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
            "metadata": {"name": s.sj.name_any()},
            "status": status,
        });
        Api::<ScavengerJob>::namespaced(self.client.clone(), &s.namespace)
            .patch_status(
                &s.sj.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(|_| ())
    }

    async fn event(&self, s: &Seen, type_: EventType, reason: &str, note: String) {
        let object = s.sj.object_ref(&());
        crate::events::publish(&self.recorder, &object, type_, reason, note).await;
    }
}

/// What a ScavengerJob says while the cluster has no PriorityClass `sluice-scavenger`.
pub fn missing_priority_class_message() -> String {
    format!(
        "the PriorityClass {SCAVENGER_PRIORITY_CLASS} does not exist, and ScavengerJobs need it: install \
         the chart with --set priorityClasses.enabled=true, or apply \
         manifests/install/00-priorityclasses.yaml (docs/src/operations/install.md)"
    )
}

fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

fn describe(list: &ResourceList) -> String {
    list.describe(|name, amount| format!("{name} {amount}"), "nothing")
}

fn describe_over(capacity: &Capacity) -> String {
    format!(
        "scavengers hold {} over what ordinary work leaves them",
        describe(&capacity.over())
    )
}

/// Why a waiting job waits, for its message. Pure.
pub fn waiting_message(why: &Held, demand: &ResourceList, now: i64) -> String {
    match why {
        // What is free changes with every pod in the cluster: not in the message (the status
        // would be rewritten each time); `sluice scavengers` shows it.
        Held::Capacity(_) => format!(
            "waiting for idle capacity: it needs {} (free scavenger capacity: sluice scavengers)",
            describe(demand)
        ),
        Held::Queue(queue) => format!(
            "waiting for its queue {queue:?}'s scavengerQuota: it needs {} more than the queue's ScavengerJobs may use (or the queue has no spec.scavengerQuota)",
            describe(demand)
        ),
        Held::Backoff(at) => format!(
            "its last start could not be scheduled in time; retried after {}",
            jiff::Timestamp::from_second(*at)
                .map(|t| t.to_string())
                .unwrap_or_else(|_| format!("{}s", (at - now).max(0)))
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_messages_say_why_without_numbers_that_churn() {
        let demand = ResourceList([("cpu".to_string(), 1500), ("pods".to_string(), 1000)].into());
        let a = waiting_message(&Held::Capacity(ResourceList::new()), &demand, 0);
        let b = waiting_message(
            &Held::Capacity(ResourceList([("cpu".to_string(), 700)].into())),
            &demand,
            5,
        );
        // What is free is left out: the status is not rewritten whenever a pod comes or goes.
        assert_eq!(a, b);
        assert!(a.contains("it needs cpu 1.5"), "{a}");
        assert!(!a.contains("pods"), "{a}");
        let q = waiting_message(&Held::Queue("team".into()), &demand, 0);
        assert!(
            q.contains("\"team\"") && q.contains("scavengerQuota"),
            "{q}"
        );
        let r = waiting_message(&Held::Backoff(1_800_000_000), &demand, 0);
        assert!(r.contains("2027-01-15T08:00:00Z"), "{r}");
    }
}
