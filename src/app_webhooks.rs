//! Admission for application objects (RayCluster, ...). Pure: they read a cache of CapacityQueues,
//! never the API server.
//! - mutation: gives an application without a `sluice.dev/queue` label its namespace's default queue
//!   (namespace label `sluice.dev/default-queue`), and copies the queue label into every pod
//!   template, so the pods its operator creates carry it and are gated like any governed pod;
//! - validation: the queue exists, admits the namespace, and the minimum gang can ever fit its
//!   quota; otherwise a clear denial at submit time instead of an application that waits forever.

use std::sync::Arc;

use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};

use crate::api::{CapacityQueue, QUEUE_LABEL};
use crate::integrations::ApplicationIntegration;
use crate::namespaces::{DefaultQueue, Namespaces, unseen_namespace_message};
use crate::queue::snapshot::selector_matches;
use crate::resources::ResourceList;

fn adapter_for<'a>(
    adapters: &'a [Arc<dyn ApplicationIntegration>],
    request: &AdmissionRequest<DynamicObject>,
) -> Option<&'a Arc<dyn ApplicationIntegration>> {
    adapters.iter().find(|a| {
        let r = a.api_resource();
        r.group == request.kind.group && r.kind == request.kind.kind
    })
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The patch operation that labels the application itself with `queue`.
fn label_object(app: &DynamicObject, queue: &str) -> Value {
    if app.metadata.labels.is_some() {
        json!({"op": "add", "path": format!("/metadata/labels/{}", escape(QUEUE_LABEL)), "value": queue})
    } else {
        json!({"op": "add", "path": "/metadata/labels", "value": {QUEUE_LABEL: queue}})
    }
}

pub struct MutateApplications {
    pub adapters: Vec<Arc<dyn ApplicationIntegration>>,
    /// Namespaces' default queues.
    pub namespaces: Namespaces,
}

impl sluice_webhooks::ApplicationHandler for MutateApplications {
    fn name(&self) -> &'static str {
        "mutate_applications"
    }

    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let (Some(adapter), Some(app)) = (
            adapter_for(&self.adapters, request),
            request.object.as_ref(),
        ) else {
            return response;
        };
        // A queue move is refused by the validator, with its own message: no patch for it (a
        // Job's template, immutable once it runs, would make the API server refuse it first).
        if left_alone(adapter.as_ref(), request, app) || refuse_queue_move(request, app).is_err() {
            return response;
        }
        let mut ops = Vec::new();
        let queue = match app.labels().get(QUEUE_LABEL) {
            Some(queue) => queue.clone(),
            None => {
                let namespace = request.namespace.clone().unwrap_or_default();
                match self.namespaces.default_queue(&namespace) {
                    DefaultQueue::Queue(queue) => {
                        ops.push(label_object(app, &queue));
                        queue
                    }
                    DefaultQueue::None => return response,
                    DefaultQueue::Unknown => {
                        return response.deny(unseen_namespace_message(&namespace, "application"));
                    }
                }
            }
        };
        // The integration says where its operator takes pod labels from.
        ops.extend(adapter.pods_patch(app, &queue));
        if ops.is_empty() {
            return response;
        }
        match serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) {
            Ok(patch) => response.with_patch(patch).unwrap_or_else(|e| {
                AdmissionResponse::from(request)
                    .deny(format!("sluice could not encode its patch: {e}"))
            }),
            Err(e) => response.deny(format!("sluice could not build its patch: {e}")),
        }
    }
}

pub struct ValidateApplications {
    pub adapters: Vec<Arc<dyn ApplicationIntegration>>,
    pub queues: Store<CapacityQueue>,
    /// Namespaces' labels, for the queues' namespaceSelectors.
    pub namespaces: Namespaces,
}

impl ValidateApplications {
    /// Err carries the message for the user.
    pub fn check(
        &self,
        adapter: &dyn ApplicationIntegration,
        app: &DynamicObject,
        queue_name: &str,
    ) -> Result<(), String> {
        let kind = adapter.api_resource().kind;
        let who = format!(
            "{kind} {}/{}",
            app.namespace().unwrap_or_default(),
            app.name_any()
        );
        let Some(queue) = self.queues.get(&ObjectRef::new(queue_name)) else {
            return Err(format!(
                "sluice: {who} names CapacityQueue {queue_name:?}, which does not exist: create it (kubectl get capacityqueues lists them) or fix the label {QUEUE_LABEL}"
            ));
        };
        if let Some(selector) = &queue.spec.namespace_selector {
            let namespace = app.namespace().unwrap_or_default();
            // A namespace not seen yet is let through: the controller checks again before admitting.
            if let Some(labels) = self.namespaces.labels(&namespace)
                && !selector_matches(selector, &labels)
            {
                return Err(format!(
                    "sluice: {who} names CapacityQueue {queue_name:?}, which does not admit namespace {namespace:?} (see its spec.namespaceSelector): use a queue that does, or ask for the namespace to be admitted"
                ));
            }
        }
        let sets = adapter
            .demand(app)
            .map_err(|e| format!("sluice: {who}: {e}"))?;
        let mut gang = ResourceList::new();
        for set in &sets {
            let per_pod = ResourceList::from_quantities(&set.requests)
                .map_err(|e| format!("sluice: {who}: {e}"))?;
            // Checked: demand() refuses a gang it cannot count, so this is a second line only.
            gang.try_add_scaled(&per_pod, i64::from(set.min_count.max(0)))
                .map_err(|resource| {
                    format!(
                        "sluice: the minimum gang of {who} needs more {resource} than sluice can count"
                    )
                })?;
        }
        // What the queue could ever give: its quota, plus what its cohort could lend it.
        let most = crate::queue::ceiling::ceiling(&queue, &self.queues.state())
            .map_err(|e| format!("sluice: CapacityQueue {queue_name}: {e}"))?;
        if let Some(over) = crate::queue::ceiling::exceeded(&gang, &most) {
            return Err(format!(
                "sluice: the minimum gang of {who} {}: it could never start. Lower its minimum (the gang: e.g. a RayCluster's minReplicas, a SparkApplication's minExecutors, a Job's parallelism, or the annotation sluice.dev/min-count) or raise the quota",
                crate::queue::ceiling::describe_exceeded(&queue, &over)
            ));
        }
        Ok(())
    }
}

/// Whether sluice leaves the application to another part of itself (a ScavengerJob's Jobs, a
/// RayJob's submitter): on an UPDATE only when the stored object was left alone too, so that an
/// owner reference added after the fact (owner edits skip the webhooks) cannot lift a running
/// application out of the checks.
fn left_alone(
    adapter: &dyn ApplicationIntegration,
    request: &AdmissionRequest<DynamicObject>,
    app: &DynamicObject,
) -> bool {
    adapter.left_alone(app)
        && request
            .old_object
            .as_ref()
            .is_none_or(|old| adapter.left_alone(old))
}

/// Refuses an UPDATE that changes or removes an application's queue label. Its pods keep the queue
/// they were admitted to (their labels are sluice's), so a new label would move its running usage
/// to another queue with no fit check, or out of every queue. The webhook does not read the
/// ledger (no API call, no workload cache on every replica), so a move is refused whether or not
/// anything was admitted yet: delete and resubmit is the one way, and the message says so.
fn refuse_queue_move(
    request: &AdmissionRequest<DynamicObject>,
    app: &DynamicObject,
) -> Result<(), String> {
    let Some(old) = request.old_object.as_ref() else {
        return Ok(());
    };
    let (before, after) = (old.labels().get(QUEUE_LABEL), app.labels().get(QUEUE_LABEL));
    match (before, after) {
        (Some(before), after) if after != Some(before) => Err(format!(
            "sluice: {kind} {namespace}/{name} is accounted to CapacityQueue {before:?}; its label {QUEUE_LABEL} cannot be {change} once set, because its pods and the quota they hold stay in that queue. To run it in another queue, delete it and create it again with {QUEUE_LABEL} set to that queue",
            kind = request.kind.kind,
            namespace = app.namespace().unwrap_or_default(),
            name = app.name_any(),
            change = match after {
                Some(after) => format!("changed (to {after:?})"),
                None => "removed".to_string(),
            },
        )),
        _ => Ok(()),
    }
}

impl sluice_webhooks::ApplicationHandler for ValidateApplications {
    fn name(&self) -> &'static str {
        "validate_applications"
    }

    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let response = AdmissionResponse::from(request);
        let (Some(adapter), Some(app)) = (
            adapter_for(&self.adapters, request),
            sluice_webhooks::written_object(request),
        ) else {
            return response;
        };
        // A queue move is refused whatever the owners: an owner reference is a user's to add
        // and remove, so it cannot make a move safe.
        if let Err(message) = refuse_queue_move(request, app) {
            return response.deny(message);
        }
        if left_alone(adapter.as_ref(), request, app) {
            return response;
        }
        let Some(queue) = app.labels().get(QUEUE_LABEL).cloned() else {
            return response;
        };
        match self.check(adapter.as_ref(), app, &queue) {
            // At creation, what will make it wait (kubectl prints it): from the cache, no call.
            Ok(()) if request.operation == Operation::Create => {
                let warnings = crate::submit_warnings::for_application(
                    adapter.as_ref(),
                    app,
                    &queue,
                    &self.queues,
                );
                crate::submit_warnings::attach(response, warnings)
            }
            verdict => sluice_webhooks::judged(response, verdict),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DEFAULT_QUEUE_LABEL;
    use crate::integrations::RayClusters;

    use crate::integrations::ray::tests::labelled_rc as rc;

    /// A cache of the CapacityQueues `queues` (name, spec).
    fn queues(queues: &[(&str, Value)]) -> Store<CapacityQueue> {
        let (reader, mut writer) = kube::runtime::reflector::store::<CapacityQueue>();
        for (name, spec) in queues {
            let q: CapacityQueue = serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "metadata": {"name": name}, "spec": spec})).expect("q");
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(q));
        }
        reader
    }

    fn validator(cpu: &str) -> ValidateApplications {
        ValidateApplications {
            adapters: vec![Arc::new(RayClusters)],
            queues: queues(&[("q", json!({"quota": {"cpu": cpu}}))]),
            namespaces: Namespaces::none(),
        }
    }

    #[test]
    fn refuses_a_gang_that_could_never_fit_and_a_missing_queue() {
        let app = rc(false);
        assert!(validator("5").check(&RayClusters, &app, "q").is_ok());
        let err = validator("4")
            .check(&RayClusters, &app, "q")
            .expect_err("5 cpu gang in 4 cpu");
        assert!(
            err.contains("needs 5 cpu") && err.contains("quota of 4 cpu"),
            "{err}"
        );
        let err = validator("8")
            .check(&RayClusters, &app, "nope")
            .expect_err("missing queue");
        assert!(err.contains("does not exist"), "{err}");
    }

    /// Issue 16, hole 2: an application whose template holds a negative request is refused at
    /// submit time, the field named, before it can reach the DynamicWorkload.
    #[test]
    fn an_application_with_a_negative_request_is_refused_naming_the_field() {
        use sluice_webhooks::ApplicationHandler;
        let mut app = rc(false);
        app.data["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
            ["requests"]["cpu"] = json!("-1000");
        let refused = validator("100").admit(&review(&app));
        assert!(!refused.allowed);
        assert!(
            refused.result.message.contains(
                r#"spec.workerGroupSpecs[0].template.spec.containers[0].resources.requests.cpu: must not be negative ("-1000")"#
            ),
            "{}",
            refused.result.message
        );
    }

    #[test]
    fn an_application_whose_gang_overflows_is_refused_naming_the_field() {
        let mut app = rc(false);
        app.data["spec"]["workerGroupSpecs"][0]["minReplicas"] = json!(i64::from(i32::MAX));
        app.data["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
            ["requests"]["cpu"] = json!("9223372036854775m");
        let err = validator("100")
            .check(&RayClusters, &app, "q")
            .expect_err("overflow");
        assert!(
            err.contains("spec.workerGroupSpecs[0].minReplicas:")
                && err.contains("than sluice can count"),
            "{err}"
        );
    }

    /// Alice's request to write `object` (a `kind` of `group`/`version`, served as `resource`),
    /// from `old` when it is an update.
    fn request(
        [group, version, kind, resource]: [&str; 4],
        object: &DynamicObject,
        old: Option<&DynamicObject>,
    ) -> AdmissionRequest<DynamicObject> {
        let review: kube::core::admission::AdmissionReview<DynamicObject> =
            serde_json::from_value(json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {
                    "uid": "u1",
                    "kind": {"group": group, "version": version, "kind": kind},
                    "resource": {"group": group, "version": version, "resource": resource},
                    "name": object.name_any(), "namespace": "ns",
                    "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
                    "userInfo": {"username": "alice"},
                    "object": object, "oldObject": old,
                },
            }))
            .expect("review");
        review.try_into().expect("request")
    }

    fn review(app: &DynamicObject) -> AdmissionRequest<DynamicObject> {
        request(["ray.io", "v1", "RayCluster", "rayclusters"], app, None)
    }

    fn patched(app: &DynamicObject, response: &AdmissionResponse) -> Value {
        let mut doc = serde_json::to_value(app).expect("json");
        let patch: json_patch::Patch =
            serde_json::from_slice(&response.patch.clone().unwrap_or_default()).expect("patch");
        json_patch::patch(&mut doc, &patch).expect("applies");
        doc
    }

    #[test]
    fn an_unlabelled_application_takes_its_namespace_default_queue() {
        use crate::namespaces::testing::namespaces;
        let mut app = rc(true);
        app.metadata.labels = None;
        let mutate = MutateApplications {
            adapters: vec![Arc::new(RayClusters)],
            namespaces: namespaces(&[("ns", &[(DEFAULT_QUEUE_LABEL, "batch")])]),
        };
        let response = sluice_webhooks::ApplicationHandler::admit(&mutate, &review(&app));
        assert!(response.allowed, "{response:?}");
        let doc = patched(&app, &response);
        crate::integrations::testing::assert_holds(
            &doc,
            &[
                ("/metadata/labels/sluice.dev~1queue", json!("batch")),
                (
                    "/spec/workerGroupSpecs/0/template/metadata/labels/sluice.dev~1queue",
                    json!("batch"),
                ),
            ],
        );

        // No default: untouched. Namespace not seen yet: refused with a retry, never let through ungoverned.
        let plain = MutateApplications {
            adapters: vec![Arc::new(RayClusters)],
            namespaces: namespaces(&[("ns", &[])]),
        };
        let response = sluice_webhooks::ApplicationHandler::admit(&plain, &review(&app));
        assert!(response.allowed && response.patch.is_none());
        let unseen = MutateApplications {
            adapters: vec![Arc::new(RayClusters)],
            namespaces: namespaces(&[]),
        };
        let response = sluice_webhooks::ApplicationHandler::admit(&unseen, &review(&app));
        assert!(!response.allowed);
        assert!(
            response.result.message.contains("retry"),
            "{}",
            response.result.message
        );
    }

    #[test]
    fn refuses_a_queue_that_does_not_admit_the_namespace() {
        use crate::namespaces::testing::namespaces;
        let reader = queues(&[(
            "q",
            json!({"quota": {"cpu": "8"}, "namespaceSelector": {"matchLabels": {"team": "ml"}}}),
        )]);
        let validate = |labels: &'static [(&'static str, &'static str)]| ValidateApplications {
            adapters: vec![Arc::new(RayClusters)],
            queues: reader.clone(),
            namespaces: namespaces(&[("ns", labels)]),
        };
        let app = rc(false);
        assert!(
            validate(&[("team", "ml")])
                .check(&RayClusters, &app, "q")
                .is_ok()
        );
        let err = validate(&[("team", "web")])
            .check(&RayClusters, &app, "q")
            .expect_err("not admitted");
        assert!(err.contains("does not admit namespace \"ns\""), "{err}");
    }

    /// Issue 16, hole 4: an application cannot be relabelled into another queue.
    #[test]
    fn relabelling_an_application_into_another_queue_is_refused() {
        use sluice_webhooks::ApplicationHandler;
        let validator = validator("100");
        let mut old = rc(true);
        old.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(QUEUE_LABEL.into(), "q".into());
        let update = |new: &DynamicObject| {
            request(
                ["ray.io", "v1", "RayCluster", "rayclusters"],
                new,
                Some(&old),
            )
        };
        let mut moved = old.clone();
        moved
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(QUEUE_LABEL.into(), "other".into());
        let refused = validator.admit(&update(&moved));
        assert!(!refused.allowed);
        assert!(
            refused
                .result
                .message
                .contains("delete it and create it again"),
            "{}",
            refused.result.message
        );
        let mut unlabelled = old.clone();
        unlabelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .remove(QUEUE_LABEL);
        assert!(
            !validator.admit(&update(&unlabelled)).allowed,
            "removing it too"
        );
        assert!(
            validator.admit(&update(&old)).allowed,
            "an update that keeps the queue is judged as before"
        );
    }

    /// Issue 31, hole 3: an owner reference is a user's to add and remove (owner edits skip the
    /// webhooks), so it decides nothing about a queue move: a Job's queue label cannot change
    /// whatever its owners, and a Job is left alone (a RayJob's submitter) only if it was so
    /// before the update too.
    #[test]
    fn a_queue_move_is_refused_whatever_the_owners() {
        use crate::integrations::Jobs;
        use sluice_webhooks::ApplicationHandler;
        let quota = json!({"quota": {"cpu": "8"}});
        let validator = ValidateApplications {
            adapters: vec![Arc::new(Jobs)],
            queues: queues(&[("q", quota.clone()), ("other", quota)]),
            namespaces: Namespaces::none(),
        };
        let job = |queue: &str, rayjob_owner: bool| -> DynamicObject {
            let mut j = json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "ns", "labels": {QUEUE_LABEL: queue}},
                "spec": {"parallelism": 1, "template": {"metadata": {"labels": {QUEUE_LABEL: queue}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}},
            });
            if rayjob_owner {
                j["metadata"]["ownerReferences"] = json!([{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u", "controller": true}]);
            }
            serde_json::from_value(j).expect("job")
        };
        let update = |old: DynamicObject, new: DynamicObject| {
            request(["batch", "v1", "Job", "jobs"], &new, Some(&old))
        };
        let refused = validator.admit(&update(job("q", false), job("other", true)));
        assert!(
            !refused.allowed,
            "an owner added with the move does not lift the check"
        );
        assert!(
            refused.result.message.contains("\"q\""),
            "{}",
            refused.result.message
        );
        let refused = validator.admit(&update(job("q", true), job("other", true)));
        assert!(!refused.allowed, "a RayJob's Job cannot move either");
        assert!(
            validator
                .admit(&update(job("q", true), job("q", true)))
                .allowed,
            "a RayJob's own Job, unchanged queue: left alone"
        );
        assert!(!left_alone(
            &Jobs,
            &update(job("q", false), job("q", true)),
            &job("q", true)
        ));
    }
}
