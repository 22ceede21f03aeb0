//! What the webhooks judge from (queues, namespaces, admission at creation, mounts: watched, no API
//! call on their hot path), every route sluice serves, and the server on its own runtime.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::settings::{ServeArgs, Settings};
use crate::api::{ADMISSION_GATE, PROTECTED_LABEL_PREFIX, QUEUE_LABEL};
use crate::integrations::Adapters;
use crate::metrics::ControllerMetrics;
use crate::queue::at_creation::AdmitAtCreation;
use crate::queue::ledger_queues::LedgerQueues;
use crate::scavenger::mounts::Mounts;

/// What the webhooks judge from, kept in memory by watches: no API call on their hot path.
pub(super) struct WebhookState {
    /// The queues, for the application validator and the pod classifier (`maxPriority`).
    pub(super) queues: Store<crate::api::CapacityQueue>,
    /// The namespaces' labels: default queues and namespaceSelectors.
    pub(super) namespaces: crate::namespaces::Namespaces,
    /// Admission at creation: the webhook admits from what this replica's controller found, while
    /// this replica leads.
    pub(super) at_creation: Arc<AdmitAtCreation>,
    /// Set once the webhooks are registered and the namespaces listed; until then /readyz says no.
    pub(super) ready: Arc<AtomicBool>,
    /// Which PVCs, ConfigMaps and Secrets exist (names only), for the ScavengerJob webhook.
    pub(super) mounts: Mounts,
    /// The queue each workload's ledger names (the pod webhook of a replica that does not lead).
    pub(super) ledgers: LedgerQueues,
}

impl WebhookState {
    fn inputs(&self) -> WebhookInputs {
        WebhookInputs {
            queues: self.queues.clone(),
            namespaces: self.namespaces.clone(),
            at_creation: self.at_creation.clone(),
            mounts: self.mounts.clone(),
            ledgers: self.ledgers.clone(),
        }
    }
}

pub(super) fn watch_webhook_state(client: &Client, metrics: &ControllerMetrics) -> WebhookState {
    let (queues, stream) = crate::watch_backoff::reflected(
        Api::<crate::api::CapacityQueue>::all(client.clone()),
        kube::runtime::watcher::Config::default(),
        |_| {},
    );
    tokio::spawn(async move { stream.for_each(|_| async {}).await });
    let (namespaces, watch_namespaces) = crate::namespaces::Namespaces::watch(client.clone());
    tokio::spawn(watch_namespaces);
    let (ledgers, watch_ledgers) = LedgerQueues::watch(client.clone());
    tokio::spawn(watch_ledgers);
    WebhookState {
        queues,
        namespaces,
        at_creation: Arc::new(
            AdmitAtCreation::default().with_metrics(metrics.admitted_at_creation.clone()),
        ),
        ready: Arc::new(AtomicBool::new(false)),
        mounts: Mounts::watch(client, None, None),
        ledgers,
    }
}

/// Starts the webhook server on a runtime of its own (`--webhook-threads`).
pub(super) fn start_webhook_server(
    args: &ServeArgs,
    settings: &Settings,
    state: &WebhookState,
    tls: RustlsConfig,
    metrics: sluice_webhooks::WebhookMetrics,
    shutdown: &CancellationToken,
) -> JoinHandle<Result<(), sluice_webhooks::WebhookError>> {
    let webhooks = webhook_routes(&state.inputs(), &settings.controller_user)
        .readiness(state.ready.clone())
        .metrics(metrics)
        .max_body_bytes(args.max_body_bytes);
    let server = sluice_webhooks::WebhookServer::new(args.listen, tls, webhooks);
    let shutdown = shutdown.clone();
    let threads = args.webhook_threads;
    tokio::spawn(async move { server.serve_dedicated(threads, None, shutdown).await })
}

/// What the webhooks judge from, without an API call on their path: the queues, the namespaces'
/// labels and the room for admission at creation. `sluice serve` fills them from watches; the fuzz
/// targets (fuzz/) from fixtures.
#[derive(Clone)]
pub struct WebhookInputs {
    pub queues: Store<crate::api::CapacityQueue>,
    pub namespaces: crate::namespaces::Namespaces,
    pub at_creation: Arc<AdmitAtCreation>,
    /// The PVCs, ConfigMaps and Secrets a ScavengerJob may mount.
    pub mounts: Mounts,
    /// The queue each workload's ledger names.
    pub ledgers: LedgerQueues,
}

/// Every webhook sluice serves (the pods', each integration's application webhooks, the
/// ScavengerJobs') with the real classifier and admission at creation: one list, for the server
/// and for the fuzz targets.
pub fn webhook_routes(inputs: &WebhookInputs, controller_user: &str) -> sluice_webhooks::Webhooks {
    let webhooks = sluice_webhooks::Webhooks::new(
        gate_settings(controller_user),
        Arc::new(crate::queue::at_creation::Classifier {
            adapters: Adapters::with_namespaces(inputs.namespaces.clone()),
            at_creation: Some(inputs.at_creation.clone()),
            queues: Some(inputs.queues.clone()),
            ledgers: Some(inputs.ledgers.clone()),
        }),
    )
    .application(
        "/mutate-applications",
        Arc::new(crate::app_webhooks::MutateApplications {
            adapters: crate::integrations::applications(),
            namespaces: inputs.namespaces.clone(),
        }),
    )
    .application(
        "/validate-applications",
        Arc::new(crate::app_webhooks::ValidateApplications {
            adapters: crate::integrations::applications(),
            queues: inputs.queues.clone(),
            namespaces: inputs.namespaces.clone(),
        }),
    );
    scavenger_routes(webhooks, inputs, controller_user)
}

/// The ScavengerJob webhooks: the ScavengerJob validator (mounts from watches) and the guard of
/// the scavenger marks on pods and Jobs.
fn scavenger_routes(
    webhooks: sluice_webhooks::Webhooks,
    inputs: &WebhookInputs,
    controller_user: &str,
) -> sluice_webhooks::Webhooks {
    webhooks
        .application(
            "/validate-scavengerjobs",
            Arc::new(crate::scavenger::webhook::ValidateScavengerJobs {
                mounts: inputs.mounts.clone(),
                queues: Some(inputs.queues.clone()),
            }),
        )
        .application(
            "/validate-scavenger-workloads",
            Arc::new(crate::scavenger::webhook::ValidateScavengerWorkloads {
                controller_user: controller_user.to_string(),
                job_controller_users: crate::scavenger::webhook::JOB_CONTROLLER_USERS
                    .iter()
                    .map(|u| u.to_string())
                    .collect(),
            }),
        )
}

/// The pod webhooks' gate: its name, sluice's labels and annotations, and who may touch them.
fn gate_settings(controller_user: &str) -> sluice_webhooks::GateSettings {
    sluice_webhooks::GateSettings {
        gate_name: ADMISSION_GATE.into(),
        protected_label_prefix: PROTECTED_LABEL_PREFIX.into(),
        governed_label: QUEUE_LABEL.into(),
        controller_usernames: vec![controller_user.to_string()],
        admission_annotations: crate::api::ADMISSION_ANNOTATIONS
            .iter()
            .map(|a| a.to_string())
            .collect(),
    }
}
