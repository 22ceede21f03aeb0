//! What a pass asks the writer to write: DynamicWorkloads recorded for workloads without an object
//! (plain pods, spark-submit), and the workloads' and queues' statuses.

use std::collections::{HashMap, HashSet};

use kube::ResourceExt;
use serde_json::json;

use super::Controller;
use crate::api::{PodSetSpec, RECORDED_FROM_LABEL};
use crate::queue::admission::{Decisions, PodState, WorkloadSnapshot};
use crate::queue::announcer::{self};
use crate::queue::clock::now_rfc3339;
use crate::queue::evictor::{self};
use crate::queue::ready;
use crate::queue::snapshot::{self, Built};
use crate::queue::status::{self, WorkloadView};
use crate::resources::ResourceList;

impl Controller {
    /// The DynamicWorkloads' records and statuses this pass wants: those of the groups it decided
    /// (`decided`, per workload; None: all), of workloads whose writes failed, and of those a
    /// preemption concerns (its record is kept, its status shows it, apart from any decision). A
    /// group whose decisions were reused has the statuses it had.
    pub(super) fn want_records_and_statuses(
        &self,
        built: &Built,
        decisions: &Decisions,
        decided: Option<&[bool]>,
    ) {
        let terminating = self.terminating_namespaces();
        let preemptions = self.evictor.for_statuses();
        let retry = self.writer.take_failed();
        let look_at = |w: usize| {
            let key = &built.snapshot.workloads[w].key;
            decided.is_none_or(|d| d.get(w).copied().unwrap_or(true))
                || retry.contains(key)
                || preemptions.preempted.contains_key(key)
                || preemptions.held.contains_key(key)
        };
        self.record_workloads(built, &terminating, &preemptions, &look_at);
        self.want_workload_statuses(built, decisions, &terminating, &preemptions, &look_at);
    }

    /// Namespaces being deleted: their DynamicWorkloads go with them, so writing their records or
    /// statuses would only race the namespace's own clean-up (one failed write per workload).
    fn terminating_namespaces(&self) -> HashSet<String> {
        self.stores
            .namespaces
            .state()
            .iter()
            .filter(|ns| ns.metadata.deletion_timestamp.is_some())
            .map(|ns| ns.name_any())
            .collect()
    }

    fn queue_names(&self) -> HashSet<String> {
        (self.stores.queues.state().iter())
            .map(|q| q.name_any())
            .collect()
    }

    /// Records (or deletes) the DynamicWorkload of every workload seen only through its pods.
    /// A workload preempted whole keeps its record until its status shows the preemption
    /// (`preemptions`), even when its last pod is gone.
    fn record_workloads(
        &self,
        built: &Built,
        terminating: &HashSet<String>,
        preemptions: &evictor::ForStatuses,
        look_at: &dyn Fn(usize) -> bool,
    ) {
        let queues = self.queue_names();
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            // A part of a workload in another queue (snapshot::stray_part_key) has no ledger.
            if !look_at(w)
                || terminating.contains(&workload.key.namespace)
                || snapshot::stray_part_of(&workload.key).is_some()
            {
                continue;
            }
            let existing = built.workloads[w].as_ref();
            // A ledger is recorded only for a queue that exists and admits the namespace.
            if existing.is_none()
                && !(workload.namespace_allowed && queues.contains(&workload.queue))
            {
                continue;
            }
            if existing.is_some_and(|d| d.spec.source.is_some()) {
                continue; // recorded from an application object: its recorder owns the spec
            }
            if workload.pod_sets.iter().all(|s| s.pods.is_empty()) {
                // A workload recorded from pods goes when its last pod is gone.
                if let Some(d) = existing
                    && !preemptions.keeps(&workload.key)
                    && d.labels().get(RECORDED_FROM_LABEL).map(String::as_str) == Some("pods")
                    && let Some(uid) = d.uid()
                {
                    self.writer.want_delete(workload.key.clone(), uid);
                }
                continue;
            }
            let pod_sets: Vec<PodSetSpec> = workload
                .pod_sets
                .iter()
                .map(|s| PodSetSpec {
                    name: s.name.clone(),
                    requests: s.per_pod.to_quantities(),
                    min_count: i32::try_from(s.min_count).unwrap_or(i32::MAX),
                    max_count: None,
                })
                .collect();
            if pod_sets.is_empty() {
                continue;
            }
            // The common case, cheaply: the ledger already says what the pods say.
            if let Some(d) = existing
                && d.spec.pod_sets == pod_sets
                && d.spec.queue_name == workload.queue
                && d.spec.priority == workload.priority
            {
                self.writer.record_settled(&workload.key);
                continue;
            }
            let body = |queue: &str, priority: i32, pod_sets: &[PodSetSpec]| {
                json!({
                    "apiVersion": "sluice.dev/v1alpha1",
                    "kind": "DynamicWorkload",
                    "metadata": {
                        "name": workload.key.name,
                        "namespace": workload.key.namespace,
                        "labels": {RECORDED_FROM_LABEL: "pods", "app.kubernetes.io/managed-by": "sluice"},
                    },
                    "spec": {"queueName": queue, "priority": priority, "podSets": pod_sets},
                })
            };
            let seen =
                existing.map(|d| body(&d.spec.queue_name, d.spec.priority, &d.spec.pod_sets));
            self.writer.want_record(
                workload.key.clone(),
                body(&workload.queue, workload.priority, &pod_sets),
                seen.as_ref(),
            );
        }
    }

    fn want_workload_statuses(
        &self,
        built: &Built,
        decisions: &Decisions,
        terminating: &HashSet<String>,
        preemptions: &evictor::ForStatuses,
        look_at: &dyn Fn(usize) -> bool,
    ) {
        let now = now_rfc3339();
        let limits = ready::rules(&self.stores.queues.state());
        let mut admitted: HashMap<usize, HashSet<(usize, usize)>> = HashMap::new();
        for r in &decisions.admit {
            admitted
                .entry(r.workload)
                .or_default()
                .insert((r.pod_set, r.pod));
        }
        let none = HashSet::new();
        for (w, workload) in built.snapshot.workloads.iter().enumerate() {
            // A part of a workload in another queue (snapshot::stray_part_key) has no ledger.
            if !look_at(w)
                || terminating.contains(&workload.key.namespace)
                || snapshot::stray_part_of(&workload.key).is_some()
            {
                continue;
            }
            // A workload seen only through its pods is recorded in the same round of writes,
            // before its status: it shows a status as soon as it exists.
            let seen = match &built.workloads[w] {
                Some(dwl) => dwl.status.as_ref(),
                None if workload.pod_sets.iter().any(|s| !s.pods.is_empty()) => None,
                None => continue,
            };
            let preempted = preemptions.preempted.get(&workload.key);
            if preempted.is_some() {
                let seen_by = seen.and_then(|s| s.last_preempted_by.as_deref());
                let seen_at = seen.and_then(|s| s.preempted_at.as_deref());
                self.evictor.recorded(&workload.key, seen_by, seen_at);
            }
            let newer = self.writer.newer_workload_status(&workload.key, seen);
            let old = newer.as_ref().or(seen);
            let mut view = WorkloadView {
                preempted,
                held: preemptions.held.get(&workload.key).map(String::as_str),
                ..WorkloadView::of(built, w)
            };
            // Sent back more often than its queue's requeueLimit: Failed, as an application that
            // failed (its gated pods were left out of the pass).
            let limit = limits.get(&workload.queue).and_then(|(_, l)| *l);
            let exhausted = limit.is_some_and(|l| ready::requeues(old, preempted) > l);
            if view.ended.is_none() && exhausted {
                view.ended = Some(crate::api::ApplicationEnd::Failed);
                view.requeue_exhausted = true;
            }
            let status = status::workload_status(
                &view,
                &decisions.workloads[w],
                admitted.get(&w).unwrap_or(&none),
                old,
                &now,
            );
            let ends = (view.requeue_exhausted, view.ended.is_some());
            announcer::announce(&self.announcer, built, decisions, w, ends, &status, old);
            if old != Some(&status) {
                self.writer
                    .want_workload_status(workload.key.clone(), status, seen);
            }
        }
    }

    pub(super) fn want_queue_statuses(&self, decisions: &Decisions) {
        let now = now_rfc3339();
        for q in self.stores.queues.state() {
            let name = q.name_any();
            let seen = q.status.as_ref();
            let old = self.writer.queue_status(&name, seen);
            let mut status = status::queue_status(
                decisions.queues.get(&name),
                old.as_ref(),
                q.metadata.generation,
                &now,
            );
            status.usage_summary = status::usage_summary(&status::summary_quota(&q.spec), &status);
            if old.as_ref() != Some(&status) {
                self.writer.want_queue_status(name, status, seen);
            }
        }
    }
}

/// What a preemptor waits for, described for people: the requests of its pods behind the gate.
pub(super) fn pending_requests(workload: &WorkloadSnapshot) -> String {
    let mut total = ResourceList::new();
    let gated = workload.pod_sets.iter().flat_map(|s| &s.pods);
    for pod in gated.filter(|p| p.state == PodState::Gated) {
        total.add_all(&pod.requests);
    }
    total.describe(
        |name, amount| format!("{amount} {name}"),
        "room for its pods",
    )
}
