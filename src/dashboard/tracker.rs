//! What the dashboard remembers beyond the current objects, in memory and bounded: each workload's
//! recent states, the recent preemptions and reclaims, and each queue's usage over the last hours.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::dashboard::model::{EvictionKind, Preemption};
use crate::resources::ResourceList;

/// States kept per workload.
pub const STATES_PER_WORKLOAD: usize = 20;
/// Preemptions and reclaims kept (of all workloads).
pub const PREEMPTIONS_KEPT: usize = 200;
/// Preemptions, reclaims and requeues kept per workload.
pub const EVICTIONS_PER_WORKLOAD: usize = 20;

/// A workload's state as it changed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateChange {
    /// When the dashboard saw it (RFC 3339).
    pub at: String,
    pub phase: String,
    pub reason: String,
    pub position: Option<i32>,
    pub admitted_pods: i32,
    pub pending_pods: i32,
}

impl StateChange {
    fn of(w: &DynamicWorkload, at: &str) -> StateChange {
        let s = w.status.clone().unwrap_or_default();
        StateChange {
            at: at.to_string(),
            phase: format!("{:?}", s.phase),
            reason: s.reason.unwrap_or_default(),
            position: s.position,
            admitted_pods: s.admitted_pods,
            pending_pods: s.pending_pods,
        }
    }

    fn same_state(&self, other: &StateChange) -> bool {
        (
            &self.phase,
            &self.reason,
            self.position,
            self.admitted_pods,
            self.pending_pods,
        ) == (
            &other.phase,
            &other.reason,
            other.position,
            other.admitted_pods,
            other.pending_pods,
        )
    }
}

/// One sample of a queue's usage (milli-units per resource of its quota).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Unix seconds.
    pub t: i64,
    pub used: BTreeMap<String, i64>,
    pub reserved: BTreeMap<String, i64>,
    pub quota: BTreeMap<String, i64>,
}

/// The memory of the dashboard; every part bounded.
#[derive(Debug, Default)]
pub struct Tracker {
    states: HashMap<(String, String), VecDeque<StateChange>>,
    preempted_at: HashMap<(String, String), String>,
    /// Each workload's own preemptions, reclaims and requeues.
    evictions: HashMap<(String, String), VecDeque<Preemption>>,
    /// The recent preemptions and reclaims of all workloads (requeues are only the workload's).
    pub preemptions: VecDeque<Preemption>,
    pub history: BTreeMap<String, VecDeque<Sample>>,
}

fn key(w: &DynamicWorkload) -> (String, String) {
    (
        w.metadata.namespace.clone().unwrap_or_default(),
        w.metadata.name.clone().unwrap_or_default(),
    )
}

impl Tracker {
    /// A workload was seen (added or changed) at `now` (RFC 3339).
    pub fn saw(&mut self, w: &DynamicWorkload, now: &str) {
        let key = key(w);
        let change = StateChange::of(w, now);
        let states = self.states.entry(key.clone()).or_default();
        if states.back().is_none_or(|last| !last.same_state(&change)) {
            states.push_back(change);
            while states.len() > STATES_PER_WORKLOAD {
                states.pop_front();
            }
        }
        let Some(status) = &w.status else { return };
        let Some(at) = &status.preempted_at else {
            return;
        };
        let before = self.preempted_at.insert(key.clone(), at.clone());
        if before.as_ref() == Some(at) {
            return;
        }
        let kind = EvictionKind::of(status);
        let condition = match kind {
            EvictionKind::Requeue => "Requeued",
            _ => "Preempted",
        };
        let eviction = Preemption {
            at: at.clone(),
            namespace: key.0.clone(),
            name: key.1.clone(),
            queue: w.spec.queue_name.clone(),
            kind,
            by: status.last_preempted_by.clone(),
            interruption: status.interrupted_count,
            why: status
                .conditions
                .iter()
                .find(|c| c.type_ == condition)
                .map(|c| c.message.clone())
                .unwrap_or_default(),
            message: status.message.clone(),
        };
        let own = self.evictions.entry(key).or_default();
        push_bounded(own, eviction.clone(), EVICTIONS_PER_WORKLOAD);
        if kind != EvictionKind::Requeue {
            push_bounded(&mut self.preemptions, eviction, PREEMPTIONS_KEPT);
        }
    }

    /// A workload was deleted: its states go (its preemptions stay until pushed out).
    pub fn gone(&mut self, w: &DynamicWorkload) {
        let key = key(w);
        self.states.remove(&key);
        self.preempted_at.remove(&key);
        self.evictions.remove(&key);
    }

    /// The preemptions, reclaims and requeues of one workload seen, oldest first.
    pub fn evictions(&self, namespace: &str, name: &str) -> Vec<Preemption> {
        self.evictions
            .get(&(namespace.to_string(), name.to_string()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn states(&self, namespace: &str, name: &str) -> Vec<StateChange> {
        self.states
            .get(&(namespace.to_string(), name.to_string()))
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Samples every queue at `t` (unix seconds), keeping `keep` samples each; queues gone are
    /// forgotten.
    pub fn sample(&mut self, queues: &[std::sync::Arc<CapacityQueue>], t: i64, keep: usize) {
        let names: Vec<String> = queues
            .iter()
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        self.history.retain(|name, _| names.contains(name));
        for q in queues {
            let Some(name) = &q.metadata.name else {
                continue;
            };
            let status = q.status.clone().unwrap_or_default();
            let milli = |m| ResourceList::from_quantities(m).unwrap_or_default().0;
            let samples = self.history.entry(name.clone()).or_default();
            samples.push_back(Sample {
                t,
                used: milli(&status.usage),
                reserved: milli(&status.reserved),
                quota: milli(&q.spec.quota),
            });
            while samples.len() > keep.max(1) {
                samples.pop_front();
            }
        }
    }
}

/// Adds `p` in time order (a first listing brings them in any order), keeping the newest `keep`.
fn push_bounded(list: &mut VecDeque<Preemption>, p: Preemption, keep: usize) {
    list.push_back(p);
    list.make_contiguous().sort_by(|a, b| a.at.cmp(&b.at));
    while list.len() > keep {
        list.pop_front();
    }
}
