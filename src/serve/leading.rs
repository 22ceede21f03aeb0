//! The leader's side of `serve`: the election, and during each term the queue controller, the
//! recorder, the Task and ScavengerJob controllers.

use std::sync::Arc;

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::settings::Settings;
use crate::integrations::Adapters;
use crate::leader::LeaderElector;
use crate::metrics::ControllerMetrics;
use crate::queue::at_creation::AdmitAtCreation;
use crate::queue::controller::{self, ControllerSettings};
use crate::scavenger::controller::ScavengerSettings;
use crate::scavenger::metrics::ScavengerMetrics;

/// Takes part in the leader election until `shutdown`; during each term this replica holds the
/// Lease, it runs the queue controller, the recorder and the Task controllers.
pub(super) async fn run_controllers_while_leading(
    client: Client,
    settings: Settings,
    (metrics, task_metrics, scavenger_metrics): (
        ControllerMetrics,
        crate::tasks::TaskMetrics,
        ScavengerMetrics,
    ),
    at_creation: Arc<AdmitAtCreation>,
    shutdown: &CancellationToken,
) {
    let elector = LeaderElector::new(client.clone(), settings.lease);
    let leader_gauge = metrics.leader.clone();
    let term_gauge = metrics.leader_term.clone();
    let ended_term_gauge = term_gauge.clone();
    // The moment a term ends the webhook admits nothing more at creation, before the controller
    // has even stopped.
    let stop_admitting: Arc<dyn Fn() + Send + Sync> = {
        let at_creation = at_creation.clone();
        Arc::new(move || at_creation.deactivate())
    };
    let controller = settings.controller;
    let scavenger = (settings.scavenger, scavenger_metrics);
    elector
        .run(
            shutdown.clone(),
            move |leading| {
                leader_gauge.set(i64::from(leading));
                if !leading {
                    ended_term_gauge.set(-1);
                }
            },
            stop_admitting,
            move |term: Arc<crate::leader::Term>| {
                term_gauge.set(i64::from(term.generation()));
                lead(
                    client.clone(),
                    metrics.clone(),
                    controller.clone(),
                    task_metrics.clone(),
                    scavenger.clone(),
                    at_creation.clone(),
                    term,
                )
            },
        )
        .await;
}

/// One term as leader: the controllers run until the term ends.
async fn lead(
    client: Client,
    metrics: ControllerMetrics,
    settings: ControllerSettings,
    task_metrics: crate::tasks::TaskMetrics,
    (scavenger, scavenger_metrics): (ScavengerSettings, ScavengerMetrics),
    at_creation: Arc<AdmitAtCreation>,
    term: Arc<crate::leader::Term>,
) {
    let token = term.cancelled().clone();
    // ScavengerJobs: leader only.
    let scavengers = tokio::spawn(crate::scavenger::controller::run(
        client.clone(),
        scavenger,
        scavenger_metrics,
        token.clone(),
    ));
    // The recorder writes DynamicWorkloads from application objects: leader only, like the
    // controller.
    let recorder = tokio::spawn(crate::recorder::run(client.clone(), token.clone()));
    // Task and TaskCluster controllers: leader only too.
    let tasks = tokio::spawn(crate::tasks::run(client.clone(), task_metrics, token));
    if let Err(e) = controller::run(
        client,
        Adapters::default(),
        metrics,
        settings,
        Some(at_creation),
        term,
    )
    .await
    {
        error!(%e, "queue controller stopped");
    }
    let _ = recorder.await;
    let _ = tasks.await;
    let _ = scavengers.await;
}
