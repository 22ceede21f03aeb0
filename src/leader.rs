//! Leader election with a coordination.k8s.io Lease: every replica serves webhooks, only the holder
//! of the Lease runs the queue controller. The semantics are client-go's leaderelection:
//!
//! - Another holder's lease is judged by this replica's own monotonic clock: it expires
//!   `leaseDurationSeconds` after we first saw its current version (resourceVersion), never by the
//!   holder's wall-clock `renewTime`, so a skewed clock on either side cannot end a lease early.
//! - Every attempt (get, then create or replace) must answer within `call_timeout` of sending it.
//! - The leader may admit only until `renew_deadline` after it *sent* its last successful renewal.
//!   Any other replica saw that renewal no earlier than it was sent and waits a whole
//!   `lease_duration` from then, so with `renew_deadline < lease_duration` the leader has stopped
//!   (passes and admission at creation) before anyone else may take over.
//!
//! A leadership term is a [`Term`]: the controller asks it before every admitting act.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The default bound on one lease attempt (a get, then a create or replace), from sending it.
pub const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease lasts without renewal, as the other replicas judge it on their own clocks.
    pub lease_duration: Duration,
    /// The leader stops admitting once this long has passed since it sent its last successful
    /// renewal. Strictly less than `lease_duration`: the difference is the safety margin.
    pub renew_deadline: Duration,
    /// How often the leader renews its lease (and followers try to take it).
    pub retry_period: Duration,
    /// Every lease attempt must answer within this, counted from sending it.
    pub call_timeout: Duration,
}

impl LeaseSettings {
    /// Refuses settings under which two replicas could admit at once, or a leader could never renew.
    pub fn validate(&self) -> Result<(), LeaseError> {
        let refuse = |why: String| Err(LeaseError::Settings(why));
        if self.renew_deadline >= self.lease_duration {
            return refuse(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?}): the leader must stop before its lease can expire for the others",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return refuse(format!(
                "the renew period ({:?}) must be above zero and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.call_timeout.is_zero() || self.call_timeout > self.renew_deadline {
            return refuse(format!(
                "the lease call timeout ({:?}) must be above zero and at most the renew deadline ({:?})",
                self.call_timeout, self.renew_deadline
            ));
        }
        Ok(())
    }

    /// The lease duration written into the Lease, in whole seconds, rounded up.
    fn duration_seconds(&self) -> i32 {
        let seconds =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("lease {namespace}/{name}: no answer within {timeout:?} of sending")]
    Timeout {
        namespace: String,
        name: String,
        timeout: Duration,
    },
    #[error("leader election settings: {0}")]
    Settings(String),
}

/// What a Lease says that matters for judging it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    /// Changes with every write: a new version is a sign of life from its holder.
    version: String,
    holder: Option<String>,
    lease_duration: Option<Duration>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
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
struct Observed {
    record: Record,
    at: Instant,
}

/// Notes `record`, seen at `now`: a record seen before keeps the time it was first seen.
fn observe(previous: Option<Observed>, record: Record, now: Instant) -> Observed {
    match previous {
        Some(p) if p.record == record => p,
        _ => Observed { record, at: now },
    }
}

/// What this replica may do with the lease it observed.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
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
fn judge(observed: &Observed, identity: &str, now: Instant, fallback: Duration) -> Verdict {
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
fn admitting_until(sent: Instant, settings: &LeaseSettings) -> Instant {
    sent + settings.renew_deadline
}

/// One leadership term. Admitting acts run through [`Term::while_valid`], which refuses them once
/// the term has been revoked or its deadline has passed, and holds off revocation while one runs.
pub struct Term {
    /// The Lease's `leaseTransitions` when this term began: with the holder it names the term, so
    /// what a replica admitted is attributable to the term it held (metric and log lines).
    generation: i32,
    state: Mutex<TermState>,
    token: CancellationToken,
    /// Turns admission at creation off; called once, under the term's lock.
    stop_admitting: Arc<dyn Fn() + Send + Sync>,
}

struct TermState {
    valid_until: Instant,
    revoked: bool,
}

impl Term {
    pub fn new(
        valid_until: Instant,
        token: CancellationToken,
        stop_admitting: Arc<dyn Fn() + Send + Sync>,
    ) -> Arc<Term> {
        Term::with_generation(0, valid_until, token, stop_admitting)
    }

    /// A term of the Lease whose `leaseTransitions` is `generation`.
    pub fn with_generation(
        generation: i32,
        valid_until: Instant,
        token: CancellationToken,
        stop_admitting: Arc<dyn Fn() + Send + Sync>,
    ) -> Arc<Term> {
        Arc::new(Term {
            generation,
            state: Mutex::new(TermState {
                valid_until,
                revoked: false,
            }),
            token,
            stop_admitting,
        })
    }

    /// The Lease's `leaseTransitions` when this term began.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    fn lock(&self) -> MutexGuard<'_, TermState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `admit` if the term is still valid (revoking it if its deadline has passed): the
    /// term cannot be revoked while `admit` runs, so what it publishes is undone by revocation.
    pub fn while_valid<R>(&self, admit: impl FnOnce() -> R) -> Option<R> {
        self.while_valid_until(|_| admit())
    }

    /// As [`Term::while_valid`], telling `admit` the term's deadline as it stands: what it
    /// publishes can carry the deadline and stop admitting by itself at that instant.
    pub fn while_valid_until<R>(&self, admit: impl FnOnce(Instant) -> R) -> Option<R> {
        let mut state = self.lock();
        if state.revoked {
            return None;
        }
        if Instant::now() >= state.valid_until {
            self.revoke_locked(&mut state);
            return None;
        }
        Some(admit(state.valid_until))
    }

    pub fn is_valid(&self) -> bool {
        self.while_valid(|| ()).is_some()
    }

    /// Cancelled when the term ends: everything the leader runs stops on it.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.token
    }

    /// Ends the term: admission at creation off, then the leader's work cancelled.
    pub fn revoke(&self) {
        let mut state = self.lock();
        self.revoke_locked(&mut state);
    }

    fn revoke_locked(&self, state: &mut TermState) {
        if !state.revoked {
            state.revoked = true;
            (self.stop_admitting)();
            self.token.cancel();
            info!(
                lease_transitions = self.generation,
                "leadership term ended: admitting nothing more"
            );
        }
    }

    /// Extends a term still valid to `until`; false when it has ended (a new term is needed).
    fn extend(&self, until: Instant) -> bool {
        let mut state = self.lock();
        if state.revoked || Instant::now() >= state.valid_until {
            self.revoke_locked(&mut state);
            return false;
        }
        state.valid_until = state.valid_until.max(until);
        true
    }

    fn valid_until(&self) -> Instant {
        self.lock().valid_until
    }

    /// Revokes the term at its deadline (unless extended meanwhile), whatever else is going on:
    /// a renewal that hangs must not keep it alive.
    async fn watchdog(self: Arc<Self>) {
        loop {
            let until = self.valid_until();
            tokio::select! {
                _ = self.token.cancelled() => return,
                _ = tokio::time::sleep_until(until) => {
                    if !self.is_valid() {
                        warn!("the lease was not renewed within the renew deadline: stopping");
                        return;
                    }
                }
            }
        }
    }
}

/// The outcome of one attempt to take or keep the lease.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease; its `leaseTransitions` as written.
    Leading {
        generation: i32,
    },
    Following {
        holder: String,
    },
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

/// A term under way: the term and the work it runs.
type Running = (Arc<Term>, tokio::task::JoinHandle<()>);

impl LeaderElector {
    pub fn new(client: Client, settings: LeaseSettings) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    fn err(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    fn timeout(&self) -> LeaseError {
        LeaseError::Timeout {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            timeout: self.settings.call_timeout,
        }
    }

    /// The spec we write: `renewTime` on our wall clock is for people reading the Lease; replicas
    /// judge it by their own clocks.
    fn spec(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        lease_spec(&self.settings, previous)
    }

    /// One attempt, answered within the call timeout of `sent` or failed.
    async fn attempt(
        &self,
        observed: &mut Option<Observed>,
        sent: Instant,
    ) -> Result<Attempt, LeaseError> {
        tokio::time::timeout_at(
            sent + self.settings.call_timeout,
            self.try_acquire_or_renew(observed),
        )
        .await
        .map_err(|_| self.timeout())?
    }

    async fn try_acquire_or_renew(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<Attempt, LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            return self.create().await;
        };
        let seen = observe(observed.take(), Record::of(&lease), Instant::now());
        let verdict = judge(
            &seen,
            &self.settings.identity,
            Instant::now(),
            self.settings.lease_duration,
        );
        *observed = Some(seen);
        let holder = match verdict {
            Verdict::Held { holder, until } => {
                debug!(%holder, in_ms = until.saturating_duration_since(Instant::now()).as_millis() as u64, "lease held by another replica");
                return Ok(Attempt::Following { holder });
            }
            Verdict::Expired { holder } => {
                info!(%holder, "the lease's holder stopped renewing: taking it over");
                holder
            }
            Verdict::Ours | Verdict::Free => self.settings.identity.clone(),
        };
        lease.spec = Some(self.spec(lease.spec.as_ref()));
        // The resourceVersion read above guards the replace: of two replicas taking an expired
        // lease, one gets a conflict.
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                *observed = Some(observe(None, Record::of(&written), Instant::now()));
                Ok(Attempt::Leading {
                    generation: generation_of(&written),
                })
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following { holder }),
            Err(e) => Err(self.err(e)),
        }
    }

    async fn create(&self) -> Result<Attempt, LeaseError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(self.spec(None)),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => Ok(Attempt::Leading {
                generation: generation_of(&written),
            }),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following {
                holder: "another replica".into(),
            }),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the lease up so another replica can take it at once (after we stopped admitting).
    async fn release(&self) {
        let released = tokio::time::timeout(self.settings.call_timeout, async {
            let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.renew_time = None;
            self.api
                .replace(&lease.name_any(), &PostParams::default(), &lease)
                .await
                .map(|_| ())
        })
        .await;
        match released {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(%e, "could not release the lease"),
            Err(_) => {
                warn!(timeout = ?self.settings.call_timeout, "could not release the lease in time")
            }
        }
    }

    /// Starts a term of `generation` valid until `until`, running `work` on it.
    fn begin<F, Fut>(
        &self,
        generation: i32,
        until: Instant,
        shutdown: &CancellationToken,
        stop_admitting: &Arc<dyn Fn() + Send + Sync>,
        work: &F,
    ) -> Running
    where
        F: Fn(Arc<Term>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        info!(
            holder = %self.settings.identity,
            lease = %self.settings.name,
            lease_transitions = generation,
            "leading: starting the controller"
        );
        let term = Term::with_generation(
            generation,
            until,
            shutdown.child_token(),
            stop_admitting.clone(),
        );
        tokio::spawn(term.clone().watchdog());
        (term.clone(), tokio::spawn(work(term)))
    }

    /// Runs `work` while this replica holds the lease, each term with its own [`Term`]. A term ends
    /// when the lease is lost or not renewed within the renew deadline (`stop_admitting` is called
    /// at once, then the work is awaited); `leading` reports terms starting and their work ending.
    /// Returns when `shutdown` is cancelled, after releasing the lease.
    pub async fn run<F, Fut>(
        &self,
        shutdown: CancellationToken,
        leading: impl Fn(bool),
        stop_admitting: Arc<dyn Fn() + Send + Sync>,
        work: F,
    ) where
        F: Fn(Arc<Term>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut current: Option<Running> = None;
        let mut observed: Option<Observed> = None;
        loop {
            let sent = Instant::now();
            let attempt = self.attempt(&mut observed, sent).await;
            match attempt {
                Ok(Attempt::Leading { generation }) => {
                    let until = admitting_until(sent, &self.settings);
                    if let Some((term, _)) = &current
                        && !term.extend(until)
                    {
                        stop(current.take(), &leading).await;
                    }
                    if current.is_none() && Instant::now() < until {
                        current =
                            Some(self.begin(generation, until, &shutdown, &stop_admitting, &work));
                        leading(true);
                    }
                }
                Ok(Attempt::Following { holder }) => {
                    if let Some((term, _)) = &current {
                        warn!(%holder, "lost the lease: stopping the controller");
                        term.revoke();
                        stop(current.take(), &leading).await;
                    }
                }
                Err(e) => warn!(%e, "lease attempt failed"),
            }
            // A term the watchdog ended: its work is awaited before anything else.
            if current.as_ref().is_some_and(|(term, _)| !term.is_valid()) {
                stop(current.take(), &leading).await;
            }
            let ended = async {
                match &current {
                    Some((term, _)) => term.cancelled().cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                _ = ended => {}
            }
        }
        if let Some((term, _)) = &current {
            term.revoke();
            stop(current.take(), &leading).await;
            self.release().await;
        }
    }
}

/// The spec `settings.identity` writes over `previous`: a takeover counts one more transition
/// (leaseTransitions names the term), a renewal keeps the count and the acquire time.
fn lease_spec(settings: &LeaseSettings, previous: Option<&LeaseSpec>) -> LeaseSpec {
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
fn generation_of(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
        .max(0)
}

/// Waits for a revoked term's work to end.
async fn stop(running: Option<Running>, leading: &impl Fn(bool)) {
    if let Some((term, handle)) = running {
        term.revoke();
        if let Err(e) = handle.await {
            warn!(%e, "the leader's work ended abnormally");
        }
        leading(false);
    }
}

#[cfg(test)]
mod tests {
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
}
