#![forbid(unsafe_code)]
//! sluice's webhook certificates: a private CA and a serving certificate signed by it, kept in a
//! Secret so that restarts and replicas share them, renewed before expiry and reloaded into the
//! running TLS server without a restart.
//!
//! The Secret (type kubernetes.io/tls) holds `tls.crt`, `tls.key`, `ca.crt` (the CA bundle clients
//! trust), `ca.key` and, during a CA rotation, `ca-next.key` (see the `rotation` module: a new CA
//! is published beside the old one before anything it signs is served). Renewal decisions read the certificates themselves (expiry, names, issuer,
//! key), so a Secret edited by hand or by another tool is judged by what it really contains.
//!
//! Pure parts ([`generate`], [`issue_serving`], [`rotate_ca`], [`renewal_due`],
//! [`inspect_certificate`], [`rustls_server_config`]) need no cluster; [`load_or_create`] and
//! [`CertReloader`] talk to the API server.

mod inspect;
mod issue;
mod reload;
mod rotation;
mod store;
mod tls;

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

pub use inspect::{CertificateInfo, Renewal, inspect_certificate, renewal_due};
pub use issue::{CA_COMMON_NAME, CA_VALIDITY, generate, generate_at, issue_serving, rotate_ca};
pub use reload::{CertReloader, PublishedBundles};
pub use rotation::{
    DEFAULT_ROTATION_OVERLAP, Phase, Published, RotationSettings, RotationState, Step, next_step,
    observe, take,
};
pub use store::{
    CA_CERT_KEY, CA_KEY_KEY, NEXT_CA_KEY_KEY, TLS_CERT_KEY, TLS_KEY_KEY, load_or_advance,
    load_or_create, write_into_secret,
};
pub use tls::{
    ClientAuth, axum_rustls_config, axum_rustls_config_with, rustls_server_config,
    rustls_server_config_with,
};

/// A serving certificate lives a year unless told otherwise.
pub const DEFAULT_SERVING_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The reloader looks at the Secret once a minute unless told otherwise.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating {what}: {source}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("{action} Secret {namespace}/{name}: {source}")]
    Api {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(
        "Secret {namespace}/{name} kept changing under us ({attempts} attempts); another replica is probably renewing it, retry later"
    )]
    KeptChanging {
        namespace: String,
        name: String,
        attempts: usize,
    },
    #[error(
        "Secret {namespace}/{name} has no {key}: delete the Secret and sluice creates a new one"
    )]
    MissingKey {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("Secret {namespace}/{name}: {key} is not UTF-8 text (expected PEM)")]
    NotUtf8 {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("{what} is not a usable PEM certificate or key: {detail}")]
    Pem { what: &'static str, detail: String },
    #[error("building the TLS server configuration: {0}")]
    Tls(#[source] rustls::Error),
    #[error("a validity of {0:?} is out of range")]
    Validity(Duration),
}

/// Where the certificates live and what they are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSettings {
    pub namespace: String,
    pub secret_name: String,
    /// DNS names the serving certificate is valid for.
    pub dns_names: Vec<String>,
    /// IP addresses the serving certificate is valid for (127.0.0.1 for webhooks on the host).
    /// Unspecified addresses (0.0.0.0, ::) are ignored: no client connects to them.
    pub ip_addresses: Vec<IpAddr>,
    /// Lifetime of a serving certificate; it is renewed when a third of it is left.
    pub serving_validity: Duration,
    /// How often the reloader looks at the Secret.
    pub check_interval: Duration,
}

impl CertSettings {
    /// Settings for a webhook behind Service `service` in `namespace`: the Service's DNS names,
    /// `localhost` and 127.0.0.1, a one-year serving certificate, checked every minute.
    pub fn for_service(namespace: &str, service: &str, secret_name: &str) -> Self {
        CertSettings {
            namespace: namespace.to_string(),
            secret_name: secret_name.to_string(),
            dns_names: service_dns_names(service, namespace),
            ip_addresses: vec![IpAddr::from([127, 0, 0, 1])],
            serving_validity: DEFAULT_SERVING_VALIDITY,
            check_interval: DEFAULT_CHECK_INTERVAL,
        }
    }

    /// The DNS names wanted in the certificate, de-duplicated.
    pub(crate) fn wanted_dns_names(&self) -> std::collections::BTreeSet<String> {
        self.dns_names
            .iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// The IP addresses wanted in the certificate, de-duplicated, without unspecified ones.
    pub(crate) fn wanted_ip_addresses(&self) -> std::collections::BTreeSet<IpAddr> {
        self.ip_addresses
            .iter()
            .copied()
            .filter(|ip| !ip.is_unspecified())
            .collect()
    }
}

/// The DNS names of a Service, short to fully qualified, plus `localhost`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
    ]
}

/// The CA bundle and the serving certificate with its key, PEM encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct ServingCerts {
    /// The CA bundle clients trust: the current CA first, then a retiring CA while it is still
    /// valid (so servers still presenting a certificate from it keep working during a rotation).
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// When the serving certificate expires.
    pub not_after: jiff::Timestamp,
    /// The current CA's private key, which signs renewed serving certificates.
    pub(crate) ca_key_pem: String,
    /// During a CA rotation, the key of the incoming CA, which is in the bundle but signs nothing
    /// yet (see [`Phase::Publishing`]).
    pub(crate) next_ca_key_pem: Option<String>,
}

// Hand-written so that private keys never end up in logs.
impl fmt::Debug for ServingCerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServingCerts")
            .field("ca_pem", &self.ca_pem)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("not_after", &self.not_after)
            .field("ca_key_pem", &"<redacted>")
            .field(
                "next_ca_key_pem",
                &self.next_ca_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests;
