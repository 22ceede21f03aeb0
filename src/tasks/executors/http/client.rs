//! Sending one request: over http, or https with the Task's CA bundle (else the system's roots) and
//! optional client certificate; within a time limit and a cap on the body read.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::Connect;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::request::{Request, Version};

/// What https needs, read from the Task's ConfigMap / Secrets.
#[derive(Clone, Default)]
pub struct TlsMaterial {
    /// PEM: the roots the server's chain must lead to; None: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM: the client certificate chain and its key.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
    pub server_name: Option<String>,
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_pem: Option<&[u8]>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("tls.caBundle: not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err("tls.caBundle holds no PEM certificate".into());
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("tls.caBundle: a certificate rustls refuses: {e}"))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(native.certs);
            if added == 0 {
                return Err(
                    "https without tls.caBundle needs the system's CA roots, and none were found: give tls.caBundle".into(),
                );
            }
        }
    }
    Ok(roots)
}

/// The rustls client configuration of a request. Pure but for the system's roots.
pub fn client_config(tls: &TlsMaterial) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots(tls.ca_pem.as_deref())?);
    match &tls.client_pem {
        Some((cert_pem, key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate (tls.crt): not PEM: {e}"))?;
            if chain.is_empty() {
                return Err("client certificate (tls.crt) holds no PEM certificate".into());
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| format!("client key (tls.key): not a PEM private key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate and key do not go together: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The bounds of one request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub total: std::time::Duration,
    pub max_body_bytes: usize,
}

/// Sends `request` within `limits`; an error is the Task's failure message.
pub async fn send(
    request: Request,
    tls: Option<TlsMaterial>,
    limits: Limits,
) -> Result<(u16, Bytes), String> {
    let what = format!("{} {}", request.method, request.url);
    tokio::time::timeout(limits.total, exchange(request, tls, limits.max_body_bytes))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{what}: no complete response within {:?} (the limit for connecting, sending and reading)",
                limits.total
            ))
        })
}

async fn exchange(
    request: Request,
    tls: Option<TlsMaterial>,
    max_body_bytes: usize,
) -> Result<(u16, Bytes), String> {
    let mut builder = HyperClient::builder(TokioExecutor::new());
    // HTTP/2 over http is prior knowledge (h2c); over https ALPN offers h2 only.
    builder.http2_only(request.version == Version::Http2);
    if !request.is_https() {
        return exchange_with(builder.build_http(), request, max_body_bytes).await;
    }
    let tls = tls.unwrap_or_default();
    let config = client_config(&tls)?;
    let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
    let connector = match &tls.server_name {
        Some(name) => {
            let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                format!("http.tls.serverName {name:?}: not a DNS name or IP address: {e}")
            })?;
            connector
                .https_only()
                .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => connector.https_only(),
    };
    let connector = match request.version {
        Version::Http2 => connector.enable_http2().build(),
        _ => connector.enable_http1().build(),
    };
    exchange_with(builder.build(connector), request, max_body_bytes).await
}

async fn exchange_with<C>(
    client: HyperClient<C, Full<Bytes>>,
    request: Request,
    max_body_bytes: usize,
) -> Result<(u16, Bytes), String>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let what = format!("{} {}", request.method, request.url);
    let version = match request.version {
        Version::Http10 => hyper::Version::HTTP_10,
        Version::Http11 => hyper::Version::HTTP_11,
        Version::Http2 => hyper::Version::HTTP_2,
    };
    let mut builder = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str())
        .version(version);
    for (k, v) in &request.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let req = builder
        .body(Full::new(Bytes::from(request.body.unwrap_or_default())))
        .map_err(|e| format!("{what}: invalid request: {e}"))?;
    let response = client.request(req).await.map_err(|e| {
        // The cause (a certificate refused, a connection refused) is what the user can act on.
        let mut message = format!("{what}: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        message
    })?;
    let status = response.status().as_u16();
    let too_big = || {
        format!("{what}: the response is larger than {max_body_bytes} bytes, the most sluice reads")
    };
    // A declared length over the cap fails before reading anything.
    let declared = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes as u64) {
        return Err(too_big());
    }
    // Limited stops reading at the cap, whatever the length says (chunked bodies have none).
    let body = http_body_util::Limited::new(response.into_body(), max_body_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                format!("{what}: reading the response: {e}")
            }
        })?
        .to_bytes();
    Ok((status, body))
}
