//! The recorder: one DynamicWorkload per application object (RayCluster, ...), its pod sets taken
//! from the demand the object declares, owned by the object so it is garbage-collected with it.
//! A kind whose CRD is not installed is waited for, not an error.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::api::{FIELD_MANAGER, QUEUE_LABEL};
use crate::integrations::framework::crd_name;
use crate::integrations::{ApplicationIntegration, applications};

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{kind} {namespace}/{name}: {message}")]
    Demand {
        kind: String,
        namespace: String,
        name: String,
        message: String,
    },
    #[error("writing DynamicWorkload {namespace}/{name}: {source}")]
    Write {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

struct Context {
    client: Client,
    adapter: Arc<dyn ApplicationIntegration>,
}

/// The DynamicWorkload an application object should have, or None when it is not governed.
pub fn desired_workload(
    adapter: &dyn ApplicationIntegration,
    app: &DynamicObject,
) -> Result<Option<serde_json::Value>, RecordError> {
    let Some(queue) = app.labels().get(QUEUE_LABEL).cloned() else {
        return Ok(None);
    };
    if adapter.left_alone(app) || !adapter.records_workload(app) {
        return Ok(None);
    }
    let resource = adapter.api_resource();
    let namespace = app.namespace().unwrap_or_default();
    let pod_sets = adapter.demand(app).map_err(|e| RecordError::Demand {
        kind: resource.kind.clone(),
        namespace: namespace.clone(),
        name: app.name_any(),
        message: e.to_string(),
    })?;
    let uid = app.uid().unwrap_or_default();
    let mut body = json!({
        "apiVersion": "sluice.dev/v1alpha1",
        "kind": "DynamicWorkload",
        "metadata": {
            "name": adapter.workload_name(&app.name_any()),
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": resource.api_version, "kind": resource.kind, "name": app.name_any(), "uid": uid,
                "controller": true, "blockOwnerDeletion": false,
            }],
        },
        "spec": {
            "source": {"apiVersion": resource.api_version, "kind": resource.kind, "name": app.name_any(), "uid": uid},
            "queueName": queue,
            "priority": 0,
            "podSets": pod_sets,
        },
    });
    if let Some(end) = adapter.ended(app) {
        body["spec"]["applicationEnded"] = json!(end);
    }
    Ok(Some(body))
}

async fn reconcile(app: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, RecordError> {
    if app.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let Some(body) = desired_workload(ctx.adapter.as_ref(), &app)? else {
        return Ok(Action::await_change());
    };
    let namespace = app.namespace().unwrap_or_default();
    let name = ctx.adapter.workload_name(&app.name_any());
    let api: Api<crate::api::DynamicWorkload> = Api::namespaced(ctx.client.clone(), &namespace);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(|source| RecordError::Write {
        namespace,
        name,
        source,
    })?;
    Ok(Action::await_change())
}

fn error_policy(_: Arc<DynamicObject>, error: &RecordError, _: Arc<Context>) -> Action {
    warn!(%error, "could not record the application");
    Action::requeue(Duration::from_secs(15))
}

async fn record_kind(
    client: Client,
    adapter: Arc<dyn ApplicationIntegration>,
    shutdown: CancellationToken,
) {
    let resource = adapter.api_resource();
    let crd_name = crd_name(&resource);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut told = false;
    while !adapter.built_in() {
        match crds.get_opt(&crd_name).await {
            Ok(Some(_)) => break,
            Ok(None) if !told => {
                info!(crd = %crd_name, "CRD not installed: {} support starts when it is", resource.kind);
                told = true;
            }
            Ok(None) => {}
            Err(e) => warn!(%e, crd = %crd_name, "could not look up the CRD"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(20)) => {}
        }
    }
    info!(kind = %resource.kind, "recording applications");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let ctx = Arc::new(Context { client, adapter });
    Controller::new_with(api, watcher::Config::default().any_semantic(), resource)
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

/// Records every kind of application until `shutdown`.
pub async fn run(client: Client, shutdown: CancellationToken) {
    let tasks: Vec<_> = applications()
        .into_iter()
        .map(|adapter| tokio::spawn(record_kind(client.clone(), adapter, shutdown.clone())))
        .collect();
    for task in tasks {
        let _ = task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrations::RayClusters;

    #[test]
    fn a_labelled_raycluster_gets_an_owned_workload_and_an_unlabelled_one_none() {
        let mut rc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ns", "uid": "u-1", "labels": {"sluice.dev/queue": "q"}},
            "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h", "image": "ray"}]}}}},
        }))
        .expect("rc");
        let body = desired_workload(&RayClusters, &rc)
            .expect("demand")
            .expect("governed");
        assert_eq!(body["metadata"]["name"], "raycluster-rc");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(body["spec"]["queueName"], "q");
        assert_eq!(body["spec"]["podSets"][0]["name"], "head");
        rc.metadata.labels = None;
        assert!(desired_workload(&RayClusters, &rc).expect("ok").is_none());
    }
}
