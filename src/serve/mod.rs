//! `sluice serve`: the webhook server on every replica, the queue controller on the leader.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use kube::Client;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

mod leading;
mod metrics;
mod registration;
mod settings;
mod tls;
mod webhooks;

use leading::run_controllers_while_leading;
pub use metrics::metrics_registry;
use metrics::serve_metrics;
pub use registration::in_cluster_webhook_manifests;
use registration::{keep_ca_bundle_published, publish_webhooks};
use settings::Settings;
pub use settings::{LogFormat, ServeArgs};
use tls::certificates;
pub use webhooks::{WebhookInputs, webhook_routes};
use webhooks::{start_webhook_server, watch_webhook_state};

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colours only for a person at a terminal, never in log files.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: logging already initialised: {e}");
    }
}

/// `sluice serve`: settings from the flags, then each step in turn. Every replica serves the
/// webhooks; the one holding the Lease also runs the controllers.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    // One crypto provider for the whole process: ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings::from_args(&args)?;

    let client = api_client(&args, &settings).await?;
    let shutdown = shutdown_on_signal();
    let (registry, controller_metrics, task_metrics, webhook_metrics, scavenger_metrics) =
        metrics_registry();
    let certs = certificates(&args, &settings, &client, &shutdown).await?;
    let state = watch_webhook_state(&client, &controller_metrics);
    let server_task = start_webhook_server(
        &args,
        &settings,
        &state,
        certs.tls.clone(),
        webhook_metrics,
        &shutdown,
    );
    publish_webhooks(&client, &settings, &certs.ca_pem, &certs.published, &state).await?;
    info!(listen = %args.listen, endpoint = ?settings.endpoint, "webhooks registered and serving");
    keep_ca_bundle_published(client.clone(), &settings, certs, shutdown.clone());
    let _dashboard = crate::dashboard::spawn(
        &args.dashboard,
        client.clone(),
        state.namespaces.clone(),
        shutdown.clone(),
    );
    let metrics_task = tokio::spawn(serve_metrics(
        args.metrics_listen,
        Arc::new(registry),
        shutdown.clone(),
    ));
    run_controllers_while_leading(
        client,
        settings,
        (controller_metrics, task_metrics, scavenger_metrics),
        state.at_creation,
        &shutdown,
    )
    .await;
    shut_down(shutdown, server_task, metrics_task).await
}

/// The API client sluice acts with. With --local (unless --no-install), first installs the CRDs,
/// namespace and RBAC with the kubeconfig's own credentials.
async fn api_client(args: &ServeArgs, settings: &Settings) -> anyhow::Result<Client> {
    let base = kube::Config::infer()
        .await
        .context("no Kubernetes credentials found: set KUBECONFIG (for the local cluster: eval \"$(hack/cluster.sh env)\") or run sluice in a pod")?;
    let install = args.local && !args.no_install;
    if install {
        let admin =
            Client::try_from(base.clone()).context("building the installer's API client")?;
        crate::install::apply_all(&admin)
            .await
            .context("installing CRDs, namespace and RBAC (needs an administrator's kubeconfig; use --no-install if they are installed already)")?;
        info!("installed CRDs, namespace and RBAC");
    }
    let mut config = base;
    // No retries inside the client: every call of sluice's is bounded by a timeout and retried by
    // its own loop (the next pass, the next writer round), and an eviction refused by a
    // PodDisruptionBudget (429) must come back at once to be recorded, not be retried until the
    // timeout hides why.
    config.default_retry = false;
    if let Some(user) = &settings.impersonate {
        config.auth_info.impersonate = Some(user.clone());
        info!(%user, "acting as");
    }
    let client = Client::try_from(config).context("building the API client")?;
    if install && settings.impersonate.is_some() {
        // The API server's RBAC cache takes a moment to see the Role just applied: wait until the
        // identity sluice acts as may read its certificate Secret, rather than fail on a 403.
        crate::install::wait_for_rights(
            &client,
            &args.namespace,
            &args.cert_secret,
            Duration::from_secs(60),
        )
        .await
        .context("waiting for sluice's RBAC to take effect")?;
    }
    Ok(client)
}

/// A token cancelled on SIGTERM or Ctrl-C; every server and controller stops with it.
fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        token.cancel();
    });
    shutdown
}

/// Stops the servers and waits for them: the webhook server's failure is the command's.
async fn shut_down(
    shutdown: CancellationToken,
    server_task: JoinHandle<Result<(), sluice_webhooks::WebhookError>>,
    metrics_task: JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    shutdown.cancel();
    match server_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context("webhook server")),
        Err(e) => return Err(anyhow::anyhow!("webhook server task: {e}")),
    }
    if let Ok(Err(e)) = metrics_task.await {
        warn!(error = %format!("{e:#}"), "metrics server");
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
