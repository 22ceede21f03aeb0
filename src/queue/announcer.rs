//! Sends the events of `notices.rs` on the user's own objects, off the pass: the pass hands what it
//! found of each workload it looked at to [`Announcer::observe`] (no I/O, a map lookup), and
//! [`Announcer::run`] posts the resulting events through the Recorder (repeats of one event become
//! a series, one patch) at most `--events-per-second` a second (default [`EVENTS_PER_SECOND`])
//! after a burst of five seconds' worth; with 0 nothing is looked at or posted.
//! An event that finds the queue full is dropped and counted (`sluice_events_dropped_total`): the
//! status of the DynamicWorkload still says it all, and the API server never sees a flood.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::api::{DynamicWorkload, DynamicWorkloadStatus};
use crate::metrics::{EventLabels, EventMetrics};
use crate::queue::admission::{Decisions, PodState, WorkloadKey};
use crate::queue::notices::{self, Announced, Notice, Observed};
use crate::queue::snapshot::Built;

/// Events posted per second at most by default (`--events-per-second`), after a burst of
/// [`BURST_SECONDS`] seconds' worth.
pub const EVENTS_PER_SECOND: f64 = 10.0;
pub const BURST_SECONDS: f64 = 5.0;
/// Events waiting to be posted at most; more are dropped.
const QUEUE_CAPACITY: usize = 1000;
/// What is told of a workload not looked at for this long is forgotten (rebuilt from its status
/// if it comes back).
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The objects a workload's events go to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Targets {
    /// The application (its DynamicWorkload's `spec.source`), in the workload's namespace.
    pub application: Option<ObjectReference>,
    /// Its oldest gated pod.
    pub gated_pod: Option<ObjectReference>,
    /// Any pod of it, for a workload without an application object (a plain pod, spark-submit).
    pub any_pod: Option<ObjectReference>,
}

impl Targets {
    /// The objects of `built.snapshot.workloads[w]` (its oldest gated pod: of those `decisions`
    /// leave gated).
    pub fn of(built: &Built, decisions: &Decisions, w: usize) -> Targets {
        let workload = &built.snapshot.workloads[w];
        let namespace = &workload.key.namespace;
        let application = built.workloads[w]
            .as_ref()
            .and_then(|d: &Arc<DynamicWorkload>| d.spec.source.as_ref())
            .map(|s| ObjectReference {
                api_version: Some(s.api_version.clone()),
                kind: Some(s.kind.clone()),
                name: Some(s.name.clone()),
                namespace: Some(namespace.clone()),
                uid: s.uid.clone(),
                ..ObjectReference::default()
            });
        let admitted: std::collections::HashSet<(usize, usize)> = decisions
            .admit
            .iter()
            .filter(|r| r.workload == w)
            .map(|r| (r.pod_set, r.pod))
            .collect();
        let mut gated: Option<(i64, ObjectReference)> = None;
        let mut any_pod = None;
        for (s, set) in workload.pod_sets.iter().enumerate() {
            for (p, pod) in set.pods.iter().enumerate() {
                let Some(cached) = built.pods[w].get(s).and_then(|pods| pods.get(p)) else {
                    continue;
                };
                let reference = ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(pod.name.clone()),
                    namespace: Some(namespace.clone()),
                    uid: cached.metadata.uid.clone(),
                    ..ObjectReference::default()
                };
                let admitted_now = admitted.contains(&(s, p));
                if pod.state == PodState::Gated
                    && !admitted_now
                    && gated.as_ref().is_none_or(|(at, _)| pod.created_at < *at)
                {
                    gated = Some((pod.created_at, reference.clone()));
                }
                any_pod.get_or_insert(reference);
            }
        }
        Targets {
            application,
            gated_pod: gated.map(|(_, r)| r),
            any_pod,
        }
    }

    /// Where one notice goes: the application, and its oldest gated pod when the notice is about
    /// waiting; a workload without an application: one of its pods.
    fn for_notice(&self, notice: &Notice) -> Vec<ObjectReference> {
        let mut out: Vec<ObjectReference> = self.application.iter().cloned().collect();
        if notice.on_gated_pod
            && let Some(pod) = &self.gated_pod
        {
            out.push(pod.clone());
        }
        if out.is_empty()
            && let Some(pod) = &self.any_pod
        {
            out.push(pod.clone());
        }
        out
    }
}

struct Outgoing {
    reference: ObjectReference,
    reason: &'static str,
    warning: bool,
    note: String,
}

struct Memory {
    told: HashMap<WorkloadKey, (Announced, Instant)>,
    pruned_at: Option<Instant>,
}

pub(crate) struct Announcer {
    memory: Mutex<Memory>,
    tx: mpsc::Sender<Outgoing>,
    rx: Mutex<Option<mpsc::Receiver<Outgoing>>>,
    recorder: Recorder,
    metrics: EventMetrics,
    api_timeout: Duration,
    /// Events per second at most; 0: none.
    rate: f64,
}

impl Announcer {
    pub(crate) fn new(
        recorder: Recorder,
        metrics: EventMetrics,
        api_timeout: Duration,
        rate: f64,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        Announcer {
            memory: Mutex::new(Memory {
                told: HashMap::new(),
                pruned_at: None,
            }),
            tx,
            rx: Mutex::new(Some(rx)),
            recorder,
            metrics,
            api_timeout,
            rate,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the pass found of one workload (`status`: the status known before this pass, from
    /// which what was told is rebuilt when this process has not told anything yet): the events it
    /// calls for are queued, never awaited.
    pub(crate) fn observe(
        &self,
        targets: impl FnOnce() -> Targets,
        status: Option<&DynamicWorkloadStatus>,
        seen: &Observed,
        now: Instant,
    ) {
        if self.rate <= 0.0 {
            return;
        }
        let out = {
            let mut memory = self.lock();
            if memory
                .pruned_at
                .is_none_or(|at| now.duration_since(at) >= FORGET_AFTER / 10)
            {
                memory
                    .told
                    .retain(|_, (_, at)| now.duration_since(*at) < FORGET_AFTER);
                memory.pruned_at = Some(now);
            }
            let before = match memory.told.get(seen.key) {
                Some((told, _)) => told.clone(),
                None => Announced::from_status(status),
            };
            let (out, after) = notices::notices(&before, seen, now);
            memory.told.insert(seen.key.clone(), (after, now));
            out
        };
        if out.is_empty() {
            return;
        }
        let targets = targets();
        for notice in out {
            for reference in targets.for_notice(&notice) {
                let outgoing = Outgoing {
                    reference,
                    reason: notice.reason,
                    warning: notice.warning,
                    note: notice.note.clone(),
                };
                if self.tx.try_send(outgoing).is_err() {
                    self.metrics.dropped.inc();
                }
            }
        }
    }

    /// Posts the queued events at the rate allowed, until `shutdown`.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(mut rx) = rx else {
            return;
        };
        if self.rate <= 0.0 {
            return;
        }
        let mut bucket = Bucket::new(self.rate, self.rate * BURST_SECONDS, Instant::now());
        loop {
            let outgoing = tokio::select! {
                _ = shutdown.cancelled() => return,
                o = rx.recv() => match o { Some(o) => o, None => return },
            };
            let wait = bucket.take(Instant::now());
            if !wait.is_zero() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            self.post(outgoing).await;
        }
    }

    async fn post(&self, outgoing: Outgoing) {
        let event = Event {
            type_: if outgoing.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: outgoing.reason.into(),
            note: Some(outgoing.note),
            action: "Queue".into(),
            secondary: None,
        };
        let labels = EventLabels {
            reason: outgoing.reason.to_string(),
        };
        match tokio::time::timeout(
            self.api_timeout,
            self.recorder.publish(&event, &outgoing.reference),
        )
        .await
        {
            Ok(Ok(())) => {
                self.metrics.sent.get_or_create(&labels).inc();
            }
            Ok(Err(e)) => {
                self.metrics.failed.inc();
                debug!(%e, reason = outgoing.reason, "event not recorded");
            }
            Err(_) => {
                self.metrics.failed.inc();
                debug!(timeout = ?self.api_timeout, "event not recorded in time");
            }
        }
    }
}

/// Hands what the pass found of `built.snapshot.workloads[w]` (its tally, its new status, the
/// status known before) to the announcer.
pub(crate) fn announce(
    announcer: &Announcer,
    built: &Built,
    decisions: &Decisions,
    w: usize,
    (requeue_exhausted, application_ended): (bool, bool),
    status: &DynamicWorkloadStatus,
    old: Option<&DynamicWorkloadStatus>,
) {
    let workload = &built.snapshot.workloads[w];
    let Some(tally) = decisions.workloads.get(w) else {
        return;
    };
    let seen = Observed {
        key: &workload.key,
        queue: &workload.queue,
        phase: status.phase,
        pending_pods: status.pending_pods,
        admitted_pods: status.admitted_pods,
        position: tally.position,
        waiting: tally.waiting.as_ref(),
        interrupted_count: status.interrupted_count,
        requeue_count: status.requeue_count,
        last_preempted_by: status.last_preempted_by.as_deref(),
        requeue_exhausted,
        application_ended,
    };
    announcer.observe(
        || Targets::of(built, decisions, w),
        old,
        &seen,
        Instant::now(),
    );
}

/// A token bucket: `rate` a second, at most `burst` saved.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Bucket {
            rate,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes one token: how long to wait before using it (zero: at once).
    fn take(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_through_then_spaces_events_at_its_rate() {
        let now = Instant::now();
        let mut b = Bucket::new(10.0, 3.0, now);
        for _ in 0..3 {
            assert_eq!(b.take(now), Duration::ZERO);
        }
        let wait = b.take(now);
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-6, "{wait:?}");
        // A second later the bucket is full again, not fuller.
        let later = now + Duration::from_secs(2);
        for _ in 0..3 {
            assert_eq!(b.take(later), Duration::ZERO);
        }
        assert!(!b.take(later).is_zero());
    }

    fn notice(on_gated_pod: bool) -> Notice {
        Notice {
            reason: "Waiting",
            warning: false,
            note: String::new(),
            on_gated_pod,
        }
    }

    fn reference(kind: &str, name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some(kind.into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn a_notice_goes_to_the_application_and_one_gated_pod_or_to_a_pod_without_application() {
        let t = Targets {
            application: Some(reference("RayCluster", "rc")),
            gated_pod: Some(reference("Pod", "w-1")),
            any_pod: Some(reference("Pod", "head")),
        };
        let names = |refs: Vec<ObjectReference>| {
            refs.into_iter().filter_map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(names(t.for_notice(&notice(true))), ["rc", "w-1"]);
        assert_eq!(names(t.for_notice(&notice(false))), ["rc"]);
        let plain = Targets {
            application: None,
            ..t
        };
        assert_eq!(names(plain.for_notice(&notice(true))), ["w-1"]);
        assert_eq!(names(plain.for_notice(&notice(false))), ["head"]);
    }
}

#[cfg(test)]
mod built_tests {

    use super::*;
    use crate::api::CapacityQueue;
    use crate::queue::admission::decide;
    use crate::queue::pod_cache::CachedPod;
    use crate::queue::snapshot::build;

    fn pod(name: &str, created: &str, workload: &str) -> Arc<CachedPod> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                "creationTimestamp": created,
                "labels": {"sluice.dev/queue": "q", "sluice.dev/workload": workload}},
            "spec": {"schedulingGates": [{"name": "sluice.dev/admission"}],
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .expect("pod");
        Arc::new(CachedPod::from_pod(pod))
    }

    /// A queue of 1 cpu and a workload of three gated 1-cpu pods: one is admitted, two wait.
    fn built() -> Built {
        let queue: CapacityQueue = serde_json::from_value(serde_json::json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "q"}, "spec": {"quota": {"cpu": "1"}},
        }))
        .expect("queue");
        let pods = vec![
            pod("b", "2026-01-01T00:00:02Z", "burst"),
            pod("a", "2026-01-01T00:00:01Z", "burst"),
            pod("c", "2026-01-01T00:00:03Z", "burst"),
        ];
        build(&[Arc::new(queue)], &[], &pods, &[], &Default::default())
    }

    #[test]
    fn a_workload_without_an_object_is_told_on_its_oldest_gated_pod() {
        let built = built();
        let w = built.snapshot.position_of("burst");
        let targets = Targets::of(&built, &Decisions::default(), w);
        assert_eq!(targets.application, None);
        let gated = targets.gated_pod.expect("a gated pod");
        assert_eq!(gated.name.as_deref(), Some("a"));
        assert_eq!(gated.uid.as_deref(), Some("uid-a"));
        assert_eq!(gated.namespace.as_deref(), Some("ml"));
        // This pass admits a (the quota has room for one): b is the oldest left waiting.
        let decisions = decide(&built.snapshot);
        let targets = Targets::of(&built, &decisions, w);
        let gated = targets.gated_pod.expect("a gated pod");
        assert_eq!(gated.name.as_deref(), Some("b"));
        assert_eq!(gated.namespace.as_deref(), Some("ml"));
    }

    #[test]
    fn the_queue_gauges_show_the_oldest_pod_still_behind_the_gate() {
        let built = built();
        let oldest = crate::queue::gauges::oldest_waiting(&built);
        // Pod a (the oldest) is gated: a pass that admits it leaves it counted until its gate is
        // off (an ungate that keeps failing leaves it waiting).
        let at = jiff::Timestamp::from_second(1_767_225_601).expect("t");
        assert_eq!(oldest.get("q").copied(), Some(at.as_millisecond()));
    }
}
