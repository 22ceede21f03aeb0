//! Applies what sluice needs before it can run (CRDs, its namespace, ServiceAccount and RBAC) with
//! server-side apply. Used by `sluice serve --local --install` with an administrator's credentials;
//! in a cluster the same objects come from `kubectl apply -f manifests/`.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

use crate::api::{FIELD_MANAGER, crds_yaml};

pub mod rbac;
pub mod uninstall;

pub use rbac::{rbac_tasks_yaml, rbac_yaml};

const NAMESPACE_YAML: &str = include_str!("../manifests/install/00-namespace.yaml");
/// The PriorityClasses of ordinary pods (globalDefault) and of ScavengerJob pods.
const PRIORITY_CLASSES_YAML: &str = include_str!("../manifests/install/00-priorityclasses.yaml");

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("manifest is not valid YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    #[error("manifest document has no apiVersion/kind/name")]
    Incomplete,
    #[error("kind {0} is not one sluice installs")]
    UnknownKind(String),
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The manifests to apply, in order.
pub fn manifests() -> Result<Vec<DynamicObject>, InstallError> {
    let mut docs = Vec::new();
    let crds: Vec<String> = crds_yaml()?.into_iter().map(|(_, y)| y).collect();
    // The RBAC as generated (the same as manifests/install/01-rbac*.yaml, which tests/manifests.rs
    // checks); the Task rights bound in every namespace as shipped (the file says how to narrow them).
    let (rbac, rbac_tasks) = (rbac_yaml()?, rbac_tasks_yaml()?);
    for text in crds.iter().map(String::as_str).chain([
        NAMESPACE_YAML,
        PRIORITY_CLASSES_YAML,
        rbac.as_str(),
        rbac_tasks.as_str(),
    ]) {
        for doc in serde_norway::Deserializer::from_str(text) {
            let value = serde_norway::Value::deserialize(doc)?;
            if value.is_null() {
                continue;
            }
            docs.push(serde_norway::from_value(value)?);
        }
    }
    Ok(docs)
}

use serde::Deserialize;

fn resource_for(obj: &DynamicObject) -> Result<(ApiResource, bool), InstallError> {
    let types = obj.types.as_ref().ok_or(InstallError::Incomplete)?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", types.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    let (plural, namespaced) = match types.kind.as_str() {
        "Namespace" => ("namespaces", false),
        "ServiceAccount" => ("serviceaccounts", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "PriorityClass" => ("priorityclasses", false),
        other => return Err(InstallError::UnknownKind(other.to_string())),
    };
    Ok((ApiResource::from_gvk_with_plural(&gvk, plural), namespaced))
}

/// Applies every manifest; idempotent.
pub async fn apply_all(client: &Client) -> Result<(), InstallError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for obj in manifests()? {
        let (resource, namespaced) = resource_for(&obj)?;
        let name = obj.name_any();
        let api: Api<DynamicObject> = match (namespaced, obj.namespace()) {
            (true, Some(ns)) => Api::namespaced_with(client.clone(), &ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &params, &Patch::Apply(&obj))
            .await
            .map_err(|source| InstallError::Apply {
                kind: resource.kind.clone(),
                name: name.clone(),
                source,
            })?;
    }
    Ok(())
}

/// Polls a SelfSubjectAccessReview, as `client`'s identity, until it may get the Secret `secret` in
/// `namespace` (what sluice needs first), or fails after `timeout`.
pub async fn wait_for_rights(
    client: &Client,
    namespace: &str,
    secret: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_string()),
                verb: Some("get".into()),
                resource: Some("secrets".into()),
                name: Some(secret.to_string()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let answer = api
            .create(&kube::api::PostParams::default(), &review)
            .await
            .map_err(|e| anyhow::anyhow!("asking the API server what sluice may do: {e}"))?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!(
                "sluice still may not get the Secret {namespace}/{secret} {timeout:?} after its RBAC was applied: check the Role and RoleBinding in manifests/install/01-rbac.yaml"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn embedded_manifests_parse_and_are_known_kinds() {
        let docs = super::manifests().expect("manifests parse");
        assert!(docs.len() >= 8);
        for d in &docs {
            super::resource_for(d).expect("known kind");
        }
    }

    /// The rules of the RBAC object `kind`/`name` among the embedded manifests.
    fn rules(kind: &str, name: &str) -> Vec<serde_json::Value> {
        let docs = super::manifests().expect("manifests parse");
        let doc = docs
            .iter()
            .find(|d| {
                d.types.as_ref().is_some_and(|t| t.kind == kind)
                    && d.metadata.name.as_deref() == Some(name)
            })
            .unwrap_or_else(|| panic!("no {kind} {name}"));
        doc.data["rules"].as_array().cloned().unwrap_or_default()
    }

    fn grants(rules: &[serde_json::Value], resource: &str, verb: &str) -> bool {
        rules.iter().any(|r| {
            let has = |field: &str, value: &str| {
                r[field]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|v| v == value || v == "*"))
            };
            has("resources", resource) && has("verbs", verb)
        })
    }

    /// What brings a compromised sluice near cluster-admin (a pod with any ServiceAccount, a
    /// container in any pod) is in the separate Task role, never in the role the gate needs
    /// everywhere; and the gate's role writes to pods only by patch (the ungate).
    #[test]
    fn the_cluster_wide_role_creates_no_pods_and_execs_nowhere() {
        let gate = rules("ClusterRole", "sluice");
        for (resource, verb) in [
            ("pods", "create"),
            ("pods", "delete"),
            ("pods", "update"),
            ("pods/ephemeralcontainers", "patch"),
            ("pods/ephemeralcontainers", "update"),
            ("pods/exec", "create"),
            ("secrets", "get"),
            ("configmaps", "create"),
        ] {
            assert!(
                !grants(&gate, resource, verb),
                "ClusterRole sluice grants {verb} {resource}"
            );
        }
        assert!(grants(&gate, "pods", "patch"), "the ungate patch");
        let tasks = rules("ClusterRole", "sluice-tasks");
        for (resource, verb) in [
            ("pods", "create"),
            ("pods", "delete"),
            ("pods/ephemeralcontainers", "patch"),
        ] {
            assert!(
                grants(&tasks, resource, verb),
                "sluice-tasks: {verb} {resource}"
            );
        }
        assert!(
            !rules("ClusterRole", "sluice")
                .iter()
                .chain(tasks.iter())
                .any(|r| r["verbs"]
                    .as_array()
                    .is_some_and(|v| v.iter().any(|v| v == "*"))),
            "no wildcard verbs"
        );
    }
}
