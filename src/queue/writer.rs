//! Writes what admission passes conclude, off the admission path: DynamicWorkload records, their
//! statuses and CapacityQueue statuses.
//!
//! A pass only says what it wants each object to look like and goes on; this writer sends it. What
//! a pass wants replaces what an earlier pass wanted and was not sent yet (one write, the newest),
//! and rounds of writes are at least `min_interval` apart, so a workload whose pods change many
//! times a second costs at most one status write per interval. Nothing is lost by this: the
//! cluster stays the source of truth, and a write that fails is wanted again by the next pass
//! (which compares with what the watch shows).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::api::{
    CapacityQueue, CapacityQueueStatus, DynamicWorkload, DynamicWorkloadStatus, FIELD_MANAGER,
};
use crate::metrics::ControllerMetrics;
use crate::queue::admission::WorkloadKey;

/// How long a write this writer made is believed over an older value the watch still shows.
/// Past it, the watch's value wins again (someone else may have written since).
const TRUST_WRITTEN_FOR: Duration = Duration::from_secs(30);

/// Wanted values not yet sent, and values sent that the watch may not show yet.
struct Slot<K, V> {
    pending: HashMap<K, V>,
    written: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash + Clone, V: PartialEq + Clone> Slot<K, V> {
    fn new() -> Self {
        Slot {
            pending: HashMap::new(),
            written: HashMap::new(),
        }
    }

    /// The newest value known for `key`: wanted and not yet sent, else sent recently, else what
    /// the watch shows (`seen`).
    fn newest(&mut self, key: &K, seen: Option<&V>) -> Option<V> {
        if let Some(value) = self.pending.get(key) {
            return Some(value.clone());
        }
        if let Some((value, at)) = self.written.get(key) {
            if seen != Some(value) && at.elapsed() < TRUST_WRITTEN_FOR {
                return Some(value.clone());
            }
            // The watch caught up (or the write is too old to trust): forget it.
            self.written.remove(key);
        }
        seen.cloned()
    }

    /// Records that `value` is wanted; returns whether that is news (a write is due).
    fn want(&mut self, key: K, value: V, seen: Option<&V>) -> bool {
        if self.newest(&key, seen).as_ref() == Some(&value) {
            return false;
        }
        self.pending.insert(key, value);
        true
    }
}

struct State {
    records: Slot<WorkloadKey, serde_json::Value>,
    deletes: HashMap<WorkloadKey, String>,
    workload_statuses: Slot<WorkloadKey, DynamicWorkloadStatus>,
    queue_statuses: Slot<String, CapacityQueueStatus>,
}

/// The writer's handle, shared by the controller's passes and the writing task.
#[derive(Clone)]
pub(crate) struct Writer {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    metrics: ControllerMetrics,
    state: Mutex<State>,
    wake: Notify,
    concurrency: usize,
    min_interval: Duration,
}

impl Writer {
    pub(crate) fn new(
        client: Client,
        metrics: ControllerMetrics,
        concurrency: usize,
        min_interval: Duration,
    ) -> Self {
        Writer {
            inner: Arc::new(Inner {
                client,
                metrics,
                state: Mutex::new(State {
                    records: Slot::new(),
                    deletes: HashMap::new(),
                    workload_statuses: Slot::new(),
                    queue_statuses: Slot::new(),
                }),
                wake: Notify::new(),
                concurrency: concurrency.max(1),
                min_interval,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest status known for a workload (see [`Slot::newest`]): what a pass builds on.
    pub(crate) fn workload_status(
        &self,
        key: &WorkloadKey,
        seen: Option<&DynamicWorkloadStatus>,
    ) -> Option<DynamicWorkloadStatus> {
        self.state().workload_statuses.newest(key, seen)
    }

    pub(crate) fn want_workload_status(
        &self,
        key: WorkloadKey,
        status: DynamicWorkloadStatus,
        seen: Option<&DynamicWorkloadStatus>,
    ) {
        if self.state().workload_statuses.want(key, status, seen) {
            self.inner.wake.notify_one();
        }
    }

    pub(crate) fn queue_status(
        &self,
        name: &String,
        seen: Option<&CapacityQueueStatus>,
    ) -> Option<CapacityQueueStatus> {
        self.state().queue_statuses.newest(name, seen)
    }

    pub(crate) fn want_queue_status(
        &self,
        name: String,
        status: CapacityQueueStatus,
        seen: Option<&CapacityQueueStatus>,
    ) {
        if self.state().queue_statuses.want(name, status, seen) {
            self.inner.wake.notify_one();
        }
    }

    /// Wants the DynamicWorkload recorded from pods to be `body` (a server-side apply of its
    /// spec); `seen` is the same body built from what the watch shows, if it exists.
    pub(crate) fn want_record(
        &self,
        key: WorkloadKey,
        body: serde_json::Value,
        seen: Option<&serde_json::Value>,
    ) {
        let mut state = self.state();
        state.deletes.remove(&key);
        if state.records.want(key, body, seen) {
            drop(state);
            self.inner.wake.notify_one();
        }
    }

    /// Wants the DynamicWorkload with this uid gone (its last pod is).
    pub(crate) fn want_delete(&self, key: WorkloadKey, uid: String) {
        let mut state = self.state();
        state.records.pending.remove(&key);
        state.records.written.remove(&key);
        state.workload_statuses.pending.remove(&key);
        state.workload_statuses.written.remove(&key);
        if state.deletes.insert(key, uid.clone()).as_ref() != Some(&uid) {
            drop(state);
            self.inner.wake.notify_one();
        }
    }

    /// Writes rounds of what is wanted until `shutdown`, at most one round per `min_interval`.
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.inner.wake.notified() => {}
            }
            let started = Instant::now();
            self.round().await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until((started + self.inner.min_interval).into()) => {}
            }
        }
    }

    /// One round: records first (a status needs its object), then deletions, then statuses.
    async fn round(&self) {
        let (records, deletes, workload_statuses, queue_statuses) = {
            let mut state = self.state();
            (
                std::mem::take(&mut state.records.pending),
                std::mem::take(&mut state.deletes),
                std::mem::take(&mut state.workload_statuses.pending),
                std::mem::take(&mut state.queue_statuses.pending),
            )
        };
        let concurrency = self.inner.concurrency;
        let client = &self.inner.client;

        stream::iter(records)
            .for_each_concurrent(concurrency, |(key, body)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match api.patch(&key.name, &params, &Patch::Apply(&body)).await {
                    Ok(_) => {
                        self.state().records.written.insert(key, (body, Instant::now()));
                    }
                    Err(e) => warn!(%e, workload = %key, "could not record DynamicWorkload; the next pass retries"),
                }
            })
            .await;

        stream::iter(deletes)
            .for_each_concurrent(concurrency, |(key, uid)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                // Only the object the pass saw: a workload re-created meanwhile stays.
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&key.name, &params).await {
                    Ok(_) => debug!(workload = %key, "deleted: its last pod is gone"),
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                    Err(e) => warn!(%e, workload = %key, "could not delete DynamicWorkload; the next pass retries"),
                }
            })
            .await;

        stream::iter(workload_statuses)
            .for_each_concurrent(concurrency, |(key, status)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let body = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload", "status": &status});
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match api.patch_status(&key.name, &params, &Patch::Apply(body)).await {
                    Ok(_) => {
                        self.inner.metrics.status_writes.inc();
                        self.state().workload_statuses.written.insert(key, (status, Instant::now()));
                    }
                    Err(e) => debug!(%e, workload = %key, "status not written; the next pass retries"),
                }
            })
            .await;

        stream::iter(queue_statuses)
            .for_each_concurrent(concurrency, |(name, status)| async move {
                let api: Api<CapacityQueue> = Api::all(client.clone());
                let body = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "status": &status});
                let params = PatchParams::apply(FIELD_MANAGER).force();
                match api.patch_status(&name, &params, &Patch::Apply(body)).await {
                    Ok(_) => {
                        self.inner.metrics.status_writes.inc();
                        self.state().queue_statuses.written.insert(name, (status, Instant::now()));
                    }
                    Err(e) => debug!(%e, queue = %name, "status not written; the next pass retries"),
                }
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wanted_value_is_news_only_when_it_differs_from_the_newest_known() {
        let mut slot: Slot<&str, u32> = Slot::new();
        // Nothing known: news.
        assert!(slot.want("a", 1, None));
        // The same again before it is sent: not news, still one pending write.
        assert!(!slot.want("a", 1, None));
        // A newer value replaces the pending one: one write, the newest.
        assert!(slot.want("a", 2, None));
        assert_eq!(slot.pending.len(), 1);
        assert_eq!(slot.pending.get("a"), Some(&2));
    }

    #[test]
    fn a_written_value_is_believed_over_the_watch_until_the_watch_shows_it() {
        let mut slot: Slot<&str, u32> = Slot::new();
        slot.written.insert("a", (2, Instant::now()));
        // The watch still shows the old value 1: the write wins, so 2 is not news.
        assert_eq!(slot.newest(&"a", Some(&1)), Some(2));
        assert!(!slot.want("a", 2, Some(&1)));
        // The watch shows 2: the written entry is forgotten.
        assert_eq!(slot.newest(&"a", Some(&2)), Some(2));
        assert!(slot.written.is_empty());
        // Going back to what the watch shows is news again.
        assert!(slot.want("a", 1, Some(&2)));
    }

    #[test]
    fn a_write_too_old_to_trust_gives_way_to_the_watch() {
        let mut slot: Slot<&str, u32> = Slot::new();
        let Some(long_ago) = Instant::now().checked_sub(TRUST_WRITTEN_FOR + Duration::from_secs(1))
        else {
            return; // a clock this young cannot express the case
        };
        slot.written.insert("a", (2, long_ago));
        assert_eq!(slot.newest(&"a", Some(&1)), Some(1));
        assert!(slot.want("a", 2, Some(&1)));
    }
}
