//! What `kubectl sluice` reads: the namespace's DynamicWorkloads, the pod or application asked
//! about, sluice's events on them, and (when these rights allow) the CapacityQueues.

use anyhow::Context;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::report::{TopRow, WhyReport, estimate, top_from_queues, top_from_workloads};
use super::{Target, parse_target, workload_of_application};
use crate::api::{ADMISSION_GATE, CapacityQueue, DynamicWorkload, QUEUE_LABEL, WORKLOAD_LABEL};
use crate::integrations::Adapters;
use crate::queue::cli::{self, Output};

/// How far back `why`'s estimate looks.
const ESTIMATE_WINDOW_S: i64 = 3600;

async fn workloads(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<Vec<DynamicWorkload>> {
    let api: Api<DynamicWorkload> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let scope = namespace.map_or("all namespaces".to_string(), |ns| format!("namespace {ns}"));
    Ok(api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing DynamicWorkloads in {scope}"))?
        .items)
}

/// Why a queue (`Some(name)`) or the queues (None) cannot be read, in words.
fn unreadable(queue: Option<&str>, e: &kube::Error) -> String {
    let what = queue.map_or("CapacityQueues".to_string(), |q| {
        format!("CapacityQueue {q}")
    });
    match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "{what}: cluster-wide, and these credentials may not read it (the ClusterRole sluice-queue-reader grants it)"
        ),
        kube::Error::Api(s) if s.code == 404 => format!("{what} does not exist"),
        other => format!("{what} could not be read: {other}"),
    }
}

/// `kubectl sluice why <target>` in `namespace`.
pub async fn why(client: &Client, namespace: &str, text: &str) -> anyhow::Result<WhyReport> {
    let applications = crate::integrations::applications();
    let target = parse_target(text, &applications).map_err(anyhow::Error::msg)?;
    let all = workloads(client, Some(namespace)).await?;
    let mut report = WhyReport::default();
    let (object_name, workload_name) =
        resolve(client, namespace, &target, &applications, &all, &mut report).await?;
    report.workload = workload_name.and_then(|n| {
        all.iter()
            .find(|w| w.metadata.name.as_deref() == Some(n.as_str()))
            .cloned()
    });
    report.events = events(client, namespace, &object_name, report.workload.as_ref()).await;
    let Some(w) = report.workload.clone() else {
        return Ok(report);
    };
    let queue = w.spec.queue_name.clone();
    let position = w.status.as_ref().and_then(|s| s.position);
    if let Some(p) = position {
        let mut ahead: Vec<DynamicWorkload> = all
            .iter()
            .filter(|o| o.spec.queue_name == queue)
            .filter(|o| {
                o.status
                    .as_ref()
                    .and_then(|s| s.position)
                    .is_some_and(|q| q < p)
            })
            .cloned()
            .collect();
        ahead.sort_by_key(|o| o.status.as_ref().and_then(|s| s.position));
        report.ahead = ahead;
        let admitted: Vec<i64> = all
            .iter()
            .filter(|o| o.spec.queue_name == queue)
            .filter_map(|o| {
                o.status
                    .as_ref()?
                    .admitted_at
                    .as_deref()?
                    .parse::<jiff::Timestamp>()
                    .ok()
            })
            .map(|t| t.as_second())
            .collect();
        let now = jiff::Timestamp::now().as_second();
        report.estimate = Some(estimate(
            p,
            &queue,
            &admitted,
            now,
            ESTIMATE_WINDOW_S,
            &format!("namespace {namespace}"),
        ));
    }
    report.queue = Some(
        Api::<CapacityQueue>::all(client.clone())
            .get(&queue)
            .await
            .map_err(|e| unreadable(Some(&queue), &e)),
    );
    Ok(report)
}

/// The object asked about and the name of its DynamicWorkload (None: none records it); fills the
/// report's target, pod note and note.
async fn resolve(
    client: &Client,
    namespace: &str,
    target: &Target,
    applications: &[std::sync::Arc<dyn crate::integrations::ApplicationIntegration>],
    all: &[DynamicWorkload],
    report: &mut WhyReport,
) -> anyhow::Result<(String, Option<String>)> {
    let resolved = match target {
        Target::Pod(name) => {
            let pod = Api::<Pod>::namespaced(client.clone(), namespace)
                .get_opt(name)
                .await
                .with_context(|| format!("reading pod {namespace}/{name}"))?
                .with_context(|| format!("pod {namespace}/{name} does not exist"))?;
            report.target = format!("Pod {namespace}/{name}");
            report.pod_note = Some(pod_note(&pod));
            let workload = pod
                .labels()
                .get(WORKLOAD_LABEL)
                .cloned()
                .or_else(|| Adapters::default().identify(&pod).and_then(|i| i.workload))
                .unwrap_or_else(|| name.clone());
            (name.clone(), Some(workload))
        }
        Target::Workload(name) => {
            report.target = format!("DynamicWorkload {namespace}/{name}");
            (name.clone(), Some(name.clone()))
        }
        Target::Application { kind, name } => {
            report.target = format!("{kind} {namespace}/{name}");
            let expected = applications
                .iter()
                .find(|a| a.api_resource().kind == *kind)
                .map(|a| a.workload_name(name))
                .unwrap_or_else(|| name.clone());
            let found = workload_of_application(all, kind, name, &expected)
                .and_then(|w| w.metadata.name.clone());
            if found.is_none() {
                report.note = Some(format!(
                    "no DynamicWorkload records {kind} {name} (yet): is it labelled {QUEUE_LABEL}, or in a namespace with a default queue? sluice records it within a second of its creation"
                ));
            }
            (name.clone(), found)
        }
    };
    Ok(resolved)
}

fn pod_note(pod: &Pod) -> String {
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE));
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    match (pod.labels().get(QUEUE_LABEL), gated) {
        (None, _) => format!("{phase}; not governed by sluice (no {QUEUE_LABEL} label)"),
        (Some(q), true) => {
            format!("{phase}; gated ({ADMISSION_GATE}): waits for quota in queue {q}")
        }
        (Some(q), false) => format!("{phase}; admitted by sluice in queue {q} (no gate)"),
    }
}

/// sluice's events on `name` and on its workload, oldest first (none when events are not
/// readable: they are a help, not the answer).
async fn events(
    client: &Client,
    namespace: &str,
    name: &str,
    workload: Option<&DynamicWorkload>,
) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let mut names = vec![name.to_string()];
    if let Some(w) = workload.and_then(|w| w.metadata.name.clone())
        && w != name
    {
        names.push(w);
    }
    let now = jiff::Timestamp::now().as_second();
    let mut out: Vec<(i64, String, String, String)> = Vec::new();
    for n in names {
        let lp = ListParams::default().fields(&format!("involvedObject.name={n}"));
        let Ok(list) = api.list(&lp).await else {
            continue;
        };
        for e in list.items {
            let ours = e.reporting_component.as_deref() == Some("sluice")
                || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("sluice");
            if !ours {
                continue;
            }
            let at = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| t.0.as_second())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))
                .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.as_second()))
                .unwrap_or(now);
            let kind = e.involved_object.kind.clone().unwrap_or_default();
            out.push((
                at,
                super::report::duration(now - at),
                format!("{}({kind})", e.reason.unwrap_or_default()),
                e.message.unwrap_or_default(),
            ));
        }
    }
    out.sort_by_key(|e| e.0);
    let skip = out.len().saturating_sub(8);
    out.into_iter()
        .skip(skip)
        .map(|(_, a, r, n)| (a, r, n))
        .collect()
}

/// `kubectl sluice queue`: the pending order, through `sluice queue`'s own table.
pub async fn queue(
    client: &Client,
    namespace: Option<&str>,
    only: Option<&str>,
    output: Output,
) -> anyhow::Result<String> {
    let workloads = workloads(client, namespace).await?;
    let (mut queues, note) = match Api::<CapacityQueue>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => (list.items, None),
        Err(e) => {
            // Only the names the workloads give: no quota, no usage.
            let mut names: Vec<String> = workloads
                .iter()
                .map(|w| w.spec.queue_name.clone())
                .collect();
            names.sort();
            names.dedup();
            let stubs = names
                .into_iter()
                .map(|n| CapacityQueue::new(&n, Default::default()))
                .collect();
            (
                stubs,
                Some(format!(
                    "{}: quota and usage unknown here",
                    unreadable(None, &e)
                )),
            )
        }
    };
    if let Some(ns) = namespace {
        // Only the queues this namespace uses.
        queues.retain(|q| workloads.iter().any(|w| w.spec.queue_name == q.name_any()));
        let _ = ns;
    }
    if let Some(only) = only {
        queues.retain(|q| q.name_any() == only);
    }
    let views = cli::views(&queues, &workloads);
    match output {
        Output::Table => {
            let mut out = String::new();
            if let Some(ns) = namespace {
                out.push_str(&format!(
                    "# namespace {ns} only (positions count every namespace's workloads)\n"
                ));
            }
            if let Some(note) = note {
                out.push_str(&format!("# {note}\n"));
            }
            out.push_str(&cli::render_table(&views, true, jiff::Timestamp::now()));
            Ok(out)
        }
        Output::Json => Ok(serde_json::to_string_pretty(&views).context("encoding")? + "\n"),
        Output::Yaml => serde_norway::to_string(&views).context("encoding"),
    }
}

/// `kubectl sluice top`: every queue's figures when the queues are readable, else what the
/// namespace's workloads hold per queue.
pub async fn top(
    client: &Client,
    namespace: Option<&str>,
) -> anyhow::Result<(Vec<TopRow>, Option<String>)> {
    match Api::<CapacityQueue>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok((top_from_queues(&list.items), None)),
        Err(e) => {
            let workloads = workloads(client, namespace).await?;
            let scope = namespace.map_or("all namespaces".into(), |ns| format!("namespace {ns}"));
            Ok((
                top_from_workloads(&workloads),
                Some(format!(
                    "{}: USED is what {scope}'s workloads hold, quota unknown",
                    unreadable(None, &e)
                )),
            ))
        }
    }
}
