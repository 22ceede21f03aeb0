//! The pod classifier of the webhook server's tests, shared by the integration test `tls.rs` and
//! the unit tests of `src/server/tests.rs` (which include this file by path): a pod is governed by
//! the queue its `sluice.dev/queue` label names. The including module has `BTreeMap`, `Pod` and
//! `PodClassifier` in scope.

use super::{BTreeMap, Pod, PodClassifier};

pub struct QueueLabel;

impl PodClassifier for QueueLabel {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        let queue = pod.metadata.labels.as_ref()?.get("sluice.dev/queue")?;
        Some(BTreeMap::from([(
            "sluice.dev/queue".to_string(),
            queue.clone(),
        )]))
    }
}
