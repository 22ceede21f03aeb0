//! The metrics reference, read from the Prometheus registry `sluice serve` serves on
//! `--metrics-listen` ([`crate::serve::metrics_registry`]): every metric's name as scraped, type
//! and help. The label sets are not in an empty registry, so they are listed here; generating the
//! page fails when a registered metric has no entry below, or an entry names no metric.

use std::collections::BTreeMap;

use anyhow::bail;

use super::cell;

/// The labels of each metric (by its name without the `_total` a counter gets) and their values.
const LABELS: &[(&str, &str)] = &[
    ("sluice_admitted_pods", "`queue`"),
    ("sluice_admitted_at_creation_pods", "`queue`"),
    ("sluice_queue_pending_pods", "`queue`"),
    ("sluice_queue_pending_workloads", "`queue`"),
    ("sluice_queue_borrowed_milli", "`queue`, `resource`"),
    ("sluice_admission_wait_seconds", "`queue`"),
    ("sluice_admission_pass_duration_seconds", ""),
    ("sluice_ungate_errors", ""),
    ("sluice_ungates_in_flight", ""),
    ("sluice_status_writes", ""),
    ("sluice_status_writes_pending", ""),
    ("sluice_leader", ""),
    ("sluice_leader_lease_transitions", ""),
    (
        "sluice_preemptions",
        "`queue`, `reason` (`InQueuePriority`, `CohortReclaim`, `PodsReadyTimeout`)",
    ),
    (
        "sluice_evicted_pods",
        "`queue`, `reason` (`InQueuePriority`, `CohortReclaim`, `PodsReadyTimeout`)",
    ),
    ("sluice_preemption_admission_seconds", "`queue`"),
    ("sluice_tasks_started", "`executor` (`container`, `pod`, `http`, `resource`)"),
    (
        "sluice_tasks_finished",
        "`executor`, `phase` (`Success`, `Failed`, `Killed`)",
    ),
    ("sluice_task_duration_seconds", "`executor`"),
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
    ("sluice_scavenger_capacity", "`resource` (`cpu` in cores, `memory` in bytes)"),
    ("sluice_scavenger_in_use", "`resource` (`cpu` in cores, `memory` in bytes)"),
    (
        "sluice_webhook_request_duration_seconds",
        "`operation` (`mutate_pods`, `validate_pods`, `mutate_applications`, `validate_applications`, ...)",
    ),
    (
        "sluice_webhook_requests",
        "`operation`, `outcome` (`allowed`, `patched`, `denied`, `rejected_bad_request`)",
    ),
];

/// A metric as the registry encodes it.
struct Metric {
    kind: String,
    help: String,
}

/// The page: one table of every registered metric.
pub(super) fn page() -> anyhow::Result<String> {
    let metrics = registered()?;
    let labels: BTreeMap<&str, &str> = LABELS.iter().copied().collect();
    let unknown: Vec<&&str> = labels.keys().filter(|k| !metrics.contains_key(**k)).collect();
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
        let Some(label) = labels.get(name.as_str()) else {
            bail!("the metric {name} has no entry in LABELS (src/docs/metrics.rs): add its labels");
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

/// Every metric of the registry, by name, from its text encoding (`# HELP` and `# TYPE` lines).
fn registered() -> anyhow::Result<BTreeMap<String, Metric>> {
    let (registry, ..) = crate::serve::metrics_registry();
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            metrics.entry(name.to_string()).or_insert_with(|| Metric {
                kind: String::new(),
                help: String::new(),
            }).help = help.trim_end_matches('.').to_string();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "?"));
            metrics.entry(name.to_string()).or_insert_with(|| Metric {
                kind: String::new(),
                help: String::new(),
            }).kind = kind.to_string();
        }
    }
    Ok(metrics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_metric_is_on_the_page_with_its_type() {
        let page = page().expect("every metric has its labels listed");
        let metrics = registered().expect("registry");
        assert!(metrics.len() >= 30, "{} metrics", metrics.len());
        assert!(page.contains("| `sluice_admitted_pods_total` | counter | `queue` |"), "{page}");
        assert!(page.contains("| `sluice_leader` | gauge |"), "{page}");
        assert!(page.contains("| `sluice_admission_pass_duration_seconds` | histogram |"), "{page}");
    }
}
