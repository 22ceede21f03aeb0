//! `sluice queue <name>` / `sluice queue -A`: a queue's pending order, the way `kubectl get` prints
//! tables (or `-o json|yaml`). It reads only the API (CapacityQueues and DynamicWorkloads, with any
//! kubeconfig that may list them): the order is the one the controller last published in each
//! DynamicWorkload's `status.position`.

use std::collections::BTreeMap;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use crate::api::{CapacityQueue, DynamicWorkload};
use crate::resources::ResourceList;
use crate::resources::quantities_text;

/// Flags of `sluice queue`.
#[derive(clap::Args, Debug, Clone)]
pub struct QueueArgs {
    /// The CapacityQueue to show.
    #[arg(required_unless_present = "all_queues")]
    pub name: Option<String>,
    /// Show every queue.
    #[arg(short = 'A', long, conflicts_with = "name")]
    pub all_queues: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// One queue and what waits in it, in the order admission considers it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    pub quota: BTreeMap<String, Quantity>,
    pub usage: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lent: BTreeMap<String, Quantity>,
    pub pending: Vec<PendingView>,
}

/// A workload with pods waiting.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    pub position: i32,
    pub namespace: String,
    pub name: String,
    pub priority: i32,
    pub pending_pods: i32,
    /// What its pending pods ask for together.
    pub asks: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub borrowed: BTreeMap<String, Quantity>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_since: Option<String>,
    /// Why it waits (its status message).
    pub waiting_for: String,
}

/// The views of `queues` (sorted by name) with the workloads of each that have a position. Pure.
pub fn views(queues: &[CapacityQueue], workloads: &[DynamicWorkload]) -> Vec<QueueView> {
    let mut out: Vec<QueueView> = queues
        .iter()
        .map(|q| {
            let status = q.status.clone().unwrap_or_default();
            QueueView {
                name: q.name_any(),
                cohort: q.spec.cohort.clone(),
                quota: q.spec.quota.clone(),
                usage: status.usage,
                borrowed: status.borrowed,
                lent: status.lent,
                pending: Vec::new(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    for w in workloads {
        let Some(status) = &w.status else { continue };
        let Some(position) = status.position else {
            continue;
        };
        let Some(view) = out.iter_mut().find(|v| v.name == w.spec.queue_name) else {
            continue;
        };
        view.pending.push(PendingView {
            position,
            namespace: w.namespace().unwrap_or_default(),
            name: w.name_any(),
            priority: w.spec.priority,
            pending_pods: status.pending_pods,
            asks: asks(w),
            borrowed: status.borrowed.clone(),
            queued_since: status.queued_since.clone(),
            waiting_for: status.message.clone(),
        });
    }
    for view in &mut out {
        view.pending.sort_by(|a, b| {
            (a.position, &a.namespace, &a.name).cmp(&(b.position, &b.namespace, &b.name))
        });
    }
    out
}

/// What a workload's pending pods ask for: per pod set, its pending pods times its requests.
fn asks(w: &DynamicWorkload) -> BTreeMap<String, Quantity> {
    let mut total = ResourceList::new();
    let Some(status) = &w.status else {
        return BTreeMap::new();
    };
    for set in &w.spec.pod_sets {
        let pending = status
            .pod_sets
            .iter()
            .find(|s| s.name == set.name)
            .map_or(0, |s| s.pending);
        if let Ok(per_pod) = ResourceList::from_quantities(&set.requests) {
            total.add_scaled(&per_pod, i64::from(pending.max(0)));
        }
    }
    total.to_quantities()
}

/// How long ago `since` (RFC 3339) was, before `now`, the way kubectl prints ages.
fn age(since: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(since) = since.and_then(|s| s.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (now.as_second() - since.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The table: one row per pending workload (and its queue with `-A`), columns padded as kubectl
/// pads them. Pure (`now` given).
pub fn render_table(views: &[QueueView], all: bool, now: jiff::Timestamp) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["POSITION", "NAMESPACE", "WORKLOAD", "PRIORITY", "PENDING"];
    header.extend(["ASKS", "BORROWED", "WAITING", "WAITS-FOR"]);
    if all {
        header.insert(0, "QUEUE");
    }
    rows.push(header.iter().map(|h| h.to_string()).collect());
    for view in views {
        for p in &view.pending {
            let mut row = vec![
                p.position.to_string(),
                p.namespace.clone(),
                p.name.clone(),
                p.priority.to_string(),
                p.pending_pods.to_string(),
                quantities_text(&p.asks, "<none>"),
                quantities_text(&p.borrowed, "<none>"),
                age(p.queued_since.as_deref(), now),
                p.waiting_for.replace('\n', " "),
            ];
            if all {
                row.insert(0, view.name.clone());
            }
            rows.push(row);
        }
    }
    let mut out = String::new();
    for view in views {
        let cohort = view.cohort.as_deref().unwrap_or("<none>");
        out.push_str(&format!(
            "# queue {}: cohort {cohort}, quota {}, used {}, borrowed {}, lent {}, {} pending\n",
            view.name,
            quantities_text(&view.quota, "<none>"),
            quantities_text(&view.usage, "<none>"),
            quantities_text(&view.borrowed, "<none>"),
            quantities_text(&view.lent, "<none>"),
            view.pending.len()
        ));
    }
    if rows.len() == 1 {
        out.push_str("No pending workloads.\n");
        return out;
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == columns {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}   ", width = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `sluice queue`.
pub async fn run(args: QueueArgs) -> anyhow::Result<String> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes credentials found: set KUBECONFIG")?;
    let queues_api = Api::<CapacityQueue>::all(client.clone());
    let queues = match &args.name {
        Some(name) if !args.all_queues => vec![
            queues_api
                .get_opt(name)
                .await
                .with_context(|| format!("reading CapacityQueue {name}"))?
                .with_context(|| format!("CapacityQueue {name:?} does not exist"))?,
        ],
        _ => {
            queues_api
                .list(&ListParams::default())
                .await
                .context("listing CapacityQueues")?
                .items
        }
    };
    let workloads = Api::<DynamicWorkload>::all(client)
        .list(&ListParams::default())
        .await
        .context("listing DynamicWorkloads")?
        .items;
    let views = views(&queues, &workloads);
    // Not with_views: `queue -A` shows every queue, `queue <name>` its one.
    match args.output {
        Output::Table => Ok(render_table(
            &views,
            args.all_queues,
            jiff::Timestamp::now(),
        )),
        Output::Json => {
            let value: serde_json::Value = if args.all_queues {
                serde_json::to_value(&views)
            } else {
                serde_json::to_value(views.first())
            }
            .context("encoding the queues")?;
            Ok(serde_json::to_string_pretty(&value).context("encoding the queues")? + "\n")
        }
        Output::Yaml => {
            let text = if args.all_queues {
                serde_norway::to_string(&views)
            } else {
                serde_norway::to_string(&views.first())
            };
            text.context("encoding the queues")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> CapacityQueue {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": name},
            "spec": {"quota": {"cpu": "4"}, "cohort": "team"},
            "status": {"usage": {"cpu": "6"}, "borrowed": {"cpu": "2"}},
        }))
        .expect("queue")
    }

    fn workload(name: &str, queue: &str, position: Option<i32>) -> DynamicWorkload {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"queueName": queue, "priority": 5,
                     "podSets": [{"name": "main", "requests": {"cpu": "500m"}, "minCount": 1}]},
            "status": {"phase": "Pending", "message": "needs 1 cpu more", "pendingPods": 3,
                       "podSets": [{"name": "main", "pending": 3, "admitted": 0, "running": 0, "finished": 0}],
                       "position": position, "queuedSince": "2026-01-01T00:00:00Z"},
        }))
        .expect("workload")
    }

    #[test]
    fn pending_workloads_are_listed_in_position_order_with_what_they_ask() {
        let queues = vec![queue("q"), queue("other")];
        let workloads = vec![
            workload("second", "q", Some(2)),
            workload("first", "q", Some(1)),
            workload("running", "q", None),
            workload("elsewhere", "nope", Some(1)),
        ];
        let v = views(&queues, &workloads);
        assert_eq!(v[0].name, "other");
        let q = &v[1];
        let names: Vec<&str> = q.pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["first", "second"]);
        assert_eq!(
            q.pending[0].asks.get("cpu").map(|c| c.0.as_str()),
            Some("1500m")
        );
        let now: jiff::Timestamp = "2026-01-01T00:05:00Z".parse().expect("time");
        let table = render_table(&v[1..], false, now);
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].starts_with("# queue q: cohort team, quota cpu=4, used cpu=6, borrowed cpu=2")
        );
        assert!(
            lines[1].starts_with("POSITION   NAMESPACE   WORKLOAD   PRIORITY"),
            "{table}"
        );
        assert!(
            lines[2].starts_with("1          ns          first      5"),
            "{table}"
        );
        assert!(
            lines[2].contains("cpu=1500m")
                && lines[2].contains("5m")
                && lines[2].ends_with("needs 1 cpu more")
        );
        let all = render_table(&v, true, now);
        assert!(
            all.lines().nth(2).is_some_and(|l| l.starts_with("QUEUE")),
            "{all}"
        );
    }

    #[test]
    fn an_empty_queue_says_so() {
        let v = views(&[queue("q")], &[]);
        assert!(
            render_table(&v, false, jiff::Timestamp::now()).ends_with("No pending workloads.\n")
        );
    }
}
