//! Leader election with a coordination.k8s.io Lease: every replica serves webhooks, only the holder
//! of the Lease runs the queue controller. A holder that stops renewing loses the Lease once
//! `lease_duration` has passed since its last renewal; a holder that shuts down cleanly releases it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_period: Duration,
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
}

/// The outcome of one attempt to take or keep the lease.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    Following { holder: String },
}

pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

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

    fn spec(&self, previous: Option<&LeaseSpec>, now: jiff::Timestamp) -> LeaseSpec {
        let ours = previous.and_then(|s| s.holder_identity.as_deref())
            == Some(self.settings.identity.as_str());
        let transitions = previous.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.lease_duration.as_secs().max(1) as i32),
            acquire_time: if ours {
                previous.and_then(|s| s.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
            ..LeaseSpec::default()
        }
    }

    async fn try_acquire_or_renew(&self) -> Result<Attempt, LeaseError> {
        let now = jiff::Timestamp::now();
        let Some(mut lease) = self
            .api
            .get_opt(&self.settings.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, now)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following {
                    holder: "another replica".into(),
                }),
                Err(e) => Err(self.err(e)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(seconds)) => {
                renewed.0.as_second().saturating_add(i64::from(seconds)) < now.as_second()
            }
            _ => true,
        };
        if holder != self.settings.identity && !holder.is_empty() && !expired {
            return Ok(Attempt::Following { holder });
        }
        lease.spec = Some(self.spec(Some(&spec), now));
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Attempt::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Following { holder }),
            Err(e) => Err(self.err(e)),
        }
    }

    /// Gives the lease up so another replica can take it at once.
    async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.settings.name).await {
            let ours = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref())
                == Some(self.settings.identity.as_str());
            if ours {
                if let Some(spec) = lease.spec.as_mut() {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                }
                if let Err(e) = self
                    .api
                    .replace(&lease.name_any(), &PostParams::default(), &lease)
                    .await
                {
                    warn!(%e, "could not release the lease");
                }
            }
        }
    }

    /// Runs `work` while this replica holds the lease; stops it (cancelling its token) when the lease
    /// is lost, and returns when `shutdown` is cancelled.
    pub async fn run<F, Fut>(&self, shutdown: CancellationToken, leading: impl Fn(bool), work: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let mut current: Option<(CancellationToken, tokio::task::JoinHandle<()>)> = None;
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            let attempt = self.try_acquire_or_renew().await;
            match attempt {
                Ok(Attempt::Leading) => {
                    last_renewal = tokio::time::Instant::now();
                    if current.is_none() {
                        info!(identity = %self.settings.identity, lease = %self.settings.name, "leading: starting the controller");
                        leading(true);
                        let token = shutdown.child_token();
                        current = Some((token.clone(), tokio::spawn(work(token))));
                    }
                }
                Ok(Attempt::Following { holder }) => {
                    if let Some((token, handle)) = current.take() {
                        warn!(%holder, "lost the lease: stopping the controller");
                        token.cancel();
                        let _ = handle.await;
                        leading(false);
                    }
                }
                Err(e) => {
                    warn!(%e, "lease renewal failed");
                    // Stop before another replica may take over: never two controllers at once.
                    let deadline = self
                        .settings
                        .lease_duration
                        .saturating_sub(self.settings.renew_period * 2);
                    if last_renewal.elapsed() > deadline
                        && let Some((token, handle)) = current.take()
                    {
                        warn!("could not renew the lease in time: stopping the controller");
                        token.cancel();
                        let _ = handle.await;
                        leading(false);
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(self.settings.renew_period) => {}
            }
        }
        if let Some((token, handle)) = current.take() {
            token.cancel();
            let _ = handle.await;
            leading(false);
            self.release().await;
        }
    }
}
