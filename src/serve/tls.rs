//! The webhook server's certificates: from the Secret the replicas share, reloaded and rotated
//! without a restart; with `--client-ca-file`, who may call.

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::settings::{ServeArgs, Settings};

/// Who may call the webhooks: with `--client-ca-file`, only clients with a certificate from it.
fn client_auth(file: Option<&std::path::Path>) -> anyhow::Result<sluice_certs::ClientAuth> {
    let Some(file) = file else {
        return Ok(sluice_certs::ClientAuth::Anyone);
    };
    let pem = std::fs::read_to_string(file)
        .with_context(|| format!("reading --client-ca-file {}", file.display()))?;
    sluice_certs::ClientAuth::require_from(&pem)
        .with_context(|| format!("--client-ca-file {}", file.display()))
}

/// The webhook's certificates, from the Secret the replicas share (created when missing).
pub(super) struct Certificates {
    /// The CA bundle the webhook configurations get first.
    pub(super) ca_pem: String,
    /// What the server presents; the reloader renews and rotates it in place, without a restart.
    pub(super) tls: RustlsConfig,
    /// Each new CA bundle to publish in the webhook configurations (empty until the first check).
    pub(super) ca_updates: watch::Receiver<String>,
    /// Where the publisher confirms that a bundle is in the configurations: a CA rotation waits
    /// for it before the new CA signs.
    pub(super) published: sluice_certs::PublishedBundles,
}

pub(super) async fn certificates(
    args: &ServeArgs,
    settings: &Settings,
    client: &Client,
    shutdown: &CancellationToken,
) -> anyhow::Result<Certificates> {
    let certs = sluice_certs::load_or_create(client.clone(), &settings.certs)
        .await
        .with_context(|| {
            format!(
                "loading or creating the webhook certificate Secret {}/{}",
                args.namespace, args.cert_secret
            )
        })?;
    let client_auth = client_auth(args.client_ca_file.as_deref())?;
    let tls = sluice_certs::axum_rustls_config_with(&certs, &client_auth)
        .context("building the TLS configuration")?;
    let (_reloader, ca_updates, published) = sluice_certs::CertReloader::spawn_with_client_auth(
        client.clone(),
        settings.certs.clone(),
        settings.rotation,
        tls.clone(),
        client_auth,
        shutdown.clone(),
    );
    Ok(Certificates {
        ca_pem: certs.ca_pem,
        tls,
        ca_updates,
        published,
    })
}
