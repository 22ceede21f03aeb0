#![forbid(unsafe_code)]
//! sluice's webhook certificates: a private CA and a serving certificate signed by it, kept in a
//! Secret so that restarts and replicas share them, renewed before expiry and reloaded into the
//! running TLS server without a restart.
//!
//! The Secret (type kubernetes.io/tls) holds `tls.crt`, `tls.key`, `ca.crt` and `ca.key`; its
//! annotations record expiry times and the serving names, so renewal decisions need no X.509 parser.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

const CA_COMMON_NAME: &str = "sluice-ca";
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 86400);
const NOT_AFTER_ANNOTATION: &str = "sluice.dev/serving-not-after";
const CA_NOT_AFTER_ANNOTATION: &str = "sluice.dev/ca-not-after";
const NAMES_ANNOTATION: &str = "sluice.dev/serving-names";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{name} has no {key}: delete it and sluice creates a new one")]
    MissingKey {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("the certificate or key is not valid PEM: {0}")]
    Pem(String),
    #[error("building the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("validity {0:?} is out of range")]
    Validity(Duration),
}

/// Where the certificates live and what they are for.
#[derive(Clone, Debug)]
pub struct CertSettings {
    pub namespace: String,
    pub secret_name: String,
    /// DNS names the serving certificate is valid for.
    pub dns_names: Vec<String>,
    /// IP addresses the serving certificate is valid for (127.0.0.1 for webhooks on the host).
    pub ip_addresses: Vec<IpAddr>,
    pub serving_validity: Duration,
    /// How often the reloader looks at the Secret.
    pub check_interval: Duration,
}

impl CertSettings {
    /// The names and addresses, sorted and de-duplicated, as recorded on the Secret.
    fn names(&self) -> String {
        let mut names: Vec<String> = self.dns_names.clone();
        names.extend(
            self.ip_addresses
                .iter()
                .filter(|ip| !ip.is_unspecified())
                .map(IpAddr::to_string),
        );
        names.sort();
        names.dedup();
        names.join(",")
    }
}

/// The DNS names of a Service, short to fully qualified.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
    ]
}

/// The current CA and serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingCerts {
    pub ca_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: jiff::Timestamp,
    pub ca_not_after: jiff::Timestamp,
    /// The names the serving certificate was issued for (see `CertSettings::names`).
    pub names: String,
}

fn offset_after(validity: Duration) -> Result<(time::OffsetDateTime, jiff::Timestamp), CertError> {
    let now = time::OffsetDateTime::now_utc();
    let seconds = i64::try_from(validity.as_secs()).map_err(|_| CertError::Validity(validity))?;
    let not_after = now + time::Duration::seconds(seconds);
    let ts = jiff::Timestamp::from_second(not_after.unix_timestamp())
        .map_err(|_| CertError::Validity(validity))?;
    Ok((not_after, ts))
}

fn ca_params(not_after: time::OffsetDateTime) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
    params.not_after = not_after;
    Ok(params)
}

/// A new CA and a serving certificate signed by it.
pub fn generate(settings: &CertSettings) -> Result<ServingCerts, CertError> {
    let (ca_after, ca_not_after) = offset_after(CA_VALIDITY)?;
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params(ca_after)?.self_signed(&ca_key)?;
    let mut certs = ServingCerts {
        ca_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        cert_pem: String::new(),
        key_pem: String::new(),
        not_after: ca_not_after,
        ca_not_after,
        names: String::new(),
    };
    issue_serving(&mut certs, settings)?;
    Ok(certs)
}

/// Issues a new serving certificate from the CA in `certs`.
pub fn issue_serving(certs: &mut ServingCerts, settings: &CertSettings) -> Result<(), CertError> {
    let ca_key = KeyPair::from_pem(&certs.ca_key_pem)?;
    let (ca_after, _) = offset_after(Duration::from_secs(1))?;
    // The issuer is identified by its name and key: the same CA name and key as the stored CA.
    let issuer = Issuer::new(ca_params(ca_after)?, ca_key);
    let (not_after, not_after_ts) = offset_after(settings.serving_validity)?;
    let mut params = CertificateParams::new(settings.dns_names.clone())?;
    for ip in settings
        .ip_addresses
        .iter()
        .filter(|ip| !ip.is_unspecified())
    {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.distinguished_name.push(
        DnType::CommonName,
        settings
            .dns_names
            .first()
            .map(String::as_str)
            .unwrap_or("sluice"),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    certs.cert_pem = cert.pem();
    certs.key_pem = key.serialize_pem();
    certs.not_after = not_after_ts;
    certs.names = settings.names();
    Ok(())
}

/// What needs renewing, if anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    None,
    /// A new serving certificate from the same CA.
    Serving,
    /// A new CA and serving certificate (the CA bundle changes).
    Everything,
}

/// Renew when less than a third of a lifetime is left, or when the wanted names changed.
pub fn renewal_due(certs: &ServingCerts, settings: &CertSettings, now: jiff::Timestamp) -> Renewal {
    let third =
        |validity: Duration| jiff::SignedDuration::from_secs((validity.as_secs() / 3) as i64);
    if now
        >= certs
            .ca_not_after
            .checked_sub(third(CA_VALIDITY))
            .unwrap_or(certs.ca_not_after)
    {
        return Renewal::Everything;
    }
    if certs.names != settings.names()
        || now
            >= certs
                .not_after
                .checked_sub(third(settings.serving_validity))
                .unwrap_or(certs.not_after)
    {
        return Renewal::Serving;
    }
    Renewal::None
}

fn to_secret(
    certs: &ServingCerts,
    settings: &CertSettings,
    resource_version: Option<String>,
) -> Secret {
    let data = BTreeMap::from([
        (
            "tls.crt".to_string(),
            ByteString(certs.cert_pem.clone().into_bytes()),
        ),
        (
            "tls.key".to_string(),
            ByteString(certs.key_pem.clone().into_bytes()),
        ),
        (
            "ca.crt".to_string(),
            ByteString(certs.ca_pem.clone().into_bytes()),
        ),
        (
            "ca.key".to_string(),
            ByteString(certs.ca_key_pem.clone().into_bytes()),
        ),
    ]);
    let annotations = BTreeMap::from([
        (
            NOT_AFTER_ANNOTATION.to_string(),
            certs.not_after.to_string(),
        ),
        (
            CA_NOT_AFTER_ANNOTATION.to_string(),
            certs.ca_not_after.to_string(),
        ),
        (NAMES_ANNOTATION.to_string(), certs.names.clone()),
    ]);
    Secret {
        metadata: ObjectMeta {
            name: Some(settings.secret_name.clone()),
            namespace: Some(settings.namespace.clone()),
            resource_version,
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/name".to_string(),
                "sluice".to_string(),
            )])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(data),
        ..Secret::default()
    }
}

fn from_secret(secret: &Secret, settings: &CertSettings) -> Result<ServingCerts, CertError> {
    let missing = |key| CertError::MissingKey {
        namespace: settings.namespace.clone(),
        name: settings.secret_name.clone(),
        key,
    };
    let data = secret.data.as_ref();
    let get = |key: &'static str| -> Result<String, CertError> {
        let bytes = data.and_then(|d| d.get(key)).ok_or_else(|| missing(key))?;
        String::from_utf8(bytes.0.clone())
            .map_err(|_| CertError::Pem(format!("{key} is not UTF-8")))
    };
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    // Missing or unreadable times count as expired: the certificate is renewed.
    let time = |key: &str| {
        annotations
            .get(key)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    };
    Ok(ServingCerts {
        ca_pem: get("ca.crt")?,
        ca_key_pem: get("ca.key")?,
        cert_pem: get("tls.crt")?,
        key_pem: get("tls.key")?,
        not_after: time(NOT_AFTER_ANNOTATION),
        ca_not_after: time(CA_NOT_AFTER_ANNOTATION),
        names: annotations
            .get(NAMES_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    })
}

/// Reads the Secret, creating it when missing and renewing what is due. Safe when several replicas
/// do it at once: the loser of a create or update race reads the winner's certificates.
pub async fn load_or_create(
    client: Client,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    let api: Api<Secret> = Api::namespaced(client, &settings.namespace);
    let err = |source| CertError::Api {
        namespace: settings.namespace.clone(),
        name: settings.secret_name.clone(),
        source,
    };
    for _ in 0..5 {
        let existing = api.get_opt(&settings.secret_name).await.map_err(err)?;
        let Some(secret) = existing else {
            let certs = generate(settings)?;
            match api
                .create(&PostParams::default(), &to_secret(&certs, settings, None))
                .await
            {
                Ok(_) => {
                    info!(secret = %settings.secret_name, "created the webhook CA and serving certificate");
                    return Ok(certs);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(err(e)),
            }
        };
        let mut certs = match from_secret(&secret, settings) {
            Ok(c) => c,
            Err(e) => {
                warn!(%e, "the certificate Secret is incomplete: replacing it");
                generate(settings)?
            }
        };
        match renewal_due(&certs, settings, jiff::Timestamp::now()) {
            Renewal::None => return Ok(certs),
            Renewal::Serving => issue_serving(&mut certs, settings)?,
            Renewal::Everything => certs = generate(settings)?,
        }
        let updated = to_secret(&certs, settings, secret.metadata.resource_version.clone());
        match api
            .replace(&settings.secret_name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => {
                info!(secret = %settings.secret_name, not_after = %certs.not_after, "renewed the webhook certificate");
                return Ok(certs);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(err(e)),
        }
    }
    Err(err(kube::Error::Service(
        "the certificate Secret kept changing under us".into(),
    )))
}

/// A rustls server configuration for the serving certificate: TLS 1.2 and 1.3, ALPN h2 and
/// http/1.1, the ring provider.
pub fn rustls_server_config(certs: &ServingCerts) -> Result<rustls::ServerConfig, CertError> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| CertError::Pem(format!("tls.crt: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes())
        .map_err(|e| CertError::Pem(format!("tls.key: {e}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The configuration for axum-server, reloadable in place.
pub fn axum_rustls_config(certs: &ServingCerts) -> Result<RustlsConfig, CertError> {
    Ok(RustlsConfig::from_config(Arc::new(rustls_server_config(
        certs,
    )?)))
}

/// Keeps the running server's certificate fresh.
pub struct CertReloader;

impl CertReloader {
    /// Every `check_interval`: reads the Secret (renewing what is due), reloads the TLS
    /// configuration when the certificate changed, and publishes the CA bundle when it changed.
    pub fn spawn(
        client: Client,
        settings: CertSettings,
        tls: RustlsConfig,
        shutdown: CancellationToken,
    ) -> (tokio::task::JoinHandle<()>, watch::Receiver<String>) {
        let (ca_tx, ca_rx) = watch::channel(String::new());
        let handle = tokio::spawn(async move {
            let mut current: Option<ServingCerts> = None;
            loop {
                match load_or_create(client.clone(), &settings).await {
                    Ok(certs) if current.as_ref() != Some(&certs) => {
                        let first = current.is_none();
                        match rustls_server_config(&certs) {
                            Ok(config) => {
                                if !first {
                                    tls.reload_from_config(Arc::new(config));
                                    info!(not_after = %certs.not_after, "reloaded the serving certificate");
                                }
                                if current.as_ref().map(|c| &c.ca_pem) != Some(&certs.ca_pem) {
                                    ca_tx.send_replace(certs.ca_pem.clone());
                                }
                                current = Some(certs);
                            }
                            Err(e) => {
                                warn!(%e, "the certificate in the Secret is unusable; keeping the current one")
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(%e, "could not check the certificate Secret; retrying"),
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(settings.check_interval) => {}
                }
            }
        });
        (handle, ca_rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(validity: Duration) -> CertSettings {
        CertSettings {
            namespace: "sluice-system".into(),
            secret_name: "tls".into(),
            dns_names: service_dns_names("sluice-webhook", "sluice-system"),
            ip_addresses: vec![IpAddr::from([127, 0, 0, 1])],
            serving_validity: validity,
            check_interval: Duration::from_secs(60),
        }
    }

    #[test]
    fn generated_certificates_build_a_tls_config_and_survive_the_secret_round_trip() {
        let s = settings(Duration::from_secs(86400));
        let certs = generate(&s).expect("generate");
        assert!(certs.ca_pem.contains("BEGIN CERTIFICATE"));
        rustls_server_config(&certs).expect("tls config");
        let back = from_secret(&to_secret(&certs, &s, None), &s).expect("round trip");
        assert_eq!(back, certs);
        assert_eq!(
            renewal_due(&certs, &s, jiff::Timestamp::now()),
            Renewal::None
        );
    }

    #[test]
    fn renews_the_serving_certificate_when_a_third_of_its_life_is_left_or_names_change() {
        let s = settings(Duration::from_secs(3000));
        let mut certs = generate(&s).expect("generate");
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(2100);
        assert_eq!(renewal_due(&certs, &s, later), Renewal::Serving);
        let ca_before = certs.ca_pem.clone();
        issue_serving(&mut certs, &s).expect("renew");
        assert_eq!(certs.ca_pem, ca_before, "renewal keeps the CA");

        let mut moved = s.clone();
        moved.dns_names.push("sluice.example".into());
        assert_eq!(
            renewal_due(&certs, &moved, jiff::Timestamp::now()),
            Renewal::Serving
        );

        let far = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 365 * 8);
        assert_eq!(renewal_due(&certs, &s, far), Renewal::Everything);
    }

    #[test]
    fn an_incomplete_secret_is_reported() {
        let s = settings(Duration::from_secs(60));
        let secret = Secret::default();
        assert!(matches!(
            from_secret(&secret, &s),
            Err(CertError::MissingKey { .. })
        ));
    }
}
