//! The read-only web dashboard (`sluice serve --dashboard-addr`): queues, cohorts, waiting work,
//! one workload, recent preemptions and usage history, per tenant, pushed live by Server-Sent
//! Events. It watches CapacityQueues and DynamicWorkloads (one object per application, never every
//! pod) and reads the namespaces' labels from the cache the webhooks keep; it runs on every
//! replica, leader or not, since it reads only what the leader publishes. Static assets are
//! embedded in the binary.

pub mod access;
pub mod detail;
pub mod events;
pub mod http;
pub mod model;
pub mod tracker;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::dashboard::model::{Inputs, Scope, StateView};
use crate::dashboard::tracker::{Sample, Tracker};
use crate::duration::parse_duration;
use crate::namespaces::Namespaces;

/// Flags of the dashboard (part of `sluice serve`).
#[derive(clap::Args, Debug, Clone)]
pub struct DashboardArgs {
    /// Serve the read-only web dashboard on this address (plain HTTP: put it behind TLS, or reach
    /// it with `kubectl port-forward`), e.g. 0.0.0.0:8080. Off when not set. Viewers log in with
    /// a Kubernetes bearer token (`kubectl create token`), checked by a TokenReview; whoever may
    /// list dynamicworkloads cluster-wide sees everything, others the namespaces where they may
    /// list them and the queues that admit those namespaces.
    #[arg(long, env = "SLUICE_DASHBOARD_ADDR")]
    pub dashboard_addr: Option<SocketAddr>,

    /// How far back the dashboard's usage history of each queue goes (kept in memory).
    #[arg(long, env = "SLUICE_DASHBOARD_HISTORY", default_value = "6h", value_parser = parse_duration)]
    pub dashboard_history: Duration,

    /// How often the dashboard samples each queue's usage for its history.
    #[arg(long, env = "SLUICE_DASHBOARD_SAMPLE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub dashboard_sample_interval: Duration,
}

/// The dashboard's state, shared by its handlers.
pub struct Dashboard {
    queues: Store<CapacityQueue>,
    workloads: Store<DynamicWorkload>,
    namespaces: Namespaces,
    tracker: Mutex<Tracker>,
    /// The Events of DynamicWorkloads (the workload page).
    events: Mutex<events::Events>,
    /// The events of applications listed for workload pages lately: (namespace, field selector)
    /// to when and what.
    app_events: Mutex<HashMap<(String, String), AppEvents>>,
    client: Client,
    /// Bumped on every change of a queue or workload: the live streams wait on it.
    version: watch::Sender<u64>,
    pub access: access::Access,
    /// The last state built per scope and the version it was built at (all viewers of one scope
    /// share it; the cell is filled by the first of them).
    cache: Mutex<HashMap<Scope, (u64, SharedView)>>,
}

/// A view as JSON, built by the first viewer who asks for it.
type SharedView = Arc<tokio::sync::OnceCell<Arc<String>>>;
/// The events of one application and when they were listed.
type AppEvents = (std::time::Instant, Vec<events::EventRow>);

/// Views cached at most (one per distinct scope).
const CACHED_VIEWS: usize = 256;
/// How long the events of an application listed for a workload page are reused.
const APP_EVENTS_FRESH: Duration = Duration::from_secs(5);
/// Applications whose events are cached at most.
const APP_EVENTS_CACHED: usize = 1024;

impl Dashboard {
    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    fn labels_of(&self) -> impl Fn(&str) -> Option<std::collections::BTreeMap<String, String>> {
        let namespaces = self.namespaces.clone();
        move |ns| namespaces.labels(ns)
    }

    pub fn namespace_names(&self) -> Vec<String> {
        self.namespaces.names()
    }

    /// The state `scope` sees, as JSON, built at most once per change and scope: the viewers of
    /// one scope that ask at once (every open page wakes on the same change) wait for one build,
    /// made off the async workers.
    pub async fn state_json(self: &Arc<Self>, scope: &Scope) -> Arc<String> {
        let version = *self.version.borrow();
        let cell = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(scope) {
                Some((at, cell)) if *at == version => cell.clone(),
                _ => {
                    if cache.len() >= CACHED_VIEWS {
                        cache.clear();
                    }
                    let cell = Arc::new(tokio::sync::OnceCell::new());
                    cache.insert(scope.clone(), (version, cell.clone()));
                    cell
                }
            }
        };
        cell.get_or_init(|| {
            let (d, scope) = (self.clone(), scope.clone());
            async move {
                let build = move || serde_json::to_string(&d.state(&scope)).unwrap_or_default();
                Arc::new(tokio::task::spawn_blocking(build).await.unwrap_or_default())
            }
        })
        .await
        .clone()
    }

    pub fn state(&self, scope: &Scope) -> StateView {
        let (queues, workloads) = (self.queues.state(), self.workloads.state());
        let preemptions: Vec<_> = {
            let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            tracker.preemptions.iter().cloned().collect()
        };
        let labels = self.labels_of();
        model::state_view(
            &Inputs {
                queues: &queues,
                workloads: &workloads,
                preemptions: &preemptions,
                labels: &labels,
                now: jiff::Timestamp::now(),
            },
            scope,
        )
    }

    /// The usage history of the queues `scope` sees.
    pub fn history(&self, scope: &Scope) -> HashMap<String, Vec<Sample>> {
        let labels = self.labels_of();
        let visible: Vec<String> = self
            .queues
            .state()
            .iter()
            .filter(|q| scope.sees_queue(q, &labels))
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        visible
            .into_iter()
            .filter_map(|q| {
                Some((
                    q.clone(),
                    tracker.history.get(&q)?.iter().cloned().collect(),
                ))
            })
            .collect()
    }

    /// One workload, if `scope` sees its namespace (else None, as if it did not exist).
    pub async fn workload(
        &self,
        scope: &Scope,
        namespace: &str,
        name: &str,
    ) -> Option<detail::WorkloadDetail> {
        if !scope.sees_namespace(namespace) {
            return None;
        }
        let w = self
            .workloads
            .get(&ObjectRef::new(name).within(namespace))?;
        let (states, evictions) = {
            let tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            let evictions = tracker.evictions(namespace, name);
            (tracker.states(namespace, name), evictions)
        };
        let mut rows = {
            let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
            events.of(namespace, name)
        };
        // Its application's events (a bare pod's: its pod's), where sluice tells it what it does.
        let (kind, object) = match &w.spec.source {
            Some(s) => (s.kind.as_str(), s.name.as_str()),
            None => ("Pod", name),
        };
        rows.extend(self.application_events(namespace, kind, object).await);
        let events = events::newest(rows, scope);
        let mut detail = detail::workload_detail(&w, states, scope);
        detail.evictions = evictions
            .iter()
            .map(|p| model::preemption_row(p, scope))
            .collect();
        detail.events = events;
        Some(detail)
    }

    /// The events of one object of `namespace`, listed with a field selector (at most every
    /// [`APP_EVENTS_FRESH`] per object); none when they cannot be listed.
    async fn application_events(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> Vec<events::EventRow> {
        let Some(selector) = events::selector_of(kind, name) else {
            return Vec::new();
        };
        let key = (namespace.to_string(), selector);
        {
            let cache = self.app_events.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((at, rows)) = cache.get(&key)
                && at.elapsed() < APP_EVENTS_FRESH
            {
                return rows.clone();
            }
        }
        let api: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), namespace);
        let params = kube::api::ListParams::default().fields(&key.1).limit(100);
        let rows: Vec<events::EventRow> = match api.list(&params).await {
            Ok(list) => list.items.iter().filter_map(events::own_row).collect(),
            Err(e) => {
                warn!(%e, namespace, kind, name, "the events of a workload's application could not be listed");
                return Vec::new();
            }
        };
        let mut cache = self.app_events.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= APP_EVENTS_CACHED {
            cache.retain(|_, (at, _)| at.elapsed() < APP_EVENTS_FRESH);
            if cache.len() >= APP_EVENTS_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, (std::time::Instant::now(), rows.clone()));
        rows
    }

    /// An Event of a DynamicWorkload was seen (or went). No view is rebuilt for it: events are
    /// only on workload pages, which the page reloads on the next change of the state.
    pub fn apply_event(&self, event: &watcher::Event<k8s_openapi::api::core::v1::Event>) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        events.apply(event);
    }
}

/// Starts the dashboard when `--dashboard-addr` is set; it stops with `shutdown`.
pub fn spawn(
    args: &DashboardArgs,
    client: Client,
    namespaces: Namespaces,
    shutdown: CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let addr = args.dashboard_addr?;
    let dashboard = start(args, client, namespaces, shutdown.clone());
    Some(tokio::spawn(async move {
        if let Err(e) = http::serve(addr, dashboard, shutdown).await {
            warn!(%e, %addr, "dashboard stopped");
        }
    }))
}

/// Where a dashboard's caches are written: its watches, or a benchmark's synthetic objects.
pub struct Feeds {
    pub queues: reflector::store::Writer<CapacityQueue>,
    pub workloads: reflector::store::Writer<DynamicWorkload>,
}

impl Dashboard {
    /// A dashboard with empty caches, and the writers that fill them (through
    /// [`Dashboard::apply_queue`] and [`Dashboard::apply_workload`]).
    pub fn new(client: Client, namespaces: Namespaces) -> (Arc<Dashboard>, Feeds) {
        let (queues, queue_writer) = reflector::store::<CapacityQueue>();
        let (workloads, workload_writer) = reflector::store::<DynamicWorkload>();
        let dashboard = Arc::new(Dashboard {
            queues,
            workloads,
            namespaces,
            tracker: Mutex::new(Tracker::default()),
            events: Mutex::new(events::Events::default()),
            app_events: Mutex::new(HashMap::new()),
            client: client.clone(),
            version: watch::Sender::new(0),
            access: access::Access::new(client),
            cache: Mutex::new(HashMap::new()),
        });
        let feeds = Feeds {
            queues: queue_writer,
            workloads: workload_writer,
        };
        (dashboard, feeds)
    }

    pub fn apply_queue(&self, feeds: &mut Feeds, event: &watcher::Event<CapacityQueue>) {
        feeds.queues.apply_watcher_event(event);
        self.bump();
    }

    pub fn apply_workload(&self, feeds: &mut Feeds, event: &watcher::Event<DynamicWorkload>) {
        feeds.workloads.apply_watcher_event(event);
        self.track(event);
    }
}

/// The watches and the sampler of a dashboard; the HTTP server is [`http::serve`].
pub fn start(
    args: &DashboardArgs,
    client: Client,
    namespaces: Namespaces,
    shutdown: CancellationToken,
) -> Arc<Dashboard> {
    let (dashboard, feeds) = Dashboard::new(client.clone(), namespaces);
    let feeds = Arc::new(Mutex::new(feeds));
    let d = dashboard.clone();
    spawn_watch(
        Api::<CapacityQueue>::all(client.clone()),
        watcher::Config::default(),
        shutdown.clone(),
        fed(feeds.clone(), move |feeds, event| {
            d.apply_queue(feeds, event)
        }),
    );
    let d = dashboard.clone();
    spawn_watch(
        Api::<DynamicWorkload>::all(client.clone()),
        watcher::Config::default(),
        shutdown.clone(),
        fed(feeds, move |feeds, event| d.apply_workload(feeds, event)),
    );
    let d = dashboard.clone();
    spawn_watch(
        Api::<k8s_openapi::api::core::v1::Event>::all(client.clone()),
        watcher::Config::default().fields(events::FIELD_SELECTOR),
        shutdown.clone(),
        move |event| match event {
            Ok(event) => d.apply_event(&event),
            Err(e) => warn!(%e, "the dashboard's watch of workload events failed; retried"),
        },
    );
    spawn_sampler(dashboard.clone(), args, shutdown);
    dashboard
}

/// Hands each event a watch delivers to `apply` with the feeds locked (an error is retried by
/// the watch's backoff).
fn fed<K: 'static>(
    feeds: Arc<Mutex<Feeds>>,
    apply: impl Fn(&mut Feeds, &watcher::Event<K>) + Send + 'static,
) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) + Send + 'static {
    move |event| {
        if let Ok(event) = event {
            apply(&mut feeds.lock().unwrap_or_else(|e| e.into_inner()), &event);
        }
    }
}

/// Watches `api` (retried with sluice's backoff) until `shutdown`, handing every event to `apply`.
fn spawn_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    shutdown: CancellationToken,
    mut apply: impl FnMut(Result<watcher::Event<K>, watcher::Error>) + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let events = watcher(api, config).backoff(crate::watch_backoff::watch_backoff());
    tokio::spawn(async move {
        let run = events.for_each(|event| {
            apply(event);
            async {}
        });
        tokio::select! { _ = run => {}, _ = shutdown.cancelled() => {} }
    });
}

impl Dashboard {
    fn track(&self, event: &watcher::Event<DynamicWorkload>) {
        let now = jiff::Timestamp::now().to_string();
        {
            let mut tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                watcher::Event::Apply(w) | watcher::Event::InitApply(w) => tracker.saw(w, &now),
                watcher::Event::Delete(w) => tracker.gone(w),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
        self.bump();
    }
}

fn spawn_sampler(dashboard: Arc<Dashboard>, args: &DashboardArgs, shutdown: CancellationToken) {
    let every = args.dashboard_sample_interval.max(Duration::from_secs(1));
    let keep = (args.dashboard_history.as_secs() / every.as_secs().max(1)).max(1) as usize;
    info!(?every, keep, "dashboard usage history");
    tokio::spawn(async move {
        // The first sample once the queues are listed, not of an empty cache.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = dashboard.queues.wait_until_ready() => {}
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let queues = dashboard.queues.state();
            let t = jiff::Timestamp::now().as_second();
            {
                let mut tracker = dashboard.tracker.lock().unwrap_or_else(|e| e.into_inner());
                tracker.sample(&queues, t, keep);
            }
            // The events of workloads gone go too (their events may come after the deletion).
            let workloads = &dashboard.workloads;
            let exists =
                |ns: &str, name: &str| workloads.get(&ObjectRef::new(name).within(ns)).is_some();
            let mut events = dashboard.events.lock().unwrap_or_else(|e| e.into_inner());
            events.prune(exists);
        }
    });
}
