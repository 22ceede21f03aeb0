//! Watch intake: the queue controller's watches of pods (its own and, for the nodes' room, the
//! ungoverned ones bound to a node), DynamicWorkloads, queues, flavors, namespaces and nodes, the
//! stores they fill, which changes wake the pass at once, and which DynamicWorkloads changed since
//! the last pass (for the incremental snapshot).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec, NodeStatus};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;

use super::{ControllerError, lock};
use crate::api::{CapacityQueue, DynamicWorkload, QUEUE_LABEL, ResourceFlavor};
use crate::queue::admission::WorkloadKey;
use crate::queue::bound_pods::{BOUND_NOT_ENDED, BoundPod, UNGOVERNED};
use crate::queue::pod_cache::CachedPod;
use crate::queue::snapshot::{self};
use crate::watch_store;

pub(super) struct Stores {
    pub(super) queues: Store<CapacityQueue>,
    /// Where the queues' flavors run (node labels and tolerations).
    pub(super) flavors: Store<ResourceFlavor>,
    pub(super) workloads: Store<DynamicWorkload>,
    /// Keyed by uid, without kube's per-object key (see [`crate::watch_store`]); notes what
    /// changed for the incremental passes.
    pub(super) pods: watch_store::Store<CachedPod>,
    pub(super) namespaces: Store<PartialObjectMeta<Namespace>>,
    /// The nodes' labels, allocatable and cordons (the rest trimmed): the room of topology
    /// domains ([`trim_node`]).
    pub(super) nodes: Store<Node>,
    /// Pods sluice does not govern, bound to a node and not ended: their requests are taken off
    /// their nodes' room too ([`BoundPod`]).
    pub(super) bound_elsewhere: Store<BoundPod>,
    /// The DynamicWorkloads changed since the last pass, as the watch noted them.
    pub(super) workload_changes: Arc<Mutex<WorkloadChanges>>,
}

/// The keys of the DynamicWorkloads the watch changed (applied to the store first), and whether a
/// (re)list replaced them all.
#[derive(Default)]
pub(super) struct WorkloadChanges {
    pub(super) keys: HashSet<WorkloadKey>,
    pub(super) relisted: bool,
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
    pub(super) async fn wait_until_ready(&self) -> Result<(), ControllerError> {
        let ready = async {
            self.queues.wait_until_ready().await?;
            self.flavors.wait_until_ready().await?;
            self.workloads.wait_until_ready().await?;
            self.namespaces.wait_until_ready().await?;
            self.nodes.wait_until_ready().await?;
            self.bound_elsewhere.wait_until_ready().await
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
pub(super) struct Wakers {
    /// Any change seen by a watch.
    pub(super) changed: Arc<Notify>,
    /// A pod seen behind the gate: a pass is wanted at once, even while passes are idle.
    pub(super) gated: Arc<Notify>,
    /// A pod that held quota seen ended or gone: the room it freed is handed over without waiting
    /// for the rest of a burst (the batch window).
    pub(super) ended: Arc<Notify>,
}

/// Background tasks of one term, aborted however the term ends.
pub(super) struct AbortOnDrop(pub(super) Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Starts the watches the passes read, each feeding its store and waking the pass loop.
pub(super) fn start_watches(client: &Client, wakers: &Wakers) -> (Stores, Vec<JoinHandle<()>>) {
    // Lists are consistent reads (not "any" version from an API server's cache, which may lag):
    // this term's first pass must see every pod a previous leader admitted.
    let config = watcher::Config::default();
    let changed = &wakers.changed;
    let (queues, q) = watch_whole(
        Api::<CapacityQueue>::all(client.clone()),
        config.clone(),
        changed,
        "capacityqueues",
    );
    let (flavors, f) = watch_whole(
        Api::<ResourceFlavor>::all(client.clone()),
        config.clone(),
        changed,
        "resourceflavors",
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
    let (namespaces, n) = watch_whole(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config,
        changed,
        "namespaces",
    );
    let ((nodes, nd), (bound_elsewhere, b)) = watch_nodes_room(client, changed);
    let stores = Stores {
        queues,
        flavors,
        workloads,
        pods,
        namespaces,
        nodes,
        bound_elsewhere,
        workload_changes,
    };
    (stores, vec![q, f, w, p, n, nd, b])
}

/// A store and the task of the watch that fills it.
type Watched<K> = (Store<K>, JoinHandle<()>);

/// The watches of what the nodes' room is made of: the nodes, and the pods sluice does not govern
/// that are bound to them.
fn watch_nodes_room(client: &Client, changed: &Arc<Notify>) -> (Watched<Node>, Watched<BoundPod>) {
    // Node status changes (heartbeats, conditions) are trimmed away before the store, but each
    // event still wakes a pass: the pass is cheap when nothing changed.
    let nodes = watch(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        trim_node,
        |_| {},
        (changed, Vec::new()),
        "nodes",
    );
    // Only their node and requests are kept; a pod bound or ended wakes a pass like a node does
    // (room on a node changed).
    let bound = watch(
        Api::<BoundPod>::all(client.clone()),
        watcher::Config::default()
            .labels(UNGOVERNED)
            .fields(BOUND_NOT_ENDED),
        |_| {},
        |_| {},
        (changed, Vec::new()),
        "ungoverned bound pods",
    );
    (nodes, bound)
}

/// Keeps of a node what topology-aware admission reads: its name, labels, whether it is
/// cordoned and its allocatable (a node's status is most of its size: images, conditions).
pub(super) fn trim_node(node: &mut Node) {
    let meta = &mut node.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.owner_references = None;
    node.spec = Some(NodeSpec {
        unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable),
        ..NodeSpec::default()
    });
    node.status = Some(NodeStatus {
        allocatable: node.status.as_mut().and_then(|s| s.allocatable.take()),
        ..NodeStatus::default()
    });
}

/// A watch of whole objects (nothing trimmed) whose every event wakes the pass loop.
fn watch_whole<K>(
    api: Api<K>,
    config: watcher::Config,
    changed: &Arc<Notify>,
    what: &'static str,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    watch(api, config, |_| {}, |_| {}, (changed, Vec::new()), what)
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
    let (store, stream) = crate::watch_backoff::reflected(api, config, trim);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ADMISSION_GATE;
    use serde_json::json;

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
}
