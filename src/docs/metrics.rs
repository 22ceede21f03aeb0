//! The metrics reference, read from the Prometheus registry `sluice serve` serves on
//! `--metrics-listen` ([`crate::serve::metrics_registry`]): every metric's name as scraped, type,
//! help and label names. A labelled family shows in the encoding only once it has a series, so
//! [`registered`] gives each family one; the values a label takes are written in [`LABELS`], and
//! generating the page fails when a metric has no entry there, or an entry names no metric.

use std::collections::BTreeMap;

use anyhow::bail;

use super::cell;

/// The values of each metric's labels (by its name without the `_total` a counter gets), where
/// the name alone does not say them.
const LABELS: &[(&str, &str)] = &[
    (
        "sluice_queue_quota",
        "`resource`: each resource the queue's quota names (base units)",
    ),
    ("sluice_queue_used", "`resource`: as `sluice_queue_quota`"),
    (
        "sluice_queue_reserved",
        "`resource`: as `sluice_queue_quota`",
    ),
    (
        "sluice_queue_borrowed",
        "`resource`: as `sluice_queue_quota`",
    ),
    ("sluice_queue_lent", "`resource`: as `sluice_queue_quota`"),
    ("sluice_queue_admitted_workloads", ""),
    ("sluice_queue_admitted_pods", ""),
    ("sluice_queue_oldest_pending_timestamp_seconds", ""),
    (
        "sluice_queue_info",
        "`cohort` (empty: none), `strategy`: `StrictFIFO` or `BestEffortFIFO`; always 1",
    ),
    (
        "sluice_events",
        "`reason`: `Waiting`, `Refused`, `Admitted`, `Preempted`, `Requeued`, `RequeueLimitExceeded`",
    ),
    (
        "sluice_cohort_quota",
        "`resource`: each resource its queues' quotas name (base units)",
    ),
    ("sluice_cohort_used", "`resource`: as `sluice_cohort_quota`"),
    (
        "sluice_cohort_reserved",
        "`resource`: as `sluice_cohort_quota`",
    ),
    (
        "sluice_cohort_borrowed",
        "`resource`: as `sluice_cohort_quota`",
    ),
    ("sluice_cohort_pending_workloads", ""),
    ("sluice_cohort_pending_pods", ""),
    ("sluice_cohort_oldest_pending_timestamp_seconds", ""),
    ("sluice_events_dropped", ""),
    ("sluice_events_failed", ""),
    ("sluice_admitted_pods", ""),
    ("sluice_admitted_at_creation_pods", ""),
    ("sluice_queue_pending_pods", ""),
    ("sluice_queue_pending_workloads", ""),
    ("sluice_queue_borrowed_milli", ""),
    ("sluice_admission_wait_seconds", ""),
    ("sluice_admission_pass_duration_seconds", ""),
    ("sluice_ungate_errors", ""),
    ("sluice_ungates_in_flight", ""),
    ("sluice_status_writes", ""),
    ("sluice_status_writes_pending", ""),
    ("sluice_leader", ""),
    (
        "sluice_build_info",
        "`version`: the version (SemVer, Cargo's); `commit`: the git commit built from, or `unknown`",
    ),
    ("sluice_leader_lease_transitions", ""),
    (
        "sluice_preemptions",
        "`reason`: `InQueuePriority`, `CohortReclaim`, `PodsReadyTimeout`",
    ),
    (
        "sluice_evicted_pods",
        "`reason`: `InQueuePriority`, `CohortReclaim`, `PodsReadyTimeout`",
    ),
    ("sluice_preemption_admission_seconds", ""),
    (
        "sluice_tasks_started",
        "`executor`: `container`, `pod`, `http`, `resource`",
    ),
    (
        "sluice_tasks_finished",
        "`phase`: `Success`, `Failed`, `Killed`",
    ),
    ("sluice_task_duration_seconds", ""),
    ("sluice_task_workers_created", ""),
    ("sluice_task_workers_deleted", ""),
    ("sluice_scavenger_started", ""),
    ("sluice_scavenger_finished", ""),
    ("sluice_scavenger_failed", ""),
    (
        "sluice_scavenger_interrupted",
        "`by`: `outside` (evicted, preempted, deleted) or `sluice` (stopped to keep within the threshold)",
    ),
    ("sluice_scavenger_unschedulable", ""),
    ("sluice_scavenger_first_start_seconds", ""),
    (
        "sluice_scavenger_capacity",
        "`resource`: `cpu` in cores, `memory` in bytes",
    ),
    (
        "sluice_scavenger_in_use",
        "`resource`: `cpu` in cores, `memory` in bytes",
    ),
    (
        "sluice_webhook_request_duration_seconds",
        "`operation`: the webhook (`mutate_pods`, `validate_pods`, `mutate_applications`, `validate_applications`, ...)",
    ),
    (
        "sluice_webhook_requests",
        "`outcome`: `allowed`, `patched`, `denied`, `rejected_bad_request`",
    ),
];

/// A metric as the registry encodes it.
#[derive(Default)]
struct Metric {
    kind: String,
    help: String,
    /// Its label names (a histogram's `le` left out).
    labels: Vec<String>,
}

/// The page: one table of every registered metric.
pub(super) fn page() -> anyhow::Result<String> {
    let metrics = registered()?;
    let labels: BTreeMap<&str, &str> = LABELS.iter().copied().collect();
    let unknown: Vec<&&str> = labels
        .keys()
        .filter(|k| !metrics.contains_key(**k))
        .collect();
    if !unknown.is_empty() {
        bail!("src/docs/metrics.rs lists labels of metrics nobody registers: {unknown:?}");
    }
    let mut out = String::from(
        "# Metrics\n\nEvery metric `sluice serve` serves on `--metrics-listen` (default \
         `0.0.0.0:9090`, path `/metrics`, plain HTTP), as the Prometheus registry describes it. \
         Controller metrics move only on the replica that leads; webhook metrics on every replica.\n\n\
         | metric | type | labels | help |\n|---|---|---|---|\n",
    );
    for (name, metric) in &metrics {
        let Some(values) = labels.get(name.as_str()) else {
            bail!("the metric {name} has no entry in LABELS (src/docs/metrics.rs): add it");
        };
        let names: Vec<String> = metric.labels.iter().map(|l| format!("`{l}`")).collect();
        let label = match (names.is_empty(), values.is_empty()) {
            (true, _) => String::new(),
            (false, true) => names.join(", "),
            (false, false) => format!("{}; {values}", names.join(", ")),
        };
        let scraped = if metric.kind == "counter" {
            format!("{name}_total")
        } else {
            name.clone()
        };
        out.push_str(&format!(
            "| `{scraped}` | {} | {label} | {} |\n",
            metric.kind,
            cell(&metric.help)
        ));
    }
    Ok(out)
}

/// Every metric of the registry, by name, from its text encoding (`# HELP` and `# TYPE` lines,
/// and the label names of its one series).
fn registered() -> anyhow::Result<BTreeMap<String, Metric>> {
    let (registry, controller, tasks, webhooks, scavengers) = crate::serve::metrics_registry();
    one_series_each(&controller, &tasks, &webhooks, &scavengers);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            current = name.to_string();
            metrics.entry(current.clone()).or_default().help =
                help.trim_end_matches('.').to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "?"));
            metrics.entry(name.to_string()).or_default().kind = kind.to_string();
        } else if let Some((_, labels)) = line.split_once('{')
            && let Some(metric) = metrics.get_mut(&current)
        {
            for pair in labels.split(',') {
                let Some((key, _)) = pair.split_once('=') else {
                    continue;
                };
                if key != "le" && !metric.labels.iter().any(|l| l == key) {
                    metric.labels.push(key.to_string());
                }
            }
        }
    }
    Ok(metrics)
}

/// One series in every labelled family, so that the encoding shows it and its label names.
fn one_series_each(
    controller: &crate::metrics::ControllerMetrics,
    tasks: &crate::tasks::TaskMetrics,
    webhooks: &sluice_webhooks::WebhookMetrics,
    scavengers: &crate::scavenger::metrics::ScavengerMetrics,
) {
    use crate::metrics::{
        CohortLabels, CohortResourceLabels, PreemptionLabels, QueueLabels, QueueResourceLabels,
    };
    let cohort = CohortLabels { cohort: "c".into() };
    let cohort_resource = CohortResourceLabels {
        cohort: "c".into(),
        resource: "cpu".into(),
    };
    let c = &controller.queues.cohorts;
    for family in [&c.quota, &c.used, &c.reserved, &c.borrowed] {
        let _ = family.get_or_create(&cohort_resource);
    }
    let _ = c.pending_workloads.get_or_create(&cohort);
    let _ = c.pending_pods.get_or_create(&cohort);
    let _ = c.oldest_pending_timestamp.get_or_create(&cohort);
    let queue = QueueLabels { queue: "q".into() };
    let _ = controller.admitted_pods.get_or_create(&queue);
    let _ = controller.admitted_at_creation.get_or_create(&queue);
    let _ = controller.pending_pods.get_or_create(&queue);
    let _ = controller.pending_workloads.get_or_create(&queue);
    let _ = controller.admission_wait_seconds.get_or_create(&queue);
    let _ = controller
        .preemption_admission_seconds
        .get_or_create(&queue);
    let preemption = PreemptionLabels {
        queue: "q".into(),
        reason: "r".into(),
    };
    let _ = controller.preemptions.get_or_create(&preemption);
    let _ = controller.evicted_pods.get_or_create(&preemption);
    let _ = controller.borrowed.get_or_create(&QueueResourceLabels {
        queue: "q".into(),
        resource: "cpu".into(),
    });
    seed_queue_gauges_and_events(controller);
    let executor = crate::tasks::metrics::ExecutorLabels {
        executor: "pod".into(),
    };
    let _ = tasks.started.get_or_create(&executor);
    let _ = tasks.duration_seconds.get_or_create(&executor);
    let _ = tasks
        .finished
        .get_or_create(&crate::tasks::metrics::FinishedLabels {
            executor: "pod".into(),
            phase: "Success".into(),
        });
    seed_webhooks_and_scavengers(webhooks, scavengers);
}

/// One series of each per-queue gauge and of the events' counter.
fn seed_queue_gauges_and_events(controller: &crate::metrics::ControllerMetrics) {
    use crate::metrics::{QueueLabels, QueueResourceLabels};
    let queue = QueueLabels { queue: "q".into() };
    let resource = QueueResourceLabels {
        queue: "q".into(),
        resource: "cpu".into(),
    };
    let gauges = &controller.queues;
    for family in [
        &gauges.quota,
        &gauges.used,
        &gauges.reserved,
        &gauges.borrowed,
        &gauges.lent,
    ] {
        let _ = family.get_or_create(&resource);
    }
    let _ = gauges.admitted_workloads.get_or_create(&queue);
    let _ = gauges.admitted_pods.get_or_create(&queue);
    let _ = gauges.oldest_pending_timestamp.get_or_create(&queue);
    let _ = gauges.info.get_or_create(&crate::metrics::QueueInfoLabels {
        queue: "q".into(),
        cohort: String::new(),
        strategy: "StrictFIFO".into(),
    });
    let _ = controller
        .events
        .sent
        .get_or_create(&crate::metrics::EventLabels {
            reason: "Waiting".into(),
        });
}

/// One series of each labelled webhook and scavenger metric.
fn seed_webhooks_and_scavengers(
    webhooks: &sluice_webhooks::WebhookMetrics,
    scavengers: &crate::scavenger::metrics::ScavengerMetrics,
) {
    let _ = webhooks
        .duration
        .get_or_create(&sluice_webhooks::OperationLabels { operation: "o" });
    let _ = webhooks
        .requests
        .get_or_create(&sluice_webhooks::OutcomeLabels {
            operation: "o",
            outcome: "allowed",
        });
    use crate::scavenger::metrics::{ReasonLabels, ResourceLabels};
    let _ = scavengers.interrupted.get_or_create(&ReasonLabels {
        by: "sluice".into(),
    });
    let cpu = ResourceLabels {
        resource: "cpu".into(),
    };
    let _ = scavengers.in_use.get_or_create(&cpu);
    let _ = scavengers.capacity.get_or_create(&cpu);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_metric_is_on_the_page_with_its_type() {
        let page = page().expect("every metric has its labels listed");
        assert!(
            page.contains("| `sluice_admitted_pods_total` | counter | `queue` |"),
            "{page}"
        );
        assert!(
            page.contains("| `sluice_webhook_requests_total` | counter | `operation`, `outcome`;"),
            "{page}"
        );
        assert!(page.contains("| `sluice_leader` | gauge |"), "{page}");
        assert!(
            page.contains("| `sluice_admission_pass_duration_seconds` | histogram |"),
            "{page}"
        );
    }

    /// A family registered in the code but given no series in `one_series_each` would be missing
    /// from the encoding, so from the page: every name registered in the sources is on it.
    #[test]
    fn every_metric_the_sources_register_is_on_the_page() {
        let metrics = registered().expect("registry");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut missing = Vec::new();
        let mut found = 0;
        for file in [
            "src/metrics.rs",
            "src/tasks/metrics.rs",
            "src/scavenger/metrics.rs",
            "webhooks/src/metrics.rs",
        ] {
            let text = std::fs::read_to_string(root.join(file)).expect("a metrics source");
            for (at, _) in text.match_indices("register(") {
                let rest = text[at + "register(".len()..].trim_start();
                let Some(name) = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split('"').next())
                    .filter(|n| n.starts_with("sluice_"))
                else {
                    continue;
                };
                found += 1;
                if !metrics.contains_key(name) {
                    missing.push(format!("{file}: {name}"));
                }
            }
        }
        assert!(
            found >= 31,
            "only {found} registrations found in the sources"
        );
        assert!(
            missing.is_empty(),
            "registered but not on the page (give the family a series in one_series_each): {missing:?}"
        );
    }

    #[test]
    fn the_labels_of_a_series_are_read_from_the_encoding() {
        let metrics = registered().expect("registry");
        let labels = |name: &str| {
            metrics
                .get(name)
                .map(|m| m.labels.clone())
                .unwrap_or_default()
        };
        assert_eq!(labels("sluice_evicted_pods"), vec!["queue", "reason"]);
        assert_eq!(labels("sluice_admission_wait_seconds"), vec!["queue"]);
        assert!(labels("sluice_leader").is_empty());
    }
}
