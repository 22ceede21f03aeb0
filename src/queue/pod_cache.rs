//! The controller's pod cache: [`CachedPod`], a governed pod as the admission pass reads it, decoded
//! straight from the API server's JSON (list and watch) without ever building the full `Pod`.
//!
//! A pod as the API server sends it is several KB (managed fields, environment, volumes, statuses);
//! the controller holds every governed pod, so what it keeps of each is most of its memory. Only
//! the fields sluice reads are decoded (serde skips the others without allocating them); what the
//! pass derives from a pod version ([`PodFacts`]: its workload, queue, pod set, requests) is read
//! once, here, and the labels it was read from are not kept. Annotations are read only under
//! `sluice.dev/` (every annotation an integration reads is there): a pod's other annotations,
//! however large, are skipped while decoding.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition,
    PodSchedulingGate, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use sluice_webhooks::pods::wire::WireContainers;

use crate::api::{
    ADMISSION_GATE, ADMITTED_AT_ANNOTATION, AT_CREATION_ANNOTATION, DATA_NODES_ANNOTATION,
    FLAVOR_ANNOTATION, TOPOLOGY_DOMAIN_ANNOTATION,
};
use crate::integrations::Adapters;
use crate::integrations::workload_object_name;
use crate::queue::admission::PodTopology;
use crate::queue::admission::WorkloadKey;
use crate::queue::data_locality::DataAsk;
use crate::queue::placement::{AffinityShape, Placement};
use crate::queue::topology::TopologyAsk;
use crate::resources::ResourceList;
use crate::resources::pod_requests;

/// The registry every pod's identity is read with: identification is a pure function of the pod
/// and the fixed list of integrations (a namespace's default queue plays no part in it).
static ADAPTERS: LazyLock<Adapters> = LazyLock::new(Adapters::default);

/// The prefix of every annotation sluice reads from a pod.
const SLUICE_ANNOTATIONS: &str = "sluice.dev/";

/// The `ObjectMeta` of the metadata `$meta` (an `ObjectMeta` or a [`WireMeta`]: the same field
/// names) keeping only what identifies the pod and its lifetime (name, namespace, uid,
/// resourceVersion, creation and deletion timestamps), and the fields `$kept` besides: the cache
/// keeps these of every pod, and the decoder reads no other. One list for both, so that what is
/// decoded and what is kept cannot drift apart.
macro_rules! pod_identity {
    ($meta:expr $(, $kept:ident)*) => {{
        let meta = $meta;
        ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            $($kept: meta.$kept,)*
            ..ObjectMeta::default()
        }
    }};
}

/// A governed pod as the controller caches it.
#[derive(Clone, Debug, Default)]
pub struct CachedPod {
    /// name, namespace, uid, resourceVersion, creationTimestamp and deletionTimestamp only.
    pub metadata: ObjectMeta,
    /// The phase (as `Pod.status.phase`), when the pod has a status.
    pub status: Option<CachedPodStatus>,
    /// Where sluice's gate is among `spec.schedulingGates` (None: not gated by sluice).
    pub admission_gate: Option<u32>,
    /// Whether the pod has `metadata.annotations` at all (the ungate patch adds to them or
    /// creates them).
    pub has_annotations: bool,
    /// `sluice.dev/admitted-at`, in milliseconds since the epoch (None: absent or unreadable).
    pub admitted_at: Option<i64>,
    /// `spec.terminationGracePeriodSeconds` (None: the API server's default, 30 s): sluice's
    /// evictions give at most this, and at most their own cap.
    pub grace_seconds: Option<i64>,
    /// What the pass reads from this pod version; None when no integration governs it or it has
    /// no spec.
    pub facts: Option<Arc<PodFacts>>,
}

/// A cached pod's status: its phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedPodStatus {
    /// The known phases are shared, not allocated per pod.
    pub phase: Option<Cow<'static, str>>,
}

/// What a pass reads from a governed pod that changes only when the pod does: its workload,
/// queue, pod set, size. Read once per pod version, when the pod is decoded into the cache
/// ([`CachedPod`]), so that a pass over thousands of unchanged pods neither asks the adapters nor
/// parses quantities again.
#[derive(Debug)]
pub struct PodFacts {
    pub key: WorkloadKey,
    pub queue: String,
    pub pod_set: String,
    pub min_count: Option<u32>,
    pub priority: i32,
    pub name: String,
    pub created_at: i64,
    /// Err: a quantity sluice cannot read (the pod is kept out of the pass, and said so). Equal
    /// lists are one shared copy ([`crate::queue::pod_cache::shared_requests`]).
    pub requests: Result<Arc<ResourceList>, String>,
    /// The token of a pod admitted at creation (see `queue::at_creation`).
    pub at_creation_token: Option<String>,
    /// The flavor sluice admitted the pod in (`sluice.dev/flavor`, which only sluice writes).
    pub flavor: Option<Arc<str>>,
    /// The pod's own node constraints (None: none), which exclude flavors whose node labels
    /// they contradict.
    pub placement: Option<Arc<Placement>>,
    /// Whether `spec.nodeSelector` and `spec.tolerations` exist (the ungate patch adds to them
    /// or creates them).
    pub has_node_selector: bool,
    pub has_tolerations: bool,
    /// How far `spec.affinity` goes (the ungate patch adds a required node affinity to it).
    pub affinity: AffinityShape,
    /// The node it is bound to (`spec.nodeName`): its requests are taken off that node's room
    /// for topology-aware gangs.
    pub node_name: Option<Box<str>>,
    /// Its topology ask and the domain sluice pinned it to (None: neither, most pods).
    pub topology: Option<Arc<PodTopology>>,
}

impl PodFacts {
    /// None when no adapter governs the pod or it has no spec.
    pub(crate) fn of(adapters: &Adapters, pod: &Pod) -> Option<PodFacts> {
        let spec = pod.spec.as_ref()?;
        let identity = adapters.identify(pod)?;
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let raw = identity.workload.unwrap_or_else(|| name.clone());
        let requests = pod_requests(spec)
            .map(shared_requests)
            .map_err(|e| format!("pod {namespace}/{name}: {e}"));
        Some(PodFacts {
            key: WorkloadKey {
                namespace,
                name: workload_object_name(&raw),
            },
            queue: identity.queue,
            pod_set: identity.pod_set,
            min_count: identity.min_count,
            priority: spec.priority.unwrap_or(0),
            name,
            created_at: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_millisecond()),
            requests,
            // Only an admitted (ungated) pod shows its hold taken: a gated pod carrying a token
            // admits nothing and must not end the hold of the pod it was copied from.
            at_creation_token: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(AT_CREATION_ANNOTATION))
                .filter(|_| !has_admission_gate(pod))
                .cloned(),
            flavor: pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(FLAVOR_ANNOTATION))
                .map(|f| Arc::from(f.as_str())),
            placement: Placement::of(spec).map(Arc::new),
            has_node_selector: spec.node_selector.is_some(),
            has_tolerations: spec.tolerations.is_some(),
            affinity: AffinityShape::of(spec),
            node_name: spec.node_name.as_deref().map(Box::from),
            topology: pod_topology(pod).map(Arc::new),
        })
    }
}

/// A pod's topology ask (an invalid key, which the webhook refuses at creation, asks nothing)
/// and the domain sluice pinned it to; None when it has neither.
fn pod_topology(pod: &Pod) -> Option<PodTopology> {
    let annotations = pod.metadata.annotations.as_ref();
    let ask = TopologyAsk::of(annotations).ok().flatten();
    let domain = annotations
        .and_then(|a| a.get(TOPOLOGY_DOMAIN_ANNOTATION))
        .cloned();
    let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    let data = DataAsk::of(annotations).ok().flatten();
    let data_nodes = annotations
        .and_then(|a| a.get(DATA_NODES_ANNOTATION))
        .map(|n| Arc::from(n.as_str()));
    (ask.is_some() || domain.is_some() || data.is_some() || data_nodes.is_some()).then_some(
        PodTopology {
            ask,
            domain,
            bound,
            data,
            data_nodes,
        },
    )
}

/// Whether a pod as the API server sends it is behind sluice's gate.
fn has_admission_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.name == ADMISSION_GATE))
}

impl CachedPod {
    /// The cached form of a pod (the same as decoding it from JSON).
    pub fn from_pod(pod: Pod) -> CachedPod {
        let facts = PodFacts::of(&ADAPTERS, &pod).map(Arc::new);
        let admission_gate = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .and_then(|gates| gates.iter().position(|g| g.name == ADMISSION_GATE))
            .and_then(|i| u32::try_from(i).ok());
        let meta = pod.metadata;
        let admitted_at = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ADMITTED_AT_ANNOTATION))
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond());
        let grace_seconds = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds);
        let has_annotations = meta.annotations.is_some();
        CachedPod {
            metadata: pod_identity!(meta),
            status: pod.status.map(|s| CachedPodStatus {
                phase: s.phase.map(shared_phase),
            }),
            admission_gate,
            has_annotations,
            admitted_at,
            grace_seconds,
            facts,
        }
    }

    /// The pod's phase, if it has one.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> CachedPod {
        CachedPod::from_pod(pod)
    }
}

fn shared_phase(phase: String) -> Cow<'static, str> {
    match phase.as_str() {
        "Pending" => Cow::Borrowed("Pending"),
        "Running" => Cow::Borrowed("Running"),
        "Succeeded" => Cow::Borrowed("Succeeded"),
        "Failed" => Cow::Borrowed("Failed"),
        "Unknown" => Cow::Borrowed("Unknown"),
        _ => Cow::Owned(phase),
    }
}

/// Makes a slim pod type (a struct with `metadata: ObjectMeta`) a Kubernetes Pod for kube's
/// `Api` and the watch stores (`crate::watch_store`): one definition for every slim pod cache.
#[macro_export]
macro_rules! slim_pod_resource {
    ($t:ty) => {
        impl k8s_openapi::Resource for $t {
            const API_VERSION: &'static str =
                <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str =
                <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str =
                <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str =
                <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $t {
            type Ty = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }
    };
}

slim_pod_resource!(CachedPod);

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(CachedPod::from_pod(decode_pod(deserializer)?))
    }
}

/// A pod as the API server sends it, decoded into a `Pod` holding only what sluice's controllers
/// read: name, namespace, uid, resourceVersion, creation and deletion timestamps, labels,
/// `sluice.dev/` annotations; per container its name, resources and restart policy; the pod's
/// overhead, resources, priority, priority class, node, scheduling gates; its phase, conditions
/// (type and status) and containers' exit codes. Every other field is skipped unread.
pub fn decode_pod<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Pod, D::Error> {
    Ok(WirePod::deserialize(deserializer)?.into_pod())
}

/// Requests shared between the pods that have the same (most pods of a workload do): one copy of
/// each distinct list while a pod holds it, forgotten when no pod does.
pub fn shared_requests(requests: ResourceList) -> Arc<ResourceList> {
    static SHARED: LazyLock<Mutex<SharedLists>> = LazyLock::new(Mutex::default);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    shared.get(requests)
}

/// The distinct request lists held, weakly; swept whenever it has doubled since the last sweep.
#[derive(Default)]
struct SharedLists {
    lists: HashMap<BTreeMap<String, i64>, Weak<ResourceList>>,
    swept_at: usize,
}

impl SharedLists {
    fn get(&mut self, requests: ResourceList) -> Arc<ResourceList> {
        if let Some(held) = self.lists.get(&requests.0).and_then(Weak::upgrade) {
            return held;
        }
        let held = Arc::new(requests);
        self.lists.insert(held.0.clone(), Arc::downgrade(&held));
        if self.lists.len() > 2 * self.swept_at.max(64) {
            self.lists.retain(|_, list| list.strong_count() > 0);
            self.swept_at = self.lists.len();
        }
        held
    }
}

/// The fields of a pod that sluice reads, as the API server sends them; every other field is
/// skipped by serde without being built.
#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: WireMeta,
    spec: Option<WireSpec>,
    status: Option<WireStatus>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "sluice_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    containers: Option<WireContainers>,
    init_containers: Option<WireContainers>,
    overhead: Option<BTreeMap<String, Quantity>>,
    resources: Option<ResourceRequirements>,
    priority: Option<i32>,
    priority_class_name: Option<String>,
    node_name: Option<String>,
    scheduling_gates: Option<Vec<PodSchedulingGate>>,
    termination_grace_period_seconds: Option<i64>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<WireAffinity>,
    tolerations: Option<Vec<IgnoredAny>>,
}

/// Of `spec.affinity`, only the node affinity (flavors judge it); pod (anti-)affinity is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAffinity {
    node_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    phase: Option<String>,
    conditions: Option<Vec<WireCondition>>,
    container_statuses: Option<Vec<WireContainerStatus>>,
}

#[derive(Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

#[derive(Deserialize)]
struct WireContainerStatus {
    name: String,
    state: Option<WireContainerState>,
}

#[derive(Deserialize)]
struct WireContainerState {
    terminated: Option<WireTerminated>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTerminated {
    exit_code: i32,
}

impl WireStatus {
    fn into_status(self) -> PodStatus {
        PodStatus {
            phase: self.phase,
            conditions: self.conditions.map(|cs| {
                cs.into_iter()
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            container_statuses: self.container_statuses.map(|cs| {
                cs.into_iter()
                    .map(|c| ContainerStatus {
                        name: c.name,
                        state: c.state.map(|s| ContainerState {
                            terminated: s.terminated.map(|t| ContainerStateTerminated {
                                exit_code: t.exit_code,
                                ..ContainerStateTerminated::default()
                            }),
                            ..ContainerState::default()
                        }),
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        }
    }
}

impl WirePod {
    /// A `Pod` holding only the decoded fields: what [`PodFacts`] and [`CachedPod::from_pod`] read.
    fn into_pod(self) -> Pod {
        Pod {
            metadata: pod_identity!(self.metadata, labels, annotations),
            spec: self.spec.map(|s| PodSpec {
                containers: (s.containers.unwrap_or_default()).into_containers(),
                init_containers: s.init_containers.map(WireContainers::into_containers),
                overhead: s.overhead,
                resources: s.resources,
                priority: s.priority,
                priority_class_name: s.priority_class_name,
                node_name: s.node_name,
                scheduling_gates: s.scheduling_gates,
                termination_grace_period_seconds: s.termination_grace_period_seconds,
                node_selector: s.node_selector,
                affinity: s.affinity.map(|a| k8s_openapi::api::core::v1::Affinity {
                    node_affinity: a.node_affinity,
                    ..Default::default()
                }),
                // Only whether the list exists is read (the ungate patch appends to it).
                tolerations: s.tolerations.map(|_| Vec::new()),
                ..PodSpec::default()
            }),
            status: self.status.map(WireStatus::into_status),
        }
    }
}

/// `metadata.annotations`, keeping only sluice's (`sluice.dev/...`): the others are skipped
/// unread. Some (perhaps empty) when the pod has annotations, None when it has none (or null).
fn sluice_annotations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Annotations;
    impl<'v> Visitor<'v> for Annotations {
        type Value = Option<BTreeMap<String, String>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of annotations or null")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'v>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'v>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<SluiceKey>()? {
                match key.0 {
                    Some(key) => {
                        let value: String = map.next_value()?;
                        kept.insert(key, value);
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(kept))
        }
    }
    deserializer.deserialize_option(Annotations)
}

/// An annotation's key: Some when it is sluice's, None (never allocated) otherwise.
struct SluiceKey(Option<String>);

impl<'de> Deserialize<'de> for SluiceKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = SluiceKey;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an annotation key")
            }

            fn visit_str<E>(self, key: &str) -> Result<SluiceKey, E> {
                Ok(SluiceKey(
                    key.starts_with(SLUICE_ANNOTATIONS).then(|| key.to_string()),
                ))
            }
        }
        deserializer.deserialize_str(Key)
    }
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::api::{AT_CREATION_ANNOTATION, MIN_COUNT_ANNOTATION};
    use crate::queue::admission::PodState;
    use crate::queue::snapshot::{is_gated, pod_state};
    use crate::resources::pod_requests;

    /// A realistic pod with everything sluice reads and much it does not.
    fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "42",
                "labels": {"sluice.dev/queue": "q", "sluice.dev/workload": "w", "app": "x"},
                "annotations": {MIN_COUNT_ANNOTATION: "2", AT_CREATION_ANNOTATION: "t-1",
                    ADMITTED_AT_ANNOTATION: "2026-11-23T00:00:05Z", "other.io/big": "y".repeat(10_000)},
                "creationTimestamp": "2026-11-23T00:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "d", "uid": "d"}]},
            "spec": {
                "priority": 7,
                "schedulingGates": [{"name": "other.io/gate"}, {"name": ADMISSION_GATE}],
                "overhead": {"cpu": "100m"},
                "volumes": [{"name": "v", "emptyDir": {}}],
                "initContainers": [
                    {"name": "sidecar", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                    {"name": "init", "image": "i", "resources": {"requests": {"cpu": "3"}}, "env": [{"name": "A", "value": "b"}]},
                ],
                "containers": [{"name": "c", "image": "i", "command": ["run"], "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
            },
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
        })
    }

    #[test]
    fn a_cached_pod_keeps_what_admission_reads() {
        let full: Pod = serde_json::from_value(full_pod()).expect("pod");
        let cached: CachedPod = serde_json::from_value(full_pod()).expect("cached pod");
        let facts = cached.facts.as_deref().expect("governed");
        let expected = PodFacts::of(&Adapters::default(), &full).expect("governed");
        assert_eq!(format!("{facts:?}"), format!("{expected:?}"));
        assert_eq!(
            facts.requests.as_deref().ok(),
            Some(&pod_requests(full.spec.as_ref().expect("spec")).expect("requests"))
        );
        assert_eq!(facts.requests.as_ref().map(|r| r.get("cpu")), Ok(4100)); // max(2 + sidecar 1, sidecar 1 + init 3) + overhead 0.1
        assert_eq!(
            facts.requests.as_ref().map(|r| r.get("nvidia.com/gpu")),
            Ok(1000),
            "a request defaulted from a limit"
        );
        assert_eq!((facts.priority, facts.min_count), (7, Some(2)));
        assert_eq!(facts.queue, "q");
        assert_eq!(cached.admission_gate, Some(1));
        assert!(is_gated(&cached));
        assert!(cached.has_annotations);
        let at = "2026-11-23T00:00:05Z"
            .parse::<jiff::Timestamp>()
            .expect("time");
        assert_eq!(cached.admitted_at, Some(at.as_millisecond()));
        assert_eq!(cached.phase(), Some("Pending"));
        assert_eq!(pod_state(&cached, &Default::default()), PodState::Gated);
        assert_eq!(cached.metadata.name.as_deref(), Some("p"));
        assert_eq!(cached.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(cached.metadata.uid.as_deref(), Some("u"));
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            cached.metadata.creation_timestamp,
            full.metadata.creation_timestamp
        );
        // Nothing else is kept.
        assert!(cached.metadata.labels.is_none() && cached.metadata.annotations.is_none());
        assert!(cached.metadata.managed_fields.is_none());
        assert!(cached.metadata.owner_references.is_none());
    }

    #[test]
    fn a_cached_pod_is_the_same_decoded_or_converted() {
        let full: Pod = serde_json::from_value(full_pod()).expect("pod");
        let decoded: CachedPod = serde_json::from_value(full_pod()).expect("cached pod");
        let converted = CachedPod::from_pod(full);
        assert_eq!(format!("{decoded:?}"), format!("{converted:?}"));
    }

    #[test]
    fn annotations_other_than_sluices_are_skipped_but_their_presence_is_kept() {
        let decode = |annotations: serde_json::Value| -> CachedPod {
            let mut pod = full_pod();
            pod["metadata"]["annotations"] = annotations;
            serde_json::from_value(pod).expect("cached pod")
        };
        assert!(decode(json!({"a": "b"})).has_annotations);
        assert!(!decode(json!(null)).has_annotations);
        let wire: WireMeta = serde_json::from_value(
            json!({"annotations": {"a": "b", "sluice.dev/x": "1", "c": {"not": "a string"}}}),
        )
        .expect("meta");
        assert_eq!(
            wire.annotations,
            Some(BTreeMap::from([(
                "sluice.dev/x".to_string(),
                "1".to_string()
            )]))
        );
        let none: WireMeta = serde_json::from_value(json!({})).expect("meta");
        assert_eq!(none.annotations, None);
    }

    #[test]
    fn hostile_pods_are_decoded_or_refused_never_a_panic() {
        // A huge label, many labels, a huge annotation: decoded, only the facts kept.
        let mut pod = full_pod();
        pod["metadata"]["labels"]["big"] = json!("z".repeat(1 << 20));
        for i in 0..10_000 {
            pod["metadata"]["labels"][format!("l{i}")] = json!("v");
        }
        let cached: CachedPod = serde_json::from_value(pod).expect("decoded");
        assert_eq!(cached.facts.as_ref().map(|f| f.queue.as_str()), Some("q"));
        // A quantity sluice cannot read: kept, its facts say so (the pass leaves it out).
        let mut pod = full_pod();
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("lots");
        let cached: CachedPod = serde_json::from_value(pod).expect("decoded");
        let facts = cached.facts.expect("governed");
        assert!(facts.requests.is_err(), "{:?}", facts.requests);
        // An unreadable admitted-at reads as none; an unknown phase is kept as it is.
        let mut pod = full_pod();
        pod["metadata"]["annotations"][ADMITTED_AT_ANNOTATION] = json!("yesterday");
        pod["status"]["phase"] = json!("Weird");
        let cached: CachedPod = serde_json::from_value(pod).expect("decoded");
        assert_eq!((cached.admitted_at, cached.phase()), (None, Some("Weird")));
        // Wrong types are refused with the field, as for a Pod.
        for (path, value) in [
            ("spec", json!({"priority": "high"})),
            ("metadata", json!([])),
        ] {
            let mut pod = full_pod();
            pod[path] = value;
            assert!(serde_json::from_value::<CachedPod>(pod).is_err(), "{path}");
        }
        // No spec: not governed; no metadata at all: nothing to identify.
        let bare: CachedPod =
            serde_json::from_value(json!({"metadata": {"name": "p"}})).expect("decoded");
        assert!(bare.facts.is_none() && bare.admission_gate.is_none());
    }

    #[test]
    fn equal_requests_are_one_copy_while_held() {
        let decode = |cpu: &str| -> CachedPod {
            let mut pod = full_pod();
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!(cpu);
            serde_json::from_value(pod).expect("decoded")
        };
        let requests = |p: &CachedPod| p.facts.as_ref().and_then(|f| f.requests.clone().ok());
        let (a, b, c) = (decode("7"), decode("7"), decode("8"));
        let (ra, rb, rc) = (requests(&a), requests(&b), requests(&c));
        assert!(ra.is_some() && rc.is_some());
        assert!(matches!((&ra, &rb), (Some(x), Some(y)) if Arc::ptr_eq(x, y)));
        assert!(matches!((&ra, &rc), (Some(x), Some(y)) if !Arc::ptr_eq(x, y)));
        // Many distinct lists: those no pod holds any more are forgotten.
        let mut shared = SharedLists::default();
        for n in 0..1000 {
            let mut list = ResourceList::new();
            list.add("cpu", n);
            drop(shared.get(list));
        }
        assert!(shared.lists.len() <= 129, "{}", shared.lists.len());
    }

    #[test]
    fn a_pod_no_integration_governs_has_no_facts() {
        let mut pod = full_pod();
        pod["metadata"]["labels"] = json!({"app": "x"});
        let cached: CachedPod = serde_json::from_value(pod).expect("decoded");
        assert!(cached.facts.is_none());
    }
}
