//! The rustls server configuration for the serving certificate.

use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use crate::{CertError, ServingCerts};

/// Which clients may complete a TLS handshake.
#[derive(Clone, Debug, Default)]
pub enum ClientAuth {
    /// Any client; none is asked for a certificate (the API server's is not checked).
    #[default]
    Anyone,
    /// Only clients presenting a certificate that chains to one of these CAs (the API server's
    /// client certificate, its `--admission-control-config-file` kubeconfig).
    Verified(Arc<dyn ClientCertVerifier>),
}

impl ClientAuth {
    /// Requires a client certificate issued by a CA of `ca_pem` (one or more PEM certificates).
    pub fn require_from(ca_pem: &str) -> Result<Self, CertError> {
        let pem_error = |detail: String| CertError::Pem {
            what: "the client CA",
            detail,
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(ca.map_err(|e| pem_error(e.to_string()))?)
                .map_err(|e| pem_error(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(pem_error("no CERTIFICATE block".into()));
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider()))
                .build()
                .map_err(|e| pem_error(e.to_string()))?;
        Ok(ClientAuth::Verified(verifier))
    }
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// TLS 1.2 and 1.3, ALPN h2 then http/1.1, the ring provider (set here, never taken from a
/// process-wide default), no client certificate asked. Fails when the key does not belong to the
/// certificate.
pub fn rustls_server_config(certs: &ServingCerts) -> Result<rustls::ServerConfig, CertError> {
    rustls_server_config_with(certs, &ClientAuth::Anyone)
}

/// [`rustls_server_config`] with the given client authentication.
pub fn rustls_server_config_with(
    certs: &ServingCerts,
    client_auth: &ClientAuth,
) -> Result<rustls::ServerConfig, CertError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| CertError::Pem {
                what: "tls.crt",
                detail: e.to_string(),
            })?;
    if chain.is_empty() {
        return Err(CertError::Pem {
            what: "tls.crt",
            detail: "no CERTIFICATE block".into(),
        });
    }
    let key =
        PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes()).map_err(|e| CertError::Pem {
            what: "tls.key",
            detail: e.to_string(),
        })?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(CertError::Tls)?;
    let builder = match client_auth {
        ClientAuth::Anyone => builder.with_no_client_auth(),
        ClientAuth::Verified(verifier) => builder.with_client_cert_verifier(verifier.clone()),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(CertError::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The configuration for axum-server; [`crate::CertReloader`] swaps certificates in it in place.
pub fn axum_rustls_config(certs: &ServingCerts) -> Result<RustlsConfig, CertError> {
    axum_rustls_config_with(certs, &ClientAuth::Anyone)
}

/// [`axum_rustls_config`] with the given client authentication.
pub fn axum_rustls_config_with(
    certs: &ServingCerts,
    client_auth: &ClientAuth,
) -> Result<RustlsConfig, CertError> {
    Ok(RustlsConfig::from_config(Arc::new(
        rustls_server_config_with(certs, client_auth)?,
    )))
}
