//! The dashboard's views, built from the cached CapacityQueues and DynamicWorkloads for one viewer:
//! pure, so what a tenant may see is decided (and unit-tested) here, never in the browser.
//!
//! A namespace user sees the workloads of the namespaces they may list, the queues that admit one
//! of those namespaces (their totals, as `kubectl get cq` shows them), and nothing that names a
//! workload of another namespace: a preemptor of another namespace is "a workload of another
//! namespace".

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use serde::Serialize;

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::kubectl_plugin::report::{duration, estimate};
use crate::queue::snapshot::selector_matches;
use crate::queue::status::summary_quota;
use crate::resources::{ResourceList, format_quantity};

/// The most waiting rows sent to a page: its memory stays bounded at any scale (the total is sent).
pub const MAX_WAITING_ROWS: usize = 500;

/// The window of admissions the wait estimate counts (as `kubectl sluice why`).
pub const ESTIMATE_WINDOW_S: i64 = 3600;

/// What one viewer may see.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "namespaces")]
pub enum Scope {
    /// May list DynamicWorkloads cluster-wide: everything.
    All,
    /// Only these namespaces' workloads and the queues that admit one of them.
    Namespaces(BTreeSet<String>),
}

impl Scope {
    pub fn sees_namespace(&self, namespace: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(set) => set.contains(namespace),
        }
    }

    /// Whether `queue` is one of this viewer's: it admits one of their namespaces.
    pub fn sees_queue(
        &self,
        queue: &CapacityQueue,
        labels: &dyn Fn(&str) -> Option<BTreeMap<String, String>>,
    ) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(set) => set.iter().any(|ns| match &queue.spec.namespace_selector {
                None => true,
                Some(selector) => labels(ns).is_some_and(|l| selector_matches(selector, &l)),
            }),
        }
    }
}

/// What took a workload's pods back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EvictionKind {
    /// A workload of higher priority of the same queue.
    #[default]
    Preemption,
    /// A queue of the cohort took back the quota the victim's queue had borrowed.
    Reclaim,
    /// Its own admitted pods did not all run within the queue's `podsReadyTimeout`.
    Requeue,
}

impl EvictionKind {
    /// The kind of the eviction recorded at `status.preemptedAt`: a requeue when `requeuedAt` is
    /// the same instant, a reclaim when the `Preempted` condition says `CohortReclaim`.
    pub fn of(status: &crate::api::DynamicWorkloadStatus) -> EvictionKind {
        if status.requeued_at.is_some() && status.requeued_at == status.preempted_at {
            return EvictionKind::Requeue;
        }
        let preempted = status.conditions.iter().find(|c| c.type_ == "Preempted");
        match preempted {
            Some(c) if c.reason == "CohortReclaim" => EvictionKind::Reclaim,
            _ => EvictionKind::Preemption,
        }
    }
}

/// A preemption, reclaim or requeue the dashboard saw (a workload's `status.preemptedAt` moved).
#[derive(Clone, Debug, PartialEq)]
pub struct Preemption {
    /// RFC 3339.
    pub at: String,
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub kind: EvictionKind,
    /// `namespace/name` of the preemptor, as the victim's status names it.
    pub by: Option<String>,
    pub interruption: i32,
    /// Why, as the victim's `Preempted` (or `Requeued`) condition says it.
    pub why: String,
    /// The victim's status message right after.
    pub message: String,
}

/// One bar: a resource of a queue, in milli-units, with the texts shown.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Bar {
    pub resource: String,
    pub quota: i64,
    pub used: i64,
    pub reserved: i64,
    pub borrowed: i64,
    pub lent: i64,
    /// e.g. `used 3 + reserved 1 of 4 (borrowed 0)`.
    pub text: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRow {
    pub name: String,
    pub cohort: Option<String>,
    pub strategy: String,
    pub bars: Vec<Bar>,
    pub pending_workloads: i32,
    pub admitted_workloads: i32,
    pub pending_pods: i32,
    pub admitted_pods: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortRow {
    pub name: String,
    /// The viewer's queues of the cohort.
    pub queues: Vec<String>,
    /// The cohort's pool: the sum of its queues' quotas and usage.
    pub pool: Vec<Bar>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingRow {
    pub queue: String,
    pub position: i32,
    pub namespace: String,
    pub name: String,
    pub priority: i32,
    pub pending_pods: i32,
    /// How long it waits, when the view was built; the page counts from `queued_since`.
    pub age: String,
    pub queued_since: Option<String>,
    pub reason: String,
    /// Why it waits, in words (its status message).
    pub message: String,
    pub estimate: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRow {
    pub at: String,
    pub namespace: String,
    pub name: String,
    pub queue: String,
    pub kind: EvictionKind,
    pub by: String,
    pub interruption: i32,
    pub why: String,
    pub message: String,
}

/// Everything the live page shows but a workload's details and the history.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateView {
    pub queues: Vec<QueueRow>,
    pub cohorts: Vec<CohortRow>,
    pub waiting: Vec<WaitingRow>,
    pub waiting_total: usize,
    pub preemptions: Vec<PreemptionRow>,
}

/// The cached objects a view is built from.
pub struct Inputs<'a> {
    pub queues: &'a [Arc<CapacityQueue>],
    pub workloads: &'a [Arc<DynamicWorkload>],
    pub preemptions: &'a [Preemption],
    pub labels: &'a dyn Fn(&str) -> Option<BTreeMap<String, String>>,
    pub now: jiff::Timestamp,
}

/// The view of `inputs` that `scope` may see.
pub fn state_view(inputs: &Inputs, scope: &Scope) -> StateView {
    let mut queues: Vec<&CapacityQueue> = inputs
        .queues
        .iter()
        .map(|q| q.as_ref())
        .filter(|q| scope.sees_queue(q, inputs.labels))
        .collect();
    queues.sort_by_key(|q| q.name_any());
    let (waiting, waiting_total) = waiting_rows(inputs, scope);
    StateView {
        cohorts: cohort_rows(inputs.queues, &queues),
        queues: queues.iter().map(|q| queue_row(q)).collect(),
        waiting,
        waiting_total,
        preemptions: preemption_rows(inputs.preemptions, scope),
    }
}

fn milli(map: &BTreeMap<String, Quantity>) -> ResourceList {
    ResourceList::from_quantities(map).unwrap_or_default()
}

fn bar(resource: &str, quota: i64, used: i64, reserved: i64, borrowed: i64, lent: i64) -> Bar {
    let f = |v| format_quantity(resource, v);
    let mut text = format!(
        "used {} + reserved {} of {}",
        f(used),
        f(reserved),
        f(quota)
    );
    if borrowed > 0 {
        text.push_str(&format!(", borrowed {}", f(borrowed)));
    }
    if lent > 0 {
        text.push_str(&format!(", lent {}", f(lent)));
    }
    Bar {
        resource: resource.to_string(),
        quota,
        used,
        reserved,
        borrowed,
        lent,
        text,
    }
}

fn queue_row(q: &CapacityQueue) -> QueueRow {
    let status = q.status.clone().unwrap_or_default();
    // A queue with flavors: one bar per flavor and resource (`a100:nvidia.com/gpu`).
    let (quota, used, reserved) = (
        milli(&summary_quota(&q.spec)),
        milli(&status.usage),
        milli(&status.reserved),
    );
    let (borrowed, lent) = (milli(&status.borrowed), milli(&status.lent));
    QueueRow {
        name: q.name_any(),
        cohort: q.spec.cohort.clone(),
        strategy: format!("{:?}", q.spec.queueing_strategy),
        bars: quota
            .0
            .keys()
            .map(|r| {
                bar(
                    r,
                    quota.get(r),
                    used.get(r),
                    reserved.get(r),
                    borrowed.get(r),
                    lent.get(r),
                )
            })
            .collect(),
        pending_workloads: status.pending_workloads,
        admitted_workloads: status.admitted_workloads,
        pending_pods: status.pending_pods,
        admitted_pods: status.admitted_pods,
    }
}

/// The cohorts of the visible queues; the pool counts every member (totals, no names).
fn cohort_rows(all: &[Arc<CapacityQueue>], visible: &[&CapacityQueue]) -> Vec<CohortRow> {
    let names: BTreeSet<&str> = visible
        .iter()
        .filter_map(|q| q.spec.cohort.as_deref())
        .collect();
    names
        .into_iter()
        .map(|cohort| {
            let (mut quota, mut used, mut reserved) = (
                ResourceList::new(),
                ResourceList::new(),
                ResourceList::new(),
            );
            for q in all
                .iter()
                .filter(|q| q.spec.cohort.as_deref() == Some(cohort))
            {
                let status = q.status.clone().unwrap_or_default();
                quota.add_all(&milli(&summary_quota(&q.spec)));
                used.add_all(&milli(&status.usage));
                reserved.add_all(&milli(&status.reserved));
            }
            CohortRow {
                name: cohort.to_string(),
                queues: visible
                    .iter()
                    .filter(|q| q.spec.cohort.as_deref() == Some(cohort))
                    .map(|q| q.name_any())
                    .collect(),
                pool: quota
                    .0
                    .keys()
                    .map(|r| bar(r, quota.get(r), used.get(r), reserved.get(r), 0, 0))
                    .collect(),
            }
        })
        .collect()
}

fn seconds(rfc3339: Option<&str>) -> Option<i64> {
    rfc3339?
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

/// The visible workloads with a position, in admission order per queue (queues by name), the
/// first [`MAX_WAITING_ROWS`], and how many there are.
fn waiting_rows(inputs: &Inputs, scope: &Scope) -> (Vec<WaitingRow>, usize) {
    let visible: Vec<&DynamicWorkload> = inputs
        .workloads
        .iter()
        .map(|w| w.as_ref())
        .filter(|w| scope.sees_namespace(&w.namespace().unwrap_or_default()))
        .collect();
    // Admissions per queue (of the visible workloads): the estimate's turnover.
    let mut admitted: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for w in &visible {
        if let Some(at) = seconds(w.status.as_ref().and_then(|s| s.admitted_at.as_deref())) {
            admitted.entry(&w.spec.queue_name).or_default().push(at);
        }
    }
    let mut rows: Vec<(&DynamicWorkload, i32)> = visible
        .iter()
        .filter_map(|w| Some((*w, w.status.as_ref()?.position?)))
        .collect();
    let total = rows.len();
    rows.sort_by(|(a, pa), (b, pb)| {
        (&a.spec.queue_name, pa, a.namespace(), a.name_any()).cmp(&(
            &b.spec.queue_name,
            pb,
            b.namespace(),
            b.name_any(),
        ))
    });
    rows.truncate(MAX_WAITING_ROWS);
    let whose = match scope {
        Scope::All => "the cluster",
        Scope::Namespaces(_) => "your namespaces",
    };
    let now = inputs.now.as_second();
    let out = rows
        .into_iter()
        .map(|(w, position)| {
            let status = w.status.clone().unwrap_or_default();
            let queue = w.spec.queue_name.clone();
            let turnover = admitted.get(queue.as_str()).map_or(&[][..], |v| v);
            let guess = estimate(position, &queue, turnover, now, ESTIMATE_WINDOW_S, whose);
            WaitingRow {
                position,
                namespace: w.namespace().unwrap_or_default(),
                name: w.name_any(),
                priority: w.spec.priority,
                pending_pods: status.pending_pods,
                age: seconds(status.queued_since.as_deref())
                    .map_or_else(|| "-".into(), |at| duration(now - at)),
                queued_since: status.queued_since.clone(),
                reason: status.reason.clone().unwrap_or_default(),
                message: redact(&status.message, scope),
                estimate: guess
                    .seconds
                    .map_or_else(|| "unknown".into(), |s| format!("~{}", duration(s))),
                queue,
            }
        })
        .collect();
    (out, total)
}

/// Preemptor shown only when the viewer may see its namespace.
pub fn preemptor_for(by: Option<&str>, scope: &Scope) -> String {
    match by {
        None => "unknown".into(),
        Some(by) => match by.split_once('/') {
            Some((ns, _)) if scope.sees_namespace(ns) => by.to_string(),
            _ => "a workload of another namespace".into(),
        },
    }
}

fn preemption_rows(preemptions: &[Preemption], scope: &Scope) -> Vec<PreemptionRow> {
    preemptions
        .iter()
        .rev()
        .filter(|p| scope.sees_namespace(&p.namespace))
        .map(|p| preemption_row(p, scope))
        .collect()
}

/// One eviction as `scope` may see it (the caller has checked it sees the victim's namespace).
pub fn preemption_row(p: &Preemption, scope: &Scope) -> PreemptionRow {
    PreemptionRow {
        at: p.at.clone(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        queue: p.queue.clone(),
        kind: p.kind,
        by: match p.kind {
            EvictionKind::Requeue => "its own pods not running in time".into(),
            _ => preemptor_for(p.by.as_deref(), scope),
        },
        interruption: p.interruption,
        why: redact(&p.why, scope),
        message: redact(&p.message, scope),
    }
}

/// `2`, `1500m`, `4Gi,`: a figure of a ratio such as `2/2 cpu used`, not a workload's name.
fn quantity_like(text: &str) -> bool {
    let text = text.trim_end_matches(|c: char| ",.;:)]}".contains(c));
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// `text` with every `namespace/name` of a namespace the viewer may not see replaced: a status
/// message may name another namespace's workload (the blocker of a StrictFIFO queue, a preemptor).
/// A namespace is a DNS label (no dots), so `nvidia.com/gpu` and `sluice.dev/queue` stay.
pub fn redact(text: &str, scope: &Scope) -> String {
    if matches!(scope, Scope::All) {
        return text.to_string();
    }
    let is_label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let start = word.trim_start_matches(|c: char| "([{'\"`".contains(c));
        let hidden = start.split_once('/').is_some_and(|(ns, name)| {
            is_label(ns) && !scope.sees_namespace(ns) && !(quantity_like(ns) && quantity_like(name))
        });
        if hidden {
            out.push_str(&word[..word.len() - start.len()]);
            out.push_str("<a workload of another namespace>");
            let tail = start.trim_end_matches(|c: char| ",.;:)]}'\"`".contains(c));
            out.push_str(&start[tail.len()..]);
        } else {
            out.push_str(word);
        }
    }
    out
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
