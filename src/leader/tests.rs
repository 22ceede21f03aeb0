//! Unit tests of leader election: another holder's lease judged by our own clock, takeovers and
//! transitions, the settings refused, terms past their deadline, and lease calls that hang.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn settings() -> LeaseSettings {
    LeaseSettings {
        namespace: "sluice-system".into(),
        name: "sluice-controller".into(),
        identity: "me".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
        call_timeout: Duration::from_secs(5),
    }
}

fn lease(version: &str, holder: &str, renewed: jiff::Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some("sluice-controller".into()),
            resource_version: Some(version.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    }
}

#[test]
fn a_holder_with_a_skewed_clock_is_not_judged_expired_early() {
    let now = Instant::now();
    // Its renewTime says a day ago (its clock is behind, or ours ahead): irrelevant.
    let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24);
    let seen = observe(None, Record::of(&lease("7", "other", renewed)), now);
    let verdict = judge(&seen, "me", now + Duration::from_secs(14), Duration::ZERO);
    assert!(
        matches!(verdict, Verdict::Held { ref holder, until } if holder == "other" && until == now + Duration::from_secs(15)),
        "{verdict:?}"
    );
}

#[test]
fn a_holder_whose_renewals_stopped_is_judged_expired_a_lease_duration_after_we_saw_the_last() {
    let first = Instant::now();
    let stamp = jiff::Timestamp::now();
    let seen = observe(None, Record::of(&lease("7", "other", stamp)), first);
    // Seen again unchanged later: the wait still counts from the first sight.
    let later = first + Duration::from_secs(10);
    let seen = observe(Some(seen), Record::of(&lease("7", "other", stamp)), later);
    assert_eq!(seen.at, first);
    assert_eq!(
        judge(&seen, "me", first + Duration::from_secs(15), Duration::ZERO),
        Verdict::Expired {
            holder: "other".into()
        }
    );
}

#[test]
fn a_renewal_seen_restarts_the_wait_even_if_its_renew_time_went_backwards() {
    let first = Instant::now();
    let stamp = jiff::Timestamp::now();
    let seen = observe(None, Record::of(&lease("7", "other", stamp)), first);
    let later = first + Duration::from_secs(14);
    let back = stamp - jiff::SignedDuration::from_hours(1);
    let seen = observe(Some(seen), Record::of(&lease("8", "other", back)), later);
    assert_eq!(seen.at, later);
    assert!(matches!(
        judge(&seen, "me", first + Duration::from_secs(20), Duration::ZERO),
        Verdict::Held { .. }
    ));
}

#[test]
fn a_lease_without_a_duration_is_held_for_ours_not_expired_at_once() {
    let now = Instant::now();
    let mut l = lease("1", "other", jiff::Timestamp::now());
    if let Some(spec) = l.spec.as_mut() {
        spec.lease_duration_seconds = None;
    }
    let seen = observe(None, Record::of(&l), now);
    assert!(matches!(
        judge(
            &seen,
            "me",
            now + Duration::from_secs(14),
            Duration::from_secs(15)
        ),
        Verdict::Held { .. }
    ));
}

#[test]
fn a_released_or_own_lease_is_taken_at_once() {
    let now = Instant::now();
    let mut released = lease("3", "", jiff::Timestamp::now());
    if let Some(spec) = released.spec.as_mut() {
        spec.holder_identity = None;
    }
    let seen = observe(None, Record::of(&released), now);
    assert_eq!(judge(&seen, "me", now, Duration::ZERO), Verdict::Free);
    let seen = observe(
        None,
        Record::of(&lease("4", "me", jiff::Timestamp::now())),
        now,
    );
    assert_eq!(judge(&seen, "me", now, Duration::ZERO), Verdict::Ours);
}

#[test]
fn the_leader_stops_admitting_before_its_lease_can_expire() {
    let s = settings();
    s.validate().expect("valid settings");
    let sent = Instant::now();
    let stop = admitting_until(sent, &s);
    // Another replica sees the renewal no earlier than it was sent, whenever it looks.
    for delay_ms in [0, 1, 500, 5_000, 60_000] {
        let seen_at = sent + Duration::from_millis(delay_ms);
        let seen = Observed {
            record: Record {
                version: "9".into(),
                holder: Some("me".into()),
                lease_duration: Some(s.lease_duration),
            },
            at: seen_at,
        };
        let Verdict::Held { until, .. } = judge(&seen, "other", seen_at, Duration::ZERO) else {
            panic!("a fresh renewal must be held");
        };
        assert!(
            stop < until,
            "stops at {stop:?}, others may take it at {until:?}"
        );
    }
}

#[test]
fn settings_that_would_let_the_lease_expire_before_the_leader_stops_are_refused() {
    let mut s = settings();
    s.renew_deadline = s.lease_duration;
    assert!(matches!(s.validate(), Err(LeaseError::Settings(_))));
    let mut s = settings();
    s.retry_period = s.renew_deadline;
    assert!(matches!(s.validate(), Err(LeaseError::Settings(_))));
    let mut s = settings();
    s.call_timeout = s.renew_deadline + Duration::from_secs(1);
    assert!(matches!(s.validate(), Err(LeaseError::Settings(_))));
}

fn counting_term(until: Instant) -> (Arc<Term>, Arc<AtomicUsize>) {
    let stops = Arc::new(AtomicUsize::new(0));
    let counter = stops.clone();
    let term = Term::new(
        until,
        CancellationToken::new(),
        Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (term, stops)
}

#[test]
fn a_term_past_its_deadline_admits_nothing_and_stops_admission_at_creation_once() {
    let (term, stops) = counting_term(Instant::now() + Duration::from_secs(3600));
    assert_eq!(term.while_valid(|| 1), Some(1));
    let (term, stops_past) = counting_term(Instant::now());
    assert_eq!(term.while_valid(|| 1), None);
    assert!(term.cancelled().is_cancelled());
    assert!(!term.extend(Instant::now() + Duration::from_secs(10)));
    term.revoke();
    assert_eq!(stops_past.load(Ordering::SeqCst), 1);
    assert_eq!(stops.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_watchdog_ends_a_term_whose_renewals_hang_at_its_deadline_not_before() {
    let (term, stops) = counting_term(Instant::now() + Duration::from_millis(50));
    let watchdog = tokio::spawn(term.clone().watchdog());
    // Extended once, then no more renewals: the watchdog ends it at the later deadline.
    let extended = Instant::now() + Duration::from_millis(100);
    assert!(term.extend(extended));
    tokio::time::timeout(Duration::from_secs(30), term.cancelled().cancelled())
        .await
        .expect("the watchdog ends the term");
    assert!(Instant::now() >= extended);
    assert_eq!(stops.load(Ordering::SeqCst), 1);
    watchdog.await.expect("watchdog");
}

#[test]
fn a_takeover_counts_a_transition_a_renewal_does_not_and_a_hostile_count_is_not_negative() {
    let elector_spec = |identity: &str, previous: Option<&LeaseSpec>| {
        let mut s = settings();
        s.identity = identity.into();
        // The spec only reads the settings; no API call is made.
        lease_spec(&s, previous)
    };
    let first = elector_spec("me", None);
    assert_eq!(first.lease_transitions, Some(1));
    let renewed = elector_spec("me", Some(&first));
    assert_eq!(renewed.lease_transitions, Some(1));
    assert_eq!(renewed.acquire_time, first.acquire_time);
    let taken = elector_spec("other", Some(&renewed));
    assert_eq!(taken.lease_transitions, Some(2));
    let mut hostile = lease("5", "other", jiff::Timestamp::now());
    if let Some(spec) = hostile.spec.as_mut() {
        spec.lease_transitions = Some(-7);
    }
    assert_eq!(generation_of(&hostile), 0);
    assert_eq!(generation_of(&Lease::default()), 0);
}

#[tokio::test]
async fn a_lease_call_that_hangs_times_out() {
    let (client, server) = crate::test_support::silent_api_client().await;
    let mut s = settings();
    s.call_timeout = Duration::from_millis(200);
    let elector = LeaderElector::new(client, s);
    let mut observed = None;
    let result = elector.attempt(&mut observed, Instant::now()).await;
    assert!(
        matches!(result, Err(LeaseError::Timeout { .. })),
        "{result:?}"
    );
    server.abort();
}
