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

mod lease;
mod term;

use lease::{
    Observed, Record, Verdict, admitting_until, generation_of, judge, lease_spec, observe,
};
pub use term::Term;

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
mod tests;
