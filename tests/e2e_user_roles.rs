//! The user roles of the install (charts/sluice/templates/user-roles.yaml, in dist/sluice.yaml):
//! aggregated into the built-in `view` / `edit` / `admin`, so a namespace user bound to one of them
//! reads sluice's objects in that namespace and nowhere else, reads CapacityQueues (cluster-wide,
//! through `sluice-queue-reader`), and only `edit` writes ScavengerJobs. Checked with real
//! requests, impersonating the users (the local cluster's admin may impersonate).
//!
//! The roles are rendered by the chart with Helm (built by `hack/cluster.sh build`) and applied with
//! server-side apply, as an install would.

#[path = "support/helm.rs"]
mod helm;
mod support;

use std::time::Duration;

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use sluice::api::{CapacityQueue, DynamicWorkload, ScavengerJob};
use support::*;

async fn client_as(user: &str) -> Client {
    let _ = client().await;
    let mut config = kube::Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).expect("client")
}

fn helm() -> std::path::PathBuf {
    helm::helm_path(&repo_root())
}

/// Renders the chart's user roles and applies them (server-side apply, field manager of the test).
async fn apply_user_roles(client: &Client) {
    let text = output_of(
        std::process::Command::new(helm())
            .current_dir(repo_root())
            .args([
                "template",
                "sluice",
                "charts/sluice",
                "--namespace",
                "sluice-system",
                "--show-only",
                "templates/user-roles.yaml",
            ]),
        "helm template (hack/cluster.sh build builds helm)",
    );
    use serde::Deserialize;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = serde_norway::Value::deserialize(doc).expect("yaml");
        if value.is_null() {
            continue;
        }
        let object: kube::api::DynamicObject = serde_norway::from_value(value).expect("object");
        let types = object.types.clone().expect("types");
        let plural = match types.kind.as_str() {
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            other => panic!("unexpected kind {other} in user-roles.yaml"),
        };
        let gvk = kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", &types.kind);
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
        let name = object.metadata.name.clone().expect("name");
        api.patch(
            &name,
            &PatchParams::apply("sluice-e2e-user-roles").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {} {name}: {e}", types.kind));
    }
}

async fn bind(env: &TestEnv, user: &str, cluster_role: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-{cluster_role}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .expect("binding");
    create(
        &Api::<RoleBinding>::namespaced(env.client.clone(), &env.namespace),
        &binding,
    )
    .await;
}

fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(ref s)) if s.code == 403)
}

#[tokio::test]
async fn namespace_users_with_view_or_edit_read_their_workloads_and_queues_and_nothing_elsewhere() {
    let mut env = env_or_skip!("roles");
    let other = TestEnv::new("roles-other").await;
    apply_user_roles(&env.client).await;
    let (viewer, editor) = (
        format!("{}-viewer", env.namespace),
        format!("{}-editor", env.namespace),
    );
    bind(&env, &viewer, "view").await;
    bind(&env, &editor, "edit").await;
    // A DynamicWorkload in each namespace: a governed pod's ledger.
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    env.create_pod(pod("p", &queue, "100m")).await;
    let theirs = other.pods();
    theirs
        .create(&PostParams::default(), &pod("p", &queue, "100m"))
        .await
        .expect("a pod in the other namespace");
    let admin_dwl: Api<DynamicWorkload> = Api::namespaced(env.client.clone(), &other.namespace);
    wait_for("both ledgers", Duration::from_secs(30), || async {
        let mine = env
            .workloads()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        let theirs = admin_dwl
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .len();
        (mine == 1 && theirs == 1).then_some(())
    })
    .await;

    for user in [&viewer, &editor] {
        let client = client_as(user).await;
        let mine: Api<DynamicWorkload> = Api::namespaced(client.clone(), &env.namespace);
        // The aggregation controller adds the rules to view/edit within moments of the apply.
        let listed = wait_for(
            &format!("{user} to list DynamicWorkloads in its namespace"),
            Duration::from_secs(30),
            || async { mine.list(&ListParams::default()).await.ok() },
        )
        .await;
        assert_eq!(listed.items.len(), 1, "{user} sees its namespace's ledger");
        let sj: Api<ScavengerJob> = Api::namespaced(client.clone(), &env.namespace);
        sj.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("{user} lists ScavengerJobs in its namespace: {e}"));
        let queues: Api<CapacityQueue> = Api::all(client.clone());
        queues
            .get(&queue)
            .await
            .unwrap_or_else(|e| panic!("{user} reads the CapacityQueue {queue}: {e}"));
        // Elsewhere: refused.
        let elsewhere: Api<DynamicWorkload> = Api::namespaced(client.clone(), &other.namespace);
        assert!(
            forbidden(elsewhere.list(&ListParams::default()).await),
            "{user} may not list DynamicWorkloads in {}",
            other.namespace
        );
        let everywhere: Api<DynamicWorkload> = Api::all(client.clone());
        assert!(
            forbidden(everywhere.list(&ListParams::default()).await),
            "{user} may not list DynamicWorkloads across namespaces"
        );
        // Nobody but sluice writes ledgers or queues.
        assert!(
            forbidden(mine.delete("default", &DeleteParams::default()).await),
            "{user} may not delete a DynamicWorkload"
        );
        assert!(
            forbidden(queues.delete(&queue, &DeleteParams::default()).await),
            "{user} may not delete a CapacityQueue"
        );
    }
    // ScavengerJobs: edit may delete (here: one that does not exist, so 404), view may not (403).
    let as_editor: Api<ScavengerJob> = Api::namespaced(client_as(&editor).await, &env.namespace);
    match as_editor.delete("none", &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        other => panic!("edit may delete ScavengerJobs (404 for a missing one), got {other:?}"),
    }
    let as_viewer: Api<ScavengerJob> = Api::namespaced(client_as(&viewer).await, &env.namespace);
    assert!(
        forbidden(as_viewer.delete("none", &DeleteParams::default()).await),
        "view may not delete ScavengerJobs"
    );
    other.cleanup().await;
    env.cleanup().await;
}
