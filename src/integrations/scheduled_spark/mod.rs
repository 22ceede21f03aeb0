//! ScheduledSparkApplications (sparkoperator.k8s.io/v1beta2): the Spark operator creates a
//! SparkApplication from `spec.template` at each time of `spec.schedule`, as its
//! `concurrencyPolicy` allows, copying the ScheduledSparkApplication's labels onto it.
//!
//! So the queue label (the object's own, or its namespace's default given by the application
//! webhook) reaches every run; the webhook also writes it into the template's `driver.labels` and
//! `executor.labels`. Each run is a SparkApplication with its own DynamicWorkload
//! (`sparkapplication-<run>`, the Spark integration's): the ScheduledSparkApplication records none
//! itself. At submission the validator refuses it when one run's gang could never fit its queue
//! (the template sized as a SparkApplication, the fields named under `spec.template`).

use k8s_openapi::api::core::v1::Pod;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

use super::spark::SparkApplications;
use super::{
    ApplicationIntegration, DemandError, Integration, IntegrationDoc, LabelTarget, PodIdentity,
};
use crate::api::PodSetSpec;

pub struct ScheduledSparkApplications;

/// The run the template describes, as a SparkApplication (None without a template).
fn run_of(app: &DynamicObject) -> Option<DynamicObject> {
    let template = app.data.get("spec")?.get("template")?;
    if !template.is_object() {
        return None;
    }
    let mut run = app.clone();
    run.data = json!({"spec": template});
    Some(run)
}

/// A SparkApplication's field named under `spec.template`.
fn under_template(error: DemandError) -> DemandError {
    let DemandError::Invalid(message) = error;
    let message = match message.strip_prefix("spec.") {
        Some(rest) => format!("spec.template.{rest}"),
        None => format!("spec.template: {message}"),
    };
    DemandError::Invalid(message)
}

impl Integration for ScheduledSparkApplications {
    fn kind(&self) -> &'static str {
        "ScheduledSpark"
    }

    /// Its pods are its runs' (SparkApplications'): none of its own.
    fn identify_pod(&self, _pod: &Pod) -> Option<PodIdentity> {
        None
    }

    fn follows_namespace_default(&self) -> bool {
        false
    }

    fn pod_marker_labels(&self) -> &'static [&'static str] {
        &[]
    }

    fn doc(&self) -> IntegrationDoc {
        IntegrationDoc {
            kind: "ScheduledSparkApplication (`sparkoperator.k8s.io/v1beta2`)",
            gang: "each run is a SparkApplication of its own: its driver and minimum executors",
            elastic: "each run's executors above its gang",
            end: "each run ends as a SparkApplication; the schedule itself holds nothing",
        }
    }
}

impl ApplicationIntegration for ScheduledSparkApplications {
    fn api_resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "sparkoperator.k8s.io",
                "v1beta2",
                "ScheduledSparkApplication",
            ),
            "scheduledsparkapplications",
        )
    }

    /// Never written (see `records_workload`): the name a ledger would have.
    fn workload_name(&self, app: &str) -> String {
        format!("scheduledsparkapplication-{app}")
    }

    /// One run's pod sets, as the Spark integration sizes a SparkApplication.
    fn demand(&self, app: &DynamicObject) -> Result<Vec<PodSetSpec>, DemandError> {
        let run =
            run_of(app).ok_or_else(|| DemandError::Invalid("spec.template is missing".into()))?;
        SparkApplications.demand(&run).map_err(under_template)
    }

    /// The template's driver and executor.
    fn label_targets(&self, app: &DynamicObject) -> Vec<LabelTarget> {
        let Some(run) = run_of(app) else {
            return Vec::new();
        };
        SparkApplications
            .label_targets(&run)
            .into_iter()
            .map(|t| LabelTarget {
                path: t.path.replacen("/spec/", "/spec/template/", 1),
                labels: t.labels,
            })
            .collect()
    }

    /// Each run records its own.
    fn records_workload(&self, _app: &DynamicObject) -> bool {
        false
    }
}

#[cfg(test)]
mod tests;
