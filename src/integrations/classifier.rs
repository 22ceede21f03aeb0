//! The registry's pod classifier: where a pod belongs, by the first integration that knows it
//! (the webhook's [`sluice_webhooks::PodClassifier`] and the controller's snapshot).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::framework::label;
use super::{Integration, PodIdentity, all};
use crate::api::{POD_SET_LABEL, QUEUE_LABEL, WORKLOAD_LABEL};
use crate::namespaces::{DefaultQueue, Namespaces, unseen_namespace_message};

/// The integrations as one: the identity of a pod by the first integration that knows it. With a namespace
/// cache, the webhook also gives Spark's and Ray's pods their namespace's default queue.
#[derive(Clone)]
pub struct Adapters {
    integrations: Vec<Arc<dyn Integration>>,
    namespaces: Namespaces,
}

impl Default for Adapters {
    fn default() -> Self {
        Adapters {
            integrations: all(),
            namespaces: Namespaces::none(),
        }
    }
}

impl Adapters {
    /// The labels of `namespace` as the cache holds them (None: not seen yet).
    pub fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces.labels(namespace)
    }

    /// Every integration, with namespaces' default queues from `namespaces`.
    pub fn with_namespaces(namespaces: Namespaces) -> Self {
        Adapters {
            integrations: all(),
            namespaces,
        }
    }

    pub fn identify(&self, pod: &Pod) -> Option<PodIdentity> {
        self.integrations.iter().find_map(|a| a.identify_pod(pod))
    }

    /// The identity `pod` would have in `queue`, by the integrations that follow a namespace default.
    fn identify_in_default(&self, pod: &Pod, queue: &str) -> Option<PodIdentity> {
        let mut labelled = pod.clone();
        labelled
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(QUEUE_LABEL.to_string(), queue.to_string());
        self.integrations
            .iter()
            .filter(|a| a.follows_namespace_default())
            .find_map(|a| a.identify_pod(&labelled))
    }
}

fn identity_labels(identity: PodIdentity) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(QUEUE_LABEL.to_string(), identity.queue);
    // A pod's own name may be too long for a label value; the controller falls back to it.
    if let Some(workload) = identity.workload.filter(|w| is_label_value(w)) {
        labels.insert(WORKLOAD_LABEL.to_string(), workload);
    }
    labels.insert(POD_SET_LABEL.to_string(), identity.pod_set);
    labels
}

impl Adapters {
    /// Err (the message) when `new` belongs elsewhere than `old`: another workload, pod set, gang
    /// or queue, as the labels and annotations its integration reads say. Those are fixed once a
    /// governed pod exists: a relabel would move what it holds into another ledger with no check.
    pub fn judge_identity_change(
        &self,
        namespace: &str,
        old: &Pod,
        new: &Pod,
    ) -> Result<(), String> {
        let (before, after) = (self.identify(old), self.identify(new));
        if before == after {
            return Ok(());
        }
        let empty = BTreeMap::new();
        let changed = |a: Option<&BTreeMap<String, String>>,
                       b: Option<&BTreeMap<String, String>>| {
            let (a, b) = (a.unwrap_or(&empty), b.unwrap_or(&empty));
            a.keys()
                .chain(b.keys())
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| format!("{k:?}"))
                .collect::<std::collections::BTreeSet<_>>()
        };
        let mut keys = changed(old.metadata.labels.as_ref(), new.metadata.labels.as_ref());
        keys.extend(changed(
            old.metadata.annotations.as_ref(),
            new.metadata.annotations.as_ref(),
        ));
        let describe = |identity: &Option<PodIdentity>| match identity {
            Some(i) => format!(
                "workload {:?}, pod set {:?}, gang {}, queue {:?}",
                i.workload.as_deref().unwrap_or("(the pod's own)"),
                i.pod_set,
                i.min_count.map_or("not set".to_string(), |m| m.to_string()),
                i.queue
            ),
            None => "no workload (ungoverned)".to_string(),
        };
        Err(format!(
            "sluice: pod {namespace}/{name} is governed as {before}; changing {keys} would make it {after}. The labels and annotations that say where a governed pod belongs are fixed once it exists, because what it holds of its queue's quota is accounted there. Create a new pod with the labels you want instead",
            name = new.metadata.name.as_deref().unwrap_or("<unnamed>"),
            before = describe(&before),
            after = describe(&after),
            keys = keys.into_iter().collect::<Vec<_>>().join(", "),
        ))
    }
}

impl sluice_webhooks::PodClassifier for Adapters {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        self.identify(pod).map(identity_labels)
    }

    fn judge_update(&self, namespace: &str, old: &Pod, new: &Pod) -> Result<(), String> {
        self.judge_identity_change(namespace, old, new)
    }

    fn classify_in(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        if label(pod, QUEUE_LABEL).is_some() {
            return Ok(self.classify(pod));
        }
        match self.namespaces.default_queue(namespace) {
            DefaultQueue::Queue(queue) => {
                Ok(self.identify_in_default(pod, &queue).map(identity_labels))
            }
            DefaultQueue::None => Ok(None),
            // Only a pod that would be governed is held up: any other pod is none of sluice's business.
            DefaultQueue::Unknown => match self.identify_in_default(pod, "unknown") {
                Some(_) => Err(unseen_namespace_message(namespace, "pod")),
                None => Ok(None),
            },
        }
    }
}

/// Whether `value` is a valid label value (at most 63 characters, alphanumeric at both ends,
/// `-`, `_`, `.` between).
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.len() <= 63
        && (value.is_empty()
            || (bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))))
}

/// A valid DynamicWorkload name (a DNS subdomain) for any workload label value: lower-cased, other
/// characters replaced, and a hash suffix when that changed anything, so distinct values never meet.
pub fn workload_object_name(raw: &str) -> String {
    let cleaned: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    let trimmed = cleaned.trim_matches(|c| c == '-' || c == '.');
    if trimmed == raw && !trimmed.is_empty() && trimmed.len() <= 253 {
        return raw.to_string();
    }
    // FNV-1a: stable across releases, unlike std's hasher.
    let mut hash: u64 = 0xcbf29ce484222325;
    for b in raw.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x100000001b3);
    }
    let base: String = trimmed.chars().take(200).collect();
    let base = if base.is_empty() {
        "workload".to_string()
    } else {
        base
    };
    format!("{base}-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DEFAULT_QUEUE_LABEL;
    use crate::namespaces::testing::namespaces;
    use sluice_webhooks::PodClassifier;

    fn pod_with(labels: &[(&str, &str)]) -> Pod {
        crate::integrations::testing::labelled_pod(Some("p"), labels, &[])
    }

    #[test]
    fn spark_and_ray_pods_take_their_namespace_default_queue_plain_pods_do_not() {
        let adapters = Adapters::with_namespaces(namespaces(&[
            ("research", &[(DEFAULT_QUEUE_LABEL, "batch")]),
            ("other", &[]),
        ]));
        let executor = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
        ]);
        let labels = adapters
            .classify_in("research", &executor)
            .expect("known namespace")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("batch"));
        assert_eq!(
            labels.get(WORKLOAD_LABEL).map(String::as_str),
            Some("spark-spark-1")
        );
        let worker = pod_with(&[
            ("ray.io/cluster", "rc"),
            ("ray.io/node-type", "worker"),
            ("ray.io/group", "cpu"),
        ]);
        let labels = adapters
            .classify_in("research", &worker)
            .expect("known")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("batch"));
        assert_eq!(
            adapters.classify_in("research", &pod_with(&[("app", "web")])),
            Ok(None),
            "a plain pod without the queue label stays ungoverned"
        );
        assert_eq!(adapters.classify_in("other", &executor), Ok(None));
        // Its own label wins over the default.
        let own = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
            (QUEUE_LABEL, "mine"),
        ]);
        let labels = adapters
            .classify_in("research", &own)
            .expect("known")
            .expect("governed");
        assert_eq!(labels.get(QUEUE_LABEL).map(String::as_str), Some("mine"));
    }

    #[test]
    fn an_unseen_namespace_holds_up_only_pods_that_would_be_governed() {
        let adapters = Adapters::with_namespaces(namespaces(&[]));
        let executor = pod_with(&[
            ("spark-app-selector", "spark-1"),
            ("spark-role", "executor"),
        ]);
        let err = adapters
            .classify_in("fresh", &executor)
            .expect_err("cannot tell yet");
        assert!(err.contains("retry") && err.contains("fresh"), "{err}");
        assert_eq!(
            adapters.classify_in("fresh", &pod_with(&[("app", "web")])),
            Ok(None)
        );
    }

    /// Issue 31, hole 2: the labels and annotations an integration joins pods by are fixed on a
    /// governed pod: relabelling an admitted Ray worker into another cluster's ledger, or growing
    /// a pod's gang, is refused naming the key; other labels may change.
    #[test]
    fn moving_a_governed_pod_to_another_workload_or_gang_is_refused_naming_the_key() {
        let adapters = Adapters::default();
        let worker = pod_with(&[
            (QUEUE_LABEL, "q"),
            ("ray.io/cluster", "mine"),
            ("ray.io/node-type", "worker"),
            ("ray.io/group", "cpu"),
        ]);
        let mut moved = worker.clone();
        moved
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert("ray.io/cluster".into(), "theirs".into());
        let refusal = adapters
            .judge_identity_change("ns", &worker, &moved)
            .expect_err("moved into another cluster");
        assert!(refusal.contains("\"ray.io/cluster\""), "{refusal}");
        let mut grown = pod_with(&[(QUEUE_LABEL, "q"), (WORKLOAD_LABEL, "w")]);
        let before = grown.clone();
        grown.metadata.annotations = Some(
            [(
                crate::api::MIN_COUNT_ANNOTATION.to_string(),
                "100000".to_string(),
            )]
            .into(),
        );
        let refusal = adapters
            .judge_identity_change("ns", &before, &grown)
            .expect_err("gang grown");
        assert!(refusal.contains("sluice.dev/min-count"), "{refusal}");
        let mut relabelled = worker.clone();
        relabelled
            .metadata
            .labels
            .as_mut()
            .expect("labels")
            .insert("team".into(), "blue".into());
        assert_eq!(
            adapters.judge_identity_change("ns", &worker, &relabelled),
            Ok(())
        );
    }

    #[test]
    fn workload_names_are_valid_and_distinct() {
        assert_eq!(workload_object_name("etl-7"), "etl-7");
        let a = workload_object_name("ETL_7");
        let b = workload_object_name("etl-7-");
        assert!(a.starts_with("etl-7-") && a != "etl-7");
        assert_ne!(a, b);
        assert!(workload_object_name("___").starts_with("workload-"));
    }
}
