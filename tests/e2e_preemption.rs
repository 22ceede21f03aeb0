//! Preemption inside a queue (issue 18), end to end on the local control plane with sluice running on
//! the host, KubeRay for the Ray case: a waiting workload of higher priority takes quota back from
//! admitted workloads of lower priority in the same queue, through the Eviction API, minimally, gangs
//! whole, elastic pods first, with the reasons recorded. Nothing is mocked: PriorityClasses,
//! PodDisruptionBudgets (the controller-manager's disruption controller computes them) and KubeRay
//! are the real ones, and kwok, acting as the kubelet, completes the evicted pods' deletion.
//!
//! Every test watches the queue while it runs ([`QuotaSampler`]): at no sampled moment do the
//! queue's admitted pods (no gate, not ended, not terminating) request more than its quota, and the
//! pods taken away (terminating, or gone while admitted) are exactly the expected victims.
//! Run with `hack/test.sh --test e2e_preemption`.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sluice::api::{ConditionStatus, DynamicWorkload, DynamicWorkloadStatus};
use support::*;

/// How long a preemption may take, from the preemptor's creation to its admission.
const PREEMPTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a test watches for a preemption that must not come, after sluice has seen the waiting
/// pod (its DynamicWorkload says why it waits): several passes' worth.
const QUIET_WINDOW: Duration = Duration::from_secs(8);
/// The queue sampler's period.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Pods.

/// A governed pod with a PriorityClass (the Priority admission plugin sets its `spec.priority`).
fn prio_pod(name: &str, queue: &str, cpu: &str, class: &str) -> Pod {
    let mut p = pod(name, queue, cpu);
    p.spec.as_mut().expect("spec").priority_class_name = Some(class.to_string());
    p
}

/// `pod` as a member of the plain workload `workload` whose first `min_count` pods are its gang.
fn member(pod: Pod, workload: &str, min_count: i32) -> Pod {
    with_annotations(
        with_labels(pod, &[("sluice.dev/workload", workload)]),
        &[("sluice.dev/min-count", &min_count.to_string())],
    )
}

/// Admitted, not ended and not terminating: what holds quota as issue 18 counts it (a victim's
/// quota is freed once its pods are gone or terminating).
fn holds_quota(pod: &Pod) -> bool {
    !is_gated(pod) && !is_ended(pod) && pod.metadata.deletion_timestamp.is_none()
}

fn holding_cpu(pods: &[Pod]) -> i64 {
    pods.iter().filter(|p| holds_quota(p)).map(cpu_millis).sum()
}

async fn wait_admitted(env: &TestEnv, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} to be admitted"),
        PREEMPTION_TIMEOUT,
        || async { env.pods().get(name).await.ok().filter(holds_quota) },
    )
    .await
}

async fn wait_gone(env: &TestEnv, names: &[&str]) {
    for name in names {
        wait_for(
            &format!("pod {name} to be evicted and gone"),
            PREEMPTION_TIMEOUT,
            || async {
                env.pods()
                    .get_opt(name)
                    .await
                    .ok()
                    .and_then(|p| p.is_none().then_some(()))
            },
        )
        .await;
    }
}

/// Waits until sluice has looked at the waiting pod `name`: its DynamicWorkload says why it waits.
async fn wait_seen_waiting(env: &TestEnv, name: &str) -> String {
    env.wait_workload_status(
        name,
        &format!("the DynamicWorkload of the waiting pod {name} to say why it waits"),
        PREEMPTION_TIMEOUT,
        |s| s.pending_pods > 0 && !s.message.is_empty(),
    )
    .await
    .message
}

/// Watches for `QUIET_WINDOW` that `check` holds at every poll; fails at the first poll it does not.
async fn stays<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let until = tokio::time::Instant::now() + QUIET_WINDOW;
    while tokio::time::Instant::now() < until {
        if let Err(broken) = check().await {
            panic!("{what}: {broken}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails unless every pod named holds quota and every pod in `waiting` is still gated.
async fn holding_and_waiting(
    env: &TestEnv,
    holding: &[&str],
    waiting: &[&str],
) -> Result<(), String> {
    for name in holding {
        let p = env
            .pods()
            .get(name)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        if !holds_quota(&p) {
            return Err(format!("{name} no longer holds quota"));
        }
    }
    for name in waiting {
        let p = env
            .pods()
            .get(name)
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        if !is_gated(&p) {
            return Err(format!("{name} was admitted"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The queue sampler: the admitted requests at every sampled moment, and which pods were taken.

#[derive(Default)]
struct SamplerReport {
    samples: usize,
    /// The most cpu (milli) the queue's admitted pods requested at one sampled moment.
    most: i64,
    /// Sampled moments above the quota, with the pods admitted then.
    over: Vec<String>,
    /// Pods taken away while admitted (seen terminating, or gone), with their labels.
    taken: BTreeMap<String, BTreeMap<String, String>>,
}

impl SamplerReport {
    fn record(
        &mut self,
        pods: &[Pod],
        quota_millis: i64,
        before: &mut BTreeMap<String, BTreeMap<String, String>>,
    ) {
        self.samples += 1;
        let mut now = BTreeMap::new();
        for p in pods {
            if p.metadata.deletion_timestamp.is_some() && !is_ended(p) && !is_gated(p) {
                self.taken.insert(p.name_any(), p.labels().clone());
            } else if holds_quota(p) {
                now.insert(p.name_any(), p.labels().clone());
            }
        }
        for (name, labels) in before.iter() {
            if !now.contains_key(name) && !pods.iter().any(|p| &p.name_any() == name) {
                self.taken.insert(name.clone(), labels.clone());
            }
        }
        let millis = holding_cpu(pods);
        self.most = self.most.max(millis);
        if millis > quota_millis {
            self.over.push(format!(
                "{millis}m admitted: {:?}",
                now.keys().collect::<Vec<_>>()
            ));
        }
        *before = now;
    }

    /// Fails if any pod was taken away while admitted.
    fn assert_nothing_taken(&self) {
        assert!(
            self.taken.is_empty(),
            "nothing evicted: {:?}",
            self.taken_names()
        );
    }

    /// Fails if any sampled moment was over the quota, or if too few moments were sampled.
    fn assert_within(&self, quota_millis: i64) {
        // At least the moments before and after the preemption: a quick one takes under a second.
        assert!(
            self.samples >= 2,
            "only {} samples of the queue were taken",
            self.samples
        );
        assert!(
            self.over.is_empty(),
            "the queue's admitted pods exceeded its quota of {quota_millis}m cpu at {} of {} sampled moments: {:?}",
            self.over.len(),
            self.samples,
            self.over
        );
    }

    fn taken_names(&self) -> Vec<&str> {
        self.taken.keys().map(String::as_str).collect()
    }
}

/// Lists the queue's pods every [`SAMPLE_EVERY`] while the test runs (a list is one moment of the
/// API server's state).
struct QuotaSampler {
    quota_millis: i64,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<SamplerReport>>,
}

impl QuotaSampler {
    fn start(env: &TestEnv, queue: &str, quota_millis: i64) -> QuotaSampler {
        let pods = env.pods();
        let selector = format!("sluice.dev/queue={queue}");
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut report = SamplerReport::default();
                let mut before = BTreeMap::new();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                        report.record(&list.items, quota_millis, &mut before);
                    }
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
                report
            }
        });
        QuotaSampler {
            quota_millis,
            stop,
            task: Some(task),
        }
    }

    /// Stops sampling; fails if any sampled moment was over the quota (see
    /// [`SamplerReport::assert_within`]).
    async fn finish(mut self) -> SamplerReport {
        self.stop.store(true, Ordering::SeqCst);
        let report = self
            .task
            .take()
            .expect("running")
            .await
            .expect("the sampler");
        report.assert_within(self.quota_millis);
        report
    }
}

impl Drop for QuotaSampler {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Every status each DynamicWorkload of the namespace had: a victim recorded from its pods alone goes
// with its last pod, so what it said when it was preempted is read from a watch.

struct WorkloadHistory {
    seen: Arc<Mutex<BTreeMap<String, Vec<DynamicWorkloadStatus>>>>,
    /// Workloads seen deleted (for failure messages).
    deleted: Arc<Mutex<std::collections::BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl WorkloadHistory {
    /// Starts watching the namespace's DynamicWorkloads and returns once the watch has listed them.
    async fn start(env: &TestEnv) -> WorkloadHistory {
        let api: Api<DynamicWorkload> = env.workloads();
        let seen: Arc<Mutex<BTreeMap<String, Vec<DynamicWorkloadStatus>>>> = Arc::default();
        let deleted: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
        let listed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (seen, deleted, listed) = (seen.clone(), deleted.clone(), listed.clone());
            async move {
                let mut events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    let workload = match event {
                        Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => w,
                        Ok(watcher::Event::InitDone) => {
                            listed.store(true, Ordering::SeqCst);
                            continue;
                        }
                        Ok(watcher::Event::Delete(w)) => {
                            deleted.lock().expect("history").insert(w.name_any());
                            continue;
                        }
                        _ => continue,
                    };
                    let Some(status) = workload.status.clone() else {
                        continue;
                    };
                    let mut seen = seen.lock().expect("history");
                    let statuses = seen.entry(workload.name_any()).or_default();
                    if statuses.last() != Some(&status) {
                        statuses.push(status);
                    }
                }
            }
        });
        wait_for(
            "the watch of DynamicWorkloads to start",
            Duration::from_secs(30),
            || async { listed.load(Ordering::SeqCst).then_some(()) },
        )
        .await;
        WorkloadHistory {
            seen,
            deleted,
            task,
        }
    }

    /// Waits until `workload` has shown `interruptedCount: 1` and the condition `Preempted` naming
    /// `preemptor` and the resources it needed, and returns that status.
    async fn wait_preempted(&self, workload: &str, preemptor: &str) -> DynamicWorkloadStatus {
        let deadline = tokio::time::Instant::now() + PREEMPTION_TIMEOUT;
        loop {
            let found = self
                .seen
                .lock()
                .expect("history")
                .get(workload)
                .and_then(|statuses| {
                    statuses
                        .iter()
                        .find(|s| preempted_by(s, preemptor))
                        .cloned()
                });
            if let Some(status) = found {
                return status;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out after {PREEMPTION_TIMEOUT:?} waiting for DynamicWorkload {workload} to show interruptedCount 1 and a Preempted condition naming {preemptor} and the cpu it needed; every status it had: {:?}",
                    self.summary(workload)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails if any workload was ever shown preempted more than once (a preemption storm).
    fn assert_no_workload_preempted_twice(&self) {
        let seen = self.seen.lock().expect("history");
        for (name, statuses) in seen.iter() {
            let most = statuses
                .iter()
                .map(|s| s.interrupted_count)
                .max()
                .unwrap_or(0);
            assert!(
                most <= 1,
                "DynamicWorkload {name} was preempted {most} times in one run"
            );
        }
    }

    /// Whether any status seen (message or condition) mentions one of `needles` (lowercase).
    fn mentions(&self, needles: &[&str]) -> Option<String> {
        let seen = self.seen.lock().expect("history");
        seen.iter().find_map(|(name, statuses)| {
            statuses.iter().find_map(|s| {
                std::iter::once(&s.message)
                    .chain(s.conditions.iter().map(|c| &c.message))
                    .find(|text| contains_any(text, needles))
                    .map(|text| format!("DynamicWorkload {name}: {text}"))
            })
        })
    }

    fn summary(&self, workload: &str) -> Vec<String> {
        let seen = self.seen.lock().expect("history");
        let deleted = self.deleted.lock().expect("history").contains(workload);
        let statuses = seen.get(workload).into_iter().flatten().map(|s| {
            let preempted: Vec<&str> = s
                .conditions
                .iter()
                .filter(|c| c.type_ == "Preempted")
                .map(|c| c.message.as_str())
                .collect();
            format!(
                "interrupted {} phase {:?} Preempted {preempted:?}",
                s.interrupted_count, s.phase
            )
        });
        statuses
            .chain(deleted.then(|| "then deleted".to_string()))
            .collect()
    }
}

impl Drop for WorkloadHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn preempted_by(status: &DynamicWorkloadStatus, preemptor: &str) -> bool {
    status.interrupted_count == 1
        && status.conditions.iter().any(|c| {
            c.type_ == "Preempted"
                && c.status == ConditionStatus::True
                && c.message.contains(preemptor)
                && c.message.contains("cpu")
        })
}

fn contains_any(text: &str, needles: &[&str]) -> bool {
    let text = text.to_lowercase();
    needles.iter().any(|n| text.contains(n))
}

// ---------------------------------------------------------------------------------------------
// Events.

fn events(env: &TestEnv) -> Api<Event> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// Waits for an Event on the object `kind`/`name` whose reason says it was preempted.
async fn wait_preemption_event(env: &TestEnv, kind: &str, name: &str) -> Event {
    let fields = format!("involvedObject.kind={kind},involvedObject.name={name}");
    wait_for(
        &format!("an Event on {kind} {name} saying it was preempted"),
        PREEMPTION_TIMEOUT,
        || async {
            let list = events(env)
                .list(&ListParams::default().fields(&fields))
                .await
                .ok()?;
            list.items.into_iter().find(|e| {
                e.reason
                    .as_deref()
                    .is_some_and(|r| r.to_lowercase().contains("preempt"))
            })
        },
    )
    .await
}

/// An Event in the namespace, or a DynamicWorkload status, that mentions one of `needles`.
async fn said_anywhere(
    env: &TestEnv,
    history: &WorkloadHistory,
    needles: &[&str],
) -> Option<String> {
    if let Some(found) = history.mentions(needles) {
        return Some(found);
    }
    let list = events(env).list(&ListParams::default()).await.ok()?;
    list.items.into_iter().find_map(|e| {
        let text = format!(
            "{} {}",
            e.reason.clone().unwrap_or_default(),
            e.message.clone().unwrap_or_default()
        );
        contains_any(&text, needles).then(|| {
            format!(
                "Event on {} {}: {text}",
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default()
            )
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Ray.

/// A RayCluster of 1-cpu pods: the head and one worker group, its pods in PriorityClass `class`.
fn raycluster_of_class(
    name: &str,
    queue: &str,
    class: &str,
    replicas: i64,
    min: i64,
) -> DynamicObject {
    let container = |n: &str| ray_container(n, "1", "1Gi");
    let pod = json!({"priorityClassName": class, "terminationGracePeriodSeconds": 0});
    raycluster(
        name,
        Some(queue),
        raycluster_spec([replicas, min, 4], container, pod),
    )
}

fn ray_node_type(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels.get("ray.io/node-type").map(String::as_str)
}

// ---------------------------------------------------------------------------------------------
// The scene of one test: its namespace, PriorityClasses, the DynamicWorkloads' history and the queue.

struct Scene {
    env: TestEnv,
    classes: Priorities,
    history: WorkloadHistory,
    queue: String,
}

impl Scene {
    /// [`Scene::with_spec`] with a BestEffortFIFO queue of `cpu`.
    async fn new(env: TestEnv, classes: &[(&str, i32)], cpu: &str) -> Scene {
        let spec = json!({"quota": {"cpu": cpu}, "queueingStrategy": "BestEffortFIFO"});
        Scene::with_spec(env, classes, spec).await
    }

    /// The PriorityClasses `(short name, value)`, the history watch, then the queue `q` with `spec`.
    async fn with_spec(
        mut env: TestEnv,
        classes: &[(&str, i32)],
        spec: serde_json::Value,
    ) -> Scene {
        let classes = Priorities::create(&env, classes).await;
        let history = WorkloadHistory::start(&env).await;
        let queue = env.queue_with_spec("q", spec).await;
        Scene {
            env,
            classes,
            history,
            queue,
        }
    }

    /// A pod of the queue asking for `cpu`, in the PriorityClass `class` (its short name).
    fn pod(&self, name: &str, cpu: &str, class: &str) -> Pod {
        prio_pod(name, &self.queue, cpu, &self.classes.name(class))
    }

    async fn create(&self, name: &str, cpu: &str, class: &str) -> Pod {
        self.env.create_pod(self.pod(name, cpu, class)).await
    }

    /// No workload was preempted twice; the PriorityClasses and the namespace go.
    async fn end(self) {
        self.history.assert_no_workload_preempted_twice();
        drop(self.classes);
        self.env.cleanup().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_high_priority_pod_preempts_exactly_as_many_low_priority_pods_as_it_needs() {
    let env = env_or_skip!("preempt-count");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "4").await;
    // Four 1-cpu pods fill the queue: two at the lowest priority, two a little above.
    for (name, class) in [
        ("low-a", "low"),
        ("low-b", "low"),
        ("lowest-a", "lowest"),
        ("lowest-b", "lowest"),
    ] {
        s.create(name, "1", class).await;
    }
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    // 2 cpu more: the two lowest go, the two above them stay.
    s.create("urgent", "2", "high").await;
    let victims = ["lowest-a", "lowest-b"];
    wait_gone(&s.env, &victims).await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let pods = s.env.list_pods().await;
    assert_eq!(
        holding_cpu(&pods),
        4000,
        "nothing more was taken than needed: the quota is full again"
    );
    for victim in victims {
        s.history.wait_preempted(victim, "urgent").await;
        wait_preemption_event(&s.env, "Pod", victim).await;
        wait_preemption_event(&s.env, "DynamicWorkload", victim).await;
    }
    holding_and_waiting(&s.env, &["low-a", "low-b", "urgent"], &[])
        .await
        .expect("the pods above the lowest are untouched");

    let report = sampler.finish().await;
    assert_eq!(
        report.taken_names(),
        victims,
        "exactly the two lowest were evicted"
    );
    s.end().await;
}

#[tokio::test]
async fn a_gang_victim_is_evicted_whole_never_in_part() {
    let env = env_or_skip!("preempt-gang");
    let s = Scene::new(env, &[("low", 10), ("mid", 100), ("high", 1000)], "4").await;
    // The gang `batch` (3 pods, all or nothing) at the lowest priority, one pod above it.
    let gang = ["batch-0", "batch-1", "batch-2"];
    s.env
        .create_pods_at_once(
            gang.iter()
                .map(|name| member(s.pod(name, "1", "low"), "batch", 3)),
        )
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    s.create("steady", "1", "mid").await;
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    // 1 cpu is needed; the victim is the gang, and a gang goes whole.
    s.create("urgent", "1", "high").await;
    wait_gone(&s.env, &gang).await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    holding_and_waiting(&s.env, &["steady", "urgent"], &[])
        .await
        .expect("the pod above the gang is untouched");
    s.history.wait_preempted("batch", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "batch").await;
    for member in gang {
        wait_preemption_event(&s.env, "Pod", member).await;
    }

    let report = sampler.finish().await;
    assert_eq!(
        report.taken_names(),
        gang,
        "the whole gang and nothing else"
    );
    s.end().await;
}

#[tokio::test]
async fn elastic_pods_above_the_minimum_go_before_any_whole_workload() {
    let env = env_or_skip!("preempt-elastic");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "4").await;
    // `spread`: a minimum of 1 pod and 2 elastic pods above it, Spark-executor style.
    for (i, name) in ["spread-0", "spread-1", "spread-2"].into_iter().enumerate() {
        s.env
            .create_pod(member(s.pod(name, "1", "low"), "spread", 1))
            .await;
        s.env.wait_queue_counts(&s.queue, 0, i as i32 + 1).await;
    }
    // A whole workload of even lower priority, and the newest admitted.
    s.create("whole", "1", "lowest").await;
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    s.create("urgent", "2", "high").await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let pods = s.env.list_pods().await;
    let spread_left: Vec<String> = pods
        .iter()
        .filter(|p| p.name_any().starts_with("spread-") && holds_quota(p))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(
        spread_left.len(),
        1,
        "spread keeps its minimum: {spread_left:?}"
    );
    holding_and_waiting(&s.env, &["whole", "urgent"], &[])
        .await
        .expect("the whole workload is untouched while elastic pods could go");
    assert_eq!(holding_cpu(&pods), 4000, "the quota is full again");
    // spread still runs: its ledger records the preemption.
    s.history.wait_preempted("spread", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "spread").await;

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        taken.len() == 2 && taken.iter().all(|n| n.starts_with("spread-")),
        "exactly two of spread's elastic pods were evicted: {taken:?}"
    );
    for name in taken {
        wait_preemption_event(&s.env, "Pod", name).await;
    }
    s.end().await;
}

#[tokio::test]
async fn raycluster_workers_above_min_replicas_go_before_any_whole_workload_and_come_back_gated() {
    let env = env_or_skip!("preempt-ray");
    let s = Scene::new(env, &[("low", 100), ("high", 1000)], "5").await;
    // The head and 1 worker are the gang; 2 workers above minReplicas are elastic.
    rayclusters(&s.env)
        .create(
            &PostParams::default(),
            &raycluster_of_class("rc", &s.queue, &s.classes.name("low"), 3, 1),
        )
        .await
        .expect("create the RayCluster");
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    // A whole workload of the same priority, admitted after the cluster (the newest).
    s.create("whole", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 5).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 5000);

    s.create("urgent", "2", "high").await;
    wait_admitted(&s.env, "urgent").await;
    // KubeRay recreates the two evicted workers; they wait behind the gate (nothing of lower
    // priority is left for them, and equal priority never preempts).
    wait_for(
        "the RayCluster to hold its head and 1 worker, with 2 recreated workers gated",
        PREEMPTION_TIMEOUT,
        || async {
            let pods = s.env.list_pods().await;
            let of = |kind: &str, admitted: bool| {
                pods.iter()
                    .filter(|p| ray_node_type(p.labels()) == Some(kind))
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| {
                        if admitted {
                            holds_quota(p)
                        } else {
                            is_gated(p)
                        }
                    })
                    .count()
            };
            (of("head", true) == 1 && of("worker", true) == 1 && of("worker", false) == 2)
                .then_some(())
        },
    )
    .await;
    s.env.wait_queue_counts(&s.queue, 2, 4).await;
    holding_and_waiting(&s.env, &["whole", "urgent"], &[])
        .await
        .expect("the whole workload is untouched while Ray workers could go");
    s.history.wait_preempted("raycluster-rc", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "raycluster-rc").await;

    let report = sampler.finish().await;
    assert!(
        report.taken.len() == 2
            && report
                .taken
                .values()
                .all(|labels| ray_node_type(labels) == Some("worker")),
        "exactly two Ray workers were evicted: {:?}",
        report.taken_names()
    );
    for name in report.taken_names() {
        wait_preemption_event(&s.env, "Pod", name).await;
    }
    s.end().await;
}

#[tokio::test]
async fn equal_priority_never_preempts() {
    let env = env_or_skip!("preempt-equal");
    let s = Scene::new(env, &[("same", 500)], "2").await;
    s.create("first", "1", "same").await;
    s.create("second", "1", "same").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 2000);

    s.create("third", "1", "same").await;
    let message = wait_seen_waiting(&s.env, "third").await;
    assert!(message.contains("cpu"), "it waits for cpu: {message}");
    stays("an equal-priority pod must wait, never preempt", || {
        holding_and_waiting(&s.env, &["first", "second"], &["third"])
    })
    .await;
    s.env.wait_queue_counts(&s.queue, 1, 2).await;

    let report = sampler.finish().await;
    report.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn a_queue_with_within_queue_never_never_preempts() {
    let env = env_or_skip!("preempt-never");
    let s = Scene::with_spec(
        env,
        &[("low", 10), ("high", 1000)],
        json!({"quota": {"cpu": "2"}, "preemption": {"withinQueue": "Never"}}),
    )
    .await;
    s.create("low-a", "1", "low").await;
    s.create("low-b", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 2000);

    s.create("urgent", "1", "high").await;
    wait_seen_waiting(&s.env, "urgent").await;
    stays(
        "in a queue with withinQueue: Never a high-priority pod must wait, never preempt",
        || holding_and_waiting(&s.env, &["low-a", "low-b"], &["urgent"]),
    )
    .await;

    let report = sampler.finish().await;
    report.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn a_pod_above_the_queues_max_priority_is_refused_at_creation_naming_the_cap() {
    let env = env_or_skip!("preempt-cap");
    let s = Scene::with_spec(
        env,
        &[("under", 400), ("over", 1000)],
        json!({"quota": {"cpu": "4"}, "preemption": {"maxPriority": 500}}),
    )
    .await;
    let message = s
        .env
        .refused(
            &s.pod("too-high", "1", "over"),
            "a pod above the queue's maxPriority is refused",
        )
        .await;
    assert!(
        message.contains("500") && message.contains("maxPriority"),
        "the refusal names the cap: {message}"
    );
    assert!(
        s.env
            .pods()
            .get_opt("too-high")
            .await
            .expect("get")
            .is_none(),
        "the refused pod does not exist"
    );
    // At or below the cap, and without a class, pods are accepted as usual.
    s.create("under", "1", "under").await;
    s.env.create_pod(pod("plain", &s.queue, "1")).await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    s.end().await;
}

/// A PodDisruptionBudget covering `app=<app>` that allows no disruption while its one pod is
/// healthy; returns once the disruption controller has computed it.
async fn blocking_pdb(env: &TestEnv, app: &str) -> String {
    let name = format!("{app}-budget");
    let api: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), &env.namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }))
    .expect("pdb");
    api.create(&PostParams::default(), &pdb)
        .await
        .expect("create PodDisruptionBudget");
    wait_for(
        &format!("PodDisruptionBudget {name} to allow no disruption of its healthy pod"),
        Duration::from_secs(60),
        || async {
            let status = api.get(&name).await.ok()?.status?;
            (status.observed_generation.is_some()
                && status.current_healthy == Some(1)
                && status.disruptions_allowed.unwrap_or(0) == 0)
                .then_some(())
        },
    )
    .await;
    name
}

#[tokio::test]
async fn a_pod_disruption_budget_is_honoured_and_another_victim_is_chosen() {
    let env = env_or_skip!("preempt-pdb");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "3").await;
    // The natural victim (lowest priority) is protected by a budget.
    s.env
        .create_pod(with_labels(
            s.pod("protected", "1", "lowest"),
            &[("app", "protected")],
        ))
        .await;
    s.create("other-a", "1", "low").await;
    s.create("other-b", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let budget = blocking_pdb(&s.env, "protected").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 3000);

    s.create("urgent", "1", "high").await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    holding_and_waiting(&s.env, &["protected", "urgent"], &[])
        .await
        .expect("the protected pod still holds its quota");
    let needles = ["disruption", budget.as_str()];
    let said = wait_for(
        "an Event or a DynamicWorkload status saying the disruption budget kept a victim",
        PREEMPTION_TIMEOUT,
        || said_anywhere(&s.env, &s.history, &needles),
    )
    .await;
    eprintln!("the budget was reported: {said}");

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        taken == ["other-a"] || taken == ["other-b"],
        "one unprotected pod was evicted instead, and only one: {taken:?}"
    );
    s.history.wait_preempted(taken[0], "urgent").await;
    s.end().await;
}

#[tokio::test]
async fn a_preemptor_waits_when_its_only_victim_is_protected_by_a_disruption_budget() {
    let env = env_or_skip!("preempt-pdb-wait");
    let s = Scene::new(env, &[("low", 10), ("high", 1000)], "1").await;
    s.env
        .create_pod(with_labels(
            s.pod("protected", "1", "low"),
            &[("app", "protected")],
        ))
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 1).await;
    let budget = blocking_pdb(&s.env, "protected").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 1000);

    s.create("urgent", "1", "high").await;
    wait_seen_waiting(&s.env, "urgent").await;
    let needles = ["disruption", budget.as_str()];
    let said = wait_for(
        "an Event or a DynamicWorkload status saying the disruption budget blocks the preemption",
        PREEMPTION_TIMEOUT,
        || said_anywhere(&s.env, &s.history, &needles),
    )
    .await;
    eprintln!("the budget was reported: {said}");
    stays("the protected pod must not be evicted", || {
        holding_and_waiting(&s.env, &["protected"], &["urgent"])
    })
    .await;

    let report = sampler.finish().await;
    report.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn admitted_requests_stay_within_the_quota_at_every_sampled_moment_of_a_preemption_run() {
    let env = env_or_skip!("preempt-run");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "6").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 6000);

    // 6 cpu of low work: a gang of 2, an elastic workload of 1 + 2, and a single pod.
    s.env
        .create_pods_at_once(
            ["gang-0", "gang-1"]
                .iter()
                .map(|name| member(s.pod(name, "1", "low"), "gang", 2)),
        )
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    for (i, name) in ["elastic-0", "elastic-1", "elastic-2"]
        .into_iter()
        .enumerate()
    {
        s.env
            .create_pod(member(s.pod(name, "1", "low"), "elastic", 1))
            .await;
        s.env.wait_queue_counts(&s.queue, 0, 3 + i as i32).await;
    }
    s.create("single", "1", "lowest").await;
    s.env.wait_queue_counts(&s.queue, 0, 6).await;

    // Three preemptors at once, 5 cpu together.
    let urgent = [("urgent-0", "2"), ("urgent-1", "1"), ("urgent-2", "2")];
    s.env
        .create_pods_at_once(urgent.iter().map(|(name, cpu)| s.pod(name, cpu, "high")))
        .await;
    for (name, _) in urgent {
        wait_admitted(&s.env, name).await;
    }
    wait_for(
        "the queue to settle with nothing terminating",
        PREEMPTION_TIMEOUT,
        || async {
            let pods = s.env.list_pods().await;
            pods.iter()
                .all(|p| p.metadata.deletion_timestamp.is_none())
                .then_some(())
        },
    )
    .await;
    let pods = s.env.list_pods().await;
    assert_eq!(
        holding_cpu(&pods),
        6000,
        "no more was evicted than needed: the quota is full again"
    );

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        !taken.is_empty() && taken.iter().all(|n| !n.starts_with("urgent")),
        "low pods and only low pods were evicted: {taken:?}"
    );
    eprintln!(
        "{} samples, at most {}m cpu admitted; evicted {taken:?}",
        report.samples, report.most
    );
    s.end().await;
}
