//! The rustls server configuration for the serving certificate.

use std::sync::Arc;

use axum_server::tls_rustls::RustlsConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{CertError, ServingCerts};

/// TLS 1.2 and 1.3, ALPN h2 then http/1.1, the ring provider (set here, never taken from a
/// process-wide default). Fails when the key does not belong to the certificate.
pub fn rustls_server_config(certs: &ServingCerts) -> Result<rustls::ServerConfig, CertError> {
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
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(CertError::Tls)?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(CertError::Tls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The configuration for axum-server; [`crate::CertReloader`] swaps certificates in it in place.
pub fn axum_rustls_config(certs: &ServingCerts) -> Result<RustlsConfig, CertError> {
    Ok(RustlsConfig::from_config(Arc::new(rustls_server_config(
        certs,
    )?)))
}
