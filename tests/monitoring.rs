//! The alerts (`manifests/monitoring/sluice-alerts.rules.yaml`, and the same groups in
//! `prometheusrule.yaml`) and the Grafana dashboard (`manifests/monitoring/grafana-dashboard.json`)
//! query only metrics sluice serves: every `sluice_*` name they use exists in sluice's registry
//! (`sluice::serve::metrics_registry()`) with that type's suffixes, and every label they select,
//! group or join by is one of those metrics' labels. No cluster needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sluice::metrics::{
    EventLabels, PreemptionLabels, QueueInfoLabels, QueueLabels, QueueResourceLabels,
};

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Metric names other than sluice's that the alerts may use: Prometheus's own and the API
/// server's (scraped separately), with their labels.
fn external() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    BTreeMap::from([(
        "apiserver_admission_webhook_rejection_count",
        BTreeSet::from(["name", "error_type", "operation", "type", "rejection_code"]),
    )])
}

/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

/// Every series name sluice serves (counters with `_total`, histograms with `_bucket`, `_sum`,
/// `_count`), with its label names: each family is given one series so that its labels show.
fn served() -> BTreeMap<String, BTreeSet<String>> {
    let (registry, c, _tasks, webhook, _scavenger) = sluice::serve::metrics_registry();
    let q = QueueLabels { queue: "q".into() };
    let qr = QueueResourceLabels {
        queue: "q".into(),
        resource: "cpu".into(),
    };
    let pr = PreemptionLabels {
        queue: "q".into(),
        reason: "InQueuePriority".into(),
    };
    c.admitted_pods.get_or_create(&q).inc();
    c.admitted_at_creation.get_or_create(&q).inc();
    c.pending_pods.get_or_create(&q).set(1);
    c.pending_workloads.get_or_create(&q).set(1);
    c.admission_wait_seconds.get_or_create(&q).observe(1.0);
    c.preemptions.get_or_create(&pr).inc();
    c.evicted_pods.get_or_create(&pr).inc();
    c.preemption_admission_seconds
        .get_or_create(&q)
        .observe(1.0);
    c.borrowed.get_or_create(&qr).set(1);
    c.events
        .sent
        .get_or_create(&EventLabels {
            reason: "Waiting".into(),
        })
        .inc();
    let g = &c.queues;
    for family in [&g.quota, &g.used, &g.reserved, &g.borrowed, &g.lent] {
        family.get_or_create(&qr).set(1.0);
    }
    g.admitted_workloads.get_or_create(&q).set(1);
    g.admitted_pods.get_or_create(&q).set(1);
    g.oldest_pending_timestamp.get_or_create(&q).set(1.0);
    g.info
        .get_or_create(&QueueInfoLabels {
            queue: "q".into(),
            cohort: "c".into(),
            strategy: "BestEffortFIFO".into(),
        })
        .set(1);
    let cohort = sluice::metrics::CohortLabels { cohort: "c".into() };
    let cohort_resource = sluice::metrics::CohortResourceLabels {
        cohort: "c".into(),
        resource: "cpu".into(),
    };
    let k = &g.cohorts;
    for family in [&k.quota, &k.used, &k.reserved, &k.borrowed] {
        family.get_or_create(&cohort_resource).set(1.0);
    }
    k.pending_workloads.get_or_create(&cohort).set(1);
    k.pending_pods.get_or_create(&cohort).set(1);
    k.oldest_pending_timestamp.get_or_create(&cohort).set(1.0);
    webhook.record("mutate_pods", sluice_webhooks::Outcome::Allowed, 0.001);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        let labels = out.entry(name.to_string()).or_default();
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) {
            for pair in inner.0.split(',') {
                if let Some((label, _)) = pair.split_once('=') {
                    labels.insert(label.to_string());
                }
            }
        }
    }
    out
}

/// A metric used in a query, with the labels it is selected by.
#[derive(Debug)]
struct Use {
    metric: String,
    selected: Vec<String>,
}

/// The metrics of one PromQL expression (each with its selector's labels), and the labels of its
/// `by`, `without`, `on`, `ignoring`, `group_left` and `group_right` clauses.
fn parse(expr: &str) -> (Vec<Use>, Vec<String>) {
    const CLAUSES: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let (mut uses, mut grouped) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            // A string (a label value, a legend): skip it.
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += 1;
            }
            i += 1;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == '_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        let inner = |open: char, close: char, j: usize| -> Option<(String, usize)> {
            if chars.get(j) != Some(&open) {
                return None;
            }
            let end = (j..chars.len()).find(|&k| chars[k] == close)?;
            Some((chars[j + 1..end].iter().collect(), end + 1))
        };
        if CLAUSES.contains(&word.as_str()) {
            if let Some((list, end)) = inner('(', ')', j) {
                grouped.extend(
                    list.split(',')
                        .map(|l| l.trim().to_string())
                        .filter(|l| !l.is_empty()),
                );
                i = end;
            }
            continue;
        }
        let is_metric = word.starts_with("sluice_") || external().contains_key(word.as_str());
        if !is_metric {
            continue;
        }
        let mut selected = Vec::new();
        if let Some((list, end)) = inner('{', '}', j) {
            for matcher in list.split(',') {
                let label: String = matcher
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !label.is_empty() {
                    selected.push(label);
                }
            }
            i = end;
        }
        uses.push(Use {
            metric: word,
            selected,
        });
    }
    (uses, grouped)
}

fn rules_exprs() -> Vec<(String, String)> {
    let rules: serde_norway::Value =
        serde_norway::from_str(&read("manifests/monitoring/sluice-alerts.rules.yaml"))
            .expect("rules YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .expect("alert name");
            let expr = rule["expr"].as_str().expect("expr");
            out.push((format!("alert {name}"), expr.to_string()));
        }
    }
    out
}

fn dashboard_exprs() -> Vec<(String, String)> {
    let dash: serde_json::Value =
        serde_json::from_str(&read("manifests/monitoring/grafana-dashboard.json"))
            .expect("dashboard JSON");
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            out.push((format!("panel {:?}", panel["title"]), expr.to_string()));
        }
    }
    for var in dash["templating"]["list"].as_array().expect("templating") {
        if let Some(q) = var["query"]["query"].as_str() {
            // label_values(metric, label)
            let inner = q.trim_start_matches("label_values(").trim_end_matches(')');
            if let Some((metric, label)) = inner.split_once(',') {
                out.push((
                    format!("variable {:?}", var["name"]),
                    format!("{}{{{}=\"x\"}}", metric.trim(), label.trim()),
                ));
            }
        }
    }
    out
}

/// The problems of one expression against what sluice serves.
fn check(expr: &str, served: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let external = external();
    let (uses, grouped) = parse(expr);
    let mut problems = Vec::new();
    if uses.is_empty() {
        problems.push("queries no metric".to_string());
    }
    let mut all_labels: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for u in &uses {
        let labels: BTreeSet<String> =
            match (served.get(&u.metric), external.get(u.metric.as_str())) {
                (Some(labels), _) => labels.clone(),
                (None, Some(labels)) => labels.iter().map(|l| l.to_string()).collect(),
                (None, None) => {
                    problems.push(format!("{} is not a metric sluice serves", u.metric));
                    continue;
                }
            };
        for label in &u.selected {
            if !labels.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                problems.push(format!(
                    "{} has no label {label} (it has {labels:?})",
                    u.metric
                ));
            }
        }
        all_labels.extend(labels);
    }
    for label in grouped {
        if !all_labels.contains(&label) {
            problems.push(format!("no metric of the expression has the label {label}"));
        }
    }
    problems
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_query_exists_with_its_labels() {
    let served = served();
    // The registry is what this test believes: a few names it must have.
    for name in [
        "sluice_queue_quota",
        "sluice_admitted_pods_total",
        "sluice_webhook_request_duration_seconds_bucket",
    ] {
        assert!(
            served.contains_key(name),
            "{name} not served: {:?}",
            served.keys()
        );
    }
    let exprs: Vec<(String, String)> = rules_exprs().into_iter().chain(dashboard_exprs()).collect();
    assert!(exprs.len() > 20, "{} expressions", exprs.len());
    let mut problems = Vec::new();
    for (what, expr) in &exprs {
        for p in check(expr, &served) {
            problems.push(format!("{what}: {p}\n    {expr}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_a_wrong_name_a_wrong_suffix_and_a_wrong_label() {
    let served = served();
    assert!(check("sluice_queue_quota{queue=\"a\"}", &served).is_empty());
    assert!(!check("sluice_queue_quotas", &served).is_empty());
    // A counter is served with _total only; a histogram with _bucket.
    assert!(!check("rate(sluice_admitted_pods[5m])", &served).is_empty());
    assert!(!check("sluice_admission_wait_seconds{queue=\"a\"}", &served).is_empty());
    assert!(!check("sluice_queue_quota{namespace=\"a\"}", &served).is_empty());
    assert!(!check("sum by (cohort) (sluice_queue_used)", &served).is_empty());
    assert!(check(
        "sum by (cohort) (sluice_queue_used * on (queue) group_left (cohort) sluice_queue_info)",
        &served
    )
    .is_empty());
}

#[test]
fn the_prometheus_rule_carries_the_rules_file_groups() {
    let rules: serde_norway::Value =
        serde_norway::from_str(&read("manifests/monitoring/sluice-alerts.rules.yaml"))
            .expect("rules");
    let cr: serde_norway::Value =
        serde_norway::from_str(&read("manifests/monitoring/prometheusrule.yaml"))
            .expect("PrometheusRule");
    assert_eq!(cr["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(cr["spec"]["groups"], rules["groups"]);
}

/// `promtool` (Prometheus's own rule engine) when installed: None, with a line saying so, when
/// not (`apt-get install prometheus` provides it); `SLUICE_REQUIRE_PROMTOOL=1` makes that a failure.
fn promtool() -> Option<std::process::Command> {
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_PROMTOOL").is_none(),
            "promtool is not installed"
        );
        eprintln!("skipped: promtool is not installed (apt-get install prometheus provides it)");
        return None;
    }
    let mut command = std::process::Command::new("promtool");
    command.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/monitoring"));
    Some(command)
}

/// Runs `promtool <args>` in manifests/monitoring; fails unless it succeeds. False when promtool
/// is not installed (the caller then returns: skipped, said so).
fn promtool_succeeds(args: &[&str]) -> bool {
    let Some(mut promtool) = promtool() else {
        return false;
    };
    let what = format!("promtool {}", args[..2].join(" "));
    let out = promtool.args(args).output().expect(&what);
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

#[test]
fn the_alert_rules_load_in_prometheus_and_fire_as_their_unit_tests_say() {
    if promtool_succeeds(&["check", "rules", "sluice-alerts.rules.yaml"]) {
        promtool_succeeds(&["test", "rules", "tests/alerts-test.yaml"]);
    }
}
