//! A cache fed by a watch, keyed by each object's uid: what kube-runtime's reflector store does for
//! the two pod caches (the queue controller's and the ScavengerJob controller's), without its
//! per-object key. The reflector keys each object by an `ObjectRef` (name, namespace, uid and
//! resourceVersion copied again beside the object: ~300 B a pod with its map slot); here the key
//! is the uid read as a 128-bit number (16 B), and an event's object moves into the cache instead of
//! being cloned. At 100,000 pods in two caches that is ~60 MB less (issue 24, memory).
//!
//! The events are applied as the reflector applies them: `Apply` and `Delete` change the cache at
//! once; a (re)list (`Init`, `InitApply`..., `InitDone`) fills a buffer that replaces the whole
//! cache at `InitDone`, so that objects deleted while the watch was down do not linger, and a
//! reader never sees a half-listed cache. The first `InitDone` makes the store ready.
//!
//! A store made by [`store_with_changes`] also notes which objects each event changed, under the
//! same lock as the cache, so that [`Store::state_and_changes`] reads the cache and what changed
//! since the last read as one view: an incremental reader (the queue controller's admission
//! passes) never sees an object in the cache without its change, or the reverse.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use kube::Resource;
use kube::runtime::watcher;

/// An object's key: its uid as a number when it is the API server's canonical form (a lowercase,
/// hyphenated UUID), else the uid (or, without one, `namespace/name`) as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Uuid(u128),
    Other(Box<str>),
}

impl Key {
    fn of_uid(uid: &str) -> Key {
        canonical_uuid(uid).map_or_else(|| Key::Other(uid.into()), Key::Uuid)
    }

    fn of<K: Resource>(object: &K) -> Key {
        let meta = object.meta();
        match meta.uid.as_deref() {
            Some(uid) => canonical_uuid(uid).map_or_else(|| Key::Other(uid.into()), Key::Uuid),
            None => Key::Other(
                format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                )
                .into(),
            ),
        }
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lowercase hex, as a number; None for any other form
/// (so that two different strings never share a key).
fn canonical_uuid(uid: &str) -> Option<u128> {
    let bytes = uid.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut value: u128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let digit = match (i, b) {
            (8 | 13 | 18 | 23, b'-') => continue,
            (8 | 13 | 18 | 23, _) => return None,
            (_, b'0'..=b'9') => b - b'0',
            (_, b'a'..=b'f') => b - b'a' + 10,
            _ => return None,
        };
        value = (value << 4) | u128::from(digit);
    }
    Some(value)
}

type Map<K> = HashMap<Key, Arc<K>>;

/// The uids of the objects changed since the last [`Store::state_and_changes`], and whether the
/// whole cache was replaced by a (re)list meanwhile.
#[derive(Default)]
struct ChangeLog {
    uids: HashSet<String>,
    relisted: bool,
}

/// What changed since the last [`Store::state_and_changes`]: each changed object (by uid) as the
/// cache holds it now (None: gone), and whether a (re)list replaced everything (then the whole
/// state is what to read).
pub struct Changes<K> {
    pub relisted: bool,
    pub objects: Vec<(String, Option<Arc<K>>)>,
}

/// The read side: cheap to clone, shared with the [`Writer`].
pub struct Store<K> {
    objects: Arc<RwLock<Map<K>>>,
    /// Only for a store made by [`store_with_changes`]; written while the cache's write lock is
    /// held, read while its read lock is.
    changes: Option<Arc<Mutex<ChangeLog>>>,
    /// True once the first list is in; closed when the writer is dropped.
    ready: tokio::sync::watch::Receiver<bool>,
}

impl<K> Clone for Store<K> {
    fn clone(&self) -> Self {
        Store {
            objects: self.objects.clone(),
            changes: self.changes.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// The writer went away before the first list completed: the store will never be ready.
#[derive(Debug, thiserror::Error)]
#[error("the watch feeding this store stopped before its first list completed")]
pub struct WriterDropped;

impl<K> Store<K> {
    /// Every object cached, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.values().cloned().collect()
    }

    /// What `pick` takes from the objects cached, read in place (no copy of the whole: a scan of
    /// 100k pods for the few that matter should not clone 100k pointers).
    pub fn pick<T>(&self, pick: impl FnMut(&K) -> Option<T>) -> Vec<T> {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.values().map(|o| &**o).filter_map(pick).collect()
    }

    /// Every object cached, and what changed since the last call, read as one view (see the module
    /// documentation). A store without a change log reports everything relisted.
    pub fn state_and_changes(&self) -> (Vec<Arc<K>>, Changes<K>) {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        let state: Vec<Arc<K>> = objects.values().cloned().collect();
        let Some(log) = &self.changes else {
            let changes = Changes {
                relisted: true,
                objects: Vec::new(),
            };
            return (state, changes);
        };
        let log = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
        let changed = (log.uids.into_iter())
            .map(|uid| {
                let object = objects.get(&Key::of_uid(&uid)).cloned();
                (uid, object)
            })
            .collect();
        let changes = Changes {
            relisted: log.relisted,
            objects: changed,
        };
        (state, changes)
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        let objects = self.objects.read().unwrap_or_else(|e| e.into_inner());
        objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits for the first complete list.
    pub async fn wait_until_ready(&self) -> Result<(), WriterDropped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WriterDropped)
    }
}

/// The write side: applies a watch's events (see the module documentation).
pub struct Writer<K> {
    objects: Arc<RwLock<Map<K>>>,
    changes: Option<Arc<Mutex<ChangeLog>>>,
    ready: tokio::sync::watch::Sender<bool>,
    /// The objects of a list in progress (between `Init` and `InitDone`).
    buffer: Map<K>,
}

/// A store and the writer that fills it.
pub fn store<K>() -> (Store<K>, Writer<K>) {
    store_noting(None)
}

/// A store and its writer that also note what changed ([`Store::state_and_changes`]).
pub fn store_with_changes<K>() -> (Store<K>, Writer<K>) {
    store_noting(Some(Arc::new(Mutex::new(ChangeLog::default()))))
}

fn store_noting<K>(changes: Option<Arc<Mutex<ChangeLog>>>) -> (Store<K>, Writer<K>) {
    let (ready, waiting) = tokio::sync::watch::channel(false);
    let objects = Arc::new(RwLock::new(HashMap::new()));
    (
        Store {
            objects: objects.clone(),
            changes: changes.clone(),
            ready: waiting,
        },
        Writer {
            objects,
            changes,
            ready,
            buffer: HashMap::new(),
        },
    )
}

impl<K: Resource> Writer<K> {
    /// Applies one event, taking its object (no copy is made).
    pub fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => {
                let key = Key::of(&object);
                let uid = object.meta().uid.clone();
                let mut objects = self.write();
                objects.insert(key, Arc::new(object));
                self.note(uid, false);
            }
            watcher::Event::Delete(object) => {
                let key = Key::of(&object);
                let uid = object.meta().uid.clone();
                let mut objects = self.write();
                objects.remove(&key);
                self.note(uid, false);
            }
            watcher::Event::Init => self.buffer = HashMap::new(),
            watcher::Event::InitApply(object) => {
                self.buffer.insert(Key::of(&object), Arc::new(object));
            }
            watcher::Event::InitDone => {
                let listed = std::mem::take(&mut self.buffer);
                let mut objects = self.write();
                let old = std::mem::replace(&mut *objects, listed);
                self.note(None, true);
                drop(objects);
                // The old cache is dropped after the lock is released.
                drop(old);
                self.ready.send_replace(true);
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Map<K>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a change in the change log, if any; called while the cache's write lock is held. An
    /// object without uid cannot be followed by uid: it is not noted.
    fn note(&self, uid: Option<String>, relisted: bool) {
        let Some(log) = &self.changes else {
            return;
        };
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(uid) = uid {
            log.uids.insert(uid);
        }
        log.relisted |= relisted;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(name: &str, uid: Option<&str>, version: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: uid.map(Into::into),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    const A: &str = "0f8e3a52-7c41-4d1e-9b5a-2a6c1d3e4f50";
    const B: &str = "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d";

    fn versions(store: &Store<Pod>) -> Vec<(String, String)> {
        let mut seen: Vec<(String, String)> = store
            .state()
            .iter()
            .map(|p| {
                let m = &p.metadata;
                (
                    m.name.clone().unwrap_or_default(),
                    m.resource_version.clone().unwrap_or_default(),
                )
            })
            .collect();
        seen.sort();
        seen
    }

    #[test]
    fn a_canonical_uuid_is_a_number_and_nothing_else_is() {
        assert_eq!(
            canonical_uuid("00000000-0000-0000-0000-0000000000ff"),
            Some(255)
        );
        assert!(canonical_uuid(A).is_some());
        // Upper case, no hyphens, hyphens elsewhere, wrong length, non-hex: kept as strings, so two
        // spellings of one number never share a key.
        for other in [
            "0F8E3A52-7C41-4D1E-9B5A-2A6C1D3E4F50",
            "0f8e3a527c414d1e9b5a2a6c1d3e4f50",
            "0f8e3a5-27c41-4d1e-9b5a-2a6c1d3e4f50",
            "0f8e3a52-7c41-4d1e-9b5a-2a6c1d3e4f5",
            "0f8e3a52-7c41-4d1e-9b5a-2a6c1d3e4f5g",
            "0f8e3a52-7c41-4d1e-9b5a-2a6c1d3e4f5é",
            "",
        ] {
            assert_eq!(canonical_uuid(other), None, "{other:?}");
        }
        assert_ne!(
            Key::of(&pod("a", Some("0F8E3A52-7C41-4D1E-9B5A-2A6C1D3E4F50"), "1")),
            Key::of(&pod("a", Some(A), "1"))
        );
    }

    #[test]
    fn apply_replaces_by_uid_and_delete_removes() {
        let (store, mut writer) = store::<Pod>();
        writer.apply(watcher::Event::Apply(pod("a", Some(A), "1")));
        writer.apply(watcher::Event::Apply(pod("b", Some(B), "1")));
        writer.apply(watcher::Event::Apply(pod("a", Some(A), "2")));
        assert_eq!(
            versions(&store),
            [("a".into(), "2".into()), ("b".into(), "1".into())]
        );
        writer.apply(watcher::Event::Delete(pod("a", Some(A), "3")));
        assert_eq!(versions(&store), [("b".into(), "1".into())]);
        // A pod recreated under the same name is another pod (another uid).
        writer.apply(watcher::Event::Apply(pod("b", Some(A), "4")));
        assert_eq!(store.len(), 2);
        // Without a uid the object is kept by namespace and name.
        writer.apply(watcher::Event::Apply(pod("c", None, "5")));
        writer.apply(watcher::Event::Apply(pod("c", None, "6")));
        assert_eq!(store.len(), 3);
        // `pick` reads the same objects as `state`, in place.
        let mut picked = store.pick(|p| {
            let version = p.metadata.resource_version.clone()?;
            (version != "1").then_some(version)
        });
        picked.sort();
        assert_eq!(picked, ["4", "6"]);
    }

    #[tokio::test]
    async fn a_relist_replaces_the_cache_at_its_end_and_the_first_makes_it_ready() {
        let (store, mut writer) = store::<Pod>();
        let waiting = tokio::spawn({
            let store = store.clone();
            async move { store.wait_until_ready().await.is_ok() }
        });
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(pod("a", Some(A), "1")));
        assert!(store.is_empty(), "a half-listed cache is never shown");
        writer.apply(watcher::Event::InitDone);
        assert!(waiting.await.is_ok_and(|ready| ready));
        assert_eq!(versions(&store), [("a".into(), "1".into())]);

        // The watch restarts: a is gone meanwhile, b new. Until InitDone the old cache stands.
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(pod("b", Some(B), "7")));
        assert_eq!(versions(&store), [("a".into(), "1".into())]);
        writer.apply(watcher::Event::InitDone);
        assert_eq!(versions(&store), [("b".into(), "7".into())]);
        assert!(store.wait_until_ready().await.is_ok());
    }

    fn changed(changes: &Changes<Pod>) -> Vec<(String, Option<String>)> {
        let mut seen: Vec<(String, Option<String>)> = (changes.objects.iter())
            .map(|(uid, pod)| {
                let version = pod
                    .as_ref()
                    .and_then(|p| p.metadata.resource_version.clone());
                (uid.clone(), version)
            })
            .collect();
        seen.sort();
        seen
    }

    #[test]
    fn changes_name_each_object_changed_since_the_last_read_as_the_cache_holds_it_now() {
        let (store, mut writer) = store_with_changes::<Pod>();
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(pod("a", Some(A), "1")));
        writer.apply(watcher::Event::InitDone);
        let (state, changes) = store.state_and_changes();
        assert_eq!((state.len(), changes.relisted), (1, true), "the first list");
        let (_, changes) = store.state_and_changes();
        assert!(!changes.relisted && changes.objects.is_empty(), "read once");
        writer.apply(watcher::Event::Apply(pod("b", Some(B), "2")));
        writer.apply(watcher::Event::Apply(pod("b", Some(B), "3")));
        writer.apply(watcher::Event::Delete(pod("a", Some(A), "4")));
        // A pod without uid cannot be followed by uid: not noted.
        writer.apply(watcher::Event::Apply(pod("c", None, "5")));
        let (state, changes) = store.state_and_changes();
        assert_eq!(state.len(), 2);
        assert_eq!(
            changed(&changes),
            vec![
                (A.to_string(), None),
                (B.to_string(), Some("3".to_string()))
            ],
            "each once, as it is now"
        );
        writer.apply(watcher::Event::Init);
        writer.apply(watcher::Event::InitApply(pod("b", Some(B), "6")));
        let (_, changes) = store.state_and_changes();
        assert!(!changes.relisted, "a list in progress changes nothing yet");
        writer.apply(watcher::Event::InitDone);
        let (state, changes) = store.state_and_changes();
        assert_eq!((state.len(), changes.relisted), (1, true));
    }

    #[test]
    fn a_store_without_change_log_reports_everything_relisted() {
        let (store, mut writer) = store::<Pod>();
        writer.apply(watcher::Event::Apply(pod("a", Some(A), "1")));
        let (state, changes) = store.state_and_changes();
        assert_eq!((state.len(), changes.relisted), (1, true));
        assert!(changes.objects.is_empty());
    }

    #[tokio::test]
    async fn a_writer_dropped_before_its_first_list_says_so() {
        let (store, writer) = store::<Pod>();
        drop(writer);
        assert!(store.wait_until_ready().await.is_err());
    }
}
