//! `sluice scavengers`: the scavenger capacity, threshold and use, computed from the cluster with
//! the same pure function the controller uses (`capacity::capacity`), and the ScavengerJobs by
//! phase and queue.

use std::collections::BTreeMap;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::capacity::{Capacity, capacity};
use super::facts::{node_facts, pod_facts};
use crate::api::{CapacityQueue, ScavengerJob, ScavengerPhase};
use crate::resources::{ResourceList, format_quantity};

/// Flags of `sluice scavengers`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScavengersArgs {
    /// The threshold `sluice serve` runs with (its --scavenger-threshold).
    #[arg(long, env = "SLUICE_SCAVENGER_THRESHOLD", default_value_t = 0.7)]
    pub threshold: f64,
    /// Print JSON (milli-units) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Amounts per resource, milli-units.
pub type Amounts = BTreeMap<String, i64>;

/// What `sluice scavengers` shows.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Report {
    pub threshold: f64,
    /// Per resource, milli-units: allocatable, limit, ordinary, for_scavengers, in_use, free.
    pub resources: BTreeMap<String, BTreeMap<&'static str, i64>>,
    /// ScavengerJobs per phase.
    pub phases: BTreeMap<String, usize>,
    /// Per queue with a scavengerQuota: (quota, in use by its running ScavengerJobs), milli-units.
    pub queues: BTreeMap<String, (Amounts, Amounts)>,
}

/// The report of a capacity, ScavengerJobs and queues. Pure.
pub fn report(c: &Capacity, scavengers: &[ScavengerJob], queues: &[CapacityQueue]) -> Report {
    let mut resources = BTreeMap::new();
    let (for_scavengers, free) = (c.for_scavengers(), c.free());
    for name in c.allocatable.0.keys() {
        resources.insert(
            name.clone(),
            BTreeMap::from([
                ("allocatable", c.allocatable.get(name)),
                ("limit", c.limit.get(name)),
                ("ordinary", c.ordinary.get(name)),
                ("for_scavengers", for_scavengers.get(name)),
                ("in_use", c.in_use.get(name)),
                ("free", free.get(name)),
            ]),
        );
    }
    let mut phases = BTreeMap::new();
    let mut queue_use: BTreeMap<String, ResourceList> = BTreeMap::new();
    for sj in scavengers {
        let phase = sj.status.as_ref().map(|s| s.phase).unwrap_or_default();
        *phases.entry(phase.to_string()).or_insert(0) += 1;
        if let (ScavengerPhase::Running, Some(q), Ok(d)) =
            (phase, &sj.spec.queue_name, super::spec::demand(&sj.spec))
        {
            queue_use.entry(q.clone()).or_default().add_all(&d);
        }
    }
    let queues = queues
        .iter()
        .filter_map(|q| {
            let quota = ResourceList::from_quantities(q.spec.scavenger_quota.as_ref()?).ok()?;
            let used = queue_use.remove(&q.name_any()).unwrap_or_default();
            Some((q.name_any(), (quota.0, used.0)))
        })
        .collect();
    Report {
        threshold: c.threshold,
        resources,
        phases,
        queues,
    }
}

/// The report as a table for people. Pure.
pub fn render(r: &Report) -> String {
    let mut out = format!(
        "scavenger capacity (threshold {}: allocatable of Ready schedulable nodes x threshold - ordinary pods' requests)\n",
        r.threshold
    );
    out.push_str(&format!(
        "{:<16} {:>12} {:>12} {:>12} {:>14} {:>12} {:>12}\n",
        "RESOURCE", "ALLOCATABLE", "THRESHOLD", "ORDINARY", "SCAVENGERS", "IN-USE", "FREE"
    ));
    for (name, v) in &r.resources {
        // cpu in millicores, memory in whole Mi, the rest in whole units (the threshold leaves
        // fractions).
        let q = |k: &str| {
            let value = v.get(k).copied().unwrap_or(0);
            let unit = match name.as_str() {
                "cpu" => 1,
                "memory" | "ephemeral-storage" => 1024 * 1024 * 1000,
                _ => 1000,
            };
            let value = value - value % unit;
            format_quantity(name, value)
        };
        out.push_str(&format!(
            "{:<16} {:>12} {:>12} {:>12} {:>14} {:>12} {:>12}\n",
            name,
            q("allocatable"),
            q("limit"),
            q("ordinary"),
            q("for_scavengers"),
            q("in_use"),
            q("free")
        ));
    }
    let phases: Vec<String> = r.phases.iter().map(|(p, n)| format!("{p} {n}")).collect();
    out.push_str(&format!(
        "ScavengerJobs: {}\n",
        if phases.is_empty() {
            "none".into()
        } else {
            phases.join(", ")
        }
    ));
    for (queue, (quota, used)) in &r.queues {
        let show = |m: &BTreeMap<String, i64>| {
            m.iter()
                .filter(|(k, _)| k.as_str() != "pods")
                .map(|(k, v)| format!("{k}={}", format_quantity(k, *v)))
                .collect::<Vec<_>>()
                .join(",")
        };
        out.push_str(&format!(
            "queue {queue}: scavengerQuota {} in use {}\n",
            show(quota),
            show(used)
        ));
    }
    out
}

/// Reads the cluster and builds the report.
pub async fn gather(client: &Client, threshold: f64) -> anyhow::Result<Report> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
        .await
        .context("listing pods")?;
    let scavengers = Api::<ScavengerJob>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing ScavengerJobs")?;
    let queues = Api::<CapacityQueue>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing CapacityQueues")?;
    let nodes: Vec<_> = nodes.items.iter().map(node_facts).collect();
    let pods: Vec<_> = pods.items.iter().map(pod_facts).collect();
    let c = capacity(&nodes, &pods, threshold);
    Ok(report(&c, &scavengers.items, &queues.items))
}

/// `sluice scavengers`.
pub async fn run(args: ScavengersArgs) -> anyhow::Result<String> {
    let client = Client::try_default()
        .await
        .context("no Kubernetes credentials found: set KUBECONFIG")?;
    let r = gather(&client, args.threshold).await?;
    if args.json {
        Ok(serde_json::to_string_pretty(&r).context("encoding the report")? + "\n")
    } else {
        Ok(render(&r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scavenger::capacity::{NodeFacts, PodFacts};

    #[test]
    fn the_report_shows_threshold_capacity_use_and_phases() {
        let cpu = |m: i64| ResourceList([("cpu".to_string(), m)].into());
        let c = capacity(
            &[NodeFacts {
                allocatable: cpu(8000),
                ready: true,
                schedulable: true,
            }],
            &[
                PodFacts {
                    requests: cpu(1000).into(),
                    scavenger: false,
                    holds_room: true,
                    scavenger_job: None,
                },
                PodFacts {
                    requests: cpu(2000).into(),
                    scavenger: true,
                    holds_room: true,
                    scavenger_job: Some("a".into()),
                },
            ],
            0.5,
        );
        let r = report(&c, &[], &[]);
        assert_eq!(r.resources["cpu"]["for_scavengers"], 3000);
        assert_eq!(r.resources["cpu"]["free"], 1000);
        let text = render(&r);
        assert!(text.contains("threshold 0.5"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("cpu") && l.contains("4") && l.ends_with("1")),
            "{text}"
        );
        assert!(text.contains("ScavengerJobs: none"), "{text}");
    }
}
