//! Plain pods: any pod labelled `sluice.dev/queue`. Pods sharing `sluice.dev/workload` form one
//! workload; otherwise a pod is a workload of its own. `sluice.dev/pod-set` names its pod set
//! (default `main`) and the annotation `sluice.dev/min-count` its set's minimum gang (default 1).

use k8s_openapi::api::core::v1::Pod;

use super::framework::{label, min_count_annotation};
use super::{Integration, IntegrationDoc, PodIdentity};
use crate::api::{POD_SET_LABEL, QUEUE_LABEL, WORKLOAD_LABEL};

pub struct PlainPods;

impl Integration for PlainPods {
    fn kind(&self) -> &'static str {
        "pod"
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[]
    }

    fn follows_namespace_default(&self) -> bool {
        false
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "plain pods (label `sluice.dev/queue`)",
            gang: "the first `sluice.dev/min-count` pods of each pod set of a `sluice.dev/workload` (default 1)",
            elastic: "pods above the minimum",
            end: "each pod's own end (Succeeded, Failed, deleted)",
        }
    }

    fn identify_pod(&self, pod: &Pod) -> Option<PodIdentity> {
        let queue = label(pod, QUEUE_LABEL)?.to_string();
        let workload = label(pod, WORKLOAD_LABEL)
            .map(str::to_string)
            .or_else(|| pod.metadata.name.clone().filter(|n| !n.is_empty()));
        Some(PodIdentity {
            queue,
            workload,
            pod_set: label(pod, POD_SET_LABEL).unwrap_or("main").to_string(),
            min_count: min_count_annotation(pod),
            recorded: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn pod(labels: &[(&str, &str)], name: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = name.map(str::to_string);
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        p
    }

    #[test]
    fn identifies_labelled_pods_only() {
        assert_eq!(
            PlainPods.identify_pod(&pod(&[("app", "x")], Some("p"))),
            None
        );
        let id = PlainPods
            .identify_pod(&pod(&[(QUEUE_LABEL, "research")], Some("p")))
            .unwrap();
        assert_eq!(id.queue, "research");
        assert_eq!(id.workload.as_deref(), Some("p"));
        assert_eq!(id.pod_set, "main");
        // generateName: no name yet at admission.
        assert_eq!(
            PlainPods
                .identify_pod(&pod(&[(QUEUE_LABEL, "q")], None))
                .unwrap()
                .workload,
            None
        );
        let grouped = PlainPods
            .identify_pod(&pod(
                &[(QUEUE_LABEL, "q"), (WORKLOAD_LABEL, "etl")],
                Some("etl-1"),
            ))
            .unwrap();
        assert_eq!(grouped.workload.as_deref(), Some("etl"));
    }
}
