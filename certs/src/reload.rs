//! Keeps the running server's certificate fresh without a restart.

use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::rotation::{Published, RotationSettings};
use crate::{
    CertError, CertSettings, ClientAuth, ServingCerts, load_or_advance, rustls_server_config_with,
};

/// What one check changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) reloaded: bool,
    pub(crate) ca_changed: bool,
}

/// The certificates the server currently presents, and where to publish changes.
pub(crate) struct ReloadState {
    current: Option<ServingCerts>,
    tls: RustlsConfig,
    ca_bundle: watch::Sender<String>,
    client_auth: ClientAuth,
}

impl ReloadState {
    pub(crate) fn new(tls: RustlsConfig, ca_bundle: watch::Sender<String>) -> Self {
        ReloadState {
            current: None,
            tls,
            ca_bundle,
            client_auth: ClientAuth::Anyone,
        }
    }

    /// Reloaded configurations verify clients with `client_auth`.
    pub(crate) fn with_client_auth(mut self, client_auth: ClientAuth) -> Self {
        self.client_auth = client_auth;
        self
    }

    /// Puts `certs` into service when they differ from the current ones. A certificate that
    /// cannot make a TLS configuration is refused and the current one stays.
    pub(crate) fn apply(&mut self, certs: ServingCerts) -> Result<Applied, CertError> {
        if self.current.as_ref() == Some(&certs) {
            return Ok(Applied::default());
        }
        let config = rustls_server_config_with(&certs, &self.client_auth)?;
        // Reloaded on the first check too: the Secret may have moved on since the server started.
        self.tls.reload_from_config(Arc::new(config));
        let ca_changed = self.current.as_ref().map(|c| &c.ca_pem) != Some(&certs.ca_pem);
        if ca_changed {
            self.ca_bundle.send_replace(certs.ca_pem.clone());
        }
        self.current = Some(certs);
        Ok(Applied {
            reloaded: true,
            ca_changed,
        })
    }
}

/// Where whoever writes the webhook configurations reports the bundles they now hold. A CA
/// rotation waits for this before a certificate from the new CA is served.
#[derive(Clone, Debug)]
pub struct PublishedBundles(watch::Sender<Option<Published>>);

impl PublishedBundles {
    pub(crate) fn new() -> (Self, watch::Receiver<Option<Published>>) {
        let (tx, rx) = watch::channel(None);
        (PublishedBundles(tx), rx)
    }

    /// Records that the webhook configurations now hold `bundle`: call it after their update
    /// succeeded. The first confirmation of a bundle counts; repeating it changes nothing.
    pub fn confirm(&self, bundle: &str) {
        let now = jiff::Timestamp::now();
        self.0.send_if_modified(|current| {
            if current.as_ref().is_some_and(|p| p.bundle == bundle) {
                return false;
            }
            *current = Some(Published {
                bundle: bundle.to_string(),
                at: now,
            });
            true
        });
    }
}

/// Keeps the running server's certificate fresh.
pub struct CertReloader;

impl CertReloader {
    /// At once and then every `settings.check_interval` until `shutdown`: reads the Secret
    /// (renewing what is due and moving a CA rotation on, see [`load_or_advance`]), reloads `tls`
    /// in place when the certificate changed, and publishes the CA bundle on the returned channel
    /// when it changed. The channel holds an empty string until the first check succeeds; after
    /// that, every change of the bundle (first check included) must reach the webhook
    /// configurations' `caBundle`, and each bundle that did must be confirmed on the returned
    /// [`PublishedBundles`]: without it a CA rotation never serves the new CA.
    /// Errors are logged and retried at the next interval; the server keeps its certificate.
    pub fn spawn(
        client: Client,
        settings: CertSettings,
        rotation: RotationSettings,
        tls: RustlsConfig,
        shutdown: CancellationToken,
    ) -> (JoinHandle<()>, watch::Receiver<String>, PublishedBundles) {
        Self::spawn_with_client_auth(
            client,
            settings,
            rotation,
            tls,
            ClientAuth::Anyone,
            shutdown,
        )
    }

    /// [`CertReloader::spawn`] for a server that verifies clients with `client_auth` (the same as
    /// `tls` was built with: a reload keeps it).
    pub fn spawn_with_client_auth(
        client: Client,
        settings: CertSettings,
        rotation: RotationSettings,
        tls: RustlsConfig,
        client_auth: ClientAuth,
        shutdown: CancellationToken,
    ) -> (JoinHandle<()>, watch::Receiver<String>, PublishedBundles) {
        let (ca_tx, ca_rx) = watch::channel(String::new());
        let (published, published_rx) = PublishedBundles::new();
        let handle = tokio::spawn(async move {
            let mut state = ReloadState::new(tls, ca_tx).with_client_auth(client_auth);
            loop {
                let confirmed = published_rx.borrow().clone();
                match load_or_advance(client.clone(), &settings, &rotation, confirmed.as_ref())
                    .await
                {
                    Ok(certs) => report(state.apply(certs.clone()), &certs),
                    Err(e) => warn!(error = %e, "could not check the certificate Secret; retrying"),
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(settings.check_interval) => {}
                }
            }
        });
        (handle, ca_rx, published)
    }
}

fn report(applied: Result<Applied, CertError>, certs: &ServingCerts) {
    match applied {
        Ok(Applied {
            reloaded: false, ..
        }) => {}
        Ok(Applied { ca_changed, .. }) => {
            info!(not_after = %certs.not_after, ca_changed, "serving the certificate from the Secret");
        }
        Err(e) => {
            warn!(error = %e, "the certificate in the Secret is unusable; keeping the current one");
        }
    }
}
