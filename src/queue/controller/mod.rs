//! The queue controller: watches queues, workloads, governed pods and namespaces, runs the admission
//! decision whenever something changed, and applies it: one patch per admitted pod (the gate
//! removed), DynamicWorkloads recorded for new workloads, and statuses written only when they change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::integrations::Adapters;
use crate::leader::Term;
use crate::metrics::ControllerMetrics;
use crate::queue::announcer::Announcer;
use crate::queue::at_creation::AdmitAtCreation;
use crate::queue::clock::API_CALL_TIMEOUT;
use crate::queue::evictor::Evictor;
use crate::queue::gauges;
use crate::queue::incremental::Snapshotter;
use crate::queue::snapshot::{self};
use crate::queue::writer::Writer;

mod data;
mod evictions;
mod holds;
mod pass;
mod pin;
mod plan;
mod statuses;
mod ungate;
mod watches;

pub use ungate::ungate_patch;
use ungate::{InFlightPods, Ungater};
use watches::{AbortOnDrop, Stores, Wakers, start_watches};
#[cfg(test)]
pub(crate) use {
    evictions::eviction_orders,
    plan::{PassInputs, PassPlan, PassWay, decide_all, open_queues, plan_pass},
};

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("a watch ended before its first list completed: {0}")]
    Watch(String),
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
    /// This replica's name in the Lease: with the term's generation it is written on every pod
    /// admitted (`sluice.dev/admitted-by`).
    pub identity: String,
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
            events_per_second: crate::queue::announcer::EVENTS_PER_SECOND,
            identity: "sluice".to_string(),
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
        controller.find_data().await;
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

/// How often a pass runs while a gated pod asks for its data's nodes (see `data.rs`).
const DATA_RECHECK: Duration = Duration::from_secs(5);

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
    /// Where the data of the gated pods' data asks is, looked up before each pass.
    data: data::DataMap,
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
        let recorder = crate::events::recorder(client.clone(), "sluice");
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
        let admitted_by = format!("{}@{}", settings.identity, term.generation());
        if let Some(at_creation) = &at_creation {
            at_creation.begin_term(admitted_by.clone());
        }
        let ungater = Arc::new(Ungater {
            admitted_by,
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
            data: data::DataMap::new(),
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
        // A gang waiting beside its data is not woken by the data's pods (sluice does not watch
        // them): it looks again this often.
        let until_due = if self.data.is_empty() {
            until_due
        } else {
            until_due.min(DATA_RECHECK)
        };
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
}
