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
use crate::queue::clock::API_CALL_TIMEOUT;

/// How long a write this writer made is believed over an older value the watch still shows.
/// Past it, the watch's value wins again (someone else may have written since).
const TRUST_WRITTEN_FOR: Duration = Duration::from_secs(30);
/// A change of wording only (see [`same_but_for_wording`]) waits this many status intervals after
/// the object's last write.
const LAZY_INTERVALS: u32 = 10;
/// DynamicWorkload statuses changed in wording only that one round sends at most (20 a second at
/// the default interval). With thousands of workloads waiting, each one's "needs 1 cpu more …"
/// followed every pod of its queue every lazy interval: 183,328 status writes for 15,152 workloads
/// in Kueue's suite (BENCHMARKS.md), the API server's largest load. The oldest go first; a change
/// of phase or counts is urgent and never waits on this.
const LAZY_WRITES_PER_ROUND: usize = 5;
/// Rounds of writes per status interval at most: a change waits for the next round (a quarter of
/// the interval here), not for the interval, unless its object was written within the interval.
const ROUNDS_PER_INTERVAL: u32 = 4;

/// Wanted values not yet sent, being sent, and sent (the watch may not show them yet).
struct Slot<K, V> {
    pending: HashMap<K, Wanted<V>>,
    sending: HashMap<K, V>,
    written: HashMap<K, (V, Instant)>,
    /// When each object was last written (kept after the watch caught up: lazy values wait on it).
    last_write: HashMap<K, Instant>,
    /// Objects whose write failed since the controller last asked ([`Writer::take_failed`]): an
    /// incremental pass looks at them again even if nothing of theirs changed.
    failed: HashSet<K>,
}

/// A value wanted, and how long it may wait (see [`Writer::want_workload_status`]).
struct Wanted<V> {
    value: V,
    patience: Patience,
    /// When a value for this object was first wanted and not yet sent (a replacing value keeps
    /// it): a round short of write budget sends the longest-waiting first.
    since: Instant,
    /// Goes before the others in a round short of write budget (a workload with pods waiting
    /// behind the gate: the status a user looks at).
    first: bool,
    /// What the watch showed when it was wanted: what the API server holds, unless this writer
    /// wrote since (see [`Slot::take_due`]).
    seen: Option<V>,
}

/// What a round sends of one object: the value, and the value the API server is believed to hold
/// (the base of a merge patch).
struct Send<K, V> {
    key: K,
    value: V,
    base: Option<V>,
}

/// How long a wanted value may wait before a round sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    /// Sent by the next round once its object was last written the spacing ago (or never).
    Urgent,
    /// Waits until its object was last written the lazy interval ago (a change of wording only).
    Lazy,
}

impl Patience {
    /// The patience of a value that replaces an unsent one of patience `earlier`: it may wait only
    /// as long as both may (an urgent value stays urgent).
    fn and(self, earlier: Patience) -> Patience {
        match (self, earlier) {
            (Patience::Lazy, Patience::Lazy) => Patience::Lazy,
            _ => Patience::Urgent,
        }
    }
}

/// How far apart a round's writes of one object are, at least.
#[derive(Clone, Copy, Debug)]
struct Spacing {
    /// An urgent value waits until its object was last written this long ago.
    urgent: Duration,
    /// A lazy value (a change of wording only) waits until its object was last written this long ago.
    lazy: Duration,
    /// Lazy values a round takes at most (the oldest wanted first).
    lazy_limit: usize,
}

impl<K: Eq + Hash + Clone, V: PartialEq + Clone> Slot<K, V> {
    fn new() -> Self {
        Slot {
            pending: HashMap::new(),
            sending: HashMap::new(),
            written: HashMap::new(),
            last_write: HashMap::new(),
            failed: HashSet::new(),
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
    /// replaces an unsent one may wait only as long as both may (see [`Patience::and`]); `first`:
    /// it goes before the others when a round is short of budget.
    fn want(
        &mut self,
        key: K,
        value: V,
        seen: Option<&V>,
        patience: Patience,
        first: bool,
    ) -> bool {
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
                first,
                seen: seen.cloned(),
            },
        );
        true
    }

    /// Takes what is due for a round, at most `limit` values, those of workloads with pods waiting
    /// first, then those waiting longest: urgent values and lazy ones whose object was last written
    /// the spacing ago or more (or never). They count as being sent from now on; the rest stay
    /// wanted (a newer value replaces one still waiting: one write instead of two). Each comes with
    /// the value the API server is believed to hold: the one this writer wrote last (while
    /// trusted), else what the watch showed.
    fn take_due(&mut self, spacing: Spacing, limit: usize) -> Vec<Send<K, V>> {
        let keep = spacing.lazy.max(spacing.urgent);
        self.last_write.retain(|_, at| at.elapsed() < keep);
        let last_write = &self.last_write;
        let (mut due, mut lazy): (Vec<_>, Vec<_>) = self
            .pending
            .iter()
            .filter(|(key, wanted)| {
                let wait = match wanted.patience {
                    Patience::Urgent => spacing.urgent,
                    Patience::Lazy => spacing.lazy,
                };
                last_write.get(*key).is_none_or(|at| at.elapsed() >= wait)
            })
            .map(|(key, wanted)| ((!wanted.first, wanted.since), key.clone(), wanted.patience))
            .partition(|(_, _, patience)| *patience == Patience::Urgent);
        if lazy.len() > spacing.lazy_limit {
            lazy.select_nth_unstable_by_key(spacing.lazy_limit, |((_, since), _, _)| *since);
            lazy.truncate(spacing.lazy_limit);
        }
        due.append(&mut lazy);
        let mut due: Vec<((bool, Instant), K)> = due
            .into_iter()
            .map(|(order, key, _)| (order, key))
            .collect();
        if due.len() > limit {
            due.select_nth_unstable_by_key(limit, |(order, _)| *order);
            due.truncate(limit);
        }
        due.into_iter()
            .map(|(_, key)| key)
            .filter_map(|key| {
                let wanted = self.pending.remove(&key)?;
                let base = match self.written.get(&key) {
                    Some((value, at)) if at.elapsed() < TRUST_WRITTEN_FOR => Some(value.clone()),
                    _ => wanted.seen,
                };
                self.sending.insert(key.clone(), wanted.value.clone());
                Some(Send {
                    key,
                    value: wanted.value,
                    base,
                })
            })
            .collect()
    }

    /// The write of `key` ended: remembered as written when it succeeded; forgotten when it
    /// failed, so that the next pass wants it again.
    fn sent(&mut self, key: K, ok: bool) {
        if self.sending.remove(&key).is_some_and(|value| {
            if ok {
                self.last_write.insert(key.clone(), Instant::now());
                self.written.insert(key.clone(), (value, Instant::now()));
            }
            !ok
        }) {
            self.failed.insert(key);
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

/// The merge patch (RFC 7386) of a DynamicWorkload status from `base`, the value the API server
/// holds, to `new`: the fields that changed, `null` for those gone (a map key as well as a field);
/// lists whole. None: nothing changed (nothing to write). Without a base, the whole status.
fn status_patch(
    base: Option<&DynamicWorkloadStatus>,
    new: &DynamicWorkloadStatus,
) -> Option<serde_json::Value> {
    let new = serde_json::to_value(new).ok()?;
    let base = base.and_then(|b| serde_json::to_value(b).ok());
    match base {
        Some(base) => merge_patch(&base, &new),
        None => Some(new),
    }
}

/// The JSON merge patch that turns `from` into `to` (RFC 7386: objects merged key by key, `null`
/// removes a key, anything else replaced whole); None when they are equal.
fn merge_patch(from: &serde_json::Value, to: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::Value;
    if from == to {
        return None;
    }
    let (Value::Object(from), Value::Object(to)) = (from, to) else {
        return Some(to.clone());
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in to {
        let change = match from.get(key) {
            // A null in `to` cannot be said by a merge patch (it removes): as gone.
            _ if value.is_null() => from.contains_key(key).then_some(Value::Null),
            Some(old) => merge_patch(old, value),
            None => Some(value.clone()),
        };
        if let Some(change) = change {
            patch.insert(key.clone(), change);
        }
    }
    for key in from.keys() {
        if !to.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
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
    use crate::api::WorkloadPhase;

    /// Spacing of the tests: urgent values at once, lazy ones after 10 s.
    const AT_ONCE: Spacing = Spacing {
        urgent: Duration::ZERO,
        lazy: Duration::from_secs(10),
        lazy_limit: usize::MAX,
    };

    /// What a round takes, as (key, value), sorted.
    fn take(
        slot: &mut Slot<&'static str, u32>,
        spacing: Spacing,
        limit: usize,
    ) -> Vec<(&'static str, u32)> {
        let mut taken: Vec<_> = slot
            .take_due(spacing, limit)
            .into_iter()
            .map(|s| (s.key, s.value))
            .collect();
        taken.sort();
        taken
    }

    #[test]
    fn a_wanted_value_is_news_only_when_it_differs_from_the_newest_known() {
        let mut slot: Slot<&str, u32> = Slot::new();
        // Nothing known: news.
        assert!(slot.want("a", 1, None, Patience::Urgent, false));
        // The same again before it is sent: not news, still one pending write.
        assert!(!slot.want("a", 1, None, Patience::Urgent, false));
        // A newer value replaces the pending one: one write, the newest.
        assert!(slot.want("a", 2, None, Patience::Urgent, false));
        assert_eq!(slot.pending.len(), 1);
        assert_eq!(slot.pending.get("a").map(|w| w.value), Some(2));
    }

    #[test]
    fn a_written_value_is_believed_over_the_watch_until_the_watch_shows_it() {
        let mut slot: Slot<&str, u32> = Slot::new();
        slot.written.insert("a", (2, Instant::now()));
        // The watch still shows the old value 1: the write wins, so 2 is not news.
        assert_eq!(slot.newest(&"a", Some(&1)), Some(2));
        assert!(!slot.want("a", 2, Some(&1), Patience::Urgent, false));
        // The watch shows 2: the written entry is forgotten.
        assert_eq!(slot.newest(&"a", Some(&2)), Some(2));
        assert!(slot.written.is_empty());
        // Going back to what the watch shows is news again.
        assert!(slot.want("a", 1, Some(&2), Patience::Urgent, false));
    }

    #[test]
    fn a_value_being_sent_is_not_wanted_again() {
        let mut slot: Slot<&str, u32> = Slot::new();
        assert!(slot.want("a", 1, None, Patience::Urgent, false));
        assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 1)]);
        // The watch does not show it yet and the write has not answered: not news.
        assert!(!slot.want("a", 1, None, Patience::Urgent, false));
        slot.sent("a", true);
        assert!(!slot.want("a", 1, None, Patience::Urgent, false));
        // A failed write is forgotten: the next pass wants it again.
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
        assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 2)]);
        slot.sent("a", false);
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
        // ... and is named to the controller, whose incremental pass looks at it again.
        assert!(slot.failed.contains("a"));
    }

    #[test]
    fn a_lazy_change_waits_for_its_interval_an_urgent_one_does_not() {
        let mut slot: Slot<&str, u32> = Slot::new();
        assert!(slot.want("a", 1, None, Patience::Urgent, false));
        assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 1)]);
        slot.sent("a", true);
        // The watch shows the write; then only the wording changes.
        assert!(slot.want("a", 2, Some(&1), Patience::Lazy, false));
        assert!(
            take(&mut slot, AT_ONCE, usize::MAX).is_empty(),
            "written just now: waits"
        );
        // An urgent change on top makes the whole write urgent.
        assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
        assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("a", 3)]);
        // Never written: a lazy value goes at once.
        assert!(slot.want("b", 1, None, Patience::Lazy, false));
        assert_eq!(take(&mut slot, AT_ONCE, usize::MAX), vec![("b", 1)]);
    }

    #[test]
    fn a_status_is_written_once_per_interval_at_most_and_at_once_after_a_quiet_one() {
        let spacing = Spacing {
            urgent: Duration::from_secs(60),
            lazy: Duration::from_secs(600),
            lazy_limit: usize::MAX,
        };
        let mut slot: Slot<&str, u32> = Slot::new();
        // Never written: goes at once, whatever the spacing.
        assert!(slot.want("a", 1, None, Patience::Urgent, false));
        assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("a", 1)]);
        slot.sent("a", true);
        // Changed again within the interval: waits for it (the newest value then, one write).
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
        assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
        assert!(take(&mut slot, spacing, usize::MAX).is_empty());
        // Another object is not held back by it.
        assert!(slot.want("b", 1, None, Patience::Urgent, false));
        assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("b", 1)]);
        // The interval has passed since "a" was written: its newest value goes.
        let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(61)) else {
            return; // a clock this young cannot express the case
        };
        slot.last_write.insert("a", long_ago);
        assert_eq!(take(&mut slot, spacing, usize::MAX), vec![("a", 3)]);
    }

    #[test]
    fn a_round_takes_few_changes_of_wording_only_the_oldest_first_and_every_urgent_one() {
        let spacing = Spacing {
            lazy_limit: 2,
            ..AT_ONCE
        };
        let mut slot: Slot<&str, u32> = Slot::new();
        let Some(start) = Instant::now().checked_sub(Duration::from_secs(10)) else {
            return; // a clock this young cannot express the case
        };
        for (age, key) in ["w1", "w2", "w3", "w4"].into_iter().enumerate() {
            assert!(slot.want(key, 1, None, Patience::Lazy, false));
            // Wanted one second apart, w1 first.
            if let Some(wanted) = slot.pending.get_mut(key) {
                wanted.since = start + Duration::from_secs(age as u64);
            }
        }
        assert!(slot.want("u1", 1, None, Patience::Urgent, false));
        assert!(slot.want("u2", 1, None, Patience::Urgent, false));
        // The urgent ones and the two oldest wording changes.
        assert_eq!(
            take(&mut slot, spacing, usize::MAX),
            vec![("u1", 1), ("u2", 1), ("w1", 1), ("w2", 1)]
        );
        // The others wait for the next rounds, nothing is lost.
        assert_eq!(
            take(&mut slot, spacing, usize::MAX),
            vec![("w3", 1), ("w4", 1)]
        );
        assert!(take(&mut slot, spacing, usize::MAX).is_empty());
    }

    #[test]
    fn a_replacing_value_stays_urgent_when_either_is() {
        use Patience::*;
        assert_eq!(Lazy.and(Urgent), Urgent);
        assert_eq!(Urgent.and(Lazy), Urgent);
        assert_eq!(Urgent.and(Urgent), Urgent);
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
    fn a_round_short_of_budget_sends_waiting_workloads_then_the_longest_waiting() {
        let mut slot: Slot<&str, u32> = Slot::new();
        for key in ["a", "b", "c", "d"] {
            assert!(slot.want(key, 1, None, Patience::Urgent, false));
            std::thread::sleep(Duration::from_millis(2));
        }
        // "a" changes again before its turn: it keeps its place (the time it was first wanted)
        // and only its newest value is written.
        assert!(slot.want("a", 2, None, Patience::Urgent, false));
        assert_eq!(take(&mut slot, AT_ONCE, 2), vec![("a", 2), ("b", 1)]);
        assert_eq!(slot.pending.len(), 2);
        // A workload with pods waiting behind the gate goes first, however new.
        assert!(slot.want("p", 1, None, Patience::Urgent, true));
        assert_eq!(take(&mut slot, AT_ONCE, 1), vec![("p", 1)]);
        assert_eq!(
            take(&mut slot, AT_ONCE, usize::MAX),
            vec![("c", 1), ("d", 1)]
        );
        // No budget: nothing is sent, nothing is lost.
        assert!(slot.want("e", 1, None, Patience::Urgent, false));
        assert!(take(&mut slot, AT_ONCE, 0).is_empty());
        assert_eq!(slot.pending.len(), 1);
    }

    #[test]
    fn a_round_sends_each_value_with_what_the_api_server_holds() {
        let mut slot: Slot<&str, u32> = Slot::new();
        // Never written by this writer: what the watch showed.
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
        let sent = slot.take_due(AT_ONCE, usize::MAX);
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].value, sent[0].base), (2, Some(1)));
        slot.sent("a", true);
        // Written, the watch not caught up: the written value is the base.
        assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
        let sent = slot.take_due(AT_ONCE, usize::MAX);
        assert_eq!((sent[0].value, sent[0].base), (3, Some(2)));
        // That write failed: the base is the watch's again.
        slot.sent("a", false);
        slot.written.clear();
        assert!(slot.want("a", 3, Some(&1), Patience::Urgent, false));
        let sent = slot.take_due(AT_ONCE, usize::MAX);
        assert_eq!((sent[0].value, sent[0].base), (3, Some(1)));
        // Nothing known: no base.
        assert!(slot.want("b", 1, None, Patience::Urgent, false));
        let sent = slot.take_due(AT_ONCE, usize::MAX);
        assert_eq!((sent[0].value, sent[0].base), (1, None));
    }

    #[test]
    fn a_merge_patch_carries_what_changed_and_removes_what_is_gone() {
        let from = json!({"phase": "Admitted", "message": "m", "used": {"cpu": "1", "memory": "1Gi"},
            "queuedSince": "t", "podSets": [{"name": "w", "running": 0}], "same": {"x": 1}});
        let to = json!({"phase": "Running", "message": "m", "used": {"cpu": "2"},
            "podSets": [{"name": "w", "running": 1}], "same": {"x": 1}, "admittedAt": "t2"});
        assert_eq!(
            merge_patch(&from, &to),
            Some(
                json!({"phase": "Running", "used": {"cpu": "2", "memory": null},
                "queuedSince": null, "podSets": [{"name": "w", "running": 1}], "admittedAt": "t2"})
            )
        );
        // Nothing changed: nothing to write.
        assert_eq!(merge_patch(&from, &from), None);
        // A null in the new value removes the field (it was there) or says nothing (it was not).
        assert_eq!(
            merge_patch(&json!({"a": 1}), &json!({"a": null, "b": null})),
            Some(json!({"a": null}))
        );
        // Not an object: replaced whole.
        assert_eq!(merge_patch(&json!({"a": 1}), &json!([1])), Some(json!([1])));
    }

    /// Applies a merge patch as RFC 7386 says (the API server's part), for the round trip below.
    fn apply(target: &mut serde_json::Value, patch: &serde_json::Value) {
        let (Some(target_map), Some(patch_map)) = (target.as_object_mut(), patch.as_object())
        else {
            *target = patch.clone();
            return;
        };
        for (key, value) in patch_map {
            if value.is_null() {
                target_map.remove(key);
            } else if value.is_object() && target_map.get(key).is_some_and(|t| t.is_object()) {
                if let Some(t) = target_map.get_mut(key) {
                    apply(t, value);
                }
            } else {
                target_map.insert(key.clone(), value.clone());
            }
        }
    }

    #[test]
    fn a_status_patch_applied_to_its_base_gives_the_new_status() {
        let mut old = status(WorkloadPhase::Pending, 0, 0, 4);
        old.queued_since = Some("2026-01-01T00:00:00Z".into());
        old.position = Some(3);
        old.used.insert(
            "memory".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
        );
        let mut new = status(WorkloadPhase::Running, 0, 4, 0);
        new.admitted_at = Some("2026-01-01T00:00:05Z".into());
        new.used.insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
        );
        new.message = "4 pod(s) admitted in queue q".into();
        let Some(patch) = status_patch(Some(&old), &new) else {
            panic!("the statuses differ: a patch is due");
        };
        // Small: only what changed.
        assert!(patch.get("interruptedCount").is_none(), "{patch}");
        let mut server = serde_json::to_value(&old).unwrap_or_default();
        apply(&mut server, &patch);
        assert_eq!(server, serde_json::to_value(&new).unwrap_or_default());
        // Unchanged: no write.
        assert_eq!(status_patch(Some(&new), &new), None);
        // No base (the first status): the whole of it.
        assert_eq!(status_patch(None, &new), serde_json::to_value(&new).ok());
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
        assert!(slot.want("a", 2, Some(&1), Patience::Urgent, false));
    }
}
