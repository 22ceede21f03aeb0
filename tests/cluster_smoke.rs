//! The local control plane itself (hack/cluster.sh): real kube-apiserver, controller-manager and
//! scheduler, kwok nodes. If these fail, nothing else can be trusted.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use support::*;

#[tokio::test]
async fn a_deployment_runs_on_kwok_nodes() {
    let env = TestEnv::new("smoke-deploy").await;
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
    deployments
        .create(&Default::default(), &d)
        .await
        .expect("create deployment");
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
    }
    env.cleanup().await;
}

#[tokio::test]
async fn a_gated_pod_waits_until_its_gate_is_removed() {
    let env = TestEnv::new("smoke-gate").await;
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
    assert_eq!(
        gated.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
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
        || async {
            let p = env.pods().get("gated").await.ok()?;
            (p.status?.phase.as_deref() == Some("Running")).then_some(())
        },
    )
    .await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_pod_is_ended_on_purpose() {
    let env = TestEnv::new("smoke-end").await;
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "job"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).expect("pod");
    env.create_pod(p).await;
    wait_for("the pod to run", Duration::from_secs(60), || async {
        (env.pods().get("job").await.ok()?.status?.phase.as_deref() == Some("Running"))
            .then_some(())
    })
    .await;
    end_pod(&env.pods(), "job", "Failed").await;
    let exit_code = wait_for("the pod to fail", Duration::from_secs(60), || async {
        let status = env.pods().get("job").await.ok()?.status?;
        if status.phase.as_deref() != Some("Failed") {
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
    })
    .await;
    assert_eq!(exit_code, 1);
    env.cleanup().await;
}

#[tokio::test]
async fn kuberay_reconciles_a_raycluster_into_a_head_pod() {
    let env = TestEnv::new("smoke-ray").await;
    let resource = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(env.client.clone());
    assert!(
        crds.get_opt("rayclusters.ray.io")
            .await
            .expect("get CRD")
            .is_some(),
        "the RayCluster CRD is missing: run the tests with hack/test.sh (it starts the cluster with --with-kuberay)"
    );
    let clusters: Api<kube::api::DynamicObject> =
        Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let container = |name: &str| json!({"name": name, "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}});
    let rc: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "smoke"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container("ray-head")]}}},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 1, "minReplicas": 1, "maxReplicas": 3, "rayStartParams": {},
                                  "template": {"spec": {"containers": [container("ray-worker")]}}}],
        },
    }))
    .expect("raycluster");
    clusters
        .create(&Default::default(), &rc)
        .await
        .expect("create RayCluster");
    wait_for(
        "KubeRay to create a running head pod",
        Duration::from_secs(90),
        || async {
            let pods = env
                .pods()
                .list(&ListParams::default().labels("ray.io/cluster=smoke,ray.io/node-type=head"))
                .await
                .ok()?
                .items;
            pods.into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .map(|_| ())
        },
    )
    .await;
    env.cleanup().await;
}
