//! `kubectl sluice` (the binary `kubectl-sluice`, `src/bin/kubectl-sluice.rs`): why an application
//! or pod waits, what waits in the queues, and how full the queues are, for a user of one
//! namespace. It only reads, and its namespaced forms need no more than the `view` role of the
//! namespace (DynamicWorkloads, pods, events, the application): CapacityQueues are cluster-wide,
//! and when they cannot be read it says so and shows what the namespace's own workloads tell.
//!
//! - `kubectl sluice why <kind>/<name>`: the workload, queue, position, what it waits for, what
//!   of the namespace waits ahead of it, an estimate of the wait with its basis, sluice's events;
//! - `kubectl sluice queue [QUEUE] [-n NS | -A]`: the pending order (the same table as
//!   `sluice queue`: one implementation, `crate::queue::cli`);
//! - `kubectl sluice top [-n NS | -A]`: per queue and cohort, used / quota, reserved, borrowed,
//!   lent.
//!
//! The pure parts (which workload a target names, the estimate, the reports) are unit-tested;
//! `read.rs` does the reading.

pub mod read;
pub mod report;

pub use report::{Estimate, WhyReport, estimate, render_top, render_why};

use crate::api::DynamicWorkload;
use crate::integrations::ApplicationIntegration;

/// `kubectl sluice`.
#[derive(clap::Parser, Debug)]
#[command(
    name = "kubectl-sluice",
    version,
    about = "Why a job waits in sluice's queues, what waits, and how full the queues are (read only)"
)]
pub struct PluginCli {
    #[command(subcommand)]
    pub command: PluginCommand,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
pub enum PluginCommand {
    /// Why an application or pod waits: `kubectl sluice why sparkapplication/etl`,
    /// `why raycluster/rc`, `why job/batch`, `why pod/etl-exec-3`, `why dwl/raycluster-rc`.
    Why {
        /// `<kind>/<name>`: pod, job, raycluster, rayjob, sparkapplication, taskcluster,
        /// scheduledsparkapplication, dynamicworkload (plural and short names work).
        target: String,
    },
    /// The pending order of the queues the namespace's workloads use (`-A`: every namespace, which
    /// needs rights to list DynamicWorkloads cluster-wide).
    Queue {
        /// Only this queue.
        queue: Option<String>,
        #[arg(short = 'A', long = "all-namespaces")]
        all_namespaces: bool,
        #[arg(short = 'o', long, value_enum, default_value_t = crate::queue::cli::Output::Table)]
        output: crate::queue::cli::Output,
    },
    /// Used / quota per queue and cohort, reserved, borrowed and lent.
    Top {
        #[arg(short = 'A', long = "all-namespaces")]
        all_namespaces: bool,
    },
}

/// What a `why` target names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pod(String),
    Workload(String),
    /// An application of one of sluice's integrations: its kind as the integration names it.
    Application {
        kind: String,
        name: String,
    },
}

/// Parses `<kind>/<name>` (kind case-insensitive, singular, plural or short; a bare name is a
/// pod, as `kubectl describe` would not guess either).
pub fn parse_target(
    text: &str,
    applications: &[std::sync::Arc<dyn ApplicationIntegration>],
) -> Result<Target, String> {
    let (kind, name) = match text.split_once('/') {
        Some((kind, name)) => (kind.to_ascii_lowercase(), name.to_string()),
        None => ("pod".to_string(), text.to_string()),
    };
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "{text:?}: expected <kind>/<name>, e.g. raycluster/my-cluster"
        ));
    }
    // A Kubernetes object name (it goes into a field selector: nothing else may pass).
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return Err(format!(
            "{name:?} is not an object name (lowercase letters, digits, '-' and '.')"
        ));
    }
    let kind = kind.split('.').next().unwrap_or_default().to_string();
    match kind.as_str() {
        "pod" | "pods" | "po" => return Ok(Target::Pod(name)),
        "dynamicworkload" | "dynamicworkloads" | "dwl" => return Ok(Target::Workload(name)),
        _ => {}
    }
    let short = |k: &str| match k {
        "RayCluster" => Some("rc"),
        "SparkApplication" => Some("sparkapp"),
        "ScheduledSparkApplication" => Some("scheduledsparkapp"),
        "TaskCluster" => Some("tc"),
        _ => None,
    };
    for app in applications {
        let r = app.api_resource();
        let singular = r.kind.to_ascii_lowercase();
        if kind == singular
            || kind == r.plural.to_ascii_lowercase()
            || short(&r.kind).is_some_and(|s| s == kind)
        {
            return Ok(Target::Application { kind: r.kind, name });
        }
    }
    let known: Vec<String> = applications
        .iter()
        .map(|a| a.api_resource().kind.to_ascii_lowercase())
        .collect();
    Err(format!(
        "unknown kind {kind:?}: use pod, dwl or one of {}",
        known.join(", ")
    ))
}

/// The workload an application's DynamicWorkload records: by its `spec.source`, else by the name
/// its integration gives.
pub fn workload_of_application<'a>(
    workloads: &'a [DynamicWorkload],
    kind: &str,
    name: &str,
    expected_name: &str,
) -> Option<&'a DynamicWorkload> {
    workloads
        .iter()
        .find(|w| {
            w.spec
                .source
                .as_ref()
                .is_some_and(|s| s.kind == kind && s.name == name)
        })
        .or_else(|| {
            workloads
                .iter()
                .find(|w| w.metadata.name.as_deref() == Some(expected_name))
        })
}

/// Runs the plugin; the text to print.
pub async fn run(cli: PluginCli) -> anyhow::Result<String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| anyhow::anyhow!("no Kubernetes credentials found (set KUBECONFIG): {e}"))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    match cli.command {
        PluginCommand::Why { target } => {
            let report = read::why(&client, &namespace, &target).await?;
            Ok(render_why(&report, jiff::Timestamp::now()))
        }
        PluginCommand::Queue {
            queue,
            all_namespaces,
            output,
        } => {
            let scope = (!all_namespaces).then_some(namespace.as_str());
            read::queue(&client, scope, queue.as_deref(), output).await
        }
        PluginCommand::Top { all_namespaces } => {
            let scope = (!all_namespaces).then_some(namespace.as_str());
            let top = read::top(&client, scope).await?;
            Ok(render_top(&top))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_by_kind_plural_short_or_as_a_pod() {
        let apps = crate::integrations::applications();
        assert_eq!(parse_target("pod/x", &apps), Ok(Target::Pod("x".into())));
        assert_eq!(parse_target("x", &apps), Ok(Target::Pod("x".into())));
        assert_eq!(
            parse_target("dwl/w", &apps),
            Ok(Target::Workload("w".into()))
        );
        for text in [
            "raycluster/rc",
            "RayClusters/rc",
            "rc/rc",
            "rayclusters.ray.io/rc",
        ] {
            assert_eq!(
                parse_target(text, &apps),
                Ok(Target::Application {
                    kind: "RayCluster".into(),
                    name: "rc".into()
                }),
                "{text}"
            );
        }
        assert_eq!(
            parse_target("jobs/j", &apps),
            Ok(Target::Application {
                kind: "Job".into(),
                name: "j".into()
            })
        );
        assert!(parse_target("deployment/d", &apps).is_err());
        assert!(parse_target("job/", &apps).is_err());
        assert!(parse_target("job/a/b", &apps).is_err());
        assert!(parse_target("pod/a,involvedObject.kind=Pod", &apps).is_err());
        assert!(parse_target("pod/A", &apps).is_err());
    }

    #[test]
    fn an_application_finds_its_workload_by_source_then_by_name() {
        let w = |name: &str, source: Option<(&str, &str)>| -> DynamicWorkload {
            let mut j = serde_json::json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {"queueName": "q"}});
            if let Some((kind, n)) = source {
                j["spec"]["source"] =
                    serde_json::json!({"apiVersion": "v1", "kind": kind, "name": n});
            }
            serde_json::from_value(j).expect("dwl")
        };
        let all = vec![w("job-a", None), w("other", Some(("Job", "b")))];
        let found = |name: &str, expected: &str| {
            workload_of_application(&all, "Job", name, expected)
                .and_then(|d| d.metadata.name.clone())
        };
        assert_eq!(found("b", "job-b").as_deref(), Some("other"));
        assert_eq!(found("a", "job-a").as_deref(), Some("job-a"));
        assert_eq!(found("c", "job-c"), None);
    }
}
