//! Reading certificates back: expiry, names, issuer and key, and the renewal decision.

use std::collections::BTreeSet;
use std::net::IpAddr;

use jiff::{SignedDuration, Timestamp};
use rcgen::PublicKeyData;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use crate::{CertError, CertSettings, ServingCerts};

/// What a certificate says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateInfo {
    pub subject: String,
    pub not_before: Timestamp,
    pub not_after: Timestamp,
    pub dns_names: BTreeSet<String>,
    pub ip_addresses: BTreeSet<IpAddr>,
    pub is_ca: bool,
}

/// The PEM blocks of `text` that hold certificates, in order.
pub(crate) fn certificate_blocks(text: &str, what: &'static str) -> Result<Vec<Pem>, CertError> {
    let mut blocks = Vec::new();
    for block in Pem::iter_from_buffer(text.as_bytes()) {
        let block = block.map_err(|e| CertError::Pem {
            what,
            detail: e.to_string(),
        })?;
        if block.label == "CERTIFICATE" {
            blocks.push(block);
        }
    }
    if blocks.is_empty() {
        return Err(CertError::Pem {
            what,
            detail: "no CERTIFICATE block".into(),
        });
    }
    Ok(blocks)
}

pub(crate) fn parse<'a>(
    block: &'a Pem,
    what: &'static str,
) -> Result<X509Certificate<'a>, CertError> {
    block.parse_x509().map_err(|e| CertError::Pem {
        what,
        detail: e.to_string(),
    })
}

fn timestamp(seconds: i64, what: &'static str) -> Result<Timestamp, CertError> {
    Timestamp::from_second(seconds).map_err(|e| CertError::Pem {
        what,
        detail: format!("validity out of range: {e}"),
    })
}

pub(crate) fn info(
    cert: &X509Certificate<'_>,
    what: &'static str,
) -> Result<CertificateInfo, CertError> {
    let mut dns_names = BTreeSet::new();
    let mut ip_addresses = BTreeSet::new();
    let san = cert
        .subject_alternative_name()
        .map_err(|e| CertError::Pem {
            what,
            detail: format!("subjectAltName: {e}"),
        })?;
    for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
        match name {
            GeneralName::DNSName(dns) => {
                dns_names.insert(dns.to_ascii_lowercase());
            }
            GeneralName::IPAddress(bytes) => {
                if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                    ip_addresses.insert(IpAddr::from(v4));
                } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                    ip_addresses.insert(IpAddr::from(v6));
                }
            }
            _ => {}
        }
    }
    Ok(CertificateInfo {
        subject: cert.subject().to_string(),
        not_before: timestamp(cert.validity().not_before.timestamp(), what)?,
        not_after: timestamp(cert.validity().not_after.timestamp(), what)?,
        dns_names,
        ip_addresses,
        is_ca: cert.is_ca(),
    })
}

/// Reads the first certificate of a PEM text.
pub fn inspect_certificate(pem: &str) -> Result<CertificateInfo, CertError> {
    let blocks = certificate_blocks(pem, "certificate")?;
    info(&parse(&blocks[0], "certificate")?, "certificate")
}

/// Whether the private key `key_pem` belongs to `cert`.
pub(crate) fn key_matches(cert: &X509Certificate<'_>, key_pem: &str) -> bool {
    rcgen::KeyPair::from_pem(key_pem)
        .is_ok_and(|key| key.subject_public_key_info() == cert.public_key().raw)
}

/// What needs renewing, if anything, and why (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    NotDue,
    /// A new serving certificate from the same CA; the CA bundle stays as it is.
    Serving {
        reason: String,
    },
    /// A new CA and serving certificate: the CA bundle changes and must reach the webhook
    /// configurations.
    Everything {
        reason: String,
    },
}

/// True when less than a third of the lifetime between `not_before` and `not_after` is left.
fn in_last_third(not_before: Timestamp, not_after: Timestamp, now: Timestamp) -> bool {
    let lifetime = not_after.duration_since(not_before);
    let renew_at = not_after.checked_sub(lifetime / 3).unwrap_or(not_before);
    now >= renew_at
}

/// Decides what to renew: everything when the CA is unreadable, does not match its key or has
/// less than a third of its life left; the serving certificate when it is unreadable, not signed
/// by the CA, does not match its key, names other hosts than wanted, or has less than a third of
/// its life left.
pub fn renewal_due(certs: &ServingCerts, settings: &CertSettings, now: Timestamp) -> Renewal {
    if let Some(reason) = ca_due(certs, now) {
        return Renewal::Everything { reason };
    }
    match serving_due(certs, settings, now) {
        Some(reason) => Renewal::Serving { reason },
        None => Renewal::NotDue,
    }
}

/// Why the signing CA (the bundle's first) must be replaced, if it must: unreadable, not a CA, its
/// key lost, or less than a third of its life left.
pub(crate) fn ca_due(certs: &ServingCerts, now: Timestamp) -> Option<String> {
    ca_sound(certs, now).err()
}

fn ca_sound(certs: &ServingCerts, now: Timestamp) -> Result<(), String> {
    let ca_blocks = certificate_blocks(&certs.ca_pem, "ca.crt").map_err(reason)?;
    let ca = parse(&ca_blocks[0], "ca.crt").map_err(reason)?;
    if !ca.is_ca() {
        return Err("ca.crt is not a CA certificate".into());
    }
    if !key_matches(&ca, &certs.ca_key_pem) {
        return Err("ca.key does not belong to ca.crt".into());
    }
    let ca_info = info(&ca, "ca.crt").map_err(reason)?;
    if in_last_third(ca_info.not_before, ca_info.not_after, now) {
        return Err(format!(
            "the CA expires at {} (less than a third of its life left)",
            ca_info.not_after
        ));
    }
    Ok(())
}

/// Why the serving certificate must be reissued by the signing CA, if it must: unreadable, not
/// signed by the signing CA, its key lost, other names than wanted, or less than a third of its
/// life left. An unreadable CA makes every serving certificate due.
pub(crate) fn serving_due(
    certs: &ServingCerts,
    settings: &CertSettings,
    now: Timestamp,
) -> Option<String> {
    serving_sound(certs, settings, now).err()
}

fn serving_sound(
    certs: &ServingCerts,
    settings: &CertSettings,
    now: Timestamp,
) -> Result<(), String> {
    let ca_blocks = certificate_blocks(&certs.ca_pem, "ca.crt").map_err(reason)?;
    let ca = parse(&ca_blocks[0], "ca.crt").map_err(reason)?;
    let serving_blocks = certificate_blocks(&certs.cert_pem, "tls.crt").map_err(reason)?;
    let cert = parse(&serving_blocks[0], "tls.crt").map_err(reason)?;
    if cert.verify_signature(Some(ca.public_key())).is_err() {
        return Err("tls.crt is not signed by the current CA".into());
    }
    if !key_matches(&cert, &certs.key_pem) {
        return Err("tls.key does not belong to tls.crt".into());
    }
    let cert_info = info(&cert, "tls.crt").map_err(reason)?;
    let (wanted_dns, wanted_ips) = (settings.wanted_dns_names(), settings.wanted_ip_addresses());
    if cert_info.dns_names != wanted_dns || cert_info.ip_addresses != wanted_ips {
        return Err(format!(
            "the certificate names {:?} {:?}, wanted {:?} {:?}",
            cert_info.dns_names, cert_info.ip_addresses, wanted_dns, wanted_ips
        ));
    }
    if in_last_third(cert_info.not_before, cert_info.not_after, now) {
        return Err(format!(
            "the serving certificate expires at {} (less than a third of its life left)",
            cert_info.not_after
        ));
    }
    Ok(())
}

/// A certificate found unreadable, as a renewal's reason.
fn reason(e: CertError) -> String {
    e.to_string()
}

/// Seconds-precision helper shared with issuing.
pub(crate) fn add(now: Timestamp, span: std::time::Duration) -> Result<Timestamp, CertError> {
    SignedDuration::try_from(span)
        .ok()
        .and_then(|d| now.checked_add(d).ok())
        .ok_or(CertError::Validity(span))
}
