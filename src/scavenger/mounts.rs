//! Which PersistentVolumeClaims, ConfigMaps and Secrets exist, from metadata-only watches (names,
//! never contents): the webhook judges mounts without an API call on its hot path, and the
//! controller sees a mount disappear at once.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::Client;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::spec::MountKind;

/// The three caches; `None` (in unit tests) means every object exists.
#[derive(Clone, Default)]
pub struct Mounts(Option<Stores>);

#[derive(Clone)]
struct Stores {
    claims: Store<PartialObjectMeta<PersistentVolumeClaim>>,
    config_maps: Store<PartialObjectMeta<ConfigMap>>,
    secrets: Store<PartialObjectMeta<Secret>>,
}

fn watch_metadata<K>(
    client: &Client,
    changed: Option<std::sync::Arc<Notify>>,
    shutdown: Option<&CancellationToken>,
) -> Store<PartialObjectMeta<K>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, stream) = crate::watch_backoff::reflected(
        Api::<PartialObjectMeta<K>>::all(client.clone()),
        watcher::Config::default(),
        |_| {},
    );
    let watch = async move {
        stream
            .for_each(|_| {
                if let Some(n) = &changed {
                    n.notify_one();
                }
                async {}
            })
            .await
    };
    match shutdown {
        Some(shutdown) => {
            tokio::spawn(shutdown.clone().run_until_cancelled_owned(watch));
        }
        None => {
            tokio::spawn(watch);
        }
    }
    store
}

impl Mounts {
    /// Every object exists (unit tests, fuzzing).
    pub fn none() -> Self {
        Mounts(None)
    }

    /// Watches the three kinds' metadata; `changed` is notified of every change.
    /// With `shutdown`, the watches stop when it is cancelled (a leadership term's).
    pub fn watch(
        client: &Client,
        changed: Option<std::sync::Arc<Notify>>,
        shutdown: Option<&CancellationToken>,
    ) -> Self {
        Mounts(Some(Stores {
            claims: watch_metadata::<PersistentVolumeClaim>(client, changed.clone(), shutdown),
            config_maps: watch_metadata::<ConfigMap>(client, changed.clone(), shutdown),
            secrets: watch_metadata::<Secret>(client, changed, shutdown),
        }))
    }

    /// Waits until the three first listings are in.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        if let Some(s) = &self.0 {
            s.claims.wait_until_ready().await?;
            s.config_maps.wait_until_ready().await?;
            s.secrets.wait_until_ready().await?;
        }
        Ok(())
    }

    /// Whether the object exists (and is not being deleted).
    pub fn exists(&self, kind: MountKind, namespace: &str, name: &str) -> bool {
        let Some(s) = &self.0 else { return true };
        macro_rules! live {
            ($store:expr) => {
                $store
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some_and(|o| o.metadata.deletion_timestamp.is_none())
            };
        }
        match kind {
            MountKind::PersistentVolumeClaim => live!(s.claims),
            MountKind::ConfigMap => live!(s.config_maps),
            MountKind::Secret => live!(s.secrets),
        }
    }
}
