//! What a run puts on the cluster: at `--setup` the PriorityClasses, namespaces and queues (and for
//! the TAS shape the racked nodes and Kueue's Topology), then each workload as a plain pod or a Job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::suite::{
    BLOCK_LABEL, BORROWING_CPU, Class, NODE_CPU, NODE_GROUP_LABEL, NODE_MEMORY, NOMINAL_CPU,
    RACK_LABEL, RACKS, Shape, TopologyAsk, WorkloadKind, priority_class, queue_names,
};
use crate::{Args, Mode};

async fn apply(
    client: &Client,
    ar: &ApiResource,
    ns: Option<&str>,
    obj: Value,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pp = PatchParams::apply("peer-suite").force();
    api.patch(&name, &pp, &Patch::Apply(&obj))
        .await
        .map_err(|e| anyhow::anyhow!("applying {} {name}: {e}", ar.kind))?;
    Ok(())
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn kueue(kind: &str, plural: &str) -> ApiResource {
    resource("kueue.x-k8s.io", "v1beta2", kind, plural)
}

/// The nodes of the TAS shape: `peer-tas-r<rack>-n<node>`, kwok's (annotated for it), labelled
/// with their block, rack and Kueue's node group. One set for every run of the cluster (apply).
pub fn tas_node_name(rack: usize, node: usize) -> String {
    format!("peer-tas-r{rack}-n{node}")
}

async fn setup_tas_nodes(client: &Client, nodes_per_rack: usize) -> anyhow::Result<()> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for rack in 0..RACKS {
        for n in 0..nodes_per_rack {
            let name = tas_node_name(rack, n);
            let node = json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", "bench.sluice.dev/peer-tas": "on",
                        BLOCK_LABEL: "b0", RACK_LABEL: format!("r{rack}"), NODE_GROUP_LABEL: "tas"}},
                // Create keeps the status it is given: the nodes' capacity (as hack/cluster.sh does).
                "status": {"allocatable": {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": "110"},
                    "capacity": {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": "110"},
                    "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake",
                        "kubeProxyVersion": "fake", "operatingSystem": "linux"},
                    "phase": "Running"}});
            match nodes
                .create(&PostParams::default(), &serde_json::from_value(node)?)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => anyhow::bail!("creating node {name}: {e}"),
            }
        }
    }
    Ok(())
}

/// Kueue's side of the TAS shape: its Topology (block, rack, host) and a flavor on the racked nodes.
async fn setup_kueue_flavor(client: &Client, args: &Args) -> anyhow::Result<()> {
    let mut flavor = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": format!("{}-rf", args.prefix)}});
    if args.shape == Shape::Tas {
        let topology = format!("{}-topology", args.prefix);
        let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
            "metadata": {"name": topology},
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL},
                {"nodeLabel": "kubernetes.io/hostname"}]}});
        apply(client, &kueue("Topology", "topologies"), None, obj).await?;
        flavor["spec"] = json!({"nodeLabels": {NODE_GROUP_LABEL: "tas"}, "topologyName": topology});
    }
    apply(
        client,
        &kueue("ResourceFlavor", "resourceflavors"),
        None,
        flavor,
    )
    .await
}

pub async fn setup(client: &Client, args: &Args) -> anyhow::Result<()> {
    let pc = resource(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
    );
    for class in args.shape.classes() {
        let obj = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": priority_class(class.priority)}, "value": class.priority});
        apply(client, &pc, None, obj).await?;
    }
    if args.shape == Shape::Tas {
        setup_tas_nodes(client, args.nodes_per_rack).await?;
    }
    if args.mode == Mode::Kueue {
        setup_kueue_flavor(client, args).await?;
    }
    let ns_res = resource("", "v1", "Namespace", "namespaces");
    for (name, cohort) in queue_names(&args.prefix, args.cohorts, args.queues_per_cohort) {
        let mut labels = json!({"bench.sluice.dev/peer-suite": args.prefix});
        if args.mode == Mode::Kueue {
            labels["bench.sluice.dev/kueue"] = json!("on");
        }
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}});
        apply(client, &ns_res, None, obj).await?;
        match args.mode {
            Mode::Sluice => setup_sluice_queue(client, &name, &cohort).await?,
            Mode::Kueue => setup_kueue_queue(client, args, &name, &cohort).await?,
        }
    }
    Ok(())
}

async fn setup_sluice_queue(client: &Client, name: &str, cohort: &str) -> anyhow::Result<()> {
    let cq = resource("sluice.dev", "v1alpha1", "CapacityQueue", "capacityqueues");
    let obj = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
        "metadata": {"name": name},
        "spec": {"quota": {"cpu": NOMINAL_CPU.to_string()}, "cohort": cohort,
            "borrowingLimit": {"cpu": BORROWING_CPU.to_string()},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
            "preemption": {"withinQueue": "LowerPriority", "reclaimWithinCohort": "Any"}}});
    apply(client, &cq, None, obj).await
}

async fn setup_kueue_queue(
    client: &Client,
    args: &Args,
    name: &str,
    cohort: &str,
) -> anyhow::Result<()> {
    let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohortName": cohort, "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": format!("{}-rf", args.prefix),
                "resources": [{"name": "cpu", "nominalQuota": NOMINAL_CPU.to_string(),
                    "borrowingLimit": BORROWING_CPU.to_string()}]}]}]}});
    apply(client, &kueue("ClusterQueue", "clusterqueues"), None, obj).await?;
    let obj = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": name}, "spec": {"clusterQueue": name}});
    apply(client, &kueue("LocalQueue", "localqueues"), Some(name), obj).await
}

/// The labels every pod of a run carries: the watch selects them, the workload's index finds it.
fn pod_labels(args: &Args, workload: usize) -> serde_json::Map<String, Value> {
    let mut labels = serde_json::Map::new();
    labels.insert("bench".into(), json!("peer-suite"));
    labels.insert(
        "bench.sluice.dev/workload".into(),
        json!(workload.to_string()),
    );
    labels.insert("bench.sluice.dev/peer-run".into(), json!(args.prefix));
    labels
}

fn queue_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Sluice => "sluice.dev/queue",
        Mode::Kueue => "kueue.x-k8s.io/queue-name",
    }
}

/// The topology ask as each system reads it (on the pod template). sluice has no slices: Kueue's
/// balanced sets run as preferred there.
fn topology_annotations(mode: Mode, ask: TopologyAsk) -> Value {
    match (mode, ask) {
        (Mode::Sluice, TopologyAsk::Required) => {
            json!({"sluice.dev/topology-required": RACK_LABEL})
        }
        (Mode::Sluice, _) => json!({"sluice.dev/topology-preferred": RACK_LABEL}),
        (Mode::Kueue, TopologyAsk::Required) => {
            json!({"kueue.x-k8s.io/podset-required-topology": RACK_LABEL})
        }
        (Mode::Kueue, TopologyAsk::Preferred) => {
            json!({"kueue.x-k8s.io/podset-preferred-topology": RACK_LABEL})
        }
        (Mode::Kueue, TopologyAsk::Balanced { slice }) => json!({
            "kueue.x-k8s.io/podset-slice-required-topology": RACK_LABEL,
            "kueue.x-k8s.io/podset-slice-size": slice.to_string()}),
    }
}

fn pod_spec(class: &Class) -> Value {
    let cpu = format!("{}m", class.pod_millicpu);
    json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "priorityClassName": priority_class(class.priority),
        "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}],
    })
}

/// One plain pod standing for a workload (the baseline as pods).
pub fn pod(
    args: &Args,
    queue: &str,
    class: &Class,
    name: &str,
    workload: usize,
) -> anyhow::Result<Pod> {
    let mut labels = pod_labels(args, workload);
    labels.insert(queue_label(args.mode).into(), json!(queue));
    let obj = json!({"metadata": {"name": name, "namespace": queue, "labels": labels}, "spec": pod_spec(class)});
    Ok(serde_json::from_value(obj)?)
}

/// One Job standing for a workload: its pods held running on kwok (`sluice.dev/kwok-hold`) until
/// the load ends them; Kueue's created suspended, as Kueue's users do; a Job preempted over and over
/// never runs out of retries.
pub fn job(
    args: &Args,
    queue: &str,
    class: &Class,
    name: &str,
    workload: usize,
) -> anyhow::Result<Job> {
    let mut annotations = json!({"sluice.dev/kwok-hold": "true"});
    if let (Some(ask), Some(map)) = (class.topology, annotations.as_object_mut())
        && let Value::Object(more) = topology_annotations(args.mode, ask)
    {
        map.extend(more);
    }
    let obj = json!({
        "metadata": {"name": name, "namespace": queue, "labels": {queue_label(args.mode): queue}},
        "spec": {
            "parallelism": class.pods, "completions": class.pods, "backoffLimit": 1_000_000,
            "suspend": args.mode == Mode::Kueue,
            "template": {"metadata": {"labels": pod_labels(args, workload), "annotations": annotations},
                "spec": pod_spec(class)},
        },
    });
    Ok(serde_json::from_value(obj)?)
}

/// Creates a workload's object, retrying what the API server refuses for a while (an overloaded
/// server's 429s and timeouts); one that exists already counts as created.
pub async fn create<K>(client: &Client, obj: &K) -> bool
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), &ns);
    for _ in 0..20 {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => return true,
            Err(kube::Error::Api(e)) if e.code == 409 => return true,
            Err(e) => {
                eprintln!("create {}: {e}", obj.name_any());
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
    false
}

/// Whether the shape and kind go together: the TAS shape's workloads are multi-pod, so Jobs.
pub fn check(args: &Args) -> anyhow::Result<()> {
    if args.shape == Shape::Tas && args.workload_kind == WorkloadKind::Pods {
        anyhow::bail!("--shape tas runs its 2-, 4- and 8-pod workloads as Jobs: add --as jobs");
    }
    Ok(())
}
