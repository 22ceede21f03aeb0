//! The MutatingWebhookConfiguration and ValidatingWebhookConfiguration sluice registers. Built here
//! once, used at startup (with the generated CA bundle) and by `sluice manifests` (checked in).

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::api::{DEFAULT_QUEUE_LABEL, QUEUE_LABEL};

/// The name of both webhook configurations.
pub const CONFIGURATION_NAME: &str = "sluice";

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// In a cluster: through the Service.
    Service {
        namespace: String,
        name: String,
        port: i32,
    },
    /// On the host (local development and tests): an https URL such as https://127.0.0.1:9443.
    Url(String),
}

impl Endpoint {
    fn client_config(&self, path: &str, ca_bundle: Option<&[u8]>) -> WebhookClientConfig {
        let ca_bundle = ca_bundle.map(|ca| ByteString(ca.to_vec()));
        match self {
            Endpoint::Service {
                namespace,
                name,
                port,
            } => WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.to_string()),
                    port: Some(*port),
                }),
                ca_bundle,
                url: None,
            },
            Endpoint::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{path}", base.trim_end_matches('/'))),
                ca_bundle,
                service: None,
            },
        }
    }
}

/// Namespaces whose pods sluice never touches, whatever their labels: the control plane's and its own.
fn namespace_selector(own_namespace: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "NotIn".into(),
            values: Some(vec![
                "kube-system".into(),
                "kube-node-lease".into(),
                own_namespace.into(),
            ]),
        }]),
        match_labels: None,
    }
}

/// Namespaces with a default queue (label `sluice.dev/default-queue`), but for the system's own.
fn default_queue_namespaces(own_namespace: &str) -> LabelSelector {
    let mut selector = namespace_selector(own_namespace);
    selector
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(LabelSelectorRequirement {
            key: DEFAULT_QUEUE_LABEL.into(),
            operator: "Exists".into(),
            values: None,
        });
    selector
}

/// Objects that do not name a queue themselves.
fn without_queue_label() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: QUEUE_LABEL.into(),
            operator: "DoesNotExist".into(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// Only pods carrying the queue label reach the webhook: every other pod never pays for it.
fn governed_pods() -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: QUEUE_LABEL.into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    }
}

fn pod_rule(operations: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![String::new()]),
        api_versions: Some(vec!["v1".into()]),
        operations: Some(operations.iter().map(|o| o.to_string()).collect()),
        resources: Some(vec!["pods".into()]),
        scope: Some("Namespaced".into()),
    }
}

/// The application kinds sluice records (RayCluster, ...), for the application webhooks.
fn application_rules() -> Vec<RuleWithOperations> {
    application_rules_for(&["CREATE", "UPDATE"])
}

fn application_rules_for(operations: &[&str]) -> Vec<RuleWithOperations> {
    crate::adapters::applications()
        .iter()
        .map(|a| {
            let r = a.api_resource();
            RuleWithOperations {
                api_groups: Some(vec![r.group.clone()]),
                api_versions: Some(vec![r.version.clone()]),
                operations: Some(operations.iter().map(|o| o.to_string()).collect()),
                resources: Some(vec![r.plural.clone()]),
                scope: Some("Namespaced".into()),
            }
        })
        .collect()
}

pub fn mutating(
    endpoint: &Endpoint,
    own_namespace: &str,
    ca_bundle: Option<&[u8]>,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION_NAME.into()),
            labels: Some([("app.kubernetes.io/name".to_string(), "sluice".to_string())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            MutatingWebhook {
                name: "pods.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/mutate-pods", ca_bundle),
                // A governed pod that could not be gated would escape its quota: fail closed.
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(namespace_selector(own_namespace)),
                object_selector: Some(governed_pods()),
                reinvocation_policy: Some("IfNeeded".into()),
                rules: Some(vec![pod_rule(&["CREATE"])]),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: None,
            },
            MutatingWebhook {
                name: "applications.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/mutate-applications", ca_bundle),
                // Without the queue label in its templates, an application's pods would escape the gate.
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(namespace_selector(own_namespace)),
                object_selector: Some(governed_pods()),
                reinvocation_policy: Some("Never".into()),
                rules: Some(application_rules()),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: None,
            },
            // In a namespace with a default queue, Spark's and Ray's pods and applications that
            // name no queue get the default; every other unlabelled object never reaches sluice.
            MutatingWebhook {
                name: "default-queue-pods.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/mutate-pods", ca_bundle),
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(default_queue_namespaces(own_namespace)),
                object_selector: Some(without_queue_label()),
                reinvocation_policy: Some("IfNeeded".into()),
                rules: Some(vec![pod_rule(&["CREATE"])]),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: Some(vec![MatchCondition {
                    name: "spark-or-ray-pod".into(),
                    expression: crate::adapters::default_queue_pod_condition(),
                }]),
            },
            MutatingWebhook {
                name: "default-queue-applications.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/mutate-applications", ca_bundle),
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(default_queue_namespaces(own_namespace)),
                object_selector: Some(without_queue_label()),
                reinvocation_policy: Some("Never".into()),
                rules: Some(application_rules_for(&["CREATE"])),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: None,
            },
        ]),
    }
}

/// The API server asks the validating webhook only about updates that touch the scheduling gates
/// or the labels, and not about sluice's own: annotation, finalizer and owner edits never depend on
/// sluice being up, and the controller's ungate patches cost no extra round trip.
fn validation_conditions(controller_user: &str) -> Vec<MatchCondition> {
    let gates =
        |o: &str| format!("(has({o}.spec.schedulingGates) ? {o}.spec.schedulingGates : [])");
    let labels = |o: &str| format!("(has({o}.metadata.labels) ? {o}.metadata.labels : {{}})");
    // A username is a plain string; quotes would end the CEL literal, so they are dropped.
    let user: String = controller_user
        .chars()
        .filter(|c| *c != '\'' && *c != '\\')
        .collect();
    vec![
        MatchCondition {
            name: "not-sluice-itself".into(),
            expression: format!("request.userInfo.username != '{user}'"),
        },
        MatchCondition {
            name: "touches-gates-or-labels".into(),
            expression: format!(
                "oldObject == null || {} != {} || {} != {}",
                gates("object"),
                gates("oldObject"),
                labels("object"),
                labels("oldObject")
            ),
        },
    ]
}

pub fn validating(
    endpoint: &Endpoint,
    own_namespace: &str,
    controller_user: &str,
    ca_bundle: Option<&[u8]>,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION_NAME.into()),
            labels: Some([("app.kubernetes.io/name".to_string(), "sluice".to_string())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            ValidatingWebhook {
                name: "pods.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/validate-pods", ca_bundle),
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(namespace_selector(own_namespace)),
                // Matches when the old or the new object carries the label: removing it is caught too.
                object_selector: Some(governed_pods()),
                rules: Some(vec![pod_rule(&["UPDATE"])]),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: Some(validation_conditions(controller_user)),
            },
            ValidatingWebhook {
                name: "applications.sluice.dev".into(),
                admission_review_versions: vec!["v1".into()],
                client_config: endpoint.client_config("/validate-applications", ca_bundle),
                failure_policy: Some("Fail".into()),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(namespace_selector(own_namespace)),
                object_selector: Some(governed_pods()),
                rules: Some(application_rules()),
                side_effects: "None".into(),
                timeout_seconds: Some(5),
                match_conditions: None,
            },
        ]),
    }
}
