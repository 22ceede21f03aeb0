//! Writes what admission passes conclude, off the admission path: DynamicWorkload records, their
//! statuses and CapacityQueue statuses.
//!
//! A pass only says what it wants each object to look like and goes on; this writer sends it. What
//! a pass wants replaces what an earlier pass wanted and was not sent yet (one write, the newest).
//! Rounds of writes follow each other a quarter of `min_interval` apart at most, and one status is
//! written at most once per `min_interval`, so a workload whose pods change many times a second
//! costs at most one status write per interval, and a change to a status not written within the
//! interval goes out within a quarter of it (statuses keep up with their pods: issue 24); a change
//! of wording only (a waiting workload's message follows every pod of its queue) waits ten
//! intervals, and a round sends a few of those at most, the oldest first
//! ([`LAZY_WRITES_PER_ROUND`]). A DynamicWorkload status is sent as a JSON merge patch of what
//! changed since the value the API server holds (what this writer wrote, else what the watch shows; see
//! [`merge_patch`]): no write when nothing did, and a small body the API server merges without a
//! server-side apply's field-by-field work. A value being sent counts as known, so a pass never
//! asks for the same write twice. Nothing is lost by this: the cluster stays the source of truth,
//! and a write that fails is wanted again by the next pass (which compares with what the watch
//! shows).

use std::collections::{HashMap, HashSet};
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
use crate::queue::clock::API_CALL_TIMEOUT;

mod patch;
mod slot;
#[cfg(test)]
mod tests;

use patch::{same_but_for_wording, status_patch};
use slot::{
    LAZY_INTERVALS, LAZY_WRITES_PER_ROUND, Patience, ROUNDS_PER_INTERVAL, Send, Slot, Spacing,
    TRUST_WRITTEN_FOR, WriteBudget,
};

struct State {
    records: Slot<WorkloadKey, serde_json::Value>,
    deletes: HashMap<WorkloadKey, String>,
    /// uids of DynamicWorkloads deleted (or found gone) recently, not to be deleted twice.
    deleted: HashMap<String, Instant>,
    workload_statuses: Slot<WorkloadKey, DynamicWorkloadStatus>,
    status_budget: WriteBudget,
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
        status_writes_per_second: f64,
    ) -> Self {
        Writer {
            inner: Arc::new(Inner {
                client,
                metrics,
                state: Mutex::new(State {
                    records: Slot::new(),
                    deletes: HashMap::new(),
                    deleted: HashMap::new(),
                    workload_statuses: Slot::new(),
                    status_budget: WriteBudget::new(status_writes_per_second),
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

    /// The newest status known for a workload when it is newer than what the watch shows (`seen`);
    /// None when `seen` is the newest. What a pass builds on.
    /// The workloads whose record, status or deletion failed since the last call: the next pass
    /// looks at them again (an incremental pass would otherwise wait for a change of theirs).
    pub(crate) fn take_failed(&self) -> HashSet<WorkloadKey> {
        let mut state = self.state();
        let mut failed = std::mem::take(&mut state.records.failed);
        failed.extend(std::mem::take(&mut state.workload_statuses.failed));
        // Queue statuses are computed at every pass: nothing to name.
        state.queue_statuses.failed.clear();
        failed
    }

    pub(crate) fn newer_workload_status(
        &self,
        key: &WorkloadKey,
        seen: Option<&DynamicWorkloadStatus>,
    ) -> Option<DynamicWorkloadStatus> {
        self.state().workload_statuses.newer_than_seen(key, seen)
    }

    /// The ledger recorded from pods already says what the pods say: nothing of an earlier pass
    /// still waiting to be sent is wanted any more.
    pub(crate) fn record_settled(&self, key: &WorkloadKey) {
        let mut state = self.state();
        if !state.records.pending.is_empty() {
            state.records.pending.remove(key);
        }
        // The watch shows what was written: a later change by anyone else is a change to undo,
        // not a lagging watch to outwait.
        if !state.records.written.is_empty() {
            state.records.written.remove(key);
        }
    }

    pub(crate) fn want_workload_status(
        &self,
        key: WorkloadKey,
        status: DynamicWorkloadStatus,
        seen: Option<&DynamicWorkloadStatus>,
    ) {
        let news = {
            let mut state = self.state();
            let wording_only = state
                .workload_statuses
                .newest(&key, seen)
                .is_some_and(|old| same_but_for_wording(&old, &status));
            let patience = if wording_only {
                // Only the message and the amounts changed (a waiting workload's "needs 1 cpu
                // more" follows every pod of its queue): that may wait for the lazy interval.
                Patience::Lazy
            } else {
                Patience::Urgent
            };
            let first = status.pending_pods > 0;
            state
                .workload_statuses
                .want(key, status, seen, patience, first)
        };
        if news {
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
        if self
            .state()
            .queue_statuses
            .want(name, status, seen, Patience::Urgent, false)
        {
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
        if state.records.want(key, body, seen, Patience::Urgent, false) {
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
        state.workload_statuses.last_write.remove(&key);
        if state.deleted.contains_key(&uid) {
            return; // asked already; the watch has not shown it gone yet
        }
        if state.deletes.insert(key, uid.clone()).as_ref() != Some(&uid) {
            drop(state);
            self.inner.wake.notify_one();
        }
    }

    /// Writes rounds of what is wanted until `shutdown`, at most one round per quarter of
    /// `min_interval` (see [`ROUNDS_PER_INTERVAL`]).
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let round_interval = self.inner.min_interval / ROUNDS_PER_INTERVAL;
        let mut waiting_lazily = false;
        loop {
            if !waiting_lazily {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = self.inner.wake.notified() => {}
                }
            }
            let started = Instant::now();
            waiting_lazily = self.round().await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until((started + round_interval).into()) => {}
            }
        }
    }

    /// One round: records first (a status needs its object), then deletions, then statuses.
    /// Returns whether writes were left for a later round (waiting for their spacing or budget).
    async fn round(&self) -> bool {
        let due = self.take_due();
        self.write_records(due.records).await;
        self.delete_workloads(due.deletes).await;
        self.write_workload_statuses(due.workload_statuses).await;
        self.write_queue_statuses(due.queue_statuses).await;
        let state = self.state();
        self.inner
            .metrics
            .status_writes_pending
            .set(state.workload_statuses.pending.len() as i64);
        !state.records.pending.is_empty()
            || !state.workload_statuses.pending.is_empty()
            || !state.queue_statuses.pending.is_empty()
    }

    /// Takes what this round sends, under the lock: workload statuses within the write budget,
    /// everything else that is due.
    fn take_due(&self) -> Due {
        let lazy = self.inner.min_interval * LAZY_INTERVALS;
        // A status once per interval at most; a record (a status needs it) at once.
        let statuses = Spacing {
            urgent: self.inner.min_interval,
            lazy,
            lazy_limit: LAZY_WRITES_PER_ROUND,
        };
        let records = Spacing {
            urgent: Duration::ZERO,
            lazy,
            lazy_limit: usize::MAX,
        };
        // Queue statuses are few (one per queue): their wording is not rationed.
        let queues = Spacing {
            lazy_limit: usize::MAX,
            ..statuses
        };
        let mut state = self.state();
        state
            .deleted
            .retain(|_, at| at.elapsed() < TRUST_WRITTEN_FOR);
        let budget = state.status_budget.available();
        let workload_statuses = state.workload_statuses.take_due(statuses, budget);
        state.status_budget.spend(workload_statuses.len());
        Due {
            records: state.records.take_due(records, usize::MAX),
            deletes: std::mem::take(&mut state.deletes),
            workload_statuses,
            queue_statuses: state.queue_statuses.take_due(queues, usize::MAX),
        }
    }

    async fn write_records(&self, records: Vec<Send<WorkloadKey, serde_json::Value>>) {
        let client = &self.inner.client;
        stream::iter(records)
            .for_each_concurrent(self.inner.concurrency, |Send { key, value: body, .. }| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let result = bounded(api.patch(&key.name, &params, &Patch::Apply(&body))).await;
                match &result {
                    Err(e) if crate::namespaces::is_namespace_terminating(e) => {
                        debug!(workload = %key, "not recorded: its namespace is being deleted");
                    }
                    Err(e) => {
                        warn!(%e, workload = %key, "could not record DynamicWorkload; the next pass retries");
                    }
                    Ok(_) => {}
                }
                self.state().records.sent(key, result.is_ok());
            })
            .await;
    }

    async fn delete_workloads(&self, deletes: HashMap<WorkloadKey, String>) {
        let client = &self.inner.client;
        stream::iter(deletes)
            .for_each_concurrent(self.inner.concurrency, |(key, uid)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                // Only the object the pass saw: a workload re-created meanwhile stays.
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let done = match bounded(api.delete(&key.name, &params)).await {
                    Ok(_) => {
                        debug!(workload = %key, "deleted: its last pod is gone");
                        true
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => true,
                    Err(e) => {
                        warn!(%e, workload = %key, "could not delete DynamicWorkload; the next pass retries");
                        false
                    }
                };
                if done {
                    self.state().deleted.insert(uid, Instant::now());
                } else {
                    self.state().records.failed.insert(key);
                }
            })
            .await;
    }

    /// Each status as a merge patch of what changed since the value the API server holds (none
    /// when nothing did).
    async fn write_workload_statuses(
        &self,
        statuses: Vec<Send<WorkloadKey, DynamicWorkloadStatus>>,
    ) {
        let client = &self.inner.client;
        stream::iter(statuses)
            .for_each_concurrent(self.inner.concurrency, |send| async move {
                let Send { key, value, base } = send;
                let Some(patch) = status_patch(base.as_ref(), &value) else {
                    self.state().workload_statuses.sent(key, true);
                    return;
                };
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PatchParams::default()
                };
                let body = json!({ "status": patch });
                let result =
                    bounded(api.patch_status(&key.name, &params, &Patch::Merge(body))).await;
                match &result {
                    Ok(_) => {
                        self.inner.metrics.status_writes.inc();
                    }
                    Err(e) => {
                        debug!(%e, workload = %key, "status not written; the next pass retries")
                    }
                }
                self.state().workload_statuses.sent(key, result.is_ok());
            })
            .await;
    }

    async fn write_queue_statuses(&self, statuses: Vec<Send<String, CapacityQueueStatus>>) {
        let client = &self.inner.client;
        stream::iter(statuses)
            .for_each_concurrent(self.inner.concurrency, |Send { key: name, value: status, .. }| async move {
                let api: Api<CapacityQueue> = Api::all(client.clone());
                let body = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "status": &status});
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let result = bounded(api.patch_status(&name, &params, &Patch::Apply(body))).await;
                match &result {
                    Ok(_) => {
                        self.inner.metrics.status_writes.inc();
                    }
                    Err(e) => debug!(%e, queue = %name, "status not written; the next pass retries"),
                }
                self.state().queue_statuses.sent(name, result.is_ok());
            })
            .await;
    }
}

/// What one round sends.
struct Due {
    records: Vec<Send<WorkloadKey, serde_json::Value>>,
    deletes: HashMap<WorkloadKey, String>,
    workload_statuses: Vec<Send<WorkloadKey, DynamicWorkloadStatus>>,
    queue_statuses: Vec<Send<String, CapacityQueueStatus>>,
}

/// An API call bounded by [`API_CALL_TIMEOUT`]: a call the API server never answers (kube's client
/// sets no read timeout) fails like any other and is retried by a later round, instead of
/// stalling the writer for good.
async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    match tokio::time::timeout(API_CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {API_CALL_TIMEOUT:?}"),
        )))),
    }
}
