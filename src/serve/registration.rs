//! The webhook configurations: registered with the current CA bundle (server-side apply) and kept
//! in step with the Secret; `sluice manifests webhooks` prints the in-cluster ones.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::settings::Settings;
use super::tls::Certificates;
use super::webhooks::WebhookState;
use crate::api::FIELD_MANAGER;
use crate::webhook_config::{self, Endpoint};

/// The in-cluster webhook configurations as YAML (for `sluice manifests webhooks`).
pub fn in_cluster_webhook_manifests() -> Result<String, serde_norway::Error> {
    let endpoint = Endpoint::Service {
        namespace: "sluice-system".into(),
        name: "sluice-webhook".into(),
        port: 443,
    };
    let mutating = serde_norway::to_string(&with_kind(
        &webhook_config::mutating(&endpoint, "sluice-system", None),
        "MutatingWebhookConfiguration",
    ))?;
    let validating = serde_norway::to_string(&with_kind(
        &webhook_config::validating(
            &endpoint,
            "sluice-system",
            "system:serviceaccount:sluice-system:sluice",
            None,
        ),
        "ValidatingWebhookConfiguration",
    ))?;
    Ok(format!("---\n{mutating}---\n{validating}"))
}

fn with_kind<T: serde::Serialize>(object: &T, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            "admissionregistration.k8s.io/v1".into(),
        );
        map.insert("kind".into(), kind.into());
    }
    value
}

/// Server-side applies the webhook configuration `configuration` of kind `kind` (`K`).
async fn apply<K>(client: &Client, configuration: &K, kind: &str) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    Api::<K>::all(client.clone())
        .patch(
            webhook_config::CONFIGURATION_NAME,
            &params,
            &Patch::Apply(with_kind(configuration, kind)),
        )
        .await
        .with_context(|| format!("registering the {kind}"))?;
    Ok(())
}

/// Writes both webhook configurations with the current CA bundle (server-side apply: idempotent,
/// and every replica writing the same content agrees).
async fn register_webhooks(
    client: &Client,
    endpoint: &Endpoint,
    namespace: &str,
    controller_user: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let mutating = webhook_config::mutating(endpoint, namespace, Some(ca_pem.as_bytes()));
    apply::<MutatingWebhookConfiguration>(client, &mutating, "MutatingWebhookConfiguration")
        .await?;
    let validating = webhook_config::validating(
        endpoint,
        namespace,
        controller_user,
        Some(ca_pem.as_bytes()),
    );
    apply::<ValidatingWebhookConfiguration>(client, &validating, "ValidatingWebhookConfiguration")
        .await?;
    Ok(())
}

/// Registers the webhook configurations with the first CA bundle, then says ready once the
/// namespaces and the queues are listed.
pub(super) async fn publish_webhooks(
    client: &Client,
    settings: &Settings,
    ca_pem: &str,
    published: &sluice_certs::PublishedBundles,
    state: &WebhookState,
) -> anyhow::Result<()> {
    register_webhooks(
        client,
        &settings.endpoint,
        &settings.certs.namespace,
        &settings.controller_user,
        ca_pem,
    )
    .await?;
    published.confirm(ca_pem);
    // Until the namespaces are listed, pods in a namespace with a default queue would be refused.
    state
        .namespaces
        .wait_until_ready()
        .await
        .context("watching namespaces for their default queues")?;
    // Until the queues are listed, no queue's maxPriority would be known to the pod webhook.
    state
        .queues
        .wait_until_ready()
        .await
        .context("watching CapacityQueues")?;
    // Until they are listed, every ScavengerJob's mounts would look missing.
    state
        .mounts
        .wait_until_ready()
        .await
        .context("watching PersistentVolumeClaims, ConfigMaps and Secrets (names only)")?;
    state.ready.store(true, Ordering::SeqCst);
    Ok(())
}

/// Keeps the CA bundle in the webhook configurations in step with the Secret, until `shutdown`.
pub(super) fn keep_ca_bundle_published(
    client: Client,
    settings: &Settings,
    certs: Certificates,
    shutdown: CancellationToken,
) {
    let Certificates {
        mut ca_updates,
        published,
        ..
    } = certs;
    let endpoint = settings.endpoint.clone();
    let namespace = settings.certs.namespace.clone();
    let controller_user = settings.controller_user.clone();
    tokio::spawn(async move {
        // A failed update is retried: a CA rotation waits for each bundle to be confirmed.
        let mut failed = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = ca_updates.changed() => if changed.is_err() { break; },
                _ = tokio::time::sleep(Duration::from_secs(5)), if failed => {}
            }
            let ca = ca_updates.borrow_and_update().clone();
            if ca.is_empty() {
                continue;
            }
            match register_webhooks(&client, &endpoint, &namespace, &controller_user, &ca).await {
                Ok(()) => {
                    failed = false;
                    published.confirm(&ca);
                    info!("CA bundle of the webhook configurations updated");
                }
                Err(e) => {
                    failed = true;
                    warn!(error = %format!("{e:#}"), "could not update the CA bundle of the webhook configurations; retrying in 5 s");
                }
            }
        }
    });
}
