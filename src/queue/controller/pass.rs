//! One pass of the controller: the pure plan (`plan.rs`) run on the caches, then its decisions
//! started (ungates, evictions, records and statuses) and the room published for admission at
//! creation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::ObjectRef;
use tokio::time::Instant;
use tracing::{debug, info, info_span};

use super::plan::{self, PassInputs, PassPlan, PassWay, open_queues, plan_pass, still_waiting};
use super::ungate::prune_in_flight;
use super::{Controller, lock};
use crate::api::{CapacityQueue, DynamicWorkload};
use crate::metrics::{QueueLabels, QueueResourceLabels};
use crate::queue::admission::Decisions;
use crate::queue::at_creation::PassMark;
use crate::queue::pod_cache::CachedPod;
use crate::queue::ready;
use crate::queue::snapshot::{self, Built};
use crate::watch_store;

/// The nodes and the ungoverned pods bound to them (both empty when no gated pod asks for a
/// topology domain).
type NodesView = (
    Vec<Arc<k8s_openapi::api::core::v1::Node>>,
    Vec<Arc<crate::queue::bound_pods::BoundPod>>,
);

impl Controller {
    /// One admission pass; true when a pod still waits behind the gate afterwards (the next pass
    /// should follow the next change closely).
    pub(super) fn pass(&mut self) -> bool {
        let started = Instant::now();
        self.passes += 1;
        let _pass = info_span!("pass", pass = self.passes).entered();
        // The pod cache and what changed in it since the last pass, as one view.
        let (pods, pod_changes) = self.stores.pods.state_and_changes();
        let facts = self.pod_memo.refresh(&self.adapters, &pods);
        let in_flight = self.in_flight_now(&pods, started);
        self.evictor.prune(&pods, started);
        let queues = self.stores.queues.state();
        let flavors = self.stores.flavors.state();
        let (full, workloads, (nodes, bound_elsewhere)) =
            self.pass_way(&pods, &facts, pod_changes, started);
        let way = if full {
            PassWay::Full
        } else {
            PassWay::Incremental(&mut self.snapshotter)
        };
        let PassPlan {
            mark,
            holds,
            built,
            mut decisions,
            rules,
            decided,
        } = plan_pass(
            self.at_creation.as_deref(),
            PassInputs {
                queues: &queues,
                flavors: &flavors,
                workloads: &workloads,
                pods: &pods,
                facts: &facts,
                namespaces: &self.stores.namespaces.state(),
                nodes: &nodes,
                bound_elsewhere: &bound_elsewhere,
                data: &self.data,
                in_flight: &in_flight,
                eviction_blocked: &self.evictor.blocked_uids(),
            },
            started.into_std(),
            || self.evictor.for_statuses().preempted,
            way,
        );
        self.requeue_overdue(&rules, &built, &mut decisions);
        if let Some(mark) = mark {
            self.publish_room(mark, &queues, &built, &decisions);
        }
        self.check_overdue_holds();
        self.start_ungates(&built, &decisions);
        self.start_evictions(&built, &decisions, started);
        self.want_records_and_statuses(&built, &decisions, decided.as_deref());
        self.want_queue_statuses(&decisions);
        self.record_pass_metrics(&decisions, started);
        self.gauges.record(&self.metrics.queues, &built, &decisions);
        let waiting = still_waiting(&in_flight, &decisions);
        debug!(
            admitted = decisions.admit.len(),
            workloads = built.snapshot.workloads.len(),
            queues_with_holds = holds.len(),
            waiting,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "admission pass"
        );
        if decided.is_some() {
            // Lent by the snapshotter: the next pass reuses them.
            self.snapshotter.give_back(built, decisions);
        }
        waiting
    }

    /// Whether the pass is a full one, with the workloads it reads then, and the nodes and the
    /// ungoverned pods bound to them it reads (only when a gated pod asks for a topology domain:
    /// every queue is then decided in one pass over the nodes' shared room; the incremental state
    /// is still fed, for the passes after).
    fn pass_way(
        &mut self,
        pods: &[Arc<CachedPod>],
        facts: &[Option<Arc<snapshot::PodFacts>>],
        pod_changes: watch_store::Changes<CachedPod>,
        now: Instant,
    ) -> (bool, Vec<Arc<DynamicWorkload>>, NodesView) {
        let topology = plan::wants_topology(pods, facts);
        let full = self.settings.full_passes || topology;
        if !self.settings.full_passes {
            self.feed_snapshotter(pods, pod_changes, now);
        }
        let workloads = if full {
            self.stores.workloads.state()
        } else {
            Vec::new()
        };
        let nodes = if topology {
            (
                self.stores.nodes.state(),
                self.stores.bound_elsewhere.state(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        (full, workloads, nodes)
    }

    /// Tells the snapshotter what the watches changed since the last pass. Once per resync period
    /// (and at a term's first pass) everything is built and decided again, as at a restart: a
    /// change the incremental state missed cannot outlive that.
    fn feed_snapshotter(
        &mut self,
        pods: &[Arc<CachedPod>],
        pod_changes: watch_store::Changes<CachedPod>,
        now: Instant,
    ) {
        self.snapshotter.apply_pod_changes(pods, pod_changes);
        let noted = std::mem::take(&mut *lock(&self.stores.workload_changes));
        if noted.relisted {
            self.snapshotter
                .replace_workloads(&self.stores.workloads.state());
        } else {
            for key in noted.keys {
                let reference = ObjectRef::<DynamicWorkload>::new(&key.name).within(&key.namespace);
                match self.stores.workloads.get(&reference) {
                    Some(dwl) => self.snapshotter.put_workload(dwl),
                    None => self.snapshotter.remove_workload(&key),
                }
            }
        }
        if self.full_pass_due.is_none_or(|due| now >= due) {
            self.snapshotter.invalidate();
            self.full_pass_due = Some(now + self.settings.resync_period);
        }
    }

    /// podsReadyTimeout: the admitted pods of workloads whose pods did not all run in time join the
    /// pass's evictions, and the next time one falls due is kept for the wait between passes.
    fn requeue_overdue(
        &mut self,
        rules: &HashMap<String, (i64, Option<i32>)>,
        built: &Built,
        decisions: &mut Decisions,
    ) {
        if rules.is_empty() {
            self.ready_due = None;
            return;
        }
        let now = jiff::Timestamp::now().as_millisecond();
        let overdue = ready::overdue(built, rules, now);
        for (w, pods) in &overdue.workloads {
            let key = &built.snapshot.workloads[*w].key;
            info!(workload = %key, pods = pods.len(), "podsReadyTimeout: admitted pods not running in time are evicted");
        }
        ready::add_evictions(decisions, &overdue.workloads);
        self.ready_due = (overdue.next_due)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(|ms| std::time::UNIX_EPOCH + Duration::from_millis(ms));
    }

    /// The uids of pods whose ungate is in flight, once those the cache shows ungated or gone, and
    /// those whose outcome stayed unknown too long, are forgotten.
    fn in_flight_now(&self, pods: &[Arc<CachedPod>], now: Instant) -> snapshot::InFlight {
        let mut guard = self.ungater.lock_in_flight();
        let gated: HashSet<&str> = pods
            .iter()
            .filter(|p| snapshot::is_gated(p))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        prune_in_flight(&mut guard.pods, &gated, now);
        let mut in_flight = snapshot::InFlight::default();
        for (uid, entry) in &guard.pods {
            in_flight.insert(uid.clone(), entry.pins.clone());
        }
        in_flight
    }

    /// Tells the webhook in this process the room each queue has left after this pass, for
    /// admission at creation; nothing once the term is over.
    fn publish_room(
        &self,
        mark: PassMark,
        queues: &[Arc<CapacityQueue>],
        built: &Built,
        decisions: &Decisions,
    ) {
        let Some(at_creation) = &self.at_creation else {
            return;
        };
        let open = open_queues(queues);
        let rules = ready::rules(queues);
        let closed = if rules.is_empty() && decisions.evict.is_empty() {
            HashSet::new()
        } else {
            ready::closed_workloads(
                built,
                decisions,
                &rules,
                &self.evictor.for_statuses().preempted,
            )
        };
        // Under the term's lock: a revocation cannot slip between its check and the publish.
        let published = self.term.while_valid_until(|until| {
            at_creation.publish(
                mark,
                built,
                decisions,
                &open,
                closed,
                Some(until.into_std()),
            )
        });
        if published.is_none() {
            debug!("leadership term over: no room published for admission at creation");
        }
    }

    fn record_pass_metrics(&self, decisions: &Decisions, started: Instant) {
        self.metrics
            .pass_duration_seconds
            .observe(started.elapsed().as_secs_f64());
        for (queue, tally) in &decisions.queues {
            let labels = QueueLabels {
                queue: queue.clone(),
            };
            self.metrics
                .pending_pods
                .get_or_create(&labels)
                .set(i64::from(tally.pending_pods));
            self.metrics
                .pending_workloads
                .get_or_create(&labels)
                .set(i64::from(tally.pending_workloads));
            // A cohort queue: every resource its quota names (0 once given back).
            for resource in tally.ceiling.iter().flat_map(|c| c.0.keys()) {
                let labels = QueueResourceLabels {
                    queue: queue.clone(),
                    resource: resource.clone(),
                };
                let milli = tally.borrowed.get(resource);
                self.metrics.borrowed.get_or_create(&labels).set(milli);
            }
        }
    }
}
