//! The real node of the local cluster (`hack/cluster.sh up --real-node`, hack/realnode.sh): a kubelet
//! with containerd and runc beside the kwok nodes, running images built on this machine. Containers
//! really run here: exit codes, logs and ephemeral containers are the kubelet's, not made up.
//!
//! This target is not part of `cargo test --workspace` (`test = false` in Cargo.toml): its last test
//! deploys sluice in-cluster from manifests/, which cannot share a cluster with `sluice serve --local`
//! on the host (both own the webhook configurations named sluice and the controller's Lease).
//! hack/test.sh runs it on a cluster of its own; alone: `hack/test.sh --test real_node`.

mod support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

/// What hack/realnode.sh gives the node: a label to choose it, a taint so nothing lands by chance.
const NODE_LABEL: (&str, &str) = ("sluice.dev/node", "real");
const NODE_TAINT: &str = "sluice.dev/real-node";
/// busybox from Debian's busybox-static, imported by hack/realnode.sh (no registry: never pulled).
const BUSYBOX: &str = "sluice.local/busybox:1.35.0";
/// Containers start, run and end on the real node within this (images are local).
const RUN_TIMEOUT: Duration = Duration::from_secs(90);

/// A pod for the real node: its node selector and toleration, one busybox container running `script`.
fn real_pod(name: &str, script: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
            "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
            }],
        },
    }))
    .expect("pod")
}

fn main_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()
}

/// Fails the test with the pod's status when it was never scheduled to the real node.
async fn wait_running(env: &TestEnv, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} to run on the real node"),
        RUN_TIMEOUT,
        || async {
            let p = env.pods().get(name).await.ok()?;
            let running = main_status(&p)?.state.as_ref()?.running.is_some();
            running.then_some(p)
        },
    )
    .await
}

async fn real_node_name(env: &TestEnv) -> String {
    let nodes: Api<Node> = Api::all(env.client.clone());
    let list = nodes
        .list(&ListParams::default().labels(&format!("{}={}", NODE_LABEL.0, NODE_LABEL.1)))
        .await
        .expect("list nodes");
    let node = list.items.first().unwrap_or_else(|| {
        panic!(
            "no node labelled {}={}: bring the cluster up with `hack/cluster.sh up --real-node` (root only)",
            NODE_LABEL.0, NODE_LABEL.1
        )
    });
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == NODE_TAINT && t.effect == "NoSchedule"),
        "the real node carries the taint {NODE_TAINT}:NoSchedule, got {taints:?}"
    );
    // Its status is the kubelet's own, never kwok's (kwok manages only nodes annotated as fake).
    let info = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.clone())
        .unwrap_or_else(|| panic!("the real node reports nodeInfo: {:?}", node.status));
    assert!(
        info.kubelet_version.starts_with("v1."),
        "a real kubelet's version, got {:?}",
        info.kubelet_version
    );
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "containerd as the runtime, got {:?}",
        info.container_runtime_version
    );
    assert!(
        !node.annotations().contains_key("kwok.x-k8s.io/node"),
        "kwok does not manage the real node"
    );
    node.name_any()
}

#[tokio::test]
async fn a_failing_container_reports_its_exit_code_and_log() {
    let env = TestEnv::new("real-exit").await;
    let node = real_node_name(&env).await;
    env.create_pod(real_pod("exit3", "echo hi; exit 3")).await;
    let pod = wait_for("pod exit3 to fail", RUN_TIMEOUT, || async {
        let p = env.pods().get("exit3").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(p)
    })
    .await;
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node.as_str()),
        "ran on the real node"
    );
    let terminated = main_status(&pod)
        .and_then(|s| s.state.as_ref()?.terminated.clone())
        .unwrap_or_else(|| panic!("a terminated container status, got {:?}", pod.status));
    assert_eq!(terminated.exit_code, 3, "the container's real exit code");
    // The log subresource: the API server asks the kubelet (kubectl logs does the same).
    let log = env
        .pods()
        .logs("exit3", &LogParams::default())
        .await
        .expect("pod log through the API server");
    assert_eq!(log, "hi\n");
    env.cleanup().await;
}

#[tokio::test]
async fn an_ephemeral_container_runs_in_a_running_pod() {
    let env = TestEnv::new("real-ephemeral").await;
    env.create_pod(real_pod("target", "echo started; exec sleep 3600"))
        .await;
    wait_running(&env, "target").await;
    let patch = json!({"spec": {"ephemeralContainers": [{
        "name": "debug", "image": BUSYBOX, "imagePullPolicy": "Never",
        "command": ["sh", "-c", "echo from the ephemeral container; ls /proc/1/cmdline >/dev/null; exit 7"],
    }]}});
    env.pods()
        .patch_ephemeral_containers("target", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("add an ephemeral container");
    let code = wait_for("the ephemeral container to end", RUN_TIMEOUT, || async {
        let p = env.pods().get("target").await.ok()?;
        let status = p
            .status?
            .ephemeral_container_statuses?
            .into_iter()
            .find(|s| s.name == "debug")?;
        status.state?.terminated.map(|t| t.exit_code)
    })
    .await;
    assert_eq!(code, 7, "the ephemeral container's real exit code");
    let log = env
        .pods()
        .logs(
            "target",
            &LogParams {
                container: Some("debug".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect("the ephemeral container's log");
    assert_eq!(log, "from the ephemeral container\n");
    // The pod's own container is untouched and still runs.
    let p = env.pods().get("target").await.expect("pod");
    assert!(
        main_status(&p)
            .and_then(|s| s.state.as_ref()?.running.as_ref())
            .is_some(),
        "the main container still runs: {:?}",
        p.status
    );
    env.cleanup().await;
}

async fn kubectl(args: &[&str]) -> String {
    let out = tokio::process::Command::new("kubectl")
        .args(args)
        .output()
        .await
        .expect("kubectl on PATH (eval \"$(hack/cluster.sh env)\")");
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn sluice_in_cluster_serves_its_webhooks_through_the_service_and_admits() {
    let mut env = TestEnv::new("real-sluice").await;
    let node = real_node_name(&env).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    if let Some(existing) = mutating.get_opt("sluice").await.expect("get webhooks") {
        let url = existing
            .webhooks
            .unwrap_or_default()
            .iter()
            .any(|w| w.client_config.url.is_some());
        assert!(
            !url,
            "sluice runs on the host (sluice serve --local registered URL webhooks): this test needs a \
             cluster without --with-sluice; run it with `hack/test.sh --test real_node`"
        );
    }
    // The way README tells users to install, plus what this node needs: its toleration and selector.
    let root = repo_root();
    let crds = root.join("manifests/crds");
    let install = root.join("manifests/install");
    kubectl(&["apply", "--server-side", "-f", crds.to_str().expect("path")]).await;
    kubectl(&[
        "wait",
        "--for",
        "condition=Established",
        "--timeout",
        "60s",
        "-f",
        crds.to_str().expect("path"),
    ])
    .await;
    kubectl(&["apply", "-f", install.to_str().expect("path")]).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), "sluice-system");
    let on_real_node = json!({"spec": {"template": {"spec": {
        "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
        "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }}}});
    deployments
        .patch(
            "sluice",
            &PatchParams::default(),
            &Patch::Strategic(&on_real_node),
        )
        .await
        .expect("put sluice on the real node");
    wait_for(
        "sluice's two replicas to be ready on the real node",
        Duration::from_secs(180),
        || async {
            let d = deployments.get("sluice").await.ok()?;
            let s = d.status?;
            (s.updated_replicas? == 2 && s.ready_replicas? == 2 && s.replicas? == 2).then_some(())
        },
    )
    .await;
    let sluice_pods: Api<Pod> = Api::namespaced(env.client.clone(), "sluice-system");
    for p in sluice_pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=sluice"))
        .await
        .expect("sluice pods")
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some(node.as_str())
        );
    }
    // The webhooks point at the Service, and the Service's endpoints are the pods on the real node.
    let config = mutating.get("sluice").await.expect("webhook configuration");
    for w in config.webhooks.unwrap_or_default() {
        let svc = w.client_config.service.as_ref().unwrap_or_else(|| {
            panic!(
                "webhook {} calls a Service, got {:?}",
                w.name, w.client_config
            )
        });
        assert_eq!(
            (svc.namespace.as_str(), svc.name.as_str()),
            ("sluice-system", "sluice-webhook")
        );
        assert!(
            w.client_config.ca_bundle.is_some(),
            "sluice wrote its CA bundle"
        );
    }
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "sluice-system");
    let ready = wait_for(
        "two ready endpoints of the Service sluice-webhook",
        Duration::from_secs(60),
        || async {
            let list = slices
                .list(&ListParams::default().labels("kubernetes.io/service-name=sluice-webhook"))
                .await
                .ok()?;
            let n = list
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter().flatten())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                .count();
            (n == 2).then_some(n)
        },
    )
    .await;
    assert_eq!(ready, 2);

    // A queue of 1 cpu, two pods of 1 cpu: the webhook gates both, the controller admits one, and the
    // other when the first ends.
    let queue = env.queue("q", json!({"cpu": "1"}), "StrictFIFO").await;
    let first = env.create_pod(pod("first", &queue, "1")).await;
    assert!(
        is_gated(&first),
        "created with sluice's gate (the webhook ran)"
    );
    wait_for("first to be admitted", Duration::from_secs(60), || async {
        let p = env.pods().get("first").await.ok()?;
        (!is_gated(&p)).then_some(())
    })
    .await;
    let second = env.create_pod(pod("second", &queue, "1")).await;
    assert!(is_gated(&second), "created with sluice's gate");
    env.wait_queue_counts(&queue, 1, 1).await;
    assert!(is_gated(&env.pods().get("second").await.expect("second")));
    end_pod(&env.pods(), "first", "Succeeded").await;
    wait_for("second to be admitted", Duration::from_secs(60), || async {
        let p = env.pods().get("second").await.ok()?;
        (!is_gated(&p)).then_some(())
    })
    .await;
    env.cleanup().await;
}
