//! The webhook's side of admission at creation: the pod classifier the pod webhook serves. It
//! labels governed pods, refuses what could never be admitted or would escape its queue (another
//! queue's workload, a priority above the queue's cap, a gang larger than the queue could ever
//! give, devices it cannot count, a grown resize), and admits at creation from the room the
//! leader's last pass published ([`super::AdmitAtCreation`]).

use super::*;
/// The pod classifier the webhook serves: the adapters, plus admission at creation when the
/// controller runs in this process.
pub struct Classifier {
    pub adapters: Adapters,
    pub at_creation: Option<Arc<AdmitAtCreation>>,
    /// The queues, for their `spec.preemption.maxPriority` (None: no cap is checked).
    pub queues: Option<Store<CapacityQueue>>,
    /// The queue each workload's ledger names, from a watch on every replica: a replica that does
    /// not lead refuses a pod joining another queue's workload from it (None: only the leader does).
    pub ledgers: Option<crate::queue::ledger_queues::LedgerQueues>,
}

impl Classifier {
    /// Refuses a pod of `queue` whose priority is above the queue's `maxPriority`. The API
    /// server's Priority admission has set `spec.priority` from the pod's PriorityClass before the
    /// webhooks run; a pod without one counts as 0, as the controller counts it. A queue not known
    /// (yet) caps nothing here: the controller counts no pod above its queue's cap.
    fn refuse_above_max_priority(
        &self,
        namespace: &str,
        pod: &Pod,
        queue: &str,
    ) -> Result<(), String> {
        let Some(cap) = self
            .queues
            .as_ref()
            .and_then(|queues| queues.get(&ObjectRef::new(queue)))
            .and_then(|q| q.spec.preemption().max_priority)
        else {
            return Ok(());
        };
        let spec = pod.spec.as_ref();
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        if priority <= cap {
            return Ok(());
        }
        let class = match spec.and_then(|s| s.priority_class_name.as_deref()) {
            Some(class) if !class.is_empty() => format!("PriorityClass {class:?}"),
            _ => "no PriorityClass".to_string(),
        };
        Err(format!(
            "sluice: pod {namespace}/{name} has priority {priority} ({class}) but CapacityQueue {queue:?} accepts pods of priority {cap} at most (spec.preemption.maxPriority): a higher priority could evict the queue's other workloads. Give the pod (or its application's pod templates) a priorityClassName whose value is at most {cap} (kubectl get priorityclasses lists them), or ask the queue's owner to raise its maxPriority",
            name = pod_display_name(pod),
        ))
    }
}

impl Classifier {
    /// The identity `pod` has with sluice's `labels` on it (a namespace default queue...); None
    /// when it does not match the labels' queue.
    fn identity_with(&self, pod: &Pod, labels: &BTreeMap<String, String>) -> Option<PodIdentity> {
        let queue = labels.get(QUEUE_LABEL)?;
        let mut labelled = pod.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.adapters
            .identify(&labelled)
            .filter(|i| &i.queue == queue)
    }

    /// The identity [`Classifier::classify_request`] worked out for this request, or (called
    /// without it) [`Classifier::identity_with`] now.
    fn identity_of<'f>(&self, created: &CreatedPod<'f>) -> Option<Cow<'f, PodIdentity>> {
        match created.facts.get::<PodIdentity>() {
            Some(identity) => Some(Cow::Borrowed(identity)),
            None => (self.identity_with(created.pod, created.labels)).map(Cow::Owned),
        }
    }

    /// Refuses a pod whose queue is not the queue its workload is charged to: every pod counts in
    /// the queue its own label names, so a workload's pods all run in one queue (a pod joining
    /// another queue's workload would otherwise be accounted nowhere or twice). Known from the
    /// controller's last pass where it leads (it knows a new gang before its ledger is written),
    /// else from the ledger's queue; a workload neither knows yet is judged by the pass (it never
    /// admits such a pod).
    fn refuse_other_queue(
        &self,
        namespace: &str,
        pod: &Pod,
        identity: &PodIdentity,
    ) -> Result<(), String> {
        // A pod that is its own workload (no workload of its own named): a pod of that name in
        // another queue was deleted, or its creation failed; the pass judges it.
        let Some(workload) = identity
            .workload
            .as_deref()
            .filter(|w| pod.metadata.name.as_deref() != Some(*w))
        else {
            return Ok(());
        };
        let key = WorkloadKey {
            namespace: namespace.to_string(),
            name: workload_object_name(workload),
        };
        let charged = self.at_creation.as_ref().and_then(|a| a.queue_of(&key));
        match charged.or_else(|| self.ledgers.as_ref().and_then(|l| l.queue_of(&key))) {
            Some(theirs) if theirs != identity.queue => Err(format!(
                "sluice: pod {namespace}/{name} names queue {ours:?} ({QUEUE_LABEL}) but belongs to workload {key}, which runs in queue {theirs:?}: a workload's pods all run in one queue, the queue their own label names. Create the pod with {QUEUE_LABEL}={theirs:?}, or give it a workload of its own (another {WORKLOAD_LABEL}, or another application)",
                name = pod_display_name(pod),
                ours = identity.queue,
            )),
            _ => Ok(()),
        }
    }
}

impl Classifier {
    /// Refuses a pod that could never be admitted: its gang (its `sluice.dev/min-count`, or 1)
    /// needs more than its queue could ever give it (its quota, plus what its cohort lends). Left
    /// waiting, it would wait forever, and at the head of a StrictFIFO queue block every pod
    /// behind it. A queue not known (yet) is judged by the controller.
    fn refuse_never_fits(
        &self,
        namespace: &str,
        pod: &Pod,
        identity: &PodIdentity,
    ) -> Result<(), String> {
        let Some(queues) = &self.queues else {
            return Ok(());
        };
        let Some(queue) = queues.get(&ObjectRef::new(&identity.queue)) else {
            return Ok(());
        };
        let Some(Ok(per_pod)) = pod.spec.as_ref().map(pod_requests) else {
            return Ok(()); // refused with its own message
        };
        let gang = identity.min_count.unwrap_or(1).max(1);
        let mut need = ResourceList::new();
        if need.try_add_scaled(&per_pod, i64::from(gang)).is_err() {
            return Err(format!(
                "sluice: pod {namespace}/{name} asks for a gang of {gang} ({MIN_COUNT_ANNOTATION}) of pods too large to count: lower the minimum",
                name = pod_display_name(pod),
            ));
        }
        let Ok(most) = crate::queue::ceiling::ceiling(&queue, &queues.state()) else {
            return Ok(()); // an unreadable queue is reported by the controller
        };
        match crate::queue::ceiling::exceeded(&need, &most) {
            None => Ok(()),
            Some(over) => Err(format!(
                "sluice: pod {namespace}/{name} could never start: its gang of {gang} pod(s) {what}. Lower its requests or its minimum ({MIN_COUNT_ANNOTATION}), or ask for a larger quota",
                name = pod_display_name(pod),
                what = crate::queue::ceiling::describe_exceeded(&queue, &over),
            )),
        }
    }
}

impl sluice_webhooks::PodClassifier for Classifier {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        self.adapters.classify(pod)
    }

    fn classify_in(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        Ok(self
            .classify_request(namespace, pod)?
            .map(|classified| classified.labels))
    }

    fn classify_request(&self, namespace: &str, pod: &Pod) -> Result<Option<Classified>, String> {
        let labels = self.adapters.classify_in(namespace, pod)?;
        if let Some(queue) = labels.as_ref().and_then(|l| l.get(QUEUE_LABEL)) {
            self.refuse_above_max_priority(namespace, pod, queue)?;
        }
        // Worked out once for the request (it copies the pod), kept for the calls after this one.
        let identity = labels.as_ref().and_then(|l| self.identity_with(pod, l));
        if let Some(identity) = &identity {
            self.refuse_other_queue(namespace, pod, identity)?;
            self.refuse_never_fits(namespace, pod, identity)?;
        }
        let annotations = pod.metadata.annotations.as_ref();
        if labels.is_some()
            && let Err(why) = crate::queue::topology::TopologyAsk::of(annotations)
                .map(|_| ())
                .and(crate::queue::data_locality::DataAsk::of(annotations).map(|_| ()))
        {
            return Err(format!(
                "sluice: pod {namespace}/{name}: {why}",
                name = pod_display_name(pod),
            ));
        }
        // The API server validates the pod only after this webhook: a governed pod's requests are
        // judged here, or a negative request would count as room.
        if labels.is_some()
            && let Some(claims) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref())
            && !claims.is_empty()
        {
            return Err(format!(
                "sluice: pod {namespace}/{name} is governed by a queue but asks for devices through dynamic resource allocation (spec.resourceClaims: {claims}), which sluice cannot count against a quota yet, so it would escape its queue's limits. Ask for the device as an extended resource in the container's resources (e.g. nvidia.com/gpu), or run the pod outside sluice's queues",
                name = pod_display_name(pod),
                claims = claims
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ));
        }
        if labels.is_some()
            && let Some(Err(e)) = pod.spec.as_ref().map(pod_requests)
        {
            return Err(format!(
                "sluice: pod {namespace}/{name} is governed by queue {queue:?} but its resources cannot be counted: {e}. Fix the pod's requests and limits, then create it again",
                name = pod_display_name(pod),
                queue = labels
                    .as_ref()
                    .and_then(|l| l.get(QUEUE_LABEL))
                    .map(String::as_str)
                    .unwrap_or(""),
            ));
        }
        let facts = identity.map(RequestFacts::new).unwrap_or_default();
        Ok(labels.map(|labels| Classified { labels, facts }))
    }

    fn judge_resize(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        judge_resize(namespace, old, new)
    }

    fn judge_update(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        self.adapters.judge_identity_change(namespace, old, new)
    }

    fn gated_warnings(&self, created: &CreatedPod<'_>) -> Vec<String> {
        let (namespace, pod) = (created.namespace, created.pod);
        let (Some(queues), Some(identity)) = (&self.queues, self.identity_of(created)) else {
            return Vec::new();
        };
        let queue = queues.get(&ObjectRef::new(&identity.queue));
        // A namespace not seen yet is given the benefit of the doubt: no warning.
        let admits_namespace = match (
            queue
                .as_ref()
                .and_then(|q| q.spec.namespace_selector.as_ref()),
            self.adapters.namespace_labels(namespace),
        ) {
            (Some(selector), Some(labels)) => {
                crate::queue::snapshot::selector_matches(selector, &labels)
            }
            _ => true,
        };
        crate::submit_warnings::for_pod(
            namespace,
            pod,
            &identity,
            queue.as_deref(),
            admits_namespace,
        )
    }

    fn admit_at_creation(&self, created: &CreatedPod<'_>) -> Option<BTreeMap<String, String>> {
        let (namespace, pod) = (created.namespace, created.pod);
        let at_creation = self.at_creation.as_ref().filter(|a| a.is_active())?;
        let identity = self.identity_of(created);
        let requests = pod.spec.as_ref().map(pod_requests);
        let (Some(identity), Some(Ok(requests))) = (identity, requests) else {
            return None; // the controller will say what is wrong
        };
        if has_gates(pod) {
            // Someone else holds the pod too: it waits behind sluice's gate as well.
            at_creation.try_admit_never(&identity.queue);
            return None;
        }
        let annotations = pod.metadata.annotations.as_ref();
        if let (Ok(Some(_)), _) | (_, Ok(Some(_))) = (
            crate::queue::topology::TopologyAsk::of(annotations),
            crate::queue::data_locality::DataAsk::of(annotations),
        ) {
            // A gang asking for a topology domain or its data's nodes is pinned as it is
            // admitted: a pass chooses where (admission at creation sees no nodes).
            at_creation.try_admit_never(&identity.queue);
            return None;
        }
        let binding = PodBinding::of(namespace, pod);
        // The webhook called again for the same creation (reinvocation): already admitted, if the
        // token is this pod's own and the pod did not grow since.
        if let Some(token) = pod.annotations().get(AT_CREATION_ANNOTATION) {
            match at_creation.reinvoked(token, &binding, &identity.queue, &requests) {
                Reinvocation::Confirmed => {
                    let mut annotations = BTreeMap::new();
                    annotations.insert(AT_CREATION_ANNOTATION.to_string(), token.clone());
                    return Some(annotations);
                }
                Reinvocation::Grown => {
                    at_creation.try_admit_never(&identity.queue);
                    return None;
                }
                Reinvocation::Unknown => {}
            }
        }
        let admitted = at_creation.try_admit_by(&binding, &identity, &requests)?;
        let mut annotations = BTreeMap::new();
        annotations.insert(AT_CREATION_ANNOTATION.to_string(), admitted.token);
        annotations.insert(ADMITTED_AT_ANNOTATION.to_string(), now_rfc3339());
        annotations.insert(ADMITTED_BY_ANNOTATION.to_string(), admitted.by);
        Some(annotations)
    }
}

/// Refuses an in-place resize that grows an admitted pod's requests: quota is taken only through
/// the gate (a pass or admission at creation), and a resize has neither. Shrinking is free.
pub(super) fn judge_resize(namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
    let name = new.metadata.name.as_deref().unwrap_or("<unnamed>");
    let queue = old
        .labels()
        .get(QUEUE_LABEL)
        .map(String::as_str)
        .unwrap_or("");
    let count = |pod: &Pod| -> Result<ResourceList, String> {
        let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
        pod_requests(spec).map_err(|e| e.to_string())
    };
    let (before, after) = (count(old), count(new));
    let after = after.map_err(|e| {
        format!(
            "sluice: pod {namespace}/{name} in queue {queue:?}: the resize cannot be counted: {e}"
        )
    })?;
    // An old pod sluice could not count holds nothing sluice knows of: any size is growth.
    let before = before.unwrap_or_default();
    let grown: Vec<String> = after
        .0
        .iter()
        .filter(|(resource, value)| **value > before.get(resource))
        .map(|(resource, value)| {
            format!(
                "{resource} {} -> {}",
                describe_quantity(resource, before.get(resource)),
                describe_quantity(resource, *value)
            )
        })
        .collect();
    if grown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "sluice: pod {namespace}/{name} runs on the quota of queue {queue:?}; an in-place resize may shrink it but not grow it ({}), because quota is only given through sluice's gate. Create a pod with the larger requests instead: it waits until the queue has room",
        grown.join(", ")
    ))
}

/// A pod's name for a message; a pod being created may only have a generateName.
fn pod_display_name(pod: &Pod) -> &str {
    pod.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(pod.metadata.generate_name.as_deref())
        .unwrap_or("<unnamed>")
}

fn has_gates(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}
