//! CA rotation that never leaves a served certificate untrusted.
//!
//! The API server trusts the webhook configurations' `caBundle`; the replicas serve whatever
//! certificate they last read from the Secret. Both lag the Secret, so a new CA goes through three
//! phases, each written to the Secret (which keeps every CA still needed):
//!
//! 1. **Publishing**: the incoming CA joins the bundle after the signing one (`ca.crt` = old, new;
//!    its key waits in `ca-next.key`). Nothing it signed is served yet. The phase ends once this
//!    replica has seen the webhook configurations take that bundle and the overlap has passed
//!    since, so that the API server and every replica have it.
//! 2. **Retiring**: the new CA signs the serving certificate (`ca.crt` = new, old). Replicas that
//!    have not reloaded yet still serve the old certificate, which the bundle still trusts. The
//!    phase ends an overlap after the new serving certificate was issued (replicas reload within a
//!    check interval, and the overlap is never shorter than two).
//! 3. **Steady**: the old CA leaves the bundle.
//!
//! [`next_step`] decides from facts alone (no I/O, no clock of its own); [`observe`] reads the
//! facts from the certificates, and [`take`] performs a step on them.

use std::time::Duration;

use jiff::Timestamp;

use crate::inspect::{add, ca_due, certificate_blocks, info, key_matches, parse, serving_due};
use crate::issue::{
    MAX_BACKDATE, generate_at, issue_serving_at, new_ca, pem_certificate_texts, rotate_ca_at,
    sign_serving,
};
use crate::{CertError, CertSettings, ServingCerts};

/// How long a published bundle is given to reach the API server and every replica, unless told
/// otherwise.
pub const DEFAULT_ROTATION_OVERLAP: Duration = Duration::from_secs(10 * 60);

/// How a CA rotation waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationSettings {
    /// How long a bundle holding old and new CA stays before the new CA's certificate is served,
    /// and how long the old CA stays after. Never shorter than two check intervals (see
    /// [`RotationSettings::overlap_for`]).
    pub overlap: Duration,
}

impl Default for RotationSettings {
    fn default() -> Self {
        RotationSettings {
            overlap: DEFAULT_ROTATION_OVERLAP,
        }
    }
}

impl RotationSettings {
    /// The overlap in force: every replica reads the Secret once per check interval, so a shorter
    /// wait could drop a CA a replica still serves from.
    pub fn overlap_for(&self, settings: &CertSettings) -> Duration {
        self.overlap.max(settings.check_interval.saturating_mul(2))
    }
}

/// A bundle the webhook configurations were seen to hold, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub bundle: String,
    pub at: Timestamp,
}

/// Where a CA rotation stands, read from the certificates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// One CA: it signs the serving certificate and is the whole bundle.
    Steady,
    /// An incoming CA sits in the bundle beside the signing one; nothing it signed is served.
    Publishing,
    /// The new CA signs; older CAs stay in the bundle for servers not yet reloaded. `since`: when
    /// the serving certificate of the new CA was issued (None when it is unreadable or not the
    /// signing CA's).
    Retiring { since: Option<Timestamp> },
    /// The signing CA is unreadable, not a CA or expired: nothing it signed is trusted anyway.
    Broken,
}

/// The facts [`next_step`] decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotationState {
    pub phase: Phase,
    /// The signing CA must be replaced (less than a third of its life left, or its key lost).
    pub ca_due: bool,
    /// The serving certificate must be reissued (expiring, other names, not the signer's...).
    pub serving_due: bool,
    /// The signing CA's key is at hand, so it can issue a serving certificate.
    pub can_issue: bool,
    /// When this replica saw the webhook configurations take the bundle as it is now; None until
    /// then (after a restart too: the wait starts again rather than trust a memory).
    pub published_at: Option<Timestamp>,
    /// The overlap in force.
    pub overlap: Duration,
}

/// What to do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing is due.
    Nothing,
    /// The bundle holding the incoming CA has not been seen in the webhook configurations yet.
    WaitForPublication,
    /// A phase's overlap runs until then.
    WaitUntil(Timestamp),
    /// A new serving certificate from the signing CA; the bundle stays.
    RenewServing,
    /// A new CA into the bundle after the signing one; nothing it signs is served yet.
    PublishIncomingCa,
    /// The incoming CA signs a new serving certificate and leads the bundle; the old one stays.
    ServeIncomingCa,
    /// The bundle keeps only the signing CA.
    DropRetiringCas,
    /// A new CA that signs at once (nothing served is trusted now), keeping still-valid old CAs.
    StartOver,
}

fn after(at: Timestamp, span: Duration) -> Timestamp {
    add(at, span).unwrap_or(Timestamp::MAX)
}

/// The rotation's next step at `now`. Pure.
pub fn next_step(state: &RotationState, now: Timestamp) -> Step {
    let renew = state.serving_due && state.can_issue;
    match state.phase {
        Phase::Broken => Step::StartOver,
        Phase::Steady if state.ca_due => Step::PublishIncomingCa,
        Phase::Steady if renew => Step::RenewServing,
        Phase::Steady => Step::Nothing,
        Phase::Publishing => match state.published_at {
            None if renew => Step::RenewServing,
            None => Step::WaitForPublication,
            Some(at) => {
                let ready = after(at, state.overlap);
                if now >= ready {
                    Step::ServeIncomingCa
                } else if renew {
                    Step::RenewServing
                } else {
                    Step::WaitUntil(ready)
                }
            }
        },
        Phase::Retiring { since: Some(since) } => {
            let ready = after(since, state.overlap);
            if now >= ready {
                Step::DropRetiringCas
            } else {
                Step::WaitUntil(ready)
            }
        }
        // A fresh certificate from the new CA starts the clock; without its key nothing can be
        // dropped safely, so the bundle stays as it is.
        Phase::Retiring { since: None } if state.can_issue => Step::RenewServing,
        Phase::Retiring { since: None } => Step::Nothing,
    }
}

/// A CA certificate of the bundle that is readable and valid at `now`.
fn valid_ca(text: &str, now: Timestamp) -> bool {
    certificate_blocks(text, "ca.crt")
        .and_then(|blocks| info(&parse(&blocks[0], "ca.crt")?, "ca.crt"))
        .is_ok_and(|i| i.is_ca && i.not_before <= now && now < i.not_after)
}

/// Whether `key_pem` belongs to the certificate `text`.
fn holds_key(text: &str, key_pem: &str) -> bool {
    certificate_blocks(text, "ca.crt")
        .and_then(|blocks| Ok(key_matches(&parse(&blocks[0], "ca.crt")?, key_pem)))
        .unwrap_or(false)
}

/// The index in the bundle of the incoming CA (the one `ca-next.key` belongs to), if any.
fn incoming_index(certs: &ServingCerts, now: Timestamp) -> Option<usize> {
    let key = certs.next_ca_key_pem.as_deref()?;
    pem_certificate_texts(&certs.ca_pem)
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, text)| valid_ca(text, now) && holds_key(text, key))
        .map(|(i, _)| i)
}

fn phase(certs: &ServingCerts, serving_due: bool, now: Timestamp) -> Phase {
    let texts = pem_certificate_texts(&certs.ca_pem);
    let Some(signer) = texts.first() else {
        return Phase::Broken;
    };
    if !valid_ca(signer, now) {
        return Phase::Broken;
    }
    if incoming_index(certs, now).is_some() {
        return Phase::Publishing;
    }
    if !texts.iter().skip(1).any(|t| valid_ca(t, now)) {
        return Phase::Steady;
    }
    // The serving certificate was issued by the new CA at the switch (or later): servers still on
    // the old one have reloaded an overlap after that. Its start is backdated by at most
    // MAX_BACKDATE and cut to whole seconds, both added back so the wait is never shorter.
    let since = (!serving_due)
        .then(|| crate::inspect_certificate(&certs.cert_pem).ok())
        .flatten()
        .map(|i| after(i.not_before, MAX_BACKDATE + Duration::from_secs(1)));
    Phase::Retiring { since }
}

/// The facts of `certs` at `now`. `published` counts only when it is the bundle of `certs`.
pub fn observe(
    certs: &ServingCerts,
    settings: &CertSettings,
    rotation: &RotationSettings,
    published: Option<&Published>,
    now: Timestamp,
) -> RotationState {
    let serving_due = serving_due(certs, settings, now).is_some();
    let signer_key_ok = pem_certificate_texts(&certs.ca_pem)
        .first()
        .is_some_and(|signer| holds_key(signer, &certs.ca_key_pem));
    RotationState {
        phase: phase(certs, serving_due, now),
        ca_due: ca_due(certs, now).is_some(),
        serving_due,
        can_issue: signer_key_ok,
        published_at: published.filter(|p| p.bundle == certs.ca_pem).map(|p| p.at),
        overlap: rotation.overlap_for(settings),
    }
}

fn join(texts: &[&str]) -> String {
    let mut bundle = String::new();
    for text in texts {
        bundle.push_str(text.trim());
        bundle.push('\n');
    }
    bundle
}

/// Performs `step` on `certs`: the certificates to store, or None when nothing changes.
pub fn take(
    step: Step,
    certs: &ServingCerts,
    settings: &CertSettings,
    now: Timestamp,
) -> Result<Option<ServingCerts>, CertError> {
    let texts = pem_certificate_texts(&certs.ca_pem);
    let signer = || {
        texts.first().copied().ok_or(CertError::Pem {
            what: "ca.crt",
            detail: "no CERTIFICATE block".into(),
        })
    };
    let changed = match step {
        Step::Nothing | Step::WaitForPublication | Step::WaitUntil(_) => return Ok(None),
        Step::RenewServing => issue_serving_at(certs, settings, now)?,
        Step::StartOver if texts.is_empty() => generate_at(settings, now)?,
        Step::StartOver => rotate_ca_at(certs, settings, now)?,
        Step::PublishIncomingCa => {
            let (incoming, incoming_key) = new_ca(now)?;
            ServingCerts {
                ca_pem: join(&[signer()?, &incoming]),
                next_ca_key_pem: Some(incoming_key),
                ..certs.clone()
            }
        }
        Step::ServeIncomingCa => serve_incoming(certs, &texts, settings, now)?,
        Step::DropRetiringCas => ServingCerts {
            ca_pem: join(&[signer()?]),
            next_ca_key_pem: None,
            ..certs.clone()
        },
    };
    Ok(Some(changed))
}

fn serve_incoming(
    certs: &ServingCerts,
    texts: &[&str],
    settings: &CertSettings,
    now: Timestamp,
) -> Result<ServingCerts, CertError> {
    let (index, key) = incoming_index(certs, now)
        .zip(certs.next_ca_key_pem.clone())
        .ok_or(CertError::Pem {
            what: "ca-next.key",
            detail: "belongs to no valid CA of ca.crt".into(),
        })?;
    // The incoming CA leads (it signs); every other CA of the bundle stays behind it.
    let mut order = vec![texts[index]];
    order.extend(
        texts
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, t)| *t),
    );
    let ca_pem = join(&order);
    let (cert_pem, key_pem, not_after) = sign_serving(&ca_pem, &key, settings, now)?;
    Ok(ServingCerts {
        ca_pem,
        cert_pem,
        key_pem,
        not_after,
        ca_key_pem: key,
        next_ca_key_pem: None,
    })
}

#[cfg(test)]
mod tests;
