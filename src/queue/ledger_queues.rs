//! Which queue each DynamicWorkload (a workload's ledger) names, kept from a watch on every
//! replica. The pod webhook refuses a pod whose own queue is not its workload's: the leader knows
//! that from its last pass ([`super::AdmitAtCreation::queue_of`]), a replica that does not lead
//! from this index, so a pod joining another queue's ledger is refused whichever replica answers
//! (before, a follower let it in gated, and no pass ever admitted it).
//!
//! Only the key and the queue's name are kept (~100 B a workload), not the objects.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use super::admission::WorkloadKey;
use crate::api::DynamicWorkload;

#[derive(Clone, Default)]
pub struct LedgerQueues {
    inner: Arc<RwLock<Index>>,
}

#[derive(Default)]
struct Index {
    queues: HashMap<WorkloadKey, String>,
    /// A (re)list in progress: replaces `queues` at its end, so a ledger deleted while the watch
    /// was down does not linger.
    relist: Option<HashMap<WorkloadKey, String>>,
}

/// The ledger's workload key; None without a namespace.
fn key_of(ledger: &DynamicWorkload) -> Option<WorkloadKey> {
    Some(WorkloadKey {
        namespace: ledger.namespace()?,
        name: ledger.name_any(),
    })
}

/// The queue the ledger names; None when it names none.
fn queue_named(ledger: &DynamicWorkload) -> Option<String> {
    let queue = ledger.spec.queue_name.trim();
    (!queue.is_empty()).then(|| queue.to_string())
}

impl LedgerQueues {
    /// The queue the workload's ledger names, if this replica has seen one.
    pub fn queue_of(&self, key: &WorkloadKey) -> Option<String> {
        let index = self.inner.read().unwrap_or_else(|e| e.into_inner());
        index.queues.get(key).cloned()
    }

    /// Applies one watch event, as kube-runtime's reflector applies them.
    pub fn apply(&self, event: Event<DynamicWorkload>) {
        let mut index = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(ledger) => {
                let Some(key) = key_of(&ledger) else { return };
                match queue_named(&ledger) {
                    Some(queue) => index.queues.insert(key, queue),
                    None => index.queues.remove(&key),
                };
            }
            Event::Delete(ledger) => {
                if let Some(key) = key_of(&ledger) {
                    index.queues.remove(&key);
                }
            }
            Event::Init => index.relist = Some(HashMap::new()),
            Event::InitApply(ledger) => {
                if let (Some(relist), Some(key), Some(queue)) =
                    (index.relist.as_mut(), key_of(&ledger), queue_named(&ledger))
                {
                    relist.insert(key, queue);
                }
            }
            Event::InitDone => {
                if let Some(relist) = index.relist.take() {
                    index.queues = relist;
                }
            }
        }
    }

    /// The index and the watch that keeps it (run the future; it retries with backoff for ever).
    pub fn watch(client: Client) -> (Self, impl std::future::Future<Output = ()>) {
        let ledgers = LedgerQueues::default();
        let kept = ledgers.clone();
        let stream = watcher::watcher(
            Api::<DynamicWorkload>::all(client),
            watcher::Config::default(),
        )
        .backoff(crate::watch_backoff::watch_backoff());
        let run = async move {
            stream
                .for_each(|event| {
                    match event {
                        Ok(event) => kept.apply(event),
                        Err(error) => {
                            tracing::warn!(%error, "watching DynamicWorkloads (retrying)")
                        }
                    }
                    async {}
                })
                .await
        };
        (ledgers, run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DynamicWorkloadSpec;

    fn ledger(namespace: &str, name: &str, queue: &str) -> DynamicWorkload {
        let mut l = DynamicWorkload::new(
            name,
            DynamicWorkloadSpec {
                queue_name: queue.into(),
                ..Default::default()
            },
        );
        l.metadata.namespace = Some(namespace.into());
        l
    }

    fn key(namespace: &str, name: &str) -> WorkloadKey {
        WorkloadKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_ledger_names_its_queue_until_it_is_deleted() {
        let index = LedgerQueues::default();
        index.apply(Event::Apply(ledger("ns", "w", "a")));
        assert_eq!(index.queue_of(&key("ns", "w")).as_deref(), Some("a"));
        assert_eq!(index.queue_of(&key("other", "w")), None, "per namespace");
        index.apply(Event::Delete(ledger("ns", "w", "a")));
        assert_eq!(index.queue_of(&key("ns", "w")), None);
    }

    #[test]
    fn a_ledger_without_a_queue_names_none() {
        let index = LedgerQueues::default();
        index.apply(Event::Apply(ledger("ns", "w", "a")));
        index.apply(Event::Apply(ledger("ns", "w", "  ")));
        assert_eq!(index.queue_of(&key("ns", "w")), None);
    }

    #[test]
    fn a_relist_replaces_the_index_at_its_end_only() {
        let index = LedgerQueues::default();
        index.apply(Event::Apply(ledger("ns", "gone", "a")));
        index.apply(Event::Init);
        index.apply(Event::InitApply(ledger("ns", "kept", "b")));
        assert_eq!(
            index.queue_of(&key("ns", "gone")).as_deref(),
            Some("a"),
            "a reader never sees a half-listed index"
        );
        index.apply(Event::InitDone);
        assert_eq!(
            index.queue_of(&key("ns", "gone")),
            None,
            "deleted while away"
        );
        assert_eq!(index.queue_of(&key("ns", "kept")).as_deref(), Some("b"));
    }
}
