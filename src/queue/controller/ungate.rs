//! Ungating: the JSON patch that removes the gate of the pod it was decided for (uid-guarded), the
//! ungates in flight, and the [`Ungater`] that sends them off the pass.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::Controller;
pub use super::pin::Pin;
use super::pin::pin_to_nodes;
use crate::api::{
    ADMISSION_GATE, ADMITTED_AT_ANNOTATION, ADMITTED_BY_ANNOTATION, DATA_NODES_ANNOTATION,
    FLAVOR_ANNOTATION, TOPOLOGY_DOMAIN_ANNOTATION,
};
use crate::leader::Term;
use crate::metrics::{ControllerMetrics, QueueLabels};
use crate::queue::admission::{Decisions, FlavorSnapshot, WorkloadKey};
use crate::queue::clock::now_rfc3339;
use crate::queue::pod_cache::CachedPod;
use crate::queue::snapshot::{self, Built, Pins};

/// Why no ungate patch could be built for a pod.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UngatePatchError {
    #[error("pod {0} has no uid")]
    NoUid(String),
    #[error("pod {pod} no longer carries the gate {ADMISSION_GATE}")]
    NotGated { pod: String },
    #[error("building the ungate patch of pod {pod}: {reason}")]
    Build { pod: String, reason: String },
}

/// Sends ungate patches in the background, at most `slots` at once across passes.
pub(super) struct Ungater {
    pub(super) client: Client,
    pub(super) metrics: ControllerMetrics,
    pub(super) in_flight: Mutex<InFlightPods>,
    pub(super) recorder: Recorder,
    pub(super) slots: Semaphore,
    /// No patch is sent once the term is no longer valid.
    pub(super) term: Arc<Term>,
    pub(super) api_timeout: Duration,
    pub(super) in_flight_max_age: Duration,
    /// `<identity>@<term generation>`, written on each pod this term admits.
    pub(super) admitted_by: String,
}

/// Pods this controller ungated, or is about to, that the pod watch has not yet shown without
/// their gate, by uid. They count as admitted; otherwise the next pass would admit their quota
/// twice.
#[derive(Default)]
pub(super) struct InFlightPods {
    pub(super) pods: HashMap<String, InFlight>,
    pub(super) next_ticket: u64,
}

impl InFlightPods {
    /// Changes the pod's entry (None: forgets it) only if it is still this ungate's (`ticket`).
    fn update(&mut self, uid: &str, ticket: u64, change: impl FnOnce(&mut Option<InFlight>)) {
        let mut entry = self.pods.get(uid).cloned().filter(|e| e.ticket == ticket);
        if entry.is_none() {
            return;
        }
        change(&mut entry);
        match entry {
            Some(e) => self.pods.insert(uid.to_string(), e),
            None => self.pods.remove(uid),
        };
    }
}

/// One pod in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct InFlight {
    /// Which ungate counts it: an older ungate of the same pod never touches a newer entry.
    pub(super) ticket: u64,
    /// When it stops counting unless confirmed: set when its patch is sent; none while it waits
    /// for a write slot (the calls ahead of it are bounded) or once the patch is known applied.
    pub(super) expires: Option<Instant>,
    /// Where the pass pinned it (its flavor, domain and data nodes): the passes before the watch
    /// shows it ungated count it there.
    pub(super) pins: Pins,
}

/// Forgets pods the cache shows ungated or gone, and those whose ungate's outcome stayed unknown
/// past their age: the pass then sees them gated and decides again.
pub(super) fn prune_in_flight(
    in_flight: &mut HashMap<String, InFlight>,
    gated: &HashSet<&str>,
    now: Instant,
) {
    in_flight.retain(|uid, entry| {
        gated.contains(uid.as_str()) && entry.expires.is_none_or(|at| now < at)
    });
}

/// What became of one ungate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UngateOutcome {
    Admitted,
    NotAdmitted,
    /// Neither the patch nor the read after it answered: counted in flight until it expires.
    Unknown,
}

/// The JSON patch that admits `pod`: it applies only to this very pod (a `test` of its uid, since
/// a pod deleted and recreated under the same name is another pod) while it still carries the
/// gate at the position the cache shows, and notes when it was admitted. Admitted in a `flavor`,
/// the pod is pinned to it in the same patch, before its gate goes: the flavor's node labels
/// join its nodeSelector, its tolerations its tolerations (Kubernetes allows adding both to a
/// gated pod, and refuses the patch whole should a label of the pod's own differ), and
/// `sluice.dev/flavor` says which quota it is charged to.
pub fn ungate_patch(
    pod: &CachedPod,
    admitted_at: &str,
    admitted_by: &str,
    flavor: Option<&FlavorSnapshot>,
) -> Result<json_patch::Patch, UngatePatchError> {
    let pin = Pin {
        flavor,
        ..Pin::default()
    };
    ungate_patch_pinned(pod, admitted_at, admitted_by, pin)
}

/// As [`ungate_patch`], pinned to a flavor and a topology domain: the domain's label joins the
/// pod's nodeSelector beside the flavor's, and `sluice.dev/topology-domain` records it.
pub fn ungate_patch_pinned(
    pod: &CachedPod,
    admitted_at: &str,
    admitted_by: &str,
    pin: Pin<'_>,
) -> Result<json_patch::Patch, UngatePatchError> {
    let flavor = pin.flavor;
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.name_any()
    );
    let uid = pod
        .metadata
        .uid
        .as_deref()
        .ok_or_else(|| UngatePatchError::NoUid(name.clone()))?;
    let index = pod
        .admission_gate
        .ok_or_else(|| UngatePatchError::NotGated { pod: name.clone() })?;
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        json!({"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": ADMISSION_GATE}),
        json!({"op": "remove", "path": format!("/spec/schedulingGates/{index}")}),
    ];
    if pod.has_annotations {
        ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-at", "value": admitted_at}));
        ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-by", "value": admitted_by}));
        if let Some(flavor) = flavor {
            ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1flavor", "value": flavor.name}));
        }
        if let Some(domain) = pin.domain {
            ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1topology-domain", "value": domain}));
        }
        if let Some(nodes) = pin.data_nodes {
            ops.push(json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1data-nodes", "value": nodes}));
        }
    } else {
        let mut annotations = serde_json::Map::new();
        annotations.insert(ADMITTED_AT_ANNOTATION.into(), admitted_at.into());
        annotations.insert(ADMITTED_BY_ANNOTATION.into(), admitted_by.into());
        if let Some(flavor) = flavor {
            annotations.insert(FLAVOR_ANNOTATION.into(), flavor.name.clone().into());
        }
        if let Some(domain) = pin.domain {
            annotations.insert(TOPOLOGY_DOMAIN_ANNOTATION.into(), domain.into());
        }
        if let Some(nodes) = pin.data_nodes {
            annotations.insert(DATA_NODES_ANNOTATION.into(), nodes.into());
        }
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": annotations}));
    }
    pin_to_nodes(pod, pin, &mut ops);
    serde_json::from_value(serde_json::Value::Array(ops)).map_err(|e| UngatePatchError::Build {
        pod: name,
        reason: e.to_string(),
    })
}

/// One pod to ungate, with what its metrics, logs and event need.
pub(super) struct UngateItem {
    pub(super) pod: Arc<CachedPod>,
    /// Its entry in flight.
    pub(super) ticket: u64,
    pub(super) queue: String,
    pub(super) key: WorkloadKey,
    pub(super) created_at_ms: i64,
    pub(super) workload: Option<ObjectReference>,
    /// The flavor it is admitted in (a flavored queue).
    pub(super) flavor: Option<Arc<FlavorSnapshot>>,
    /// The topology domain it is pinned to (`<key>=<value>`).
    pub(super) domain: Option<Arc<str>>,
    /// The hostnames of its data's nodes it is pinned to.
    pub(super) data_nodes: Option<Arc<str>>,
}

impl Controller {
    /// Counts the admitted pods as in flight now (so the next pass does not admit them again) and
    /// sends their ungate patches in the background.
    pub(super) fn start_ungates(&self, built: &Built, decisions: &Decisions) {
        if decisions.admit.is_empty() || !self.term.is_valid() {
            return;
        }
        log_admissions(built, decisions);
        let mut items = Vec::with_capacity(decisions.admit.len());
        {
            let mut in_flight = self.ungater.lock_in_flight();
            for r in &decisions.admit {
                let pod = built.pods[r.workload][r.pod_set][r.pod].clone();
                let Some(uid) = pod.metadata.uid.clone() else {
                    continue;
                };
                let ticket = in_flight.next_ticket;
                in_flight.next_ticket += 1;
                let flavor = decisions.flavors.get(r).cloned();
                let domain = decisions.domains.get(r).cloned();
                let data_nodes = decisions.data_nodes.get(r).cloned();
                let pins = Pins {
                    flavor: flavor.as_ref().map(|f| Arc::from(f.name.as_str())),
                    domain: domain.clone(),
                    data_nodes: data_nodes.clone(),
                };
                in_flight.pods.insert(
                    uid,
                    InFlight {
                        ticket,
                        expires: None,
                        pins,
                    },
                );
                let workload = &built.snapshot.workloads[r.workload];
                items.push(UngateItem {
                    pod,
                    ticket,
                    queue: workload.queue.clone(),
                    key: workload.key.clone(),
                    created_at_ms: workload.pod_sets[r.pod_set].pods[r.pod].created_at,
                    workload: built.workloads[r.workload]
                        .as_ref()
                        .map(|d| d.object_ref(&())),
                    flavor,
                    domain,
                    data_nodes,
                });
            }
        }
        self.metrics.ungates_in_flight.inc_by(items.len() as i64);
        let ungater = self.ungater.clone();
        let concurrency = self.settings.max_concurrent_writes.max(1);
        tokio::spawn(async move { ungater.ungate_all(items, concurrency).await });
    }
}

impl Ungater {
    pub(super) fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, InFlightPods> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update_in_flight(&self, uid: &str, ticket: u64, change: impl FnOnce(&mut Option<InFlight>)) {
        self.lock_in_flight().update(uid, ticket, change);
    }

    /// Ungates `items` (already counted in flight), then records metrics and one event per workload.
    async fn ungate_all(&self, items: Vec<UngateItem>, concurrency: usize) {
        let now = now_rfc3339();
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let count = items.len() as i64;
        let results: Vec<(UngateItem, UngateOutcome)> = stream::iter(items)
            .map(|item| {
                let now = &now;
                let span = info_span!("ungate", queue = %item.queue, workload = %item.key);
                async move {
                    let outcome = match self.slots.acquire().await {
                        Ok(_permit) => {
                            let pin = Pin {
                                flavor: item.flavor.as_deref(),
                                domain: item.domain.as_deref(),
                                data_nodes: item.data_nodes.as_deref(),
                            };
                            self.ungate_pod(&item.pod, item.ticket, now, pin).await
                        }
                        // Closed: never, the semaphore lives as long as self.
                        Err(_) => UngateOutcome::Unknown,
                    };
                    (item, outcome)
                }
                .instrument(span)
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        self.metrics.ungates_in_flight.dec_by(count);

        let mut admitted_per_workload: HashMap<String, (ObjectReference, String, u32)> =
            HashMap::new();
        for (item, outcome) in results {
            if outcome != UngateOutcome::Admitted {
                continue;
            }
            let labels = QueueLabels {
                queue: item.queue.clone(),
            };
            self.metrics.admitted_pods.get_or_create(&labels).inc();
            self.metrics
                .admission_wait_seconds
                .get_or_create(&labels)
                .observe(((now_ms - item.created_at_ms).max(0) as f64) / 1000.0);
            if let Some(reference) = item.workload {
                let key = format!(
                    "{}/{}",
                    reference.namespace.as_deref().unwrap_or_default(),
                    reference.name.as_deref().unwrap_or_default()
                );
                admitted_per_workload
                    .entry(key)
                    .or_insert((reference, item.queue, 0))
                    .2 += 1;
            }
        }
        for (key, (reference, queue, count)) in admitted_per_workload {
            let span = info_span!("admitted_event", queue = %queue, workload = %key);
            self.publish_admitted(reference, queue, count)
                .instrument(span)
                .await;
        }
    }

    async fn publish_admitted(&self, reference: ObjectReference, queue: String, count: u32) {
        let event = Event {
            type_: EventType::Normal,
            reason: "Admitted".into(),
            note: Some(format!("admitted {count} pod(s) in queue {queue}")),
            action: "Admit".into(),
            secondary: None,
        };
        match tokio::time::timeout(self.api_timeout, self.recorder.publish(&event, &reference))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(%e, "event not recorded"),
            Err(_) => debug!(timeout = ?self.api_timeout, "event not recorded in time"),
        }
    }

    /// Removes the gate of this very pod with one JSON patch ([`ungate_patch`]), while the term is
    /// valid. A pod not admitted is no longer counted in flight; one whose fate stayed unknown is
    /// counted until its entry expires.
    async fn ungate_pod(
        &self,
        pod: &CachedPod,
        ticket: u64,
        now: &str,
        pin: Pin<'_>,
    ) -> UngateOutcome {
        let (Some(uid), Some(namespace)) = (pod.uid(), pod.namespace()) else {
            return UngateOutcome::NotAdmitted;
        };
        let forget = |entry: &mut Option<InFlight>| *entry = None;
        let name = pod.name_any();
        let patch = match ungate_patch_pinned(pod, now, &self.admitted_by, pin) {
            Ok(patch) => patch,
            Err(e) => {
                warn!(%e, "no ungate patch");
                self.update_in_flight(&uid, ticket, forget);
                return UngateOutcome::NotAdmitted;
            }
        };
        if !self.term.is_valid() {
            self.update_in_flight(&uid, ticket, forget);
            return UngateOutcome::NotAdmitted;
        }
        let expires = Instant::now() + self.in_flight_max_age;
        self.update_in_flight(&uid, ticket, |e| {
            if let Some(e) = e {
                e.expires = Some(expires);
            }
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = PatchParams::default();
        let sent = tokio::time::timeout(
            self.api_timeout,
            api.patch(&name, &params, &Patch::<()>::Json(patch)),
        )
        .await;
        let outcome = match sent {
            Ok(Ok(_)) => UngateOutcome::Admitted,
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
                // Deleted between the pass and the patch (a scale-down, an application ending):
                // nothing to admit, nothing to hold.
                debug!(pod = %format!("{namespace}/{name}"), "pod gone before its ungate");
                UngateOutcome::NotAdmitted
            }
            failed => {
                // Someone changed the gates, the pod is another one now, or the patch was applied
                // and only the answer lost: ask the API server which.
                self.metrics.ungate_errors.inc();
                let outcome = self.outcome_after_failure(&api, &name, &uid).await;
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {:?}", self.api_timeout),
                };
                warn!(%error, pod = %format!("{namespace}/{name}"), ?outcome, "ungate failed");
                outcome
            }
        };
        match outcome {
            UngateOutcome::Admitted => self.update_in_flight(&uid, ticket, |e| {
                if let Some(e) = e {
                    e.expires = None; // known ungated: counted until the watch shows it
                }
            }),
            UngateOutcome::NotAdmitted => self.update_in_flight(&uid, ticket, forget),
            UngateOutcome::Unknown => {} // counted until its entry expires
        }
        outcome
    }

    /// Reads the pod after a failed patch: whether this very pod (`uid`) is now ungated.
    async fn outcome_after_failure(&self, api: &Api<Pod>, name: &str, uid: &str) -> UngateOutcome {
        match tokio::time::timeout(self.api_timeout, api.get_opt(name)).await {
            Ok(Ok(Some(current))) if current.uid().as_deref() == Some(uid) => {
                if snapshot::pod_is_gated(&current) {
                    UngateOutcome::NotAdmitted
                } else {
                    UngateOutcome::Admitted
                }
            }
            // Gone, or another pod under its name: ours is not admitted.
            Ok(Ok(_)) => UngateOutcome::NotAdmitted,
            Ok(Err(_)) | Err(_) => UngateOutcome::Unknown,
        }
    }
}

/// Logs, per workload, how many pods this pass admits, in a span naming its queue and workload
/// (only when debug logs are on: a span per workload costs on a large pass).
fn log_admissions(built: &Built, decisions: &Decisions) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let mut per_workload: BTreeMap<usize, usize> = BTreeMap::new();
    for r in &decisions.admit {
        *per_workload.entry(r.workload).or_default() += 1;
    }
    for (w, pods) in per_workload {
        let workload = &built.snapshot.workloads[w];
        let _admit =
            info_span!("admit", queue = %workload.queue, workload = %workload.key).entered();
        debug!(pods, "admitted; ungating");
    }
}

#[cfg(test)]
mod tests {
    use super::super::ControllerSettings;
    use super::*;
    use kube::runtime::events::Reporter;

    fn gated_pod(annotations: bool) -> CachedPod {
        serde_json::from_value(gated_pod_json(annotations)).expect("pod")
    }

    fn gated_pod_json(annotations: bool) -> serde_json::Value {
        json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "uid-a",
                "annotations": if annotations { json!({"x": "y"}) } else { json!(null) },
            },
            "spec": {
                "containers": [],
                "schedulingGates": [{"name": "other.dev/gate"}, {"name": ADMISSION_GATE}],
            },
        })
    }

    fn ops(patch: &json_patch::Patch) -> Vec<serde_json::Value> {
        match serde_json::to_value(patch).expect("patch as json") {
            serde_json::Value::Array(ops) => ops,
            other => panic!("not a list of operations: {other}"),
        }
    }

    #[test]
    fn the_ungate_patch_applies_only_to_the_pod_it_was_decided_for() {
        let patch =
            ungate_patch(&gated_pod(true), "2026-01-01T00:00:00Z", "r1@3", None).expect("patch");
        assert_eq!(
            ops(&patch),
            vec![
                json!({"op": "test", "path": "/metadata/uid", "value": "uid-a"}),
                json!({"op": "test", "path": "/spec/schedulingGates/1/name", "value": ADMISSION_GATE}),
                json!({"op": "remove", "path": "/spec/schedulingGates/1"}),
                json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-at", "value": "2026-01-01T00:00:00Z"}),
                json!({"op": "add", "path": "/metadata/annotations/sluice.dev~1admitted-by", "value": "r1@3"}),
            ]
        );
    }

    fn a100() -> FlavorSnapshot {
        FlavorSnapshot {
            name: "a100".into(),
            quota: crate::resources::ResourceList::new(),
            node_labels: BTreeMap::from([("gpu.example/type".to_string(), "a100".to_string())]),
            tolerations: vec![
                serde_json::from_value(
                    json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}),
                )
                .expect("toleration"),
            ],
            defined: true,
        }
    }

    /// Applies the ungate patch of `pod` (admitted in a100) to the pod itself.
    fn admitted_in_a100(mut pod: serde_json::Value) -> serde_json::Value {
        let cached: CachedPod = serde_json::from_value(pod.clone()).expect("pod");
        let patch = ungate_patch(&cached, "t", "r1@3", Some(&a100())).expect("patch");
        json_patch::patch(&mut pod, &patch).expect("the patch applies");
        pod
    }

    #[test]
    fn the_ungate_patch_pins_the_pod_to_its_domain_beside_its_flavor() {
        for with_selector in [false, true] {
            let mut pod = gated_pod_json(with_selector);
            pod["metadata"]["labels"] = json!({"sluice.dev/queue": "q"});
            if with_selector {
                pod["spec"]["nodeSelector"] = json!({"disk": "ssd"});
            }
            let cached: CachedPod = serde_json::from_value(pod.clone()).expect("pod");
            let pin = Pin {
                flavor: Some(&a100()),
                domain: Some("example.com/rack=r2"),
                data_nodes: None,
            };
            let patch = ungate_patch_pinned(&cached, "t", "r1@3", pin).expect("patch");
            json_patch::patch(&mut pod, &patch).expect("the patch applies");
            let mut want = json!({"gpu.example/type": "a100", "example.com/rack": "r2"});
            if with_selector {
                want["disk"] = json!("ssd");
            }
            assert_eq!(pod["spec"]["nodeSelector"], want);
            assert_eq!(
                pod["metadata"]["annotations"]["sluice.dev/topology-domain"],
                "example.com/rack=r2"
            );
        }
    }

    #[test]
    fn the_ungate_patch_pins_the_pod_to_its_flavor_adding_to_what_it_has() {
        let mut bare = gated_pod_json(false);
        bare["metadata"]["labels"] = json!({"sluice.dev/queue": "q"});
        let pinned = admitted_in_a100(bare.clone());
        assert_eq!(
            pinned["spec"]["nodeSelector"],
            json!({"gpu.example/type": "a100"})
        );
        assert_eq!(pinned["spec"]["tolerations"][0]["key"], "gpu");
        assert_eq!(
            pinned["metadata"]["annotations"]["sluice.dev/flavor"],
            "a100"
        );
        assert_eq!(
            pinned["spec"]["schedulingGates"],
            json!([{"name": "other.dev/gate"}])
        );

        let mut own = bare;
        own["metadata"]["annotations"] = json!({"x": "y"});
        own["spec"]["nodeSelector"] = json!({"team": "ml"});
        own["spec"]["tolerations"] = json!([{"key": "spot", "operator": "Exists"}]);
        let pinned = admitted_in_a100(own);
        assert_eq!(
            pinned["spec"]["nodeSelector"],
            json!({"team": "ml", "gpu.example/type": "a100"})
        );
        let keys: Vec<&str> = (pinned["spec"]["tolerations"]
            .as_array()
            .expect("list")
            .iter())
        .filter_map(|t| t["key"].as_str())
        .collect();
        assert_eq!(keys, vec!["spot", "gpu"]);
        assert_eq!(
            pinned["metadata"]["annotations"]["sluice.dev/flavor"],
            "a100"
        );
        assert_eq!(pinned["metadata"]["annotations"]["x"], "y");
    }

    #[test]
    fn the_ungate_patch_of_a_recreated_pod_fails_its_uid_test() {
        let patch =
            ungate_patch(&gated_pod(false), "2026-01-01T00:00:00Z", "r1@3", None).expect("patch");
        assert_eq!(
            ops(&patch).last(),
            Some(
                &json!({"op": "add", "path": "/metadata/annotations", "value": {
                    ADMITTED_AT_ANNOTATION: "2026-01-01T00:00:00Z",
                    ADMITTED_BY_ANNOTATION: "r1@3",
                }})
            )
        );
        // The same name, gated alike, but another uid: the patch must not apply.
        let mut recreated = gated_pod_json(false);
        recreated["metadata"]["uid"] = json!("uid-b");
        let refused = json_patch::patch(&mut recreated.clone(), &patch);
        assert!(refused.is_err(), "{refused:?}");
        let mut original = gated_pod_json(false);
        json_patch::patch(&mut original, &patch).expect("applies to the original pod");
        assert_eq!(
            original["spec"]["schedulingGates"],
            json!([{"name": "other.dev/gate"}])
        );
    }

    #[test]
    fn no_ungate_patch_for_a_pod_without_uid_or_gate() {
        let mut pod = gated_pod(false);
        pod.metadata.uid = None;
        assert!(matches!(
            ungate_patch(&pod, "t", "r1@3", None),
            Err(UngatePatchError::NoUid(_))
        ));
        let mut pod = gated_pod(false);
        pod.admission_gate = None;
        assert!(matches!(
            ungate_patch(&pod, "t", "r1@3", None),
            Err(UngatePatchError::NotGated { .. })
        ));
    }

    fn entry(ticket: u64, expires: Option<Instant>) -> InFlight {
        InFlight {
            ticket,
            expires,
            pins: Pins::default(),
        }
    }

    #[test]
    fn an_ungate_whose_outcome_stayed_unknown_expires_and_is_decided_again() {
        let now = Instant::now();
        let age = ControllerSettings::default().in_flight_max_age();
        let mut in_flight = HashMap::from([("a".to_string(), entry(1, Some(now + age)))]);
        let gated = HashSet::from(["a"]);
        prune_in_flight(&mut in_flight, &gated, now + age - Duration::from_millis(1));
        assert!(in_flight.contains_key("a"), "still within its age");
        prune_in_flight(&mut in_flight, &gated, now + age);
        assert!(
            in_flight.is_empty(),
            "past its age: the pass judges the pod again"
        );
    }

    #[test]
    fn an_ungate_waiting_for_a_slot_or_known_applied_never_expires() {
        let now = Instant::now();
        let mut in_flight = HashMap::from([
            ("queued".to_string(), entry(1, None)),
            ("applied".to_string(), entry(2, None)),
        ]);
        let gated = HashSet::from(["queued", "applied"]);
        prune_in_flight(&mut in_flight, &gated, now + Duration::from_secs(86_400));
        assert_eq!(in_flight.len(), 2);
    }

    #[test]
    fn a_pod_the_cache_shows_ungated_or_gone_leaves_in_flight() {
        let now = Instant::now();
        let mut in_flight = HashMap::from([
            ("ungated".to_string(), entry(1, None)),
            ("gated".to_string(), entry(2, None)),
        ]);
        prune_in_flight(&mut in_flight, &HashSet::from(["gated"]), now);
        assert_eq!(in_flight.keys().collect::<Vec<_>>(), vec!["gated"]);
    }

    /// An Ungater on a client whose API server accepts connections and never answers.
    async fn ungater_on_a_silent_server(
        api_timeout: Duration,
    ) -> (Ungater, tokio::task::JoinHandle<()>) {
        let (client, server) = crate::test_support::silent_api_client().await;
        let term = crate::test_support::long_term();
        let ungater = Ungater {
            client: client.clone(),
            metrics: ControllerMetrics::new(&mut prometheus_client::registry::Registry::default()),
            in_flight: Mutex::new(InFlightPods::default()),
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "sluice".into(),
                    instance: None,
                },
            ),
            slots: Semaphore::new(1),
            term,
            api_timeout,
            in_flight_max_age: api_timeout * 3,
            admitted_by: "test@0".to_string(),
        };
        (ungater, server)
    }

    #[tokio::test]
    async fn an_ungate_whose_patch_and_read_hang_is_unknown_and_expires() {
        let (ungater, server) = ungater_on_a_silent_server(Duration::from_millis(100)).await;
        ungater
            .lock_in_flight()
            .pods
            .insert("uid-a".into(), entry(7, None));
        let sent = Instant::now();
        let outcome = ungater
            .ungate_pod(&gated_pod(false), 7, "t", Pin::default())
            .await;
        assert_eq!(outcome, UngateOutcome::Unknown);
        let kept = ungater.lock_in_flight().pods.get("uid-a").cloned();
        let expires = kept
            .and_then(|e| e.expires)
            .expect("an unknown ungate expires");
        assert!(expires >= sent + ungater.in_flight_max_age);
        server.abort();
    }

    #[tokio::test]
    async fn an_ungate_after_the_term_ended_sends_nothing_and_forgets_the_pod() {
        let (ungater, server) = ungater_on_a_silent_server(Duration::from_secs(3600)).await;
        ungater.term.revoke();
        ungater
            .lock_in_flight()
            .pods
            .insert("uid-a".into(), entry(7, None));
        // With an hour's timeout on a silent server, any call sent would hang the test.
        let outcome = ungater
            .ungate_pod(&gated_pod(false), 7, "t", Pin::default())
            .await;
        assert_eq!(outcome, UngateOutcome::NotAdmitted);
        assert!(ungater.lock_in_flight().pods.is_empty());
        server.abort();
    }

    #[test]
    fn an_older_ungate_never_touches_a_newer_entry_of_the_same_pod() {
        let mut pods = InFlightPods::default();
        pods.pods.insert("uid-a".into(), entry(2, None));
        pods.update("uid-a", 1, |e| *e = None);
        assert_eq!(pods.pods.get("uid-a"), Some(&entry(2, None)));
        pods.update("uid-a", 2, |e| *e = None);
        assert!(pods.pods.is_empty());
    }

    #[test]
    fn an_in_flight_entry_outlives_every_call_of_its_ungate() {
        let settings = ControllerSettings::default();
        // The patch, then the read after a failed one, each up to the API timeout.
        assert!(settings.in_flight_max_age() > settings.api_timeout * 2);
    }
}
