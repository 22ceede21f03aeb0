//! `sluice uninstall`: removes sluice without stranding a pod.
//!
//! The order matters, and is the one docs/src/operations/uninstall.md gives:
//!
//! 1. **Stop sluice**: scale its Deployment to zero and wait until none of its pods is left. A
//!    running replica registers the webhook configurations again (server-side apply, at start and on
//!    every certificate change) and gates new pods, so it must be gone first.
//! 2. **Remove the webhook configurations** (`sluice`, mutating and validating): from here on no pod
//!    is gated at creation and no creation is refused for want of sluice.
//! 3. **Ungate every pod still gated** (`sluice.dev/admission`), in every namespace, and list them; or,
//!    with `--keep-gated`, only list them (they then stay Pending until someone removes the gate).
//!    An ungated pod is scheduled with no quota check: nothing governs it any more.
//! 4. **Remove the rest** (unless `--keep-install`, as the Helm chart's pre-delete hook runs it, Helm
//!    deleting the rest itself): the namespace, and every cluster-wide object labelled
//!    `app.kubernetes.io/name=sluice` (ClusterRoles and their bindings, PriorityClasses). The CRDs, and
//!    with them every CapacityQueue and DynamicWorkload, only with `--delete-crds`.
//!
//! Each step is idempotent: running the command again after an interruption finishes the work.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::api::{ADMISSION_GATE, FIELD_MANAGER};
use crate::webhook_config::CONFIGURATION_NAME;

/// The label every object of an install carries (manifests/install/, charts/sluice/).
pub const NAME_LABEL: &str = "app.kubernetes.io/name=sluice";

/// `sluice uninstall`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct UninstallArgs {
    /// The namespace sluice was installed in.
    #[arg(long, default_value = "sluice-system")]
    pub namespace: String,
    /// The Deployment to stop first.
    #[arg(long, default_value = "sluice")]
    pub deployment: String,
    /// List the gated pods but leave them gated (they stay Pending until the gate is removed).
    #[arg(long)]
    pub keep_gated: bool,
    /// Stop sluice, remove the webhooks and ungate only; leave the namespace, roles and priority
    /// classes (the Helm chart's pre-delete hook: Helm removes the rest).
    #[arg(long)]
    pub keep_install: bool,
    /// Also delete sluice's CRDs, and with them every CapacityQueue, DynamicWorkload, ScavengerJob
    /// and Task of the cluster.
    #[arg(long)]
    pub delete_crds: bool,
    /// How long to wait for sluice's pods to end.
    #[arg(long, default_value = "120s", value_parser = crate::duration::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "sluice's pods in {namespace} did not end within {timeout:?} (still there: {pods}); nothing was removed after stopping them"
    )]
    StillRunning {
        namespace: String,
        timeout: Duration,
        pods: String,
    },
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> UninstallError {
    let what = what.into();
    move |source| UninstallError::Api { what, source }
}

/// What `run` did, for the report it prints.
#[derive(Debug, Default)]
pub struct UninstallReport {
    /// Lines in the order the steps ran.
    pub lines: Vec<String>,
    /// The pods that were gated: namespace/name.
    pub gated: Vec<String>,
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Runs the four steps (module docs).
pub async fn run(client: &Client, args: &UninstallArgs) -> Result<UninstallReport, UninstallError> {
    let mut report = UninstallReport::default();
    stop_sluice(client, args, &mut report).await?;
    remove_webhooks(client, &mut report).await?;
    ungate_pods(client, args.keep_gated, &mut report).await?;
    if !args.keep_install {
        remove_the_rest(client, args, &mut report).await?;
    }
    Ok(report)
}

async fn stop_sluice(
    client: &Client,
    args: &UninstallArgs,
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &args.namespace);
    let what = format!("Deployment {}/{}", args.namespace, args.deployment);
    let Some(deployment) = deployments
        .get_opt(&args.deployment)
        .await
        .map_err(api_err(format!("reading {what}")))?
    else {
        report
            .lines
            .push(format!("{what}: not found (already removed)"));
        return Ok(());
    };
    let scale = json!({"spec": {"replicas": 0}});
    deployments
        .patch_scale(
            &args.deployment,
            &PatchParams::default(),
            &Patch::Merge(&scale),
        )
        .await
        .map_err(api_err(format!("scaling {what} to 0")))?;
    // Its pods: the Deployment's selector (matchLabels), as `kubectl get pods -l` would read it.
    let selector: BTreeMap<String, String> = deployment
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let selector = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let left = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_err(format!("listing the pods of {what}")))?
            .items;
        if left.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(UninstallError::StillRunning {
                namespace: args.namespace.clone(),
                timeout: args.timeout,
                pods: left
                    .iter()
                    .map(|p| p.name_any())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        // Polled: a watch would need its own reconnect handling for a one-off command.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    report
        .lines
        .push(format!("{what}: scaled to 0, its pods have ended"));
    Ok(())
}

async fn remove_webhooks(
    client: &Client,
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let dp = DeleteParams::default();
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    for (kind, result) in [
        (
            "MutatingWebhookConfiguration",
            mutating.delete(CONFIGURATION_NAME, &dp).await.map(|_| ()),
        ),
        (
            "ValidatingWebhookConfiguration",
            validating.delete(CONFIGURATION_NAME, &dp).await.map(|_| ()),
        ),
    ] {
        match result {
            Ok(()) => report
                .lines
                .push(format!("{kind} {CONFIGURATION_NAME}: deleted")),
            Err(e) if is_not_found(&e) => report
                .lines
                .push(format!("{kind} {CONFIGURATION_NAME}: not found")),
            Err(e) => return Err(api_err(format!("deleting {kind} {CONFIGURATION_NAME}"))(e)),
        }
    }
    Ok(())
}

/// The pods of the whole cluster that carry sluice's gate.
pub async fn gated_pods(client: &Client) -> Result<Vec<Pod>, UninstallError> {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = pods
            .list(&params)
            .await
            .map_err(api_err("listing the pods of the cluster"))?;
        out.extend(page.items.into_iter().filter(has_gate));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(out)
}

fn has_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

async fn ungate_pods(
    client: &Client,
    keep_gated: bool,
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let gated = gated_pods(client).await?;
    for pod in &gated {
        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        report.gated.push(format!("{namespace}/{name}"));
        if keep_gated {
            continue;
        }
        // Only the gate goes; other controllers' gates stay. The test on the gate's index makes the
        // patch fail rather than remove another gate when the list changed since it was read.
        let gates = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.clone())
            .unwrap_or_default();
        let Some(index) = gates.iter().position(|g| g.name == ADMISSION_GATE) else {
            continue;
        };
        let patch: json_patch::Patch = match serde_json::from_value(json!([
            {"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": ADMISSION_GATE},
            {"op": "remove", "path": format!("/spec/schedulingGates/{index}")},
        ])) {
            Ok(p) => p,
            Err(_) => continue,
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        match pods
            .patch(
                &name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PatchParams::default()
                },
                &Patch::<()>::Json(patch),
            )
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_err(format!("ungating pod {namespace}/{name}"))(e)),
        }
    }
    report.lines.push(if gated.is_empty() {
        "gated pods: none".to_string()
    } else if keep_gated {
        format!(
            "gated pods left gated (--keep-gated): {}",
            report.gated.join(" ")
        )
    } else {
        format!(
            "gated pods ungated (no longer governed): {}",
            report.gated.join(" ")
        )
    });
    Ok(())
}

async fn remove_the_rest(
    client: &Client,
    args: &UninstallArgs,
    report: &mut UninstallReport,
) -> Result<(), UninstallError> {
    let dp = DeleteParams::background();
    let labelled = ListParams::default().labels(NAME_LABEL);
    macro_rules! delete_labelled {
        ($ty:ty, $kind:expr) => {{
            let api: Api<$ty> = Api::all(client.clone());
            let list = api
                .list(&labelled)
                .await
                .map_err(api_err(format!("listing {}s", $kind)))?;
            for o in list.items {
                let name = o.name_any();
                match api.delete(&name, &dp).await {
                    Ok(_) => report.lines.push(format!("{} {name}: deleted", $kind)),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(api_err(format!("deleting {} {name}", $kind))(e)),
                }
            }
        }};
    }
    delete_labelled!(ClusterRoleBinding, "ClusterRoleBinding");
    delete_labelled!(ClusterRole, "ClusterRole");
    delete_labelled!(PriorityClass, "PriorityClass");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(&args.namespace, &dp).await {
        Ok(_) => report
            .lines
            .push(format!("Namespace {}: deleted", args.namespace)),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(api_err(format!("deleting Namespace {}", args.namespace))(e)),
    }
    if args.delete_crds {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (name, _) in crate::api::crds_yaml().unwrap_or_default() {
            match crds.delete(&name, &dp).await {
                Ok(_) => report
                    .lines
                    .push(format!("CustomResourceDefinition {name}: deleted")),
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    return Err(api_err(format!("deleting CustomResourceDefinition {name}"))(e));
                }
            }
        }
    } else {
        report.lines.push(
            "CRDs kept (CapacityQueues and DynamicWorkloads stay readable): --delete-crds removes them"
                .to_string(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_gate_finds_only_sluices_gate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "schedulingGates": [{"name": "other"}, {"name": ADMISSION_GATE}]},
        }))
        .expect("pod");
        assert!(has_gate(&pod));
        let other: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "schedulingGates": [{"name": "other"}]},
        }))
        .expect("pod");
        assert!(!has_gate(&other));
    }
}
