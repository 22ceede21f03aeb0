//! Writes what admission passes conclude, off the admission path: DynamicWorkload records, their
//! statuses and CapacityQueue statuses.
//!
//! A pass only says what it wants each object to look like and goes on; this writer sends it. What
//! a pass wants replaces what an earlier pass wanted and was not sent yet (one write, the newest),
//! and rounds of writes are at least `min_interval` apart, so a workload whose pods change many
//! times a second costs at most one status write per interval; a change of wording only (a waiting
//! workload's message follows every pod of its queue) waits ten intervals, and a workload whose
//! admitted pods have not started yet waits up to five for them to start (pods on a free node start
//! within seconds: one write then says Running instead of two saying Admitted, then Running). A value being sent
//! counts as known, so a pass never asks for the same write twice. Nothing is lost by this: the
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
    WorkloadPhase,
};
use crate::metrics::ControllerMetrics;
use crate::queue::admission::WorkloadKey;
use crate::queue::clock::API_CALL_TIMEOUT;

/// How long a write this writer made is believed over an older value the watch still shows.
/// Past it, the watch's value wins again (someone else may have written since).
const TRUST_WRITTEN_FOR: Duration = Duration::from_secs(30);
/// A change of wording only (see [`same_but_for_wording`]) waits this many status intervals after
/// the object's last write.
const LAZY_INTERVALS: u32 = 10;
/// A status expected to pass soon (see [`settling`]) waits at most this many status intervals from
/// when it was first wanted.
const SETTLE_INTERVALS: u32 = 5;

/// Wanted values not yet sent, being sent, and sent (the watch may not show them yet).
struct Slot<K, V> {
    pending: HashMap<K, Wanted<V>>,
    sending: HashMap<K, V>,
    written: HashMap<K, (V, Instant)>,
    /// When each object was last written (kept after the watch caught up: lazy values wait on it).
    last_write: HashMap<K, Instant>,
}

/// A value wanted, and how long it may wait (see [`Writer::want_workload_status`]).
struct Wanted<V> {
    value: V,
    patience: Patience,
    /// When a value for this object was first wanted and not yet sent (a replacing value keeps
    /// it): a round short of write budget sends the longest-waiting first.
    since: Instant,
}

/// How long a wanted value may wait before a round sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    /// Sent by the next round.
    Urgent,
    /// Waits until its object was last written the lazy interval ago (a change of wording only).
    Lazy,
    /// Waits until this instant at most: a state expected to pass soon, whose successor would be
    /// written instead of it.
    Until(Instant),
}

impl Patience {
    /// The patience of a value that replaces an unsent one of patience `earlier`: it may wait only
    /// as long as both may (a deadline never moves later, an urgent value stays urgent).
    fn and(self, earlier: Patience) -> Patience {
        use Patience::*;
        match (self, earlier) {
            (Urgent, _) | (_, Urgent) => Urgent,
            (Until(a), Until(b)) => Until(a.min(b)),
            (Until(t), Lazy) | (Lazy, Until(t)) => Until(t),
            (Lazy, Lazy) => Lazy,
        }
    }
}

impl<K: Eq + Hash + Clone, V: PartialEq + Clone> Slot<K, V> {
    fn new() -> Self {
        Slot {
            pending: HashMap::new(),
            sending: HashMap::new(),
            written: HashMap::new(),
            last_write: HashMap::new(),
        }
    }

    /// The newest value known for `key`: wanted and not yet sent, else being sent, else sent
    /// recently, else what the watch shows (`seen`).
    fn newest(&mut self, key: &K, seen: Option<&V>) -> Option<V> {
        if let Some(wanted) = self.pending.get(key) {
            return Some(wanted.value.clone());
        }
        if let Some(value) = self.sending.get(key) {
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

    /// The newest value for `key` when it is not what the watch shows (`seen`): wanted, being
    /// sent, or sent and not yet shown. None: `seen` is the newest (no copy made).
    fn newer_than_seen(&mut self, key: &K, seen: Option<&V>) -> Option<V> {
        if self.pending.is_empty() && self.sending.is_empty() && self.written.is_empty() {
            return None;
        }
        self.newest(key, seen).filter(|v| seen != Some(v))
    }

    /// Records that `value` is wanted; returns whether that is news (a write is due). A value that
    /// replaces an unsent one may wait only as long as both may (see [`Patience::and`]).
    fn want(&mut self, key: K, value: V, seen: Option<&V>, patience: Patience) -> bool {
        if self.newest(&key, seen).as_ref() == Some(&value) {
            return false;
        }
        let (patience, since) = match self.pending.get(&key) {
            Some(earlier) => (patience.and(earlier.patience), earlier.since),
            None => (patience, Instant::now()),
        };
        self.pending.insert(
            key,
            Wanted {
                value,
                patience,
                since,
            },
        );
        true
    }

    /// Takes what is due for a round, at most `limit` values, those waiting longest first:
    /// everything urgent, lazy values whose object was last written `lazy_interval` ago or more
    /// (or never), and values whose deadline has come. They count as being sent from now on; the
    /// rest stay wanted (a newer value replaces one still waiting: one write instead of two).
    fn take_due(&mut self, lazy_interval: Duration, limit: usize) -> Vec<(K, V)> {
        self.last_write.retain(|_, at| at.elapsed() < lazy_interval);
        let last_write = &self.last_write;
        let now = Instant::now();
        let mut due: Vec<(Instant, K)> = self
            .pending
            .iter()
            .filter(|(key, wanted)| match wanted.patience {
                Patience::Urgent => true,
                Patience::Lazy => !last_write.contains_key(*key),
                Patience::Until(deadline) => deadline <= now,
            })
            .map(|(key, wanted)| (wanted.since, key.clone()))
            .collect();
        if due.len() > limit {
            due.select_nth_unstable_by_key(limit, |(since, _)| *since);
            due.truncate(limit);
        }
        due.into_iter()
            .map(|(_, key)| key)
            .filter_map(|key| {
                let wanted = self.pending.remove(&key)?;
                self.sending.insert(key.clone(), wanted.value.clone());
                Some((key, wanted.value))
            })
            .collect()
    }

    /// The write of `key` ended: remembered as written when it succeeded; forgotten when it
    /// failed, so that the next pass wants it again.
    fn sent(&mut self, key: K, ok: bool) {
        if let Some(value) = self.sending.remove(&key)
            && ok
        {
            self.last_write.insert(key.clone(), Instant::now());
            self.written.insert(key, (value, Instant::now()));
        }
    }
}

/// How many DynamicWorkload status writes a round may send: a token bucket refilled at
/// `per_second`, holding at most one second's worth. Statuses are the ledger's bulk (a few per
/// workload), each a write the API server pays for; under a burst of workloads the bucket runs
/// dry and statuses wait, the newest replacing older ones (often one write per workload's start).
struct WriteBudget {
    /// 0: no limit.
    per_second: f64,
    tokens: f64,
    refilled: Instant,
}

impl WriteBudget {
    fn new(per_second: f64) -> Self {
        let per_second = if per_second.is_finite() && per_second > 0.0 {
            per_second
        } else {
            0.0
        };
        WriteBudget {
            per_second,
            tokens: per_second.max(1.0),
            refilled: Instant::now(),
        }
    }

    /// Writes the budget allows now.
    fn available(&mut self) -> usize {
        if self.per_second == 0.0 {
            return usize::MAX;
        }
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.per_second.max(1.0));
        self.refilled = now;
        self.tokens.floor() as usize
    }

    fn spend(&mut self, writes: usize) {
        if self.per_second != 0.0 {
            self.tokens = (self.tokens - writes as f64).max(0.0);
        }
    }
}

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
            } else if settling(&status) {
                Patience::Until(Instant::now() + self.inner.min_interval * SETTLE_INTERVALS)
            } else {
                Patience::Urgent
            };
            state.workload_statuses.want(key, status, seen, patience)
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
            .want(name, status, seen, Patience::Urgent)
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
        if state.records.want(key, body, seen, Patience::Urgent) {
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

    /// Writes rounds of what is wanted until `shutdown`, at most one round per `min_interval`.
    pub(crate) async fn run(self, shutdown: CancellationToken) {
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
                _ = tokio::time::sleep_until((started + self.inner.min_interval).into()) => {}
            }
        }
    }

    /// One round: records first (a status needs its object), then deletions, then statuses.
    /// Returns whether lazy writes were left for a later round.
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
        let lazy_interval = self.inner.min_interval * LAZY_INTERVALS;
        let mut state = self.state();
        state
            .deleted
            .retain(|_, at| at.elapsed() < TRUST_WRITTEN_FOR);
        let budget = state.status_budget.available();
        let workload_statuses = state.workload_statuses.take_due(lazy_interval, budget);
        state.status_budget.spend(workload_statuses.len());
        Due {
            records: state.records.take_due(lazy_interval, usize::MAX),
            deletes: std::mem::take(&mut state.deletes),
            workload_statuses,
            queue_statuses: state.queue_statuses.take_due(lazy_interval, usize::MAX),
        }
    }

    async fn write_records(&self, records: Vec<(WorkloadKey, serde_json::Value)>) {
        let client = &self.inner.client;
        stream::iter(records)
            .for_each_concurrent(self.inner.concurrency, |(key, body)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let result = bounded(api.patch(&key.name, &params, &Patch::Apply(&body))).await;
                if let Err(e) = &result {
                    warn!(%e, workload = %key, "could not record DynamicWorkload; the next pass retries");
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
                }
            })
            .await;
    }

    async fn write_workload_statuses(&self, statuses: Vec<(WorkloadKey, DynamicWorkloadStatus)>) {
        let client = &self.inner.client;
        stream::iter(statuses)
            .for_each_concurrent(self.inner.concurrency, |(key, status)| async move {
                let api: Api<DynamicWorkload> = Api::namespaced(client.clone(), &key.namespace);
                let body = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload", "status": &status});
                let params = PatchParams::apply(FIELD_MANAGER).force();
                let result = bounded(api.patch_status(&key.name, &params, &Patch::Apply(body))).await;
                match &result {
                    Ok(_) => {
                        self.inner.metrics.status_writes.inc();
                    }
                    Err(e) => debug!(%e, workload = %key, "status not written; the next pass retries"),
                }
                self.state().workload_statuses.sent(key, result.is_ok());
            })
            .await;
    }

    async fn write_queue_statuses(&self, statuses: Vec<(String, CapacityQueueStatus)>) {
        let client = &self.inner.client;
        stream::iter(statuses)
            .for_each_concurrent(self.inner.concurrency, |(name, status)| async move {
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
    records: Vec<(WorkloadKey, serde_json::Value)>,
    deletes: HashMap<WorkloadKey, String>,
    workload_statuses: Vec<(WorkloadKey, DynamicWorkloadStatus)>,
    queue_statuses: Vec<(String, CapacityQueueStatus)>,
}

/// Whether a status describes a moment expected to pass within seconds: admitted pods starting
/// (quota given, some pods not running yet), none waiting behind the gate, none ended. Its
/// successor (more pods running, then all) would replace it, so it may wait a little for that:
/// one write for a workload's start instead of one per status interval while its pods come up
/// (the first of them at most a few seconds late). The quota it holds is in the queue's status
/// (written at once) whatever this one waits for.
fn settling(status: &DynamicWorkloadStatus) -> bool {
    matches!(
        status.phase,
        WorkloadPhase::Admitted | WorkloadPhase::Running
    ) && status.pending_pods == 0
        && status.pod_sets.iter().any(|s| s.admitted > 0)
        && status
            .pod_sets
            .iter()
            .all(|s| s.finished == 0 && s.pending == 0)
}

/// Whether two statuses differ only in their wording and amounts (message, conditions' messages,
/// used, reserved): what a waiting workload's status does whenever anything in its queue moves.
fn same_but_for_wording(old: &DynamicWorkloadStatus, new: &DynamicWorkloadStatus) -> bool {
    let conditions = |s: &DynamicWorkloadStatus| -> Vec<(String, String, String, String)> {
        s.conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    format!("{:?}", c.status),
                    c.reason.clone(),
                    c.last_transition_time.clone(),
                )
            })
            .collect()
    };
    old.phase == new.phase
        && old.pod_sets == new.pod_sets
        && old.pending_pods == new.pending_pods
        && old.admitted_pods == new.admitted_pods
        && old.interrupted_count == new.interrupted_count
        && old.last_preempted_by == new.last_preempted_by
        && old.preempted_at == new.preempted_at
        && old.admitted_at == new.admitted_at
        && old.finished_at == new.finished_at
        && old.pod_set_summary == new.pod_set_summary
        && conditions(old) == conditions(new)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wanted_value_is_news_only_when_it_differs_from_the_newest_known() {
        let mut slot: Slot<&str, u32> = Slot::new();
        // Nothing known: news.
        assert!(slot.want("a", 1, None, Patience::Urgent));
        // The same again before it is sent: not news, still one pending write.
        assert!(!slot.want("a", 1, None, Patience::Urgent));
        // A newer value replaces the pending one: one write, the newest.
        assert!(slot.want("a", 2, None, Patience::Urgent));
        assert_eq!(slot.pending.len(), 1);
        assert_eq!(slot.pending.get("a").map(|w| w.value), Some(2));
    }

    #[test]
    fn a_written_value_is_believed_over_the_watch_until_the_watch_shows_it() {
        let mut slot: Slot<&str, u32> = Slot::new();
        slot.written.insert("a", (2, Instant::now()));
        // The watch still shows the old value 1: the write wins, so 2 is not news.
        assert_eq!(slot.newest(&"a", Some(&1)), Some(2));
        assert!(!slot.want("a", 2, Some(&1), Patience::Urgent));
        // The watch shows 2: the written entry is forgotten.
        assert_eq!(slot.newest(&"a", Some(&2)), Some(2));
        assert!(slot.written.is_empty());
        // Going back to what the watch shows is news again.
        assert!(slot.want("a", 1, Some(&2), Patience::Urgent));
    }

    #[test]
    fn a_value_being_sent_is_not_wanted_again() {
        let mut slot: Slot<&str, u32> = Slot::new();
        assert!(slot.want("a", 1, None, Patience::Urgent));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("a", 1)]
        );
        // The watch does not show it yet and the write has not answered: not news.
        assert!(!slot.want("a", 1, None, Patience::Urgent));
        slot.sent("a", true);
        assert!(!slot.want("a", 1, None, Patience::Urgent));
        // A failed write is forgotten: the next pass wants it again.
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("a", 2)]
        );
        slot.sent("a", false);
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent));
    }

    #[test]
    fn a_lazy_change_waits_for_its_interval_an_urgent_one_does_not() {
        let mut slot: Slot<&str, u32> = Slot::new();
        assert!(slot.want("a", 1, None, Patience::Urgent));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("a", 1)]
        );
        slot.sent("a", true);
        // The watch shows the write; then only the wording changes.
        assert!(slot.want("a", 2, Some(&1), Patience::Lazy));
        assert!(
            slot.take_due(Duration::from_secs(10), usize::MAX)
                .is_empty(),
            "written just now: waits"
        );
        // An urgent change on top makes the whole write urgent.
        assert!(slot.want("a", 3, Some(&1), Patience::Urgent));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("a", 3)]
        );
        // Never written: a lazy value goes at once.
        assert!(slot.want("b", 1, None, Patience::Lazy));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("b", 1)]
        );
    }

    #[test]
    fn a_settling_value_waits_for_its_deadline_or_gives_way_to_its_successor() {
        let mut slot: Slot<&str, u32> = Slot::new();
        let soon = Instant::now() + Duration::from_secs(60);
        // Admitted, pods not started: may wait until the deadline.
        assert!(slot.want("a", 1, None, Patience::Until(soon)));
        assert!(
            slot.take_due(Duration::from_secs(10), usize::MAX)
                .is_empty()
        );
        // The pods started: the successor goes at once, and only it (one write, not two).
        assert!(slot.want("a", 2, None, Patience::Urgent));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("a", 2)]
        );
        // A deadline that has come is due.
        let Some(past) = Instant::now().checked_sub(Duration::from_millis(1)) else {
            return;
        };
        assert!(slot.want("b", 1, None, Patience::Until(past)));
        assert_eq!(
            slot.take_due(Duration::from_secs(10), usize::MAX),
            vec![("b", 1)]
        );
    }

    #[test]
    fn a_replacing_value_never_waits_longer_than_the_one_it_replaces() {
        let now = Instant::now();
        let (early, late) = (now + Duration::from_secs(1), now + Duration::from_secs(9));
        use Patience::*;
        assert_eq!(Until(late).and(Until(early)), Until(early));
        assert_eq!(Until(early).and(Until(late)), Until(early));
        assert_eq!(Lazy.and(Until(early)), Until(early));
        assert_eq!(Until(early).and(Lazy), Until(early));
        assert_eq!(Until(early).and(Urgent), Urgent);
        assert_eq!(Urgent.and(Lazy), Urgent);
        assert_eq!(Lazy.and(Lazy), Lazy);
    }

    fn status(
        phase: WorkloadPhase,
        admitted: i32,
        running: i32,
        pending: i32,
    ) -> DynamicWorkloadStatus {
        DynamicWorkloadStatus {
            phase,
            admitted_pods: admitted + running,
            pending_pods: pending,
            pod_sets: vec![crate::api::PodSetStatus {
                name: "workers".into(),
                pending,
                admitted,
                running,
                finished: 0,
            }],
            ..DynamicWorkloadStatus::default()
        }
    }

    #[test]
    fn only_workloads_whose_admitted_pods_are_still_starting_are_settling() {
        assert!(settling(&status(WorkloadPhase::Admitted, 4, 0, 0)));
        // Some pods of the workload run, the others are starting: the next status says more run.
        assert!(settling(&status(WorkloadPhase::Running, 2, 2, 0)));
        // All run: nothing left to wait for.
        assert!(!settling(&status(WorkloadPhase::Running, 0, 4, 0)));
        // Someone waits behind the gate: the user wants to see why, now.
        assert!(!settling(&status(WorkloadPhase::Admitted, 2, 0, 2)));
        assert!(!settling(&status(WorkloadPhase::Running, 2, 2, 1)));
        assert!(!settling(&status(WorkloadPhase::Pending, 0, 0, 4)));
        // Quota reserved for a gang not created yet: nothing will start by itself.
        assert!(!settling(&status(WorkloadPhase::Admitted, 0, 0, 0)));
        // A pod ended: worth saying now (it may have failed).
        let mut ended = status(WorkloadPhase::Running, 2, 1, 0);
        ended.pod_sets[0].finished = 1;
        assert!(!settling(&ended));
    }

    #[test]
    fn a_preemption_is_never_a_change_of_wording_only() {
        let old = status(WorkloadPhase::Running, 0, 2, 0);
        let mut reworded = old.clone();
        reworded.message = "other words".into();
        assert!(same_but_for_wording(&old, &reworded));
        let mut preempted = old.clone();
        preempted.interrupted_count = 1;
        preempted.last_preempted_by = Some("ns/urgent".into());
        preempted.preempted_at = Some("2026-01-01T00:00:00Z".into());
        assert!(!same_but_for_wording(&old, &preempted));
        let mut by_another = preempted.clone();
        by_another.last_preempted_by = Some("ns/other".into());
        assert!(!same_but_for_wording(&preempted, &by_another));
    }

    #[test]
    fn a_round_short_of_budget_sends_the_longest_waiting_and_keeps_the_rest() {
        let mut slot: Slot<&str, u32> = Slot::new();
        for key in ["a", "b", "c", "d"] {
            assert!(slot.want(key, 1, None, Patience::Urgent));
            std::thread::sleep(Duration::from_millis(2));
        }
        // "a" changes again before its turn: it keeps its place (the time it was first wanted)
        // and only its newest value is written.
        assert!(slot.want("a", 2, None, Patience::Urgent));
        let mut first = slot.take_due(Duration::from_secs(10), 2);
        first.sort();
        assert_eq!(first, vec![("a", 2), ("b", 1)]);
        assert_eq!(slot.pending.len(), 2);
        let mut rest = slot.take_due(Duration::from_secs(10), usize::MAX);
        rest.sort();
        assert_eq!(rest, vec![("c", 1), ("d", 1)]);
        // No budget: nothing is sent, nothing is lost.
        assert!(slot.want("e", 1, None, Patience::Urgent));
        assert!(slot.take_due(Duration::from_secs(10), 0).is_empty());
        assert_eq!(slot.pending.len(), 1);
    }

    #[test]
    fn the_write_budget_refills_at_its_rate_up_to_one_second_of_writes() {
        let mut unlimited = WriteBudget::new(0.0);
        assert_eq!(unlimited.available(), usize::MAX);
        unlimited.spend(1_000_000);
        assert_eq!(unlimited.available(), usize::MAX);

        let mut budget = WriteBudget::new(20.0);
        assert_eq!(budget.available(), 20);
        budget.spend(20);
        assert_eq!(budget.available(), 0);
        // Half a second later, about half a second's worth (never more than one second's).
        budget.refilled -= Duration::from_millis(500);
        assert_eq!(budget.available(), 10);
        budget.refilled -= Duration::from_secs(60);
        assert_eq!(budget.available(), 20);
        // Below one write per second, a write still comes through now and then.
        let mut slow = WriteBudget::new(0.5);
        assert_eq!(slow.available(), 1);
        slow.spend(1);
        assert_eq!(slow.available(), 0);
        slow.refilled -= Duration::from_secs(2);
        assert_eq!(slow.available(), 1);
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
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent));
    }
}
