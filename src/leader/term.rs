//! One leadership term: admitting acts run through it, and it refuses them once revoked or past
//! its deadline.

use super::*;

/// One leadership term. Admitting acts run through [`Term::while_valid`], which refuses them once
/// the term has been revoked or its deadline has passed, and holds off revocation while one runs.
pub struct Term {
    /// The Lease's `leaseTransitions` when this term began: with the holder it names the term, so
    /// what a replica admitted is attributable to the term it held (metric and log lines).
    pub(super) generation: i32,
    pub(super) state: Mutex<TermState>,
    pub(super) token: CancellationToken,
    /// Turns admission at creation off; called once, under the term's lock.
    pub(super) stop_admitting: Arc<dyn Fn() + Send + Sync>,
}

pub(super) struct TermState {
    pub(super) valid_until: Instant,
    pub(super) revoked: bool,
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

    pub(super) fn lock(&self) -> MutexGuard<'_, TermState> {
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

    pub(super) fn revoke_locked(&self, state: &mut TermState) {
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
    pub(super) fn extend(&self, until: Instant) -> bool {
        let mut state = self.lock();
        if state.revoked || Instant::now() >= state.valid_until {
            self.revoke_locked(&mut state);
            return false;
        }
        state.valid_until = state.valid_until.max(until);
        true
    }

    pub(super) fn valid_until(&self) -> Instant {
        self.lock().valid_until
    }

    /// Revokes the term at its deadline (unless extended meanwhile), whatever else is going on:
    /// a renewal that hangs must not keep it alive.
    pub(super) async fn watchdog(self: Arc<Self>) {
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
