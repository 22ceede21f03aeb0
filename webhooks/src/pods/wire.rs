//! The pod as the pod webhooks read it off the wire: only what they judge (name, generateName,
//! namespace, labels, annotations, `spec.schedulingGates`, and what makes a pod's requests:
//! containers' and init containers' resources and restart policy, `spec.overhead`, pod-level
//! `spec.resources`, the names of `spec.resourceClaims`; `spec.priority` and
//! `spec.priorityClassName`, for a queue's `maxPriority`). Every other
//! field is skipped without being built, which is most of a pod's 5-10 KB: env, volumes, probes,
//! managedFields.
//! The result is an ordinary [`Pod`] carrying just those fields, so the handlers and the
//! classifier keep their types.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, Pod, PodResourceClaim, PodSchedulingGate, PodSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::AdmissionRequest;
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

/// A [`Pod`] decoded partially (see the module documentation). Used only as the type an
/// AdmissionReview is decoded into; [`into_pod_request`] turns the request into one of `Pod`.
/// Public for the benchmarks. Boxed: a [`Pod`] is kilobytes of fields even when nearly all are
/// empty, and serde moves what it decodes through several layers (the request, the review) by
/// value; a box moves as a pointer.
#[derive(Clone, Debug, Default)]
pub struct PartialPod(pub Box<Pod>);

impl k8s_openapi::Resource for PartialPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for PartialPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePod {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<WireMeta>,
    #[serde(default)]
    spec: Option<WireSpec>,
    // `status` and any other field: skipped by serde's parser, never built.
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    #[serde(default)]
    scheduling_gates: Option<Vec<WireGate>>,
    #[serde(default)]
    containers: Option<WireContainers>,
    #[serde(default)]
    init_containers: Option<WireContainers>,
    #[serde(default)]
    overhead: Option<BTreeMap<String, Quantity>>,
    /// Pod-level requests and limits (PodLevelResources): they count instead of the containers'.
    #[serde(default)]
    resources: Option<WireResources>,
    /// Dynamic resource allocation claims: sluice cannot count them, so it needs to see them.
    #[serde(default)]
    resource_claims: Option<Vec<WireClaim>>,
    /// Set from the PriorityClass by the API server's Priority admission, before the webhooks.
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    priority_class_name: Option<String>,
}

/// A pod's resource claim: its name is all sluice reads.
#[derive(Deserialize)]
struct WireClaim {
    #[serde(default)]
    name: String,
}

/// A pod's containers (or init containers) as far as its requests go: what the webhooks'
/// [`PartialPod`] and the controller's pod cache decode of them, so that both count a pod's
/// requests from the same fields.
#[derive(Default, Deserialize)]
#[serde(transparent)]
pub struct WireContainers(Vec<WireContainer>);

impl WireContainers {
    /// The containers, holding only their names, requests, limits and restart policies.
    pub fn into_containers(self) -> Vec<Container> {
        self.0
            .into_iter()
            .map(WireContainer::into_container)
            .collect()
    }
}

/// A container as far as its requests go.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainer {
    #[serde(default)]
    name: String,
    #[serde(default)]
    resources: Option<WireResources>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
struct WireResources {
    #[serde(default)]
    requests: Option<BTreeMap<String, Quantity>>,
    #[serde(default)]
    limits: Option<BTreeMap<String, Quantity>>,
}

impl WireResources {
    fn into_requirements(self) -> ResourceRequirements {
        ResourceRequirements {
            requests: self.requests,
            limits: self.limits,
            ..ResourceRequirements::default()
        }
    }
}

impl WireContainer {
    fn into_container(self) -> Container {
        Container {
            name: self.name,
            resources: self.resources.map(WireResources::into_requirements),
            restart_policy: self.restart_policy,
            ..Container::default()
        }
    }
}

/// A scheduling gate: only its name exists in the API.
#[derive(Deserialize)]
struct WireGate {
    #[serde(default)]
    name: String,
}

impl<'de> Deserialize<'de> for PartialPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WirePod::deserialize(deserializer)?;
        // As k8s-openapi's Pod: an apiVersion or kind, when given, must be a pod's.
        if let Some(v) = wire.api_version.as_deref().filter(|v| *v != "v1") {
            return Err(D::Error::custom(format!(
                "the object has apiVersion {v:?}, a pod has \"v1\""
            )));
        }
        if let Some(k) = wire.kind.as_deref().filter(|k| *k != "Pod") {
            return Err(D::Error::custom(format!(
                "the object is a {k:?}, not a \"Pod\""
            )));
        }
        let metadata = wire
            .metadata
            .map(|m| ObjectMeta {
                name: m.name,
                generate_name: m.generate_name,
                namespace: m.namespace,
                labels: m.labels,
                annotations: m.annotations,
                ..ObjectMeta::default()
            })
            .unwrap_or_default();
        let spec = wire.spec.map(|s| PodSpec {
            scheduling_gates: s.scheduling_gates.map(|gates| {
                gates
                    .into_iter()
                    .map(|g| PodSchedulingGate { name: g.name })
                    .collect()
            }),
            containers: (s.containers.unwrap_or_default()).into_containers(),
            init_containers: s.init_containers.map(WireContainers::into_containers),
            overhead: s.overhead,
            resources: s.resources.map(WireResources::into_requirements),
            resource_claims: s.resource_claims.map(|claims| {
                claims
                    .into_iter()
                    .map(|c| PodResourceClaim {
                        name: c.name,
                        ..PodResourceClaim::default()
                    })
                    .collect()
            }),
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            ..PodSpec::default()
        });
        Ok(PartialPod(Box::new(Pod {
            metadata,
            spec,
            status: None,
        })))
    }
}

/// The same request with its objects as [`Pod`]s (moves, no copy of the pods).
pub fn into_pod_request(request: AdmissionRequest<PartialPod>) -> AdmissionRequest<Pod> {
    AdmissionRequest {
        types: request.types,
        uid: request.uid,
        kind: request.kind,
        resource: request.resource,
        sub_resource: request.sub_resource,
        request_kind: request.request_kind,
        request_resource: request.request_resource,
        request_sub_resource: request.request_sub_resource,
        name: request.name,
        namespace: request.namespace,
        operation: request.operation,
        user_info: request.user_info,
        object: request.object.map(|p| *p.0),
        old_object: request.old_object.map(|p| *p.0),
        dry_run: request.dry_run,
        options: request.options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::admission::AdmissionReview;
    use serde_json::{Value, json};

    fn review(object: Value, old: Value) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns", "operation": "UPDATE", "userInfo": {"username": "a"},
                "object": object, "oldObject": old,
            }
        })
    }

    fn both(
        body: &[u8],
    ) -> (
        Result<AdmissionRequest<Pod>, String>,
        Result<AdmissionRequest<Pod>, String>,
    ) {
        let full = serde_json::from_slice::<AdmissionReview<Pod>>(body)
            .map_err(|e| e.to_string())
            .and_then(|r| {
                r.try_into()
                    .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string())
            });
        let partial = serde_json::from_slice::<AdmissionReview<PartialPod>>(body)
            .map_err(|e| e.to_string())
            .and_then(|r| {
                r.try_into()
                    .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string())
            })
            .map(into_pod_request);
        (full, partial)
    }

    /// What the pod webhooks and the classifier read of a pod.
    fn judged(pod: &Pod) -> Value {
        json!({
            "name": pod.metadata.name, "generateName": pod.metadata.generate_name,
            "namespace": pod.metadata.namespace, "labels": pod.metadata.labels,
            "annotations": pod.metadata.annotations,
            "spec": pod.spec.as_ref().map(|s| json!({
                "schedulingGates": s.scheduling_gates,
                "overhead": s.overhead,
                "resources": s.resources.as_ref().map(|r| json!([r.requests, r.limits])),
                "resourceClaims": s.resource_claims.as_ref().map(|c| c.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
                "containers": requests_of(&s.containers),
                "initContainers": s.init_containers.as_deref().map(requests_of),
                "priority": s.priority,
                "priorityClassName": s.priority_class_name,
            })),
        })
    }

    /// What makes a pod's requests, per container.
    fn requests_of(containers: &[k8s_openapi::api::core::v1::Container]) -> Value {
        containers
            .iter()
            .map(|c| {
                json!([
                    c.name,
                    c.restart_policy,
                    c.resources.as_ref().map(|r| json!([r.requests, r.limits]))
                ])
            })
            .collect()
    }

    #[test]
    fn the_partial_pod_holds_what_the_whole_pod_holds_of_what_is_judged() {
        let big = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "generateName": "p-",
                         "labels": {"sluice.dev/queue": "q", "a": "b"}, "annotations": {"x": "y"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "d", "uid": "1"}],
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:metadata": {}}}]},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}},
                                    {"name": "d", "image": "i"}],
                     "initContainers": [{"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                                        {"name": "i", "resources": {"limits": {"memory": "2Gi"}}}],
                     "overhead": {"cpu": "10m"},
                     "resources": {"requests": {"cpu": "8"}, "limits": {"memory": "4Gi"}},
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                     "schedulingGates": [{"name": "other"}, {"name": "sluice.dev/admission"}],
                     "priority": 1000, "priorityClassName": "high", "preemptionPolicy": "Never"},
            "status": {"phase": "Pending"},
        });
        let pods = [
            big,
            json!({}),
            json!({"metadata": null, "spec": null}),
            json!({"metadata": {"labels": null}, "spec": {}}),
            json!({"spec": {"schedulingGates": []}}),
            json!({"spec": {"schedulingGates": null}}),
            json!({"metadata": {"generateName": "w-", "labels": {}}}),
            json!({"spec": {"containers": [{"name": "c", "resources": {}}], "initContainers": []}}),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": null}}]}}),
            json!({"spec": {"priority": -5, "priorityClassName": null}}),
            json!({"spec": {"priority": null, "priorityClassName": "low"}}),
        ];
        for pod in pods {
            let body = serde_json::to_vec(&review(pod.clone(), pod.clone())).unwrap_or_default();
            let (full, partial) = both(&body);
            let (Ok(full), Ok(partial)) = (full, partial) else {
                panic!("{pod}: both decodings should succeed");
            };
            for (f, p) in [
                (&full.object, &partial.object),
                (&full.old_object, &partial.old_object),
            ] {
                let (Some(f), Some(p)) = (f, p) else {
                    panic!("{pod}: objects missing")
                };
                assert_eq!(judged(f), judged(p), "{pod}");
            }
            assert_eq!(full.uid, partial.uid);
            assert_eq!(full.namespace, partial.namespace);
            assert_eq!(full.operation, partial.operation);
            assert_eq!(full.user_info.username, partial.user_info.username);
        }
    }

    #[test]
    fn malformed_pods_are_errors_not_panics() {
        let cases = [
            json!({"apiVersion": "v1", "kind": "Service"}),
            json!({"apiVersion": "apps/v1", "kind": "Pod"}),
            json!({"metadata": {"name": 7}}),
            json!({"metadata": {"labels": ["a"]}}),
            json!({"metadata": {"labels": {"a": 1}}}),
            json!({"metadata": "x"}),
            json!({"spec": {"schedulingGates": {"name": "g"}}}),
            json!({"spec": {"schedulingGates": [{"name": 1}]}}),
            json!({"spec": {"containers": [{"name": "c", "resources": {"requests": ["cpu"]}}]}}),
            json!({"spec": {"containers": {"name": "c"}}}),
            json!({"spec": {"priority": "high"}}),
            json!({"spec": {"priority": 4294967296u64}}),
            json!({"spec": {"priorityClassName": 7}}),
            json!("a pod"),
        ];
        for pod in cases {
            let body = serde_json::to_vec(&review(pod.clone(), Value::Null)).unwrap_or_default();
            let (full, partial) = both(&body);
            assert!(partial.is_err(), "{pod} decoded");
            assert!(full.is_err(), "{pod}: the whole pod decoding accepted it");
        }
        // Truncated, empty, or not JSON at all.
        let body = serde_json::to_vec(&review(json!({"metadata": {"name": "p"}}), Value::Null))
            .unwrap_or_default();
        for cut in [0, 1, body.len() / 2, body.len() - 1] {
            assert!(both(&body[..cut]).1.is_err(), "cut at {cut}");
        }
        assert!(both(b"\xff\xfe").1.is_err());
    }
}
