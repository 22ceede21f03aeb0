//! Issuing: a new CA, a serving certificate from it, and a CA rotation that keeps the retiring CA
//! in the bundle while it is still valid.

use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::inspect::{add, certificate_blocks, info, parse};
use crate::{CertError, CertSettings, ServingCerts};

pub const CA_COMMON_NAME: &str = "sluice-ca";
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// Certificates start a little in the past so that clocks running slightly behind accept them;
/// at most a tenth of the validity, so that short-lived test certificates keep their renewal
/// point (a third of the lifetime before expiry) after the moment they are issued.
pub(crate) const MAX_BACKDATE: Duration = Duration::from_secs(5 * 60);

fn generate_error(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertError {
    move |source| CertError::Generate { what, source }
}

fn offset(ts: Timestamp) -> Result<time::OffsetDateTime, CertError> {
    time::OffsetDateTime::from_unix_timestamp(ts.as_second())
        .map_err(|_| CertError::Validity(Duration::from_secs(ts.as_second().unsigned_abs())))
}

fn not_before(now: Timestamp, validity: Duration) -> Result<time::OffsetDateTime, CertError> {
    let backdate = MAX_BACKDATE.min(validity / 10);
    let backdated = jiff::SignedDuration::try_from(backdate)
        .ok()
        .and_then(|d| now.checked_sub(d).ok())
        .ok_or(CertError::Validity(backdate))?;
    offset(backdated)
}

/// A new self-signed CA: (certificate PEM, key PEM).
pub(crate) fn new_ca(now: Timestamp) -> Result<(String, String), CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new())
        .map_err(generate_error("the CA parameters"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before(now, CA_VALIDITY)?;
    params.not_after = offset(add(now, CA_VALIDITY)?)?;
    let key = KeyPair::generate().map_err(generate_error("the CA key"))?;
    let cert = params
        .self_signed(&key)
        .map_err(generate_error("the CA certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate signed by the first CA of `ca_bundle_pem`: (certificate PEM, key PEM,
/// not after). It never outlives its CA.
pub(crate) fn sign_serving(
    ca_bundle_pem: &str,
    ca_key_pem: &str,
    settings: &CertSettings,
    now: Timestamp,
) -> Result<(String, String, Timestamp), CertError> {
    let blocks = certificate_blocks(ca_bundle_pem, "ca.crt")?;
    let ca_info = info(&parse(&blocks[0], "ca.crt")?, "ca.crt")?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| CertError::Pem {
        what: "ca.key",
        detail: e.to_string(),
    })?;
    let issuer = Issuer::from_ca_cert_der(&blocks[0].contents.clone().into(), ca_key)
        .map_err(generate_error("the issuer from ca.crt"))?;

    let not_after = add(now, settings.serving_validity)?.min(ca_info.not_after);
    let dns_names: Vec<String> = settings.wanted_dns_names().into_iter().collect();
    let mut params = CertificateParams::new(dns_names.clone())
        .map_err(generate_error("the serving certificate parameters"))?;
    params.subject_alt_names.extend(
        settings
            .wanted_ip_addresses()
            .into_iter()
            .map(SanType::IpAddress),
    );
    params.distinguished_name.push(
        DnType::CommonName,
        dns_names.first().map(String::as_str).unwrap_or("sluice"),
    );
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before(now, settings.serving_validity)?;
    params.not_after = offset(not_after)?;
    let key = KeyPair::generate().map_err(generate_error("the serving key"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(generate_error("the serving certificate"))?;
    // The certificate's own not_after has second precision; report exactly that.
    let not_after = Timestamp::from_second(not_after.as_second())
        .map_err(|_| CertError::Validity(settings.serving_validity))?;
    Ok((cert.pem(), key.serialize_pem(), not_after))
}

/// A new CA and a serving certificate signed by it.
pub fn generate(settings: &CertSettings) -> Result<ServingCerts, CertError> {
    generate_at(settings, Timestamp::now())
}

/// [`generate`] as of `now`: certificates made in the past are aged ones (an end-to-end test of
/// the CA rotation starts from a CA in the last third of its life).
pub fn generate_at(settings: &CertSettings, now: Timestamp) -> Result<ServingCerts, CertError> {
    let (ca_pem, ca_key_pem) = new_ca(now)?;
    let (cert_pem, key_pem, not_after) = sign_serving(&ca_pem, &ca_key_pem, settings, now)?;
    Ok(ServingCerts {
        ca_pem,
        cert_pem,
        key_pem,
        not_after,
        ca_key_pem,
        next_ca_key_pem: None,
    })
}

/// A new serving certificate from the same CA (the CA bundle does not change).
pub fn issue_serving(
    certs: &ServingCerts,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    issue_serving_at(certs, settings, Timestamp::now())
}

pub(crate) fn issue_serving_at(
    certs: &ServingCerts,
    settings: &CertSettings,
    now: Timestamp,
) -> Result<ServingCerts, CertError> {
    let (cert_pem, key_pem, not_after) =
        sign_serving(&certs.ca_pem, &certs.ca_key_pem, settings, now)?;
    Ok(ServingCerts {
        cert_pem,
        key_pem,
        not_after,
        ..certs.clone()
    })
}

/// A new CA and serving certificate. The bundle lists the new CA first and keeps the CAs of
/// `previous` that are still valid, so that replicas still serving a certificate from the old CA
/// are trusted until they reload. Unreadable old CAs are dropped.
pub fn rotate_ca(
    previous: &ServingCerts,
    settings: &CertSettings,
) -> Result<ServingCerts, CertError> {
    rotate_ca_at(previous, settings, Timestamp::now())
}

pub(crate) fn rotate_ca_at(
    previous: &ServingCerts,
    settings: &CertSettings,
    now: Timestamp,
) -> Result<ServingCerts, CertError> {
    let mut fresh = generate_at(settings, now)?;
    for text in pem_certificate_texts(&previous.ca_pem) {
        let still_valid = certificate_blocks(text, "ca.crt")
            .and_then(|blocks| info(&parse(&blocks[0], "ca.crt")?, "ca.crt"))
            .is_ok_and(|i| i.is_ca && i.not_after > now);
        if still_valid {
            if !fresh.ca_pem.ends_with('\n') {
                fresh.ca_pem.push('\n');
            }
            fresh.ca_pem.push_str(text);
            fresh.ca_pem.push('\n');
        }
    }
    Ok(fresh)
}

/// The certificate blocks of a PEM text, as they are written (so they are kept byte for byte).
pub(crate) fn pem_certificate_texts(text: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let Some(length) = rest[start..].find(END) else {
            break;
        };
        let end = start + length + END.len();
        blocks.push(&rest[start..end]);
        rest = &rest[end..];
    }
    blocks
}
