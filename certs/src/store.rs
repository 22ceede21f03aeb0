//! The Secret that shares the certificates between restarts and replicas.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::{info, warn};

use crate::inspect::{Renewal, renewal_due};
use crate::issue::{generate_at, issue_serving_at, rotate_ca_at};
use crate::{CertError, CertSettings, ServingCerts};

pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
const SECRET_TYPE: &str = "kubernetes.io/tls";
/// For people reading the Secret; decisions never rely on it.
const NOT_AFTER_ANNOTATION: &str = "sluice.dev/serving-not-after";
/// Create/update races between replicas are settled by re-reading; a few rounds always suffice.
const ATTEMPTS: usize = 5;

pub(crate) fn certs_from_secret(
    secret: &Secret,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    let data = secret.data.as_ref();
    let get = |key: &'static str| -> Result<String, CertError> {
        let bytes = data
            .and_then(|d| d.get(key))
            .ok_or_else(|| CertError::MissingKey {
                namespace: settings.namespace.clone(),
                name: settings.secret_name.clone(),
                key,
            })?;
        String::from_utf8(bytes.0.clone()).map_err(|_| CertError::NotUtf8 {
            namespace: settings.namespace.clone(),
            name: settings.secret_name.clone(),
            key,
        })
    };
    let cert_pem = get(TLS_CERT_KEY)?;
    // An unreadable expiry is treated as "now": renewal_due judges the certificate anyway.
    let not_after = crate::inspect_certificate(&cert_pem)
        .map(|i| i.not_after)
        .unwrap_or_else(|_| jiff::Timestamp::now());
    Ok(ServingCerts {
        ca_pem: get(CA_CERT_KEY)?,
        ca_key_pem: get(CA_KEY_KEY)?,
        key_pem: get(TLS_KEY_KEY)?,
        cert_pem,
        not_after,
    })
}

/// Writes `certs` into `secret`, keeping whatever else is on it (labels, owners, other keys).
pub(crate) fn write_into_secret(
    secret: &mut Secret,
    certs: &ServingCerts,
    settings: &CertSettings,
) {
    secret.metadata.name = Some(settings.secret_name.clone());
    secret.metadata.namespace = Some(settings.namespace.clone());
    secret
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .entry("app.kubernetes.io/name".to_string())
        .or_insert_with(|| "sluice".to_string());
    secret
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            NOT_AFTER_ANNOTATION.to_string(),
            certs.not_after.to_string(),
        );
    // The type of an existing Secret is immutable: only set it on a new one.
    if secret.type_.is_none() {
        secret.type_ = Some(SECRET_TYPE.to_string());
    }
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    for (key, value) in [
        (TLS_CERT_KEY, &certs.cert_pem),
        (TLS_KEY_KEY, &certs.key_pem),
        (CA_CERT_KEY, &certs.ca_pem),
        (CA_KEY_KEY, &certs.ca_key_pem),
    ] {
        data.insert(key.to_string(), ByteString(value.clone().into_bytes()));
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    // 409 is AlreadyExists on create and Conflict (stale resourceVersion) on replace.
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// What a stored Secret needs: None when it can be used as it is.
fn renewed(
    secret: &Secret,
    settings: &CertSettings,
    now: jiff::Timestamp,
) -> Result<Option<ServingCerts>, CertError> {
    let stored = match certs_from_secret(secret, settings) {
        Ok(certs) => certs,
        Err(e) => {
            warn!(error = %e, "the certificate Secret is unusable: replacing its CA and certificate");
            return generate_at(settings, now).map(Some);
        }
    };
    match renewal_due(&stored, settings, now) {
        Renewal::NotDue => Ok(None),
        Renewal::Serving { reason } => {
            info!(%reason, "issuing a new serving certificate from the same CA");
            issue_serving_at(&stored, settings, now).map(Some)
        }
        Renewal::Everything { reason } => {
            warn!(%reason, "creating a new CA: the CA bundle of the webhook configurations changes");
            rotate_ca_at(&stored, settings, now).map(Some)
        }
    }
}

/// Reads the Secret, creating it when missing and renewing what is due. Safe when several replicas
/// do it at once: the loser of a create or update race re-reads and uses the winner's certificates.
pub async fn load_or_create(
    client: Client,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    let api: Api<Secret> = Api::namespaced(client, &settings.namespace);
    let api_error = |action: &'static str| {
        move |source: kube::Error| CertError::Api {
            action,
            namespace: settings.namespace.clone(),
            name: settings.secret_name.clone(),
            source: Box::new(source),
        }
    };
    for _ in 0..ATTEMPTS {
        let now = jiff::Timestamp::now();
        match api
            .get_opt(&settings.secret_name)
            .await
            .map_err(api_error("reading"))?
        {
            None => {
                let certs = generate_at(settings, now)?;
                let mut secret = Secret {
                    metadata: ObjectMeta::default(),
                    ..Secret::default()
                };
                write_into_secret(&mut secret, &certs, settings);
                match api.create(&PostParams::default(), &secret).await {
                    Ok(_) => {
                        info!(secret = %settings.secret_name, namespace = %settings.namespace, not_after = %certs.not_after,
                            "created the webhook CA and serving certificate");
                        return Ok(certs);
                    }
                    // Another replica created it first: use theirs.
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(api_error("creating")(e)),
                }
            }
            Some(mut secret) => {
                let Some(certs) = renewed(&secret, settings, now)? else {
                    return certs_from_secret(&secret, settings);
                };
                // resourceVersion stays as read: a concurrent renewal makes this a 409.
                write_into_secret(&mut secret, &certs, settings);
                match api
                    .replace(&settings.secret_name, &PostParams::default(), &secret)
                    .await
                {
                    Ok(_) => {
                        info!(secret = %settings.secret_name, namespace = %settings.namespace, not_after = %certs.not_after,
                            "stored the renewed webhook certificate");
                        return Ok(certs);
                    }
                    Err(e) if is_conflict(&e) => continue,
                    Err(e) => return Err(api_error("updating")(e)),
                }
            }
        }
    }
    Err(CertError::KeptChanging {
        namespace: settings.namespace.clone(),
        name: settings.secret_name.clone(),
        attempts: ATTEMPTS,
    })
}
