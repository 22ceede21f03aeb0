//! The rotation's promise: whatever bundle the API server holds and whatever certificate a
//! replica serves during a rotation, the one trusts the other.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::*;
use crate::issue::{generate_at, issue_serving_at};
use crate::store::{certs_from_secret, write_into_secret};
use crate::{PublishedBundles, inspect_certificate};

fn settings() -> CertSettings {
    CertSettings {
        serving_validity: Duration::from_secs(365 * 86400),
        ..CertSettings::for_service("sluice-system", "sluice-webhook", "sluice-webhook-tls")
    }
}

const OVERLAP: Duration = Duration::from_secs(600);

fn rotation() -> RotationSettings {
    RotationSettings { overlap: OVERLAP }
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

/// Seven years on, the ten-year CA has less than a third of its life left.
fn ageing(t0: Timestamp) -> Timestamp {
    t0 + SignedDuration::from_hours(24 * 365 * 7)
}

/// The certificates as they stand when the CA ages: the serving certificate (a year long) was
/// renewed a day before.
fn before_rotation(t0: Timestamp) -> ServingCerts {
    let first = generate_at(&settings(), t0).expect("generate");
    issue_serving_at(
        &first,
        &settings(),
        ageing(t0) - SignedDuration::from_hours(24),
    )
    .expect("renew")
}

/// Whether a client trusting `bundle` accepts `cert_pem` for localhost at `at`.
fn trusts(bundle: &str, cert_pem: &str, at: Timestamp) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(bundle.as_bytes()).flatten() {
        if roots.add(ca).is_err() {
            return false;
        }
    }
    let Ok(verifier) = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build() else {
        return false;
    };
    let Ok(leaf) = CertificateDer::from_pem_slice(cert_pem.as_bytes()) else {
        return false;
    };
    let name = ServerName::try_from("localhost").expect("a valid name");
    let now = UnixTime::since_unix_epoch(Duration::from_secs(at.as_second().unsigned_abs()));
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], now)
        .is_ok()
}

fn ca_count(bundle: &str) -> usize {
    bundle.matches("BEGIN CERTIFICATE").count()
}

/// One check of one replica: the step and the certificates after it.
fn check(
    certs: &ServingCerts,
    published: Option<&Published>,
    now: Timestamp,
) -> (Step, ServingCerts) {
    let state = observe(certs, &settings(), &rotation(), published, now);
    let step = next_step(&state, now);
    let after = take(step, certs, &settings(), now)
        .expect("the step succeeds")
        .unwrap_or_else(|| certs.clone());
    (step, after)
}

fn published(certs: &ServingCerts, at: Timestamp) -> Published {
    Published {
        bundle: certs.ca_pem.clone(),
        at,
    }
}

/// Through the Secret, as a restarted replica reads it.
fn round_trip(certs: &ServingCerts) -> ServingCerts {
    let mut secret = Secret::default();
    write_into_secret(&mut secret, certs, &settings());
    certs_from_secret(&secret, &settings()).expect("read back")
}

/// The certificates at each phase of a rotation that starts at `ageing(t0)`.
struct Phases {
    old: ServingCerts,
    publishing: ServingCerts,
    retiring: ServingCerts,
    /// When this replica saw the bundle of both CAs published.
    published_at: Timestamp,
    /// When the new CA's certificate was first served.
    switched_at: Timestamp,
}

fn rotate_through(t0: Timestamp) -> Phases {
    let old = before_rotation(t0);
    let start = ageing(t0);
    let (step, publishing) = check(&old, None, start);
    assert_eq!(step, Step::PublishIncomingCa);
    let published_at = start + secs(5);
    let switched_at = published_at + SignedDuration::try_from(OVERLAP).expect("overlap");
    let seen = published(&publishing, published_at);
    let (step, retiring) = check(&publishing, Some(&seen), switched_at);
    assert_eq!(step, Step::ServeIncomingCa);
    Phases {
        old,
        publishing,
        retiring,
        published_at,
        switched_at,
    }
}

#[test]
fn the_new_ca_is_published_beside_the_old_before_any_new_certificate_is_served() {
    let t0 = Timestamp::now();
    let old = before_rotation(t0);
    let now = ageing(t0);
    let (step, publishing) = check(&old, None, now);

    assert_eq!(step, Step::PublishIncomingCa);
    assert_eq!(ca_count(&publishing.ca_pem), 2, "old and new CA");
    assert!(
        publishing.ca_pem.starts_with(old.ca_pem.trim()),
        "the old CA still leads (it signs)"
    );
    assert_eq!(
        publishing.cert_pem, old.cert_pem,
        "nothing new is served yet"
    );
    assert_eq!(publishing.ca_key_pem, old.ca_key_pem);
    assert!(
        publishing.next_ca_key_pem.is_some(),
        "the new CA's key is kept"
    );
    // The API server may still hold only the old CA: the served certificate must pass with it.
    assert!(trusts(&old.ca_pem, &publishing.cert_pem, now));
}

#[test]
fn nothing_from_the_new_ca_is_served_before_this_replica_saw_the_bundle_of_both_published() {
    let t0 = Timestamp::now();
    let p = rotate_through(t0);
    let month_later = ageing(t0) + SignedDuration::from_hours(24 * 30);

    let (step, same) = check(&p.publishing, None, month_later);
    assert_eq!(step, Step::WaitForPublication);
    assert_eq!(same, p.publishing);

    // A confirmation of another bundle (the old one) is no publication of this one.
    let old_bundle = published(&p.old, ageing(t0));
    let (step, _) = check(&p.publishing, Some(&old_bundle), month_later);
    assert_eq!(step, Step::WaitForPublication);

    // A year on, the served certificate expires: the old CA renews it, the new one still waits.
    let year_later = ageing(t0) + SignedDuration::from_hours(24 * 365);
    let (step, renewed) = check(&p.publishing, None, year_later);
    assert_eq!(step, Step::RenewServing);
    assert_eq!(renewed.ca_pem, p.publishing.ca_pem);
    assert!(trusts(&p.old.ca_pem, &renewed.cert_pem, year_later));
}

#[test]
fn the_new_ca_signs_only_an_overlap_after_the_bundle_of_both_was_published() {
    let t0 = Timestamp::now();
    let p = rotate_through(t0);
    let seen = published(&p.publishing, p.published_at);

    let just_before = p.switched_at - secs(1);
    let (step, same) = check(&p.publishing, Some(&seen), just_before);
    assert_eq!(step, Step::WaitUntil(p.switched_at));
    assert_eq!(same, p.publishing);

    let (step, retiring) = check(&p.publishing, Some(&seen), p.switched_at);
    assert_eq!(step, Step::ServeIncomingCa);
    assert_eq!(ca_count(&retiring.ca_pem), 2, "the old CA stays");
    assert!(retiring.next_ca_key_pem.is_none());
    assert_ne!(retiring.ca_key_pem, p.old.ca_key_pem, "the new CA signs");
    // Trusted by the bundle the API server holds (published) and by the new one.
    assert!(trusts(
        &p.publishing.ca_pem,
        &retiring.cert_pem,
        p.switched_at
    ));
    assert!(trusts(&retiring.ca_pem, &retiring.cert_pem, p.switched_at));
    // ... and a replica still serving the old certificate stays trusted by the new bundle.
    assert!(trusts(&retiring.ca_pem, &p.old.cert_pem, p.switched_at));
    assert!(
        !trusts(&p.old.ca_pem, &retiring.cert_pem, p.switched_at),
        "the old bundle alone would refuse it: the publication was needed"
    );
}

#[test]
fn the_old_ca_leaves_the_bundle_only_an_overlap_after_the_new_certificate_is_served() {
    let t0 = Timestamp::now();
    let p = rotate_through(t0);
    let served = inspect_certificate(&p.retiring.cert_pem).expect("served");
    // The certificate is backdated and cut to whole seconds; the wait counts from the latest
    // moment it can have been issued.
    let drop_at = served.not_before
        + secs(MAX_BACKDATE.as_secs() as i64 + 1)
        + secs(OVERLAP.as_secs() as i64);
    assert!(drop_at >= p.switched_at + secs(OVERLAP.as_secs() as i64));

    let (step, same) = check(&p.retiring, None, drop_at - secs(1));
    assert_eq!(step, Step::WaitUntil(drop_at));
    assert_eq!(same, p.retiring);

    let (step, steady) = check(&p.retiring, None, drop_at);
    assert_eq!(step, Step::DropRetiringCas);
    assert_eq!(ca_count(&steady.ca_pem), 1);
    assert_eq!(steady.cert_pem, p.retiring.cert_pem);
    assert!(trusts(&steady.ca_pem, &steady.cert_pem, drop_at));
    assert!(!trusts(&steady.ca_pem, &p.old.cert_pem, drop_at));

    let (step, _) = check(&steady, None, drop_at + secs(3600));
    assert_eq!(step, Step::Nothing, "the rotation is over");
}

#[test]
fn a_restart_mid_rotation_resumes_without_dropping_the_trusted_ca() {
    let t0 = Timestamp::now();
    let p = rotate_through(t0);

    // Restarted while publishing: the Secret keeps both CAs and the new key, and the new process
    // (which has seen no publication yet) waits for one, however late it is.
    let reread = round_trip(&p.publishing);
    assert_eq!(reread, p.publishing);
    let late = p.switched_at + SignedDuration::from_hours(24);
    let (step, _) = check(&reread, None, late);
    assert_eq!(step, Step::WaitForPublication);
    // Its own publication starts a whole overlap again.
    let seen_again = published(&reread, late);
    let (step, _) = check(&reread, Some(&seen_again), late + secs(60));
    assert_eq!(step, Step::WaitUntil(late + secs(OVERLAP.as_secs() as i64)));

    // Restarted while retiring: both CAs are still in the Secret and the clock is the served
    // certificate's, so the old CA stays until its overlap is over.
    let reread = round_trip(&p.retiring);
    assert_eq!(reread, p.retiring);
    let (step, same) = check(&reread, None, p.switched_at + secs(1));
    assert!(matches!(step, Step::WaitUntil(_)), "{step:?}");
    assert_eq!(ca_count(&same.ca_pem), 2);
    assert!(trusts(
        &same.ca_pem,
        &p.old.cert_pem,
        p.switched_at + secs(1)
    ));
}

/// A value (a served certificate, a bundle the API server holds) and since when.
struct Seen {
    value: String,
    since: Timestamp,
}

/// The values that may still be in use at `now`: the latest, and any replaced less than `lag` ago.
fn in_use(history: &[Seen], now: Timestamp, lag: SignedDuration) -> Vec<&str> {
    let mut values: Vec<&str> = history
        .windows(2)
        .filter(|w| w[1].since > now - lag)
        .map(|w| w[0].value.as_str())
        .collect();
    values.extend(history.last().map(|s| s.value.as_str()));
    values
}

fn assert_all_trusted(served: &[Seen], held: &[Seen], now: Timestamp) {
    // Replicas reload within a check interval (a minute) of a write, or later after a slow or
    // failed read (two and a half minutes here); the API server takes a bundle within seconds of
    // its publication (a minute here).
    for cert in in_use(served, now, secs(150)) {
        for bundle in in_use(held, now, secs(60)) {
            assert!(
                trusts(bundle, cert, now),
                "at {now}: a served certificate is not trusted by a bundle the API server may hold"
            );
        }
    }
}

#[test]
fn every_certificate_served_during_a_rotation_is_trusted_by_every_bundle_the_api_server_may_hold() {
    // One replica checks every minute through a whole rotation; the webhook configurations take
    // each new bundle a minute after it is written to the Secret (the publisher's lag).
    let t0 = Timestamp::now();
    let mut certs = before_rotation(t0);
    let mut now = ageing(t0);
    let mut served = vec![Seen {
        value: certs.cert_pem.clone(),
        since: t0,
    }];
    let mut held = vec![Seen {
        value: certs.ca_pem.clone(),
        since: t0,
    }];
    let mut confirmed = Some(published(&certs, t0));
    let mut steps = Vec::new();
    for _ in 0..60 {
        let (step, next) = check(&certs, confirmed.as_ref(), now);
        if !matches!(
            step,
            Step::Nothing | Step::WaitForPublication | Step::WaitUntil(_)
        ) {
            steps.push(step);
        }
        if next.cert_pem != certs.cert_pem {
            served.push(Seen {
                value: next.cert_pem.clone(),
                since: now,
            });
        }
        certs = next;
        // The API server still holds what was published before this step.
        assert_all_trusted(&served, &held, now);

        now += secs(60);
        if confirmed.as_ref().map(|c| &c.bundle) != Some(&certs.ca_pem) {
            confirmed = Some(published(&certs, now));
            held.push(Seen {
                value: certs.ca_pem.clone(),
                since: now,
            });
        }
        assert_all_trusted(&served, &held, now);
    }
    assert_eq!(
        steps,
        vec![
            Step::PublishIncomingCa,
            Step::ServeIncomingCa,
            Step::DropRetiringCas
        ]
    );
    assert_eq!(ca_count(&certs.ca_pem), 1);
    assert_eq!(served.len(), 2, "one switch of the served certificate");
}

#[test]
fn the_overlap_is_never_shorter_than_two_check_intervals() {
    let s = CertSettings {
        check_interval: Duration::from_secs(300),
        ..settings()
    };
    let short = RotationSettings {
        overlap: Duration::from_secs(10),
    };
    assert_eq!(short.overlap_for(&s), Duration::from_secs(600));
    assert_eq!(rotation().overlap_for(&settings()), OVERLAP);
}

#[test]
fn a_lost_ca_key_rotates_through_publication_too() {
    // The CA is still trusted by the API server: it is not replaced without a bundle of both.
    let t0 = Timestamp::now();
    let certs = generate_at(&settings(), t0).expect("generate");
    let other = generate_at(&settings(), t0).expect("other");
    let lost = ServingCerts {
        ca_key_pem: other.ca_key_pem,
        ..certs.clone()
    };
    let (step, publishing) = check(&lost, None, t0);
    assert_eq!(step, Step::PublishIncomingCa);
    assert_eq!(publishing.cert_pem, certs.cert_pem);
    assert!(publishing.ca_pem.starts_with(certs.ca_pem.trim()));
}

#[test]
fn an_unreadable_ca_is_replaced_at_once_keeping_still_valid_old_cas() {
    let t0 = Timestamp::now();
    let certs = generate_at(&settings(), t0).expect("generate");
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let broken = ServingCerts {
        ca_pem: format!("{garbage}{}", certs.ca_pem),
        ..certs.clone()
    };
    let state = observe(&broken, &settings(), &rotation(), None, t0);
    assert_eq!(state.phase, Phase::Broken);
    let (step, fresh) = check(&broken, None, t0);
    assert_eq!(step, Step::StartOver);
    assert!(
        fresh.ca_pem.contains(certs.ca_pem.trim()),
        "the valid old CA stays"
    );
    assert!(!fresh.ca_pem.contains("AAAA"));
    assert!(trusts(&fresh.ca_pem, &fresh.cert_pem, t0));
    assert!(trusts(&fresh.ca_pem, &certs.cert_pem, t0));
}

#[test]
fn a_serving_certificate_due_while_publishing_is_renewed_by_the_old_ca() {
    let t0 = Timestamp::now();
    let p = rotate_through(t0);
    let mut s = settings();
    s.dns_names.push("sluice.example".into());
    let state = observe(&p.publishing, &s, &rotation(), None, p.published_at);
    assert_eq!(next_step(&state, p.published_at), Step::RenewServing);
    let renewed = take(Step::RenewServing, &p.publishing, &s, p.published_at)
        .expect("renew")
        .expect("changed");
    assert_eq!(renewed.ca_pem, p.publishing.ca_pem, "the bundle stays");
    assert_eq!(renewed.next_ca_key_pem, p.publishing.next_ca_key_pem);
    assert!(trusts(&p.old.ca_pem, &renewed.cert_pem, p.published_at));
}

#[test]
fn published_bundles_keep_the_first_confirmation_of_a_bundle() {
    let (publisher, seen) = PublishedBundles::new();
    publisher.confirm("bundle A");
    let first = seen.borrow().clone().expect("confirmed");
    publisher.confirm("bundle A");
    assert_eq!(seen.borrow().as_ref(), Some(&first));
    publisher.confirm("bundle B");
    assert_eq!(
        seen.borrow().as_ref().map(|p| p.bundle.as_str()),
        Some("bundle B")
    );
}

#[test]
fn the_secret_keeps_the_incoming_ca_key_only_while_publishing() {
    let p = rotate_through(Timestamp::now());
    let mut secret = Secret::default();
    write_into_secret(&mut secret, &p.publishing, &settings());
    let has_next = |s: &Secret| {
        s.data
            .as_ref()
            .is_some_and(|d| d.contains_key(crate::NEXT_CA_KEY_KEY))
    };
    assert!(has_next(&secret));
    write_into_secret(&mut secret, &p.retiring, &settings());
    assert!(!has_next(&secret), "the new CA's key moved to ca.key");
    assert_eq!(
        certs_from_secret(&secret, &settings()).expect("read back"),
        p.retiring
    );
}

#[test]
fn keys_of_the_incoming_ca_stay_out_of_debug_output() {
    let p = rotate_through(Timestamp::now());
    let shown = format!("{:?}", p.publishing);
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}
