//! The namespaces' labels, cached for the webhooks so that no API call sits on their hot path: a
//! namespace's default queue (its label `sluice.dev/default-queue`) and the labels a CapacityQueue's
//! `namespaceSelector` is matched against.

use std::collections::BTreeMap;
use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use crate::api::DEFAULT_QUEUE_LABEL;

/// What is known of a namespace's default queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefaultQueue {
    /// The namespace names this queue in its label `sluice.dev/default-queue`.
    Queue(String),
    /// The namespace has no default queue.
    None,
    /// The namespace has not been seen yet (created a moment ago, or the cache is still filling).
    Unknown,
}

/// Whether the API server refused a write because its namespace is being deleted (403, cause
/// `NamespaceTerminating`): nothing to retry or warn about, the namespace's objects go with it.
pub fn is_namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403
        && s.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating")))
}

/// Why an object of `what` (a pod, an application) in `namespace` is refused while its default queue
/// cannot be told yet: the user retries, nothing passes ungoverned.
pub fn unseen_namespace_message(namespace: &str, what: &str) -> String {
    format!(
        "sluice has not seen namespace {namespace:?} yet, so it cannot tell this {what}'s default queue (namespace label {DEFAULT_QUEUE_LABEL}); retry in a moment"
    )
}

/// A cache of every namespace's labels; empty (every namespace without labels) when built with
/// [`Namespaces::none`], as in unit tests and benchmarks that run without a cluster.
#[derive(Clone, Default)]
pub struct Namespaces(Option<Store<PartialObjectMeta<Namespace>>>);

impl Namespaces {
    /// No cache: no namespace has labels or a default queue.
    pub fn none() -> Self {
        Namespaces(None)
    }

    /// A cache over `store` (tests fill it through the store's writer).
    pub fn from_store(store: Store<PartialObjectMeta<Namespace>>) -> Self {
        Namespaces(Some(store))
    }

    /// Watches namespaces' metadata (labels only, not specs). The returned future keeps the cache
    /// current and runs until the watch stream ends; spawn it.
    pub fn watch(client: Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, stream) = crate::watch_backoff::reflected(
            Api::<PartialObjectMeta<Namespace>>::all(client),
            watcher::Config::default(),
            |_| {},
        );
        let run = async move { stream.for_each(|_| async {}).await };
        (Namespaces(Some(store)), run)
    }

    /// Waits until the first listing is in the cache.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        match &self.0 {
            Some(store) => store.wait_until_ready().await,
            None => Ok(()),
        }
    }

    /// The labels of `namespace`; None when it is not known (yet).
    pub fn labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        match &self.0 {
            Some(store) => store
                .get(&ObjectRef::new(namespace))
                .map(|ns| ns.labels().clone()),
            None => Some(BTreeMap::new()),
        }
    }

    /// The names of the namespaces in the cache (none without a cache).
    pub fn names(&self) -> Vec<String> {
        match &self.0 {
            Some(store) => store.state().iter().map(|ns| ns.name_any()).collect(),
            None => Vec::new(),
        }
    }

    /// The default queue of `namespace`.
    pub fn default_queue(&self, namespace: &str) -> DefaultQueue {
        match self.labels(namespace) {
            None => DefaultQueue::Unknown,
            Some(labels) => match labels.get(DEFAULT_QUEUE_LABEL) {
                Some(queue) if !queue.is_empty() => DefaultQueue::Queue(queue.clone()),
                _ => DefaultQueue::None,
            },
        }
    }
}

/// Namespaces from fixtures: for unit tests and the fuzz targets (feature `fuzzing`).
#[cfg(any(test, feature = "fuzzing"))]
pub mod testing {
    use super::*;
    use kube::runtime::watcher::Event;

    /// A cache holding the given namespaces and their labels.
    pub fn namespaces(entries: &[(&str, &[(&str, &str)])]) -> Namespaces {
        let (store, mut writer) = reflector::store::<PartialObjectMeta<Namespace>>();
        for (name, labels) in entries {
            let mut meta = PartialObjectMeta::<Namespace>::default();
            meta.metadata.name = Some(name.to_string());
            meta.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            writer.apply_watcher_event(&Event::Apply(meta));
        }
        Namespaces::from_store(store)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::namespaces;
    use super::*;

    #[test]
    fn a_write_refused_because_the_namespace_terminates_is_told_apart() {
        let status = |reason: &str| {
            let status: kube::core::Status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "code": 403, "reason": "Forbidden",
                "message": "unable to create new content in namespace x because it is being terminated",
                "details": {"name": "a", "kind": "dynamicworkloads",
                    "causes": [{"reason": reason, "message": "m", "field": "metadata.namespace"}]},
            }))
            .expect("a Status");
            kube::Error::Api(Box::new(status))
        };
        assert!(is_namespace_terminating(&status("NamespaceTerminating")));
        // Any other refusal (RBAC, a quota) is not.
        assert!(!is_namespace_terminating(&status("FieldValueForbidden")));
    }

    #[test]
    fn default_queue_is_read_from_the_namespace_label() {
        let ns = namespaces(&[
            ("research", &[(DEFAULT_QUEUE_LABEL, "batch")]),
            ("plain", &[("team", "a")]),
            ("blank", &[(DEFAULT_QUEUE_LABEL, "")]),
        ]);
        assert_eq!(
            ns.default_queue("research"),
            DefaultQueue::Queue("batch".into())
        );
        assert_eq!(ns.default_queue("plain"), DefaultQueue::None);
        assert_eq!(ns.default_queue("blank"), DefaultQueue::None);
        assert_eq!(ns.default_queue("new"), DefaultQueue::Unknown);
        assert_eq!(Namespaces::none().default_queue("any"), DefaultQueue::None);
    }
}
