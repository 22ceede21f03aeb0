//! The reports of `kubectl sluice why` and `kubectl sluice top`, and the wait estimate: pure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::queue::status::summary_quota;
use crate::resources::quantities_text;
use crate::resources::{ResourceList, format_quantity};

/// Everything `why` found.
#[derive(Clone, Debug, Default)]
pub struct WhyReport {
    /// What was asked about, e.g. `RayCluster ml/rc`.
    pub target: String,
    /// About the pod itself, when a pod was asked about (gated or not).
    pub pod_note: Option<String>,
    pub workload: Option<DynamicWorkload>,
    /// Workloads of the same namespace and queue ahead of it (lower position), in order.
    pub ahead: Vec<DynamicWorkload>,
    /// The queue, when these rights can read it; else why not (None: not asked).
    pub queue: Option<Result<CapacityQueue, String>>,
    pub estimate: Option<Estimate>,
    /// sluice's events on the object (and its workload), oldest first: `(age, reason, note)`.
    pub events: Vec<(String, String, String)>,
    /// Why nothing more can be said (no workload yet...).
    pub note: Option<String>,
}

/// An estimate of the wait, and what it rests on.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub seconds: Option<i64>,
    pub basis: String,
}

/// How long `position` takes at the queue's recent turnover: the workloads (of those visible)
/// of `queue` admitted within `window_s` before `now_s`. `visible` says whose workloads were seen.
pub fn estimate(
    position: i32,
    queue: &str,
    admitted_at: &[i64],
    now_s: i64,
    window_s: i64,
    visible: &str,
) -> Estimate {
    let recent = admitted_at
        .iter()
        .filter(|&&at| at <= now_s && now_s - at <= window_s)
        .count() as i64;
    let minutes = window_s / 60;
    if recent == 0 {
        return Estimate {
            seconds: None,
            basis: format!(
                "no estimate: none of {visible} was admitted in queue {queue} in the last {minutes} min"
            ),
        };
    }
    let seconds = (i64::from(position.max(1)) * window_s) / recent;
    Estimate {
        seconds: Some(seconds),
        basis: format!(
            "{recent} workload(s) of {visible} admitted in queue {queue} in the last {minutes} min; at that rate position {position} comes up in about {}; a guess: running work may end sooner or later, and higher priorities go first",
            duration(seconds)
        ),
    }
}

/// `45s`, `12m`, `3h`, `2d`.
pub fn duration(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn since(rfc3339: Option<&str>, now: jiff::Timestamp) -> Option<String> {
    let at = rfc3339?.parse::<jiff::Timestamp>().ok()?;
    Some(duration(now.as_second() - at.as_second()))
}

/// The text of `kubectl sluice why`.
// Long: one report, its lines in the order they are printed, each a few lines of formatting.
pub fn render_why(r: &WhyReport, now: jiff::Timestamp) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", r.target);
    if let Some(note) = &r.pod_note {
        let _ = writeln!(out, "  pod:        {note}");
    }
    let Some(w) = &r.workload else {
        let _ = writeln!(
            out,
            "  {}",
            r.note
                .as_deref()
                .unwrap_or("no DynamicWorkload records it: sluice does not govern it")
        );
        return out;
    };
    let status = w.status.clone().unwrap_or_default();
    let name = w.metadata.name.as_deref().unwrap_or_default();
    let _ = writeln!(out, "  workload:   DynamicWorkload {name}");
    let _ = writeln!(out, "  queue:      {}", w.spec.queue_name);
    let _ = writeln!(
        out,
        "  phase:      {:?} (pods admitted/pending per set: {})",
        status.phase,
        if status.pod_set_summary.is_empty() {
            "-"
        } else {
            &status.pod_set_summary
        }
    );
    match status.position {
        Some(p) => {
            let waited = since(status.queued_since.as_deref(), now)
                .map(|d| format!(", waiting for {d}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  position:   {p} in queue {} ({} pod(s) pending{waited})",
                w.spec.queue_name, status.pending_pods
            );
        }
        None => {
            let _ = writeln!(out, "  position:   none (nothing of it waits)");
        }
    }
    let _ = writeln!(out, "  why:        {}", status.message);
    if status.position.is_some() {
        let others = status
            .position
            .map_or(0, |p| (p - 1).max(0) as usize)
            .saturating_sub(r.ahead.len());
        let _ = writeln!(
            out,
            "  ahead:      {} of this namespace, {others} of other namespaces (not shown)",
            r.ahead.len()
        );
        for a in &r.ahead {
            let s = a.status.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "              {} {} ({} pod(s) pending, priority {}): {}",
                s.position.unwrap_or_default(),
                a.metadata.name.as_deref().unwrap_or_default(),
                s.pending_pods,
                a.spec.priority,
                s.reason.as_deref().unwrap_or("-")
            );
        }
    }
    match &r.queue {
        None => {}
        Some(Ok(q)) => {
            let qs = q.status.clone().unwrap_or_default();
            let summary = if qs.usage_summary.is_empty() {
                format!(
                    "quota {}, used {}",
                    quantities_text(&q.spec.quota, "<none>"),
                    quantities_text(&qs.usage, "<none>")
                )
            } else {
                qs.usage_summary.clone()
            };
            let cohort = q
                .spec
                .cohort
                .as_deref()
                .map(|c| format!(", cohort {c}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  queue use:  {summary}{cohort}; {} workload(s) pending, {} admitted",
                qs.pending_workloads, qs.admitted_workloads
            );
        }
        Some(Err(why)) => {
            let _ = writeln!(out, "  queue use:  {why}");
        }
    }
    if let Some(e) = &r.estimate {
        let value = e
            .seconds
            .map_or("unknown".to_string(), |s| format!("~{}", duration(s)));
        let _ = writeln!(out, "  estimate:   {value} ({})", e.basis);
    }
    if !r.events.is_empty() {
        let _ = writeln!(out, "  events:");
        for (age, reason, note) in &r.events {
            let _ = writeln!(out, "    {age:>5} ago  {reason}: {note}");
        }
    }
    out
}

/// One row of `top`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopRow {
    pub queue: String,
    pub cohort: Option<String>,
    /// Per resource: used, quota (None: unknown), reserved, borrowed, lent, milli-units.
    pub resources: BTreeMap<String, [Option<i64>; 5]>,
    pub pending_workloads: Option<i32>,
}

/// Rows of `top` from the queues (full figures).
pub fn top_from_queues(queues: &[CapacityQueue]) -> Vec<TopRow> {
    let mut rows: Vec<TopRow> = queues
        .iter()
        .map(|q| {
            let s = q.status.clone().unwrap_or_default();
            let parse = |m| ResourceList::from_quantities(m).unwrap_or_default();
            // A queue with flavors: a row per flavor and resource (`a100:nvidia.com/gpu`).
            let (quota, used, reserved, borrowed, lent) = (
                parse(&summary_quota(&q.spec)),
                parse(&s.usage),
                parse(&s.reserved),
                parse(&s.borrowed),
                parse(&s.lent),
            );
            let resources = quota
                .0
                .keys()
                .chain(used.0.keys())
                .map(|r| {
                    (
                        r.clone(),
                        [
                            Some(used.get(r)),
                            quota.0.get(r).copied(),
                            Some(reserved.get(r)),
                            Some(borrowed.get(r)),
                            Some(lent.get(r)),
                        ],
                    )
                })
                .collect();
            TopRow {
                queue: q.metadata.name.clone().unwrap_or_default(),
                cohort: q.spec.cohort.clone(),
                resources,
                pending_workloads: Some(s.pending_workloads),
            }
        })
        .collect();
    rows.sort_by(|a, b| a.queue.cmp(&b.queue));
    rows
}

/// Rows of `top` from the workloads only (queues not readable): what they hold, per queue.
pub fn top_from_workloads(workloads: &[DynamicWorkload]) -> Vec<TopRow> {
    let mut per_queue: BTreeMap<String, (ResourceList, ResourceList, i32)> = BTreeMap::new();
    for w in workloads {
        let s = w.status.clone().unwrap_or_default();
        let entry = per_queue.entry(w.spec.queue_name.clone()).or_default();
        entry
            .0
            .add_all(&ResourceList::from_quantities(&s.used).unwrap_or_default());
        entry
            .1
            .add_all(&ResourceList::from_quantities(&s.borrowed).unwrap_or_default());
        if s.position.is_some() {
            entry.2 += 1;
        }
    }
    per_queue
        .into_iter()
        .map(|(queue, (used, borrowed, pending))| TopRow {
            queue,
            cohort: None,
            resources: used
                .0
                .keys()
                .map(|r| {
                    (
                        r.clone(),
                        [Some(used.get(r)), None, None, Some(borrowed.get(r)), None],
                    )
                })
                .collect(),
            pending_workloads: Some(pending),
        })
        .collect()
}

/// The text of `kubectl sluice top`: queues, then cohorts (sums of their queues).
pub fn render_top(top: &(Vec<TopRow>, Option<String>)) -> String {
    let (rows, note) = top;
    let mut out = String::new();
    if let Some(note) = note {
        let _ = writeln!(out, "# {note}");
    }
    let cell = |r: &str, v: Option<i64>| v.map_or("?".to_string(), |v| format_quantity(r, v));
    let mut table = vec![
        [
            "QUEUE",
            "COHORT",
            "RESOURCE",
            "USED/QUOTA",
            "USE%",
            "RESERVED",
            "BORROWED",
            "LENT",
            "PENDING",
        ]
        .map(String::from)
        .to_vec(),
    ];
    let mut cohorts: BTreeMap<(String, String), [Option<i64>; 5]> = BTreeMap::new();
    for row in rows {
        for (resource, v) in &row.resources {
            let pct = match (v[0], v[1]) {
                (Some(u), Some(q)) if q > 0 => format!("{}%", u.saturating_mul(100) / q),
                _ => "?".into(),
            };
            table.push(vec![
                row.queue.clone(),
                row.cohort.clone().unwrap_or_else(|| "<none>".into()),
                resource.clone(),
                format!("{}/{}", cell(resource, v[0]), cell(resource, v[1])),
                pct,
                cell(resource, v[2]),
                cell(resource, v[3]),
                cell(resource, v[4]),
                row.pending_workloads.map_or("?".into(), |p| p.to_string()),
            ]);
            if let Some(c) = &row.cohort {
                let sum = cohorts
                    .entry((c.clone(), resource.clone()))
                    .or_insert([Some(0); 5]);
                for (s, x) in sum.iter_mut().zip(v) {
                    *s = match (*s, x) {
                        (Some(a), Some(b)) => Some(a.saturating_add(*b)),
                        _ => None,
                    };
                }
            }
        }
    }
    out.push_str(&pad(&table));
    if !cohorts.is_empty() {
        let mut table = vec![
            ["COHORT", "RESOURCE", "USED/QUOTA", "BORROWED-BY-QUEUES"]
                .map(String::from)
                .to_vec(),
        ];
        for ((cohort, resource), v) in &cohorts {
            table.push(vec![
                cohort.clone(),
                resource.clone(),
                format!("{}/{}", cell(resource, v[0]), cell(resource, v[1])),
                cell(resource, v[3]),
            ]);
        }
        out.push('\n');
        out.push_str(&pad(&table));
    }
    out
}

fn pad(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let _ = write!(line, "{cell:<width$}   ", width = widths[c]);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_estimate_follows_the_recent_turnover_and_says_so() {
        let now = 10_000;
        let e = estimate(
            3,
            "q",
            &[now - 100, now - 200, now - 5000],
            now,
            3600,
            "namespace ml",
        );
        // Two in the last hour: 1800 s each, position 3: 5400 s.
        assert_eq!(e.seconds, Some(5400));
        assert!(
            e.basis.contains("2 workload(s) of namespace ml"),
            "{}",
            e.basis
        );
        let none = estimate(1, "q", &[], now, 3600, "namespace ml");
        assert_eq!(none.seconds, None);
        assert!(none.basis.starts_with("no estimate"));
    }

    fn queue(json: serde_json::Value) -> CapacityQueue {
        serde_json::from_value(json).expect("queue")
    }

    #[test]
    fn top_shows_used_over_quota_per_resource_and_sums_cohorts() {
        let qs = vec![
            queue(
                json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "a"}, "spec": {"quota": {"cpu": "4"}, "cohort": "c"},
                "status": {"usage": {"cpu": "3"}, "pendingWorkloads": 2}}),
            ),
            queue(
                json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "b"}, "spec": {"quota": {"cpu": "2"}, "cohort": "c"},
                "status": {"usage": {"cpu": "2"}, "borrowed": {"cpu": "1"}}}),
            ),
        ];
        let text = render_top(&(top_from_queues(&qs), None));
        assert!(text.contains("3/4"), "{text}");
        assert!(text.contains("75%"), "{text}");
        assert!(text.contains("5/6"), "{text}");
    }

    #[test]
    fn top_shows_a_queue_with_flavors_per_flavor_and_resource() {
        let qs = vec![queue(
            json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "gpus"},
            "spec": {"flavors": [{"name": "a100", "quota": {"nvidia.com/gpu": "8"}},
                                 {"name": "h100", "quota": {"nvidia.com/gpu": "4"}}]},
            "status": {"usage": {"a100:nvidia.com/gpu": "8", "h100:nvidia.com/gpu": "1"}}}),
        )];
        let text = render_top(&(top_from_queues(&qs), None));
        let row = |flavor: &str| {
            text.lines()
                .find(|l| l.contains(flavor))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(
            row("a100:")[2..5],
            ["a100:nvidia.com/gpu", "8/8", "100%"],
            "{text}"
        );
        assert_eq!(
            row("h100:")[2..5],
            ["h100:nvidia.com/gpu", "1/4", "25%"],
            "{text}"
        );
    }

    #[test]
    fn why_names_the_workload_queue_position_and_what_it_waits_for() {
        let w: DynamicWorkload = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "metadata": {"name": "raycluster-rc", "namespace": "ml"},
            "spec": {"queueName": "q"},
            "status": {"phase": "Pending", "position": 3, "pendingPods": 2, "reason": "Quota:cpu",
                "message": "needs 1 cpu more in queue q", "queuedSince": "2026-01-01T00:00:00Z"}
        }))
        .expect("dwl");
        let report = WhyReport {
            target: "RayCluster ml/rc".into(),
            workload: Some(w),
            queue: Some(Err("CapacityQueue q: not readable with these rights".into())),
            ..WhyReport::default()
        };
        let now: jiff::Timestamp = "2026-01-01T00:05:00Z".parse().expect("now");
        let text = render_why(&report, now);
        for part in [
            "DynamicWorkload raycluster-rc",
            "queue:      q",
            "position:   3",
            "waiting for 5m",
            "needs 1 cpu more",
            "2 of other namespaces",
        ] {
            assert!(text.contains(part), "{part} not in\n{text}");
        }
    }
}
