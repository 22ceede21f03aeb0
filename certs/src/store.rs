//! The Secret that shares the certificates between restarts and replicas.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::{info, warn};

use crate::issue::generate_at;
use crate::rotation::{Published, RotationSettings, RotationState, Step, next_step, observe, take};
use crate::{CertError, CertSettings, ServingCerts};

pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";
pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
/// The incoming CA's key while a rotation publishes it (absent otherwise).
pub const NEXT_CA_KEY_KEY: &str = "ca-next.key";
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
    let next_ca_key_pem = match data.is_some_and(|d| d.contains_key(NEXT_CA_KEY_KEY)) {
        true => Some(get(NEXT_CA_KEY_KEY)?),
        false => None,
    };
    Ok(ServingCerts {
        ca_pem: get(CA_CERT_KEY)?,
        ca_key_pem: get(CA_KEY_KEY)?,
        key_pem: get(TLS_KEY_KEY)?,
        cert_pem,
        not_after,
        next_ca_key_pem,
    })
}

/// Writes `certs` into `secret`, keeping whatever else is on it (labels, owners, other keys).
pub fn write_into_secret(secret: &mut Secret, certs: &ServingCerts, settings: &CertSettings) {
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
    match &certs.next_ca_key_pem {
        Some(key) => {
            data.insert(
                NEXT_CA_KEY_KEY.to_string(),
                ByteString(key.clone().into_bytes()),
            );
        }
        None => {
            data.remove(NEXT_CA_KEY_KEY);
        }
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
    rotation: &RotationSettings,
    published: Option<&Published>,
    now: jiff::Timestamp,
) -> Result<Option<ServingCerts>, CertError> {
    let stored = match certs_from_secret(secret, settings) {
        Ok(certs) => certs,
        Err(e) => {
            warn!(error = %e, "the certificate Secret is unusable: replacing its CA and certificate");
            return generate_at(settings, now).map(Some);
        }
    };
    let state = observe(&stored, settings, rotation, published, now);
    let step = next_step(&state, now);
    log_step(step, &state, &stored, settings, now);
    take(step, &stored, settings, now)
}

/// Says why a step that changes the certificates is taken.
fn log_step(
    step: Step,
    state: &RotationState,
    stored: &ServingCerts,
    settings: &CertSettings,
    now: jiff::Timestamp,
) {
    let phase = &state.phase;
    match step {
        Step::Nothing | Step::WaitForPublication | Step::WaitUntil(_) => {}
        Step::RenewServing => {
            let reason = crate::inspect::serving_due(stored, settings, now);
            info!(
                ?reason,
                ?phase,
                "issuing a new serving certificate from the same CA"
            );
        }
        Step::PublishIncomingCa => {
            let reason = crate::inspect::ca_due(stored, now);
            warn!(
                ?reason,
                "CA rotation: publishing a new CA beside the current one; it signs nothing until the webhook configurations have held both for the overlap"
            );
        }
        Step::ServeIncomingCa => {
            info!(overlap = ?state.overlap, "CA rotation: the bundle of both CAs was published; serving a certificate from the new CA");
        }
        Step::DropRetiringCas => {
            info!(overlap = ?state.overlap, "CA rotation: every replica serves the new CA's certificate; dropping the old CA from the bundle");
        }
        Step::StartOver => {
            warn!(
                ?phase,
                "the signing CA is unusable: a new CA signs at once (nothing served is trusted now); still-valid old CAs stay in the bundle"
            );
        }
    }
}

/// Reads the Secret, creating it when missing and renewing what is due, with the default rotation
/// settings and no bundle known to be published (a CA rotation may start, never switch CAs).
pub async fn load_or_create(
    client: Client,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    load_or_advance(client, settings, &RotationSettings::default(), None).await
}

/// Reads the Secret, creating it when missing, renewing what is due and moving a CA rotation on
/// (see [`next_step`]); `published` is the bundle this replica saw the webhook configurations
/// take. Safe when several replicas do it at once: the loser of a create or update race re-reads
/// and uses the winner's certificates.
pub async fn load_or_advance(
    client: Client,
    settings: &CertSettings,
    rotation: &RotationSettings,
    published: Option<&Published>,
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
        let existing = api
            .get_opt(&settings.secret_name)
            .await
            .map_err(api_error("reading"))?;
        let (certs, written, action, stored) = match existing {
            None => {
                let certs = generate_at(settings, now)?;
                let mut secret = Secret::default();
                write_into_secret(&mut secret, &certs, settings);
                let written = api.create(&PostParams::default(), &secret).await;
                let stored = "created the webhook CA and serving certificate";
                (certs, written, "creating", stored)
            }
            Some(mut secret) => {
                let Some(certs) = renewed(&secret, settings, rotation, published, now)? else {
                    return certs_from_secret(&secret, settings);
                };
                // resourceVersion stays as read: a concurrent renewal makes this a 409.
                write_into_secret(&mut secret, &certs, settings);
                let written = api
                    .replace(&settings.secret_name, &PostParams::default(), &secret)
                    .await;
                let stored = "stored the renewed webhook certificate";
                (certs, written, "updating", stored)
            }
        };
        match written {
            Ok(_) => {
                info!(secret = %settings.secret_name, namespace = %settings.namespace, not_after = %certs.not_after,
                    "{stored}");
                return Ok(certs);
            }
            // Another replica created or renewed it first: use theirs.
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(api_error(action)(e)),
        }
    }
    Err(CertError::KeptChanging {
        namespace: settings.namespace.clone(),
        name: settings.secret_name.clone(),
        attempts: ATTEMPTS,
    })
}
