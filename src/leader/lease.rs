//! The Lease as this replica reads and writes it (pure): its record, another holder's expiry
//! judged by this replica's own monotonic clock, the verdict of one attempt, and the spec written.

use super::*;

/// What a Lease says that matters for judging it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Record {
    /// Changes with every write: a new version is a sign of life from its holder.
    pub(super) version: String,
    pub(super) holder: Option<String>,
    pub(super) lease_duration: Option<Duration>,
}

impl Record {
    pub(super) fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        // Without a resourceVersion (never from a real API server) the renewal time stands in.
        let version = lease.metadata.resource_version.clone().unwrap_or_else(|| {
            spec.and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string())
                .unwrap_or_default()
        });
        Record {
            version,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            lease_duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs),
        }
    }
}

/// A record, and when this replica first saw it (its own monotonic clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Observed {
    pub(super) record: Record,
    pub(super) at: Instant,
}

/// Notes `record`, seen at `now`: a record seen before keeps the time it was first seen.
pub(super) fn observe(previous: Option<Observed>, record: Record, now: Instant) -> Observed {
    match previous {
        Some(p) if p.record == record => p,
        _ => Observed { record, at: now },
    }
}

/// What this replica may do with the lease it observed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// We hold it: renew.
    Ours,
    /// Nobody holds it (new, or released): take it.
    Free,
    /// Its holder has not renewed for a whole lease duration of our time: take it.
    Expired { holder: String },
    /// Its holder may still be acting on it: leave it.
    Held { holder: String, until: Instant },
}

/// Judges the observed lease at `now`, by how long we have seen it unchanged. A lease without a
/// duration counts as lasting `fallback` (ours), never as expired.
pub(super) fn judge(
    observed: &Observed,
    identity: &str,
    now: Instant,
    fallback: Duration,
) -> Verdict {
    let Some(holder) = observed.record.holder.clone() else {
        return Verdict::Free;
    };
    if holder == identity {
        return Verdict::Ours;
    }
    let until = observed.at + observed.record.lease_duration.unwrap_or(fallback);
    if now >= until {
        Verdict::Expired { holder }
    } else {
        Verdict::Held { holder, until }
    }
}

/// Until when a leader whose last successful renewal was sent at `sent` may admit.
pub(super) fn admitting_until(sent: Instant, settings: &LeaseSettings) -> Instant {
    sent + settings.renew_deadline
}

/// The spec `settings.identity` writes over `previous`: a takeover counts one more transition
/// (leaseTransitions names the term), a renewal keeps the count and the acquire time.
pub(super) fn lease_spec(settings: &LeaseSettings, previous: Option<&LeaseSpec>) -> LeaseSpec {
    let now = jiff::Timestamp::now();
    let ours =
        previous.and_then(|s| s.holder_identity.as_deref()) == Some(settings.identity.as_str());
    let transitions = previous
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
        .max(0);
    LeaseSpec {
        holder_identity: Some(settings.identity.clone()),
        lease_duration_seconds: Some(settings.duration_seconds()),
        acquire_time: if ours {
            previous.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if ours {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..LeaseSpec::default()
    }
}

/// The `leaseTransitions` a Lease records (0 when it records none; never negative).
pub(super) fn generation_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
        .max(0)
}
