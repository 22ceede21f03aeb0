//! Pure tests: no cluster. The Secret round trips through the API server are covered by the
//! end-to-end tests.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rustls::Connection;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::issue::{generate_at, issue_serving_at, rotate_ca_at};
use crate::reload::{Applied, ReloadState};
use crate::store::{certs_from_secret, write_into_secret};
use crate::*;

fn settings(validity: Duration) -> CertSettings {
    CertSettings {
        serving_validity: validity,
        ..CertSettings::for_service("sluice-system", "sluice-webhook", "sluice-webhook-tls")
    }
}

fn day() -> Duration {
    Duration::from_secs(86400)
}

/// Verifies `certs.cert_pem` for `name` the way a client trusting `ca_bundle` would, at `at`.
fn client_accepts(
    ca_bundle: &str,
    cert_pem: &str,
    name: &str,
    at: Timestamp,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| e.to_string())?;
    let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let now = UnixTime::since_unix_epoch(Duration::from_secs(at.as_second().unsigned_abs()));
    verifier
        .verify_server_cert(&leaf, &[], &server_name, &[], now)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_generated_ca_signs_a_serving_certificate_for_every_wanted_name() {
    let s = settings(Duration::from_secs(365 * 86400));
    let certs = generate(&s).expect("generate");

    let ca = inspect_certificate(&certs.ca_pem).expect("ca");
    assert!(ca.is_ca);
    assert!(ca.subject.contains("CN=sluice-ca"), "{}", ca.subject);
    let ca_life = ca.not_after.duration_since(ca.not_before).as_secs();
    assert!(ca_life >= CA_VALIDITY.as_secs() as i64, "{ca_life}");

    let serving = inspect_certificate(&certs.cert_pem).expect("serving");
    assert!(!serving.is_ca);
    assert_eq!(serving.not_after, certs.not_after);
    assert_eq!(
        serving
            .dns_names
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec![
            "localhost",
            "sluice-webhook",
            "sluice-webhook.sluice-system",
            "sluice-webhook.sluice-system.svc",
            "sluice-webhook.sluice-system.svc.cluster.local",
        ]
    );
    assert_eq!(
        serving.ip_addresses.into_iter().collect::<Vec<_>>(),
        vec![IpAddr::from([127, 0, 0, 1])]
    );
    let now = Timestamp::now();
    for name in ["sluice-webhook.sluice-system.svc", "localhost", "127.0.0.1"] {
        client_accepts(&certs.ca_pem, &certs.cert_pem, name, now).expect(name);
    }
    assert!(client_accepts(&certs.ca_pem, &certs.cert_pem, "evil.example", now).is_err());
    assert_eq!(renewal_due(&certs, &s, now), Renewal::NotDue);
}

#[test]
fn unspecified_addresses_are_left_out_and_names_are_case_insensitive() {
    let mut s = settings(day());
    s.ip_addresses.push(IpAddr::from([0, 0, 0, 0]));
    s.dns_names.push("LOCALHOST".into());
    let certs = generate(&s).expect("generate");
    let serving = inspect_certificate(&certs.cert_pem).expect("serving");
    assert_eq!(serving.ip_addresses.len(), 1);
    assert_eq!(renewal_due(&certs, &s, Timestamp::now()), Renewal::NotDue);
}

#[test]
fn the_serving_certificate_is_renewed_in_the_last_third_of_its_life() {
    let s = settings(Duration::from_secs(3000));
    let now = Timestamp::now();
    let certs = generate_at(&s, now).expect("generate");
    // The certificate starts 5 minutes back: a lifetime of 3300 s, renewed 1100 s before the end.
    let early = now + SignedDuration::from_secs(1800);
    let late = now + SignedDuration::from_secs(2000);
    assert_eq!(renewal_due(&certs, &s, early), Renewal::NotDue);
    assert!(matches!(
        renewal_due(&certs, &s, late),
        Renewal::Serving { .. }
    ));

    let renewed = issue_serving_at(&certs, &s, late).expect("renew");
    assert_eq!(renewed.ca_pem, certs.ca_pem, "renewal keeps the CA bundle");
    assert_ne!(renewed.cert_pem, certs.cert_pem);
    assert_eq!(renewal_due(&renewed, &s, late), Renewal::NotDue);
    client_accepts(&certs.ca_pem, &renewed.cert_pem, "localhost", late).expect("same CA trusts it");
}

#[test]
fn other_names_a_foreign_key_or_a_foreign_issuer_renew_the_serving_certificate() {
    let s = settings(day());
    let now = Timestamp::now();
    let certs = generate(&s).expect("generate");

    let mut moved = s.clone();
    moved.dns_names.push("sluice.example".into());
    assert!(matches!(
        renewal_due(&certs, &moved, now),
        Renewal::Serving { .. }
    ));
    let renewed = issue_serving(&certs, &moved).expect("renew");
    assert_eq!(renewal_due(&renewed, &moved, now), Renewal::NotDue);
    client_accepts(&renewed.ca_pem, &renewed.cert_pem, "sluice.example", now).expect("new name");

    let other = generate(&s).expect("other");
    let foreign_key = ServingCerts {
        key_pem: other.key_pem.clone(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&foreign_key, &s, now),
        Renewal::Serving { reason } if reason.contains("tls.key")
    ));
    let foreign_issuer = ServingCerts {
        cert_pem: other.cert_pem.clone(),
        key_pem: other.key_pem.clone(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&foreign_issuer, &s, now),
        Renewal::Serving { reason } if reason.contains("not signed")
    ));
    let garbage = ServingCerts {
        cert_pem: "not a certificate".into(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&garbage, &s, now),
        Renewal::Serving { .. }
    ));
}

#[test]
fn a_broken_or_ageing_ca_renews_everything() {
    let s = settings(day());
    let now = Timestamp::now();
    let certs = generate_at(&s, now).expect("generate");
    let other = generate(&s).expect("other");

    let wrong_ca_key = ServingCerts {
        ca_key_pem: other.ca_key_pem.clone(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&wrong_ca_key, &s, now),
        Renewal::Everything { .. }
    ));
    let garbage = ServingCerts {
        ca_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&garbage, &s, now),
        Renewal::Everything { .. }
    ));
    let not_a_ca = ServingCerts {
        ca_pem: certs.cert_pem.clone(),
        ..certs.clone()
    };
    assert!(matches!(
        renewal_due(&not_a_ca, &s, now),
        Renewal::Everything { .. }
    ));

    let in_seven_years = now + SignedDuration::from_hours(24 * 365 * 7);
    assert!(matches!(
        renewal_due(&certs, &s, in_seven_years),
        Renewal::Everything { reason } if reason.contains("CA expires")
    ));
}

#[test]
fn a_ca_rotation_keeps_the_retiring_ca_trusted_until_it_expires() {
    let s = settings(day());
    let now = Timestamp::now();
    let old = generate_at(&s, now).expect("generate");

    let in_seven_years = now + SignedDuration::from_hours(24 * 365 * 7);
    let rotated = rotate_ca_at(&old, &s, in_seven_years).expect("rotate");
    assert!(
        !rotated.ca_pem.starts_with(old.ca_pem.trim()),
        "the new CA comes first"
    );
    assert_eq!(rotated.ca_pem.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(
        rotated.ca_pem.contains(old.ca_pem.trim()),
        "the old CA stays in the bundle"
    );
    assert_eq!(renewal_due(&rotated, &s, in_seven_years), Renewal::NotDue);
    client_accepts(
        &rotated.ca_pem,
        &rotated.cert_pem,
        "localhost",
        in_seven_years,
    )
    .expect("new");

    // A serving certificate from the old CA (another replica that has not reloaded yet) is still
    // trusted by the new bundle.
    let old_serving = issue_serving_at(&old, &s, in_seven_years).expect("old CA serving");
    client_accepts(
        &rotated.ca_pem,
        &old_serving.cert_pem,
        "localhost",
        in_seven_years,
    )
    .expect("retiring CA still trusted");

    // Once the old CA has expired, the next rotation drops it.
    let in_eleven_years = now + SignedDuration::from_hours(24 * 365 * 11);
    let again = rotate_ca_at(&rotated, &s, in_eleven_years).expect("rotate again");
    assert_eq!(again.ca_pem.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(!again.ca_pem.contains(old.ca_pem.trim()));
}

#[test]
fn a_serving_certificate_never_outlives_its_ca() {
    let s = settings(Duration::from_secs(20 * 365 * 86400));
    let certs = generate(&s).expect("generate");
    let ca = inspect_certificate(&certs.ca_pem).expect("ca");
    assert_eq!(certs.not_after, ca.not_after);
}

#[test]
fn the_secret_round_trip_keeps_foreign_data_and_the_existing_type() {
    let s = settings(day());
    let certs = generate(&s).expect("generate");
    let mut secret = Secret::default();
    write_into_secret(&mut secret, &certs, &s);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.clone().unwrap_or_default();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, vec!["ca.crt", "ca.key", "tls.crt", "tls.key"]);
    assert_eq!(certs_from_secret(&secret, &s).expect("read back"), certs);

    let mut existing = Secret {
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "other".to_string(),
            ByteString(b"x".to_vec()),
        )])),
        ..Secret::default()
    };
    write_into_secret(&mut existing, &certs, &s);
    assert_eq!(
        existing.type_.as_deref(),
        Some("Opaque"),
        "a Secret's type is immutable"
    );
    assert!(existing.data.unwrap_or_default().contains_key("other"));
}

#[test]
fn an_incomplete_or_binary_secret_is_reported_with_its_name() {
    let s = settings(day());
    let error = certs_from_secret(&Secret::default(), &s).expect_err("incomplete");
    assert!(matches!(error, CertError::MissingKey { .. }));
    assert!(
        error
            .to_string()
            .contains("sluice-system/sluice-webhook-tls"),
        "{error}"
    );

    let certs = generate(&s).expect("generate");
    let mut secret = Secret::default();
    write_into_secret(&mut secret, &certs, &s);
    if let Some(data) = secret.data.as_mut() {
        data.insert("tls.key".into(), ByteString(vec![0xff, 0xfe]));
    }
    assert!(matches!(
        certs_from_secret(&secret, &s),
        Err(CertError::NotUtf8 { key: "tls.key", .. })
    ));
}

#[test]
fn the_tls_configuration_offers_h2_and_http1_and_refuses_a_foreign_key() {
    let s = settings(day());
    let certs = generate(&s).expect("generate");
    let config = rustls_server_config(&certs).expect("config");
    assert_eq!(
        config.alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    );

    let other = generate(&s).expect("other");
    let mismatched = ServingCerts {
        key_pem: other.key_pem,
        ..certs
    };
    assert!(matches!(
        rustls_server_config(&mismatched),
        Err(CertError::Tls(_))
    ));
}

#[test]
fn keys_stay_out_of_debug_output() {
    let certs = generate(&settings(day())).expect("generate");
    let shown = format!("{certs:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}

#[test]
fn the_reloader_reloads_on_change_and_publishes_only_a_new_ca_bundle() {
    let s = settings(day());
    let first = generate(&s).expect("generate");
    let tls = axum_rustls_config(&first).expect("tls");
    let (ca_tx, mut ca_rx) = tokio::sync::watch::channel(String::new());
    let mut state = ReloadState::new(tls, ca_tx);

    let applied = state.apply(first.clone()).expect("first");
    assert_eq!(
        applied,
        Applied {
            reloaded: true,
            ca_changed: true
        }
    );
    assert!(ca_rx.has_changed().unwrap_or(false));
    assert_eq!(*ca_rx.borrow_and_update(), first.ca_pem);

    assert_eq!(
        state.apply(first.clone()).expect("same"),
        Applied::default()
    );

    let renewed = issue_serving(&first, &s).expect("renew");
    assert_eq!(
        state.apply(renewed.clone()).expect("renewed"),
        Applied {
            reloaded: true,
            ca_changed: false
        }
    );
    assert!(!ca_rx.has_changed().unwrap_or(true));

    let broken = ServingCerts {
        key_pem: "garbage".into(),
        ..renewed.clone()
    };
    assert!(
        state.apply(broken).is_err(),
        "an unusable certificate is refused"
    );

    let rotated = rotate_ca(&renewed, &s).expect("rotate");
    assert_eq!(
        state.apply(rotated.clone()).expect("rotated"),
        Applied {
            reloaded: true,
            ca_changed: true
        }
    );
    assert_eq!(*ca_rx.borrow_and_update(), rotated.ca_pem);
}

#[test]
fn a_short_lived_certificate_is_not_renewed_the_moment_it_is_issued() {
    // End-to-end tests use minute-long certificates to watch renewal happen.
    let s = settings(Duration::from_secs(60));
    let now = Timestamp::now();
    let certs = generate_at(&s, now).expect("generate");
    assert_eq!(renewal_due(&certs, &s, now), Renewal::NotDue);
    assert_eq!(
        renewal_due(&certs, &s, now + SignedDuration::from_secs(30)),
        Renewal::NotDue
    );
    assert!(matches!(
        renewal_due(&certs, &s, now + SignedDuration::from_secs(45)),
        Renewal::Serving { .. }
    ));
}

/// A client CA and a client certificate from it (client auth), PEM: (CA, certificate, key).
fn client_identity() -> (String, String, String) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.distinguished_name
        .push(DnType::CommonName, "front-proxy-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("client key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("client params");
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let issuer = Issuer::new(ca, ca_key);
    let cert = params.signed_by(&key, &issuer).expect("client cert");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// A TLS handshake in memory between a client trusting `certs`' CA (presenting `identity` when
/// given) and a server configured with `server`; the error says which side failed.
fn handshake(
    certs: &ServingCerts,
    server: rustls::ServerConfig,
    identity: Option<(&str, &str)>,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(certs.ca_pem.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let client_config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).map_err(|e| e.to_string())?],
                rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?,
    };
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let client =
        rustls::ClientConnection::new(Arc::new(client_config), name).map_err(|e| e.to_string())?;
    let server = rustls::ServerConnection::new(Arc::new(server)).map_err(|e| e.to_string())?;
    let (mut client, mut server) = (Connection::from(client), Connection::from(server));
    // Each round moves everything either side has to say; a handshake needs a few.
    for _ in 0..8 {
        deliver(&mut client, &mut server, "server")?;
        deliver(&mut server, &mut client, "client")?;
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
    }
    Err("the handshake did not finish".into())
}

/// Moves everything `from` has to say to `to`, which reads it (`to_name` names it in errors).
fn deliver(from: &mut Connection, to: &mut Connection, to_name: &str) -> Result<(), String> {
    let mut wire = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut wire).map_err(|e| e.to_string())?;
    }
    to.read_tls(&mut wire.as_slice())
        .map_err(|e| e.to_string())?;
    to.process_new_packets()
        .map_err(|e| format!("{to_name}: {e}"))?;
    Ok(())
}

#[test]
fn with_a_client_ca_a_client_without_a_certificate_is_refused() {
    let certs = generate(&settings(day())).expect("generate");
    let (client_ca, client_cert, client_key) = client_identity();
    let required = ClientAuth::require_from(&client_ca).expect("client CA");
    let config = || rustls_server_config_with(&certs, &required).expect("config");

    let refused = handshake(&certs, config(), None).expect_err("no certificate");
    assert!(refused.starts_with("server:"), "{refused}");
    handshake(&certs, config(), Some((&client_cert, &client_key))).expect("the client CA's");

    // A certificate from another CA is refused too.
    let (_, stranger_cert, stranger_key) = client_identity();
    let refused = handshake(&certs, config(), Some((&stranger_cert, &stranger_key)))
        .expect_err("a stranger's certificate");
    assert!(refused.starts_with("server:"), "{refused}");

    // Without the option, anyone may connect (today's default).
    handshake(&certs, rustls_server_config(&certs).expect("config"), None).expect("anyone");
}

#[test]
fn a_client_ca_file_without_a_certificate_is_an_error() {
    assert!(matches!(
        ClientAuth::require_from("not a certificate"),
        Err(CertError::Pem { .. })
    ));
}

#[test]
fn a_reload_keeps_requiring_client_certificates() {
    let s = settings(day());
    let first = generate(&s).expect("generate");
    let (client_ca, ..) = client_identity();
    let required = ClientAuth::require_from(&client_ca).expect("client CA");
    let tls = axum_rustls_config_with(&first, &required).expect("tls");
    let (ca_tx, _ca_rx) = tokio::sync::watch::channel(String::new());
    let mut state = ReloadState::new(tls.clone(), ca_tx).with_client_auth(required);
    let renewed = issue_serving(&first, &s).expect("renew");
    state.apply(renewed.clone()).expect("reload");
    let reloaded = tls.get_inner();
    assert!(
        handshake(&renewed, (*reloaded).clone(), None).is_err(),
        "the reloaded configuration still asks for a client certificate"
    );
}
