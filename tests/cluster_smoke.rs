//! The local control plane itself (hack/cluster.sh): real kube-apiserver, controller-manager and
//! scheduler, kwok nodes, and the operators it runs on the host. If these fail, nothing else can be
//! trusted. Run with `hack/test.sh --test cluster_smoke` (or `hack/cluster.sh up --with-kuberay` and
//! `eval "$(hack/cluster.sh env)"` first).

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client};
use serde_json::json;
use support::*;

fn phase(p: &Pod) -> Option<&str> {
    p.status.as_ref()?.phase.as_deref()
}

fn dynamic(
    client: &Client,
    ns: Option<&str>,
    gvk: (&str, &str, &str),
    plural: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(gvk.0, gvk.1, gvk.2), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn has_crd(client: &Client, name: &str) -> bool {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get CRD {name}: {e}"))
        .is_some()
}

#[tokio::test]
async fn a_deployment_runs_on_kwok_nodes() {
    let env = env_or_skip!("smoke-deploy");
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
        },
    }))
    .expect("deployment");
    create(&deployments, &d).await;
    wait_for("3 ready replicas", Duration::from_secs(60), || async {
        let d = deployments.get("web").await.ok()?;
        (d.status?.ready_replicas? == 3).then_some(())
    })
    .await;
    let pods = env
        .pods()
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods")
        .items;
    assert_eq!(pods.len(), 3);
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert!(
            node.starts_with("kwok-node-"),
            "scheduled on a kwok node, got {node:?}"
        );
        assert_eq!(phase(p), Some("Running"));
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_gated_pod_waits_until_its_gate_is_removed() {
    let env = env_or_skip!("smoke-gate");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "gated"},
        "spec": {"schedulingGates": [{"name": "example.com/hold"}], "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    env.create_pod(p).await;
    let reason = wait_for(
        "PodScheduled=False with reason SchedulingGated",
        Duration::from_secs(30),
        || async {
            let p = env.pods().get("gated").await.ok()?;
            let c = p
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "PodScheduled")?;
            (c.status == "False").then_some(c.reason.unwrap_or_default())
        },
    )
    .await;
    assert_eq!(reason, "SchedulingGated");
    let gated = env.pods().get("gated").await.expect("pod");
    assert_eq!(phase(&gated), Some("Pending"));
    assert_eq!(
        gated.spec.and_then(|s| s.node_name),
        None,
        "a gated pod is not bound"
    );

    let remove: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": "/spec/schedulingGates"}]))
            .expect("patch");
    env.pods()
        .patch("gated", &PatchParams::default(), &Patch::<()>::Json(remove))
        .await
        .expect("ungate");
    wait_for(
        "the ungated pod to run",
        Duration::from_secs(60),
        || async { (phase(&env.pods().get("gated").await.ok()?) == Some("Running")).then_some(()) },
    )
    .await;
    env.cleanup().await;
}

#[tokio::test]
async fn pods_are_ended_on_purpose_by_annotation() {
    let env = env_or_skip!("smoke-end");
    for name in ["ok", "bad"] {
        let p: Pod = serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        )
        .expect("pod");
        env.create_pod(p).await;
    }
    for name in ["ok", "bad"] {
        wait_for(
            &format!("pod {name} to run"),
            Duration::from_secs(60),
            || async {
                (phase(&env.pods().get(name).await.ok()?) == Some("Running")).then_some(())
            },
        )
        .await;
    }
    end_pod(&env.pods(), "ok", "Succeeded").await;
    end_pod(&env.pods(), "bad", "Failed").await;
    for (name, want_phase, want_code) in [("ok", "Succeeded", 0), ("bad", "Failed", 1)] {
        let code = wait_for(
            &format!("pod {name} to end {want_phase}"),
            Duration::from_secs(60),
            || async {
                let status = env.pods().get(name).await.ok()?.status?;
                if status.phase.as_deref() != Some(want_phase) {
                    return None;
                }
                status
                    .container_statuses?
                    .first()?
                    .state
                    .as_ref()?
                    .terminated
                    .as_ref()
                    .map(|t| t.exit_code)
            },
        )
        .await;
        assert_eq!(code, want_code, "exit code of pod {name}");
    }
    env.cleanup().await;
}

#[tokio::test]
async fn kuberay_reconciles_a_raycluster_into_a_head_pod() {
    let env = env_or_skip!("smoke-ray");
    assert!(
        has_crd(&env.client, "rayclusters.ray.io").await,
        "the RayCluster CRD is missing: run the tests with hack/test.sh (it starts the cluster with --with-kuberay)"
    );
    let clusters = rayclusters(&env);
    let container = |name: &str| ray_container(name, "1", "2Gi");
    let rc = raycluster(
        "smoke",
        None,
        raycluster_spec([1, 1, 3], container, json!({})),
    );
    create(&clusters, &rc).await;
    wait_for(
        "KubeRay to create a running head pod",
        Duration::from_secs(90),
        || async {
            let lp = ListParams::default().labels("ray.io/cluster=smoke,ray.io/node-type=head");
            let pods = env.pods().list(&lp).await.ok()?.items;
            pods.iter()
                .any(|p| phase(p) == Some("Running"))
                .then_some(())
        },
    )
    .await;
    env.cleanup().await;
}

/// Runs when the cluster has the Spark operator (hack/cluster.sh up --with-spark-operator): the
/// operator runs spark-submit on the host, which creates the driver pod.
#[tokio::test]
async fn the_spark_operator_submits_a_driver_pod() {
    let env = env_or_skip!("smoke-spark");
    if !has_crd(&env.client, "sparkapplications.sparkoperator.k8s.io").await {
        eprintln!(
            "skipped: no Spark operator in this cluster (hack/cluster.sh up --with-spark-operator)"
        );
        env.cleanup().await;
        return;
    }
    let apps = spark_applications(&env);
    let app = spark_application(
        "pi",
        None,
        spark_pi(
            json!({"serviceAccount": "default"}),
            json!({"instances": 1}),
        ),
    );
    create(&apps, &app).await;
    let driver = wait_for(
        "spark-submit to create a running driver pod",
        Duration::from_secs(120),
        || async {
            let lp =
                ListParams::default().labels("spark-role=driver,sparkoperator.k8s.io/app-name=pi");
            let pods = env.pods().list(&lp).await.ok()?.items;
            pods.into_iter()
                .find(|p| phase(p) == Some("Running"))
                .and_then(|p| p.metadata.name)
        },
    )
    .await;
    let state = |want: &'static str| {
        let apps = apps.clone();
        move || {
            let apps = apps.clone();
            async move {
                let app = apps.get("pi").await.ok()?;
                let state = app
                    .data
                    .pointer("/status/applicationState/state")?
                    .as_str()?
                    .to_string();
                (state == want).then_some(())
            }
        }
    };
    wait_for(
        "the SparkApplication to be RUNNING",
        Duration::from_secs(60),
        state("RUNNING"),
    )
    .await;
    end_pod(&env.pods(), &driver, "Succeeded").await;
    wait_for(
        "the SparkApplication to be COMPLETED",
        Duration::from_secs(60),
        state("COMPLETED"),
    )
    .await;
    env.cleanup().await;
}

/// Runs when the cluster has Kueue (hack/cluster.sh up --with-kueue): a Job in a LocalQueue is
/// admitted, runs on kwok nodes and completes.
#[tokio::test]
async fn kueue_admits_a_job() {
    let env = env_or_skip!("smoke-kueue");
    if !has_crd(&env.client, "clusterqueues.kueue.x-k8s.io").await {
        eprintln!("skipped: no Kueue in this cluster (hack/cluster.sh up --with-kueue)");
        env.cleanup().await;
        return;
    }
    let name = env.namespace.clone();
    let flavors = dynamic(
        &env.client,
        None,
        ("kueue.x-k8s.io", "v1beta2", "ResourceFlavor"),
        "resourceflavors",
    );
    let cluster_queues = dynamic(
        &env.client,
        None,
        ("kueue.x-k8s.io", "v1beta2", "ClusterQueue"),
        "clusterqueues",
    );
    let local_queues = dynamic(
        &env.client,
        Some(&env.namespace),
        ("kueue.x-k8s.io", "v1beta2", "LocalQueue"),
        "localqueues",
    );
    let object = |v: serde_json::Value| serde_json::from_value::<DynamicObject>(v).expect("object");
    flavors
        .create(
            &PostParams::default(),
            &object(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}})),
        )
        .await
        .expect("create ResourceFlavor");
    cluster_queues
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                    "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": name, "resources": [
                        {"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "8Gi"}]}]}],
                },
            })),
        )
        .await
        .expect("create ClusterQueue");
    local_queues
        .create(
            &PostParams::default(),
            &object(json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q"},
                           "spec": {"clusterQueue": name}})),
        )
        .await
        .expect("create LocalQueue");
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.namespace);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "work", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {"parallelism": 2, "completions": 2, "suspend": true, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        }}},
    }))
    .expect("job");
    create(&jobs, &job).await;
    wait_for(
        "Kueue to admit the Job and the Job to complete",
        Duration::from_secs(120),
        || async {
            let status = jobs.get("work").await.ok()?.status?;
            (status.succeeded? == 2).then_some(())
        },
    )
    .await;
    env.cleanup().await;
    let _ = cluster_queues.delete(&name, &DeleteParams::default()).await;
    let _ = flavors.delete(&name, &DeleteParams::default()).await;
}
