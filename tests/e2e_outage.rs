//! Issue 16, hole 10: during a sluice outage, labelled applications can still be updated and
//! deleted. The application webhooks fail closed (failurePolicy Fail), so without their
//! matchConditions a finalizer, annotation or label edit of a SparkApplication, RayCluster or
//! TaskCluster was refused while sluice was down, and objects being deleted stayed stuck.
//!
//! sluice on the host stays up (other tests share it): the outage is a second pair of webhook
//! configurations, built by `webhook_config` exactly as sluice registers its own (same rules,
//! same matchConditions), pointing at a closed port and matching only this test's namespace. Run
//! with `hack/test.sh --test e2e_outage` (or on a cluster up with `--with-sluice`).

mod support;

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice::api::TaskCluster;
use sluice::webhook_config::{self, Endpoint};
use support::*;

/// What the failing webhooks are called: every refusal they cause names them.
const OUTAGE_WEBHOOK_SUFFIX: &str = "outage.sluice.dev";

/// An https address nothing listens on: a port the OS handed out, closed again.
fn unreachable_endpoint() -> Endpoint {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("the port's address").port();
    drop(listener);
    Endpoint::Url(format!("https://127.0.0.1:{port}"))
}

/// Only the namespace `name`: the failing webhooks never touch another test's objects.
fn only_namespace(name: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![name.into()]),
        }]),
        match_labels: None,
    }
}

/// sluice's application webhooks as sluice generates them, but unreachable, renamed, and limited
/// to `namespace`.
fn outage_configurations(
    name: &str,
    namespace: &str,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let endpoint = unreachable_endpoint();
    let user = webhook_config::service_account_user("sluice-system");
    // The two configurations' webhooks are of two types with the same fields: one macro for both.
    macro_rules! only_the_application_webhook {
        ($config:expr, $what:literal, $verb:literal) => {{
            let mut config = $config;
            config.metadata.name = Some(name.into());
            config.webhooks = Some(
                config
                    .webhooks
                    .take()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|w| w.name == "applications.sluice.dev")
                    .map(|mut w| {
                        assert!(
                            w.match_conditions.is_some(),
                            concat!("the ", $what, " application webhook has matchConditions")
                        );
                        w.name = format!(concat!($verb, "-applications.{}"), OUTAGE_WEBHOOK_SUFFIX);
                        w.namespace_selector = Some(only_namespace(namespace));
                        w
                    })
                    .collect(),
            );
            config
        }};
    }
    let mutating = only_the_application_webhook!(
        webhook_config::mutating(&endpoint, "sluice-system", None),
        "mutating",
        "mutate"
    );
    let validating = only_the_application_webhook!(
        webhook_config::validating(&endpoint, "sluice-system", &user, None),
        "validating",
        "validate"
    );
    assert_eq!(mutating.webhooks.as_ref().map(Vec::len), Some(1));
    assert_eq!(validating.webhooks.as_ref().map(Vec::len), Some(1));
    (mutating, validating)
}

async fn delete_configurations(client: &Client, name: &str) {
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

async fn merge(clusters: &Api<TaskCluster>, name: &str, patch: Value) -> Result<(), String> {
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A refusal caused by the unreachable webhooks (not by sluice or the API server's validation).
fn refused_by_outage(result: Result<(), String>, what: &str) {
    match result {
        Ok(()) => panic!("{what} went through although the application webhooks are unreachable"),
        Err(e) => assert!(
            e.contains(OUTAGE_WEBHOOK_SUFFIX),
            "{what} was refused, but not by the unreachable webhooks: {e}"
        ),
    }
}

#[tokio::test]
async fn during_an_outage_application_finalizers_and_metadata_can_be_edited_but_not_the_spec() {
    let (env, queue) = env_and_queue!("outage", json!({"cpu": "2"}), "BestEffortFIFO");
    let clusters: Api<TaskCluster> = Api::namespaced(env.client.clone(), &env.namespace);
    // No worker is ever wanted (minWorkers 0, no Tasks): the object alone is what is edited.
    let cluster: TaskCluster = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
        "metadata": {"name": "pool", "labels": {"sluice.dev/queue": queue, "team": "a"}},
        "spec": {"minWorkers": 0, "maxWorkers": 1,
            "template": {"spec": {"containers": [{"name": "worker", "image": "busybox",
                "resources": {"requests": {"cpu": "1"}}}]}}},
    }))
    .expect("TaskCluster");
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create the TaskCluster while sluice is reachable");

    let name = format!("sluice-outage-{}", env.namespace);
    let (mutating, validating) = outage_configurations(&name, &env.namespace);
    let client = env.client.clone();
    let body = async {
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &mutating)
            .await
            .expect("register the unreachable mutating webhook");
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &validating)
            .await
            .expect("register the unreachable validating webhook");

        // The API server picks new webhook configurations up a moment later: spec edits go
        // through until it does, then are refused by the unreachable webhooks.
        let workers = AtomicI64::new(2);
        wait_for(
            "the API server to call the unreachable webhooks on a spec edit",
            Duration::from_secs(30),
            || {
                let n = workers.fetch_add(1, Ordering::SeqCst);
                let clusters = clusters.clone();
                async move {
                    let edit = merge(&clusters, "pool", json!({"spec": {"maxWorkers": n}})).await;
                    match edit {
                        Err(e) if e.contains(OUTAGE_WEBHOOK_SUFFIX) => Some(()),
                        _ => None,
                    }
                }
            },
        )
        .await;

        // What never needs sluice goes through.
        merge(
            &clusters,
            "pool",
            json!({"metadata": {"finalizers": ["sluice.dev/outage-test"]}}),
        )
        .await
        .expect("adding a finalizer during the outage");
        merge(
            &clusters,
            "pool",
            json!({"metadata": {"annotations": {"note": "edited during the outage"}}}),
        )
        .await
        .expect("annotating during the outage");
        merge(
            &clusters,
            "pool",
            json!({"metadata": {"labels": {"team": "b"}}}),
        )
        .await
        .expect("changing a label other than the queue's during the outage");

        // What sluice judges is refused while it cannot judge it.
        refused_by_outage(
            merge(&clusters, "pool", json!({"spec": {"maxWorkers": 7}})).await,
            "a spec edit",
        );
        refused_by_outage(
            merge(
                &clusters,
                "pool",
                json!({"metadata": {"labels": {"sluice.dev/queue": "elsewhere"}}}),
            )
            .await,
            "a queue-label change",
        );

        // Deletion: the DELETE itself, then the finalizer's removal (as a garbage collector or
        // an operator's controller would do it) during the outage.
        clusters
            .delete("pool", &DeleteParams::default())
            .await
            .expect("deleting during the outage");
        merge(&clusters, "pool", json!({"metadata": {"finalizers": null}}))
            .await
            .expect("removing the finalizer of a deleted application during the outage");
        wait_absent(&clusters, "pool", Duration::from_secs(30)).await;
    };
    let outcome = AssertUnwindSafe(body).catch_unwind().await;
    delete_configurations(&client, &name).await;
    env.cleanup().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
