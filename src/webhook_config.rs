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
    queue_label("DoesNotExist")
}

/// Only pods carrying the queue label reach the webhook: every other pod never pays for it.
fn governed_pods() -> LabelSelector {
    queue_label("Exists")
}

/// Objects whose queue label `operator` (`Exists`, `DoesNotExist`).
fn queue_label(operator: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: QUEUE_LABEL.into(),
            operator: operator.into(),
            values: None,
        }]),
        match_labels: None,
    }
}

/// The name and labels of both webhook configurations.
fn configuration_metadata() -> ObjectMeta {
    ObjectMeta {
        name: Some(CONFIGURATION_NAME.into()),
        labels: Some([("app.kubernetes.io/name".to_string(), "sluice".to_string())].into()),
        ..ObjectMeta::default()
    }
}

/// `operations` on the namespaced `resource` of `group`/`version`.
fn rule(group: &str, version: &str, resource: &str, operations: &[&str]) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(vec![version.into()]),
        operations: Some(operations.iter().map(|o| o.to_string()).collect()),
        resources: Some(vec![resource.into()]),
        scope: Some("Namespaced".into()),
    }
}

fn pod_rule(operations: &[&str]) -> RuleWithOperations {
    rule("", "v1", "pods", operations)
}

/// The application kinds sluice records (RayCluster, ...: the registry's), for the application
/// webhooks.
fn application_rules() -> Vec<RuleWithOperations> {
    application_rules_for(&["CREATE", "UPDATE"])
}

fn application_rules_for(operations: &[&str]) -> Vec<RuleWithOperations> {
    crate::integrations::applications()
        .iter()
        .map(|a| {
            let r = a.api_resource();
            rule(&r.group, &r.version, &r.plural, operations)
        })
        .collect()
}

/// A webhook of sluice's (`MutatingWebhook` or `ValidatingWebhook`: k8s-openapi has a type for
/// each, with the same fields) with the settings they all share: fail closed (a governed pod or
/// application that escaped sluice would escape its quota), five seconds, no side effects.
macro_rules! sluice_webhook {
    ($kind:ident, $name:expr, $path:expr, $endpoint:expr, $ca_bundle:expr) => {
        $kind {
            name: $name.into(),
            admission_review_versions: vec!["v1".into()],
            client_config: $endpoint.client_config($path, $ca_bundle),
            failure_policy: Some("Fail".into()),
            match_policy: Some("Equivalent".into()),
            side_effects: "None".into(),
            timeout_seconds: Some(5),
            ..$kind::default()
        }
    };
}

fn mutating_webhook(
    name: &str,
    path: &str,
    endpoint: &Endpoint,
    ca_bundle: Option<&[u8]>,
) -> MutatingWebhook {
    sluice_webhook!(MutatingWebhook, name, path, endpoint, ca_bundle)
}

/// A validating webhook of sluice's with the settings they all share, called for no object of
/// sluice's own namespace.
fn validating_webhook(
    name: &str,
    path: &str,
    endpoint: &Endpoint,
    own_namespace: &str,
    ca_bundle: Option<&[u8]>,
) -> ValidatingWebhook {
    ValidatingWebhook {
        namespace_selector: Some(namespace_selector(own_namespace)),
        ..sluice_webhook!(ValidatingWebhook, name, path, endpoint, ca_bundle)
    }
}

pub fn mutating(
    endpoint: &Endpoint,
    own_namespace: &str,
    ca_bundle: Option<&[u8]>,
) -> MutatingWebhookConfiguration {
    let webhook = |name: &str, path: &str| mutating_webhook(name, path, endpoint, ca_bundle);
    MutatingWebhookConfiguration {
        metadata: configuration_metadata(),
        webhooks: Some(vec![
            MutatingWebhook {
                namespace_selector: Some(namespace_selector(own_namespace)),
                object_selector: Some(governed_pods()),
                reinvocation_policy: Some("IfNeeded".into()),
                rules: Some(vec![pod_rule(&["CREATE"])]),
                ..webhook("pods.sluice.dev", "/mutate-pods")
            },
            // Without the queue label in its templates, an application's pods would escape the gate.
            MutatingWebhook {
                namespace_selector: Some(namespace_selector(own_namespace)),
                object_selector: Some(governed_pods()),
                reinvocation_policy: Some("Never".into()),
                rules: Some(application_rules()),
                match_conditions: Some(application_conditions(&service_account_user(
                    own_namespace,
                ))),
                ..webhook("applications.sluice.dev", "/mutate-applications")
            },
            // In a namespace with a default queue, the pods of the integrations that follow it
            // (Spark's, Ray's: their marker labels, from the registry) and applications that name
            // no queue get the default; every other unlabelled object never reaches sluice.
            MutatingWebhook {
                namespace_selector: Some(default_queue_namespaces(own_namespace)),
                object_selector: Some(without_queue_label()),
                reinvocation_policy: Some("IfNeeded".into()),
                rules: Some(vec![pod_rule(&["CREATE"])]),
                match_conditions: Some(vec![MatchCondition {
                    name: "pod-of-a-kind-following-the-default-queue".into(),
                    expression: crate::integrations::default_queue_pod_condition(),
                }]),
                ..webhook("default-queue-pods.sluice.dev", "/mutate-pods")
            },
            MutatingWebhook {
                namespace_selector: Some(default_queue_namespaces(own_namespace)),
                object_selector: Some(without_queue_label()),
                reinvocation_policy: Some("Never".into()),
                rules: Some(application_rules_for(&["CREATE"])),
                ..webhook(
                    "default-queue-applications.sluice.dev",
                    "/mutate-applications",
                )
            },
        ]),
    }
}

/// The username of sluice's ServiceAccount in `namespace`: the default controller user.
pub fn service_account_user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:sluice")
}

/// Requests by sluice itself never go back to it.
fn not_sluice_itself(controller_user: &str) -> MatchCondition {
    // A username is a plain string; quotes would end the CEL literal, so they are dropped.
    let user: String = controller_user
        .chars()
        .filter(|c| *c != '\'' && *c != '\\')
        .collect();
    MatchCondition {
        name: "not-sluice-itself".into(),
        expression: format!("request.userInfo.username != '{user}'"),
    }
}

/// The name of the condition that lets only creations and edits sluice judges reach the
/// application webhooks.
pub const APPLICATION_CHANGE_CONDITION: &str = "creation-or-spec-or-queue-change";

/// The API server asks the application webhooks about a creation, and about an update only when
/// the spec (what sluice sizes and labels) or the queue label (what the validator may refuse to
/// change) changed. Finalizer, annotation, owner, other labels' and status edits never need sluice:
/// during an outage (failurePolicy Fail) operators and garbage collection can still update and
/// delete applications. Each side may have no labels or no spec at all. The comparisons cost the
/// number of top-level keys (CEL charges map equality by size, not depth), far below the API
/// server's budget for matchConditions.
pub fn application_conditions(controller_user: &str) -> Vec<MatchCondition> {
    let spec = |o: &str| format!("(has({o}.spec) ? {o}.spec : {{}})");
    let queue = |o: &str| {
        format!(
            "((has({o}.metadata.labels) && '{QUEUE_LABEL}' in {o}.metadata.labels) ? {o}.metadata.labels['{QUEUE_LABEL}'] : '')"
        )
    };
    vec![
        not_sluice_itself(controller_user),
        MatchCondition {
            name: APPLICATION_CHANGE_CONDITION.into(),
            expression: format!(
                "oldObject == null || {} != {} || {} != {}",
                spec("object"),
                spec("oldObject"),
                queue("object"),
                queue("oldObject")
            ),
        },
    ]
}

/// The API server asks the validating webhook only about updates that touch the scheduling gates
/// or the labels, and not about sluice's own: annotation, finalizer and owner edits never depend on
/// sluice being up, and the controller's ungate patches cost no extra round trip.
fn validation_conditions(controller_user: &str) -> Vec<MatchCondition> {
    let gates =
        |o: &str| format!("(has({o}.spec.schedulingGates) ? {o}.spec.schedulingGates : [])");
    let labels = |o: &str| format!("(has({o}.metadata.labels) ? {o}.metadata.labels : {{}})");
    // The annotations that record an admission (its token) and those a pod's gang is read from: a
    // user copying a token onto a pod, or changing its gang, must reach the validator to be refused.
    let notes = |o: &str| {
        crate::api::ADMISSION_ANNOTATIONS
            .iter()
            .chain(crate::api::IDENTITY_ANNOTATIONS.iter())
            .map(|key| {
                format!("(has({o}.metadata.annotations) && '{key}' in {o}.metadata.annotations ? {o}.metadata.annotations['{key}'] : '')")
            })
            .collect::<Vec<_>>()
            .join(" + '/' + ")
    };
    vec![
        not_sluice_itself(controller_user),
        MatchCondition {
            name: "touches-gates-labels-admission-or-size".into(),
            expression: format!(
                "oldObject == null || (has(request.subResource) && request.subResource == 'resize') || {} != {} || {} != {} || {} != {}",
                gates("object"),
                gates("oldObject"),
                labels("object"),
                labels("oldObject"),
                notes("object"),
                notes("oldObject"),
            ),
        },
    ]
}

/// Updates of pods, and their in-place resizes (`pods/resize`, which change what an admitted pod
/// holds of its queue's quota).
fn pod_update_rule() -> RuleWithOperations {
    RuleWithOperations {
        resources: Some(vec!["pods".into(), "pods/resize".into()]),
        ..pod_rule(&["UPDATE"])
    }
}

pub fn validating(
    endpoint: &Endpoint,
    own_namespace: &str,
    controller_user: &str,
    ca_bundle: Option<&[u8]>,
) -> ValidatingWebhookConfiguration {
    let webhook =
        |name: &str, path: &str| validating_webhook(name, path, endpoint, own_namespace, ca_bundle);
    ValidatingWebhookConfiguration {
        metadata: configuration_metadata(),
        webhooks: Some(vec![
            ValidatingWebhook {
                // Matches when the old or the new object carries the label: removing it is caught too.
                object_selector: Some(governed_pods()),
                rules: Some(vec![pod_update_rule()]),
                match_conditions: Some(validation_conditions(controller_user)),
                ..webhook("pods.sluice.dev", "/validate-pods")
            },
            ValidatingWebhook {
                object_selector: Some(governed_pods()),
                rules: Some(application_rules()),
                match_conditions: Some(application_conditions(controller_user)),
                ..webhook("applications.sluice.dev", "/validate-applications")
            },
            scavenger_jobs_webhook(
                webhook("scavengerjobs.sluice.dev", "/validate-scavengerjobs"),
                controller_user,
            ),
            scavenger_workloads_webhook(
                webhook(
                    "scavenger-workloads.sluice.dev",
                    "/validate-scavenger-workloads",
                ),
                controller_user,
            ),
        ]),
    }
}

/// ScavengerJobs' creations and spec changes: their fields, mounts and queue
/// (`src/scavenger/webhook.rs`).
fn scavenger_jobs_webhook(base: ValidatingWebhook, controller_user: &str) -> ValidatingWebhook {
    let create_or_update = ["CREATE", "UPDATE"];
    ValidatingWebhook {
        rules: Some(vec![rule(
            crate::api::GROUP,
            "v1alpha1",
            "scavengerjobs",
            &create_or_update,
        )]),
        match_conditions: Some(vec![
            not_sluice_itself(controller_user),
            MatchCondition {
                name: "creation-or-spec-change".into(),
                expression: "oldObject == null || object.spec != oldObject.spec".into(),
            },
        ]),
        ..base
    }
}

/// The CEL condition: `o` (a Pod or a Job) carries a scavenger mark (the label, on itself or its
/// pod template, or the scavenger PriorityClass).
pub fn scavenger_mark_condition(o: &str) -> String {
    let label = crate::api::SCAVENGER_JOB_LABEL;
    let class = crate::api::SCAVENGER_PRIORITY_CLASS;
    format!(
        "({o} != null && ((has({o}.metadata.labels) && '{label}' in {o}.metadata.labels) \
         || (has({o}.spec.priorityClassName) && {o}.spec.priorityClassName == '{class}') \
         || (has({o}.spec.template) && ((has({o}.spec.template.metadata) && has({o}.spec.template.metadata.labels) && '{label}' in {o}.spec.template.metadata.labels) \
         || (has({o}.spec.template.spec) && has({o}.spec.template.spec.priorityClassName) && {o}.spec.template.spec.priorityClassName == '{class}')))))"
    )
}

/// Pods and Jobs that carry (or carried) a scavenger mark: only sluice's Jobs and their pods may
/// (`src/scavenger/webhook.rs`). Every other pod and Job never reaches sluice.
fn scavenger_workloads_webhook(
    base: ValidatingWebhook,
    controller_user: &str,
) -> ValidatingWebhook {
    let create_or_update = ["CREATE", "UPDATE"];
    ValidatingWebhook {
        rules: Some(vec![
            rule("", "v1", "pods", &create_or_update),
            rule("batch", "v1", "jobs", &create_or_update),
        ]),
        match_conditions: Some(vec![
            not_sluice_itself(controller_user),
            MatchCondition {
                name: "carries-a-scavenger-mark".into(),
                expression: format!(
                    "{} || {}",
                    scavenger_mark_condition("object"),
                    scavenger_mark_condition("oldObject")
                ),
            },
        ]),
        ..base
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn endpoint() -> Endpoint {
        Endpoint::Url("https://127.0.0.1:9443".into())
    }

    const SLUICE: &str = "system:serviceaccount:sluice-system:sluice";

    /// Evaluates a matchCondition as the API server would, on a request with these objects.
    fn holds(condition: &MatchCondition, object: &Value, old: &Value, user: &str) -> bool {
        holds_for(
            condition,
            object,
            old,
            json!({"userInfo": {"username": user}}),
        )
    }

    /// As [`holds`], with the whole `request` variable (e.g. a subresource).
    fn holds_for(condition: &MatchCondition, object: &Value, old: &Value, request: Value) -> bool {
        let program = cel_interpreter::Program::compile(&condition.expression)
            .unwrap_or_else(|e| panic!("{}: {e}", condition.expression));
        let mut context = cel_interpreter::Context::default();
        context
            .add_variable("object", object.clone())
            .expect("object");
        context
            .add_variable("oldObject", old.clone())
            .expect("oldObject");
        context.add_variable("request", request).expect("request");
        match program.execute(&context) {
            Ok(cel_interpreter::Value::Bool(b)) => b,
            other => panic!("{} gave {other:?}", condition.expression),
        }
    }

    /// Whether an application webhook with `conditions` is called (every condition holds).
    fn called(conditions: &[MatchCondition], object: &Value, old: &Value, user: &str) -> bool {
        conditions.iter().all(|c| holds(c, object, old, user))
    }

    fn ray(queue: Option<&str>, workers: i64) -> Value {
        let mut app = json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ns", "labels": {"app": "x"}},
            "spec": {"workerGroupSpecs": [{"groupName": "w", "replicas": workers}]},
        });
        if let Some(q) = queue {
            app["metadata"]["labels"][QUEUE_LABEL] = json!(q);
        }
        app
    }

    fn application_webhook_conditions() -> Vec<(&'static str, Vec<MatchCondition>)> {
        let mutating = mutating(&endpoint(), "sluice-system", None);
        let validating = validating(&endpoint(), "sluice-system", SLUICE, None);
        let applications = |conditions: Vec<(String, Option<Vec<MatchCondition>>)>| {
            (conditions.into_iter())
                .find(|(name, _)| name == "applications.sluice.dev")
                .and_then(|(_, conditions)| conditions)
                .expect("the application webhook has matchConditions")
        };
        let m = applications(
            (mutating.webhooks.unwrap_or_default().into_iter())
                .map(|w| (w.name, w.match_conditions))
                .collect(),
        );
        let v = applications(
            (validating.webhooks.unwrap_or_default().into_iter())
                .map(|w| (w.name, w.match_conditions))
                .collect(),
        );
        vec![("mutating", m), ("validating", v)]
    }

    #[test]
    fn application_webhooks_carry_the_outage_conditions() {
        for (which, conditions) in application_webhook_conditions() {
            let names: Vec<&str> = conditions.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(
                names,
                ["not-sluice-itself", APPLICATION_CHANGE_CONDITION],
                "{which}"
            );
            assert!(
                conditions[0].expression.contains(SLUICE),
                "{which}: {}",
                conditions[0].expression
            );
        }
    }

    // Long: a table of cases, one per kind of edit, read top to bottom.
    #[test]
    fn application_webhooks_see_creations_spec_and_queue_changes_only() {
        let user = "alice";
        let old = ray(Some("q"), 1);
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = old.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            ("creation", old.clone(), Value::Null, true),
            ("no change", old.clone(), old.clone(), false),
            (
                "finalizer added",
                with(&|v| v["metadata"]["finalizers"] = json!(["ray.io/cleanup"])),
                old.clone(),
                false,
            ),
            (
                "annotation added",
                with(&|v| v["metadata"]["annotations"] = json!({"a": "b"})),
                old.clone(),
                false,
            ),
            (
                "another label changed",
                with(&|v| v["metadata"]["labels"]["app"] = json!("y")),
                old.clone(),
                false,
            ),
            (
                "status changed",
                with(&|v| v["status"] = json!({"state": "ready"})),
                old.clone(),
                false,
            ),
            ("spec changed", ray(Some("q"), 2), old.clone(), true),
            (
                "queue label changed",
                ray(Some("other"), 1),
                old.clone(),
                true,
            ),
            ("queue label removed", ray(None, 1), old.clone(), true),
            (
                "queue label added to an object with no labels",
                ray(Some("q"), 1),
                with(&|v| {
                    v["metadata"]
                        .as_object_mut()
                        .expect("metadata")
                        .remove("labels");
                }),
                true,
            ),
            (
                "no labels and no spec on either side",
                json!({"metadata": {"name": "rc"}}),
                json!({"metadata": {"name": "rc"}}),
                false,
            ),
            (
                "spec removed",
                json!({"metadata": old["metadata"].clone()}),
                old.clone(),
                true,
            ),
        ];
        for (which, conditions) in application_webhook_conditions() {
            for (case, object, old_object, expected) in &cases {
                assert_eq!(
                    called(&conditions, object, old_object, user),
                    *expected,
                    "{which} webhook, {case}"
                );
            }
            // sluice's own edits never reach it, whatever they change.
            assert!(
                !called(&conditions, &ray(Some("q"), 5), &old, SLUICE),
                "{which} webhook, sluice's own edit"
            );
        }
    }

    #[test]
    fn the_controller_user_cannot_break_out_of_the_cel_string() {
        let c = not_sluice_itself("evil' || true || '");
        assert!(!c.expression.contains('\''.to_string().repeat(2).as_str()));
        assert_eq!(
            c.expression,
            "request.userInfo.username != 'evil || true || '"
        );
    }

    /// Whether the pod validating webhook is called for this update (every condition holds).
    fn pod_webhook_called(object: &Value, old: &Value, request: Value) -> bool {
        let validating = validating(&endpoint(), "sluice-system", SLUICE, None);
        let conditions = validating.webhooks.expect("webhooks")[0]
            .match_conditions
            .clone()
            .expect("conditions");
        conditions
            .iter()
            .all(|condition| holds_for(condition, object, old, request.clone()))
    }

    #[test]
    fn pod_updates_reach_the_validator_for_gates_labels_admission_annotations_and_resizes_only() {
        let alice = json!({"userInfo": {"username": "alice"}});
        let old = json!({"metadata": {"name": "p", "labels": {QUEUE_LABEL: "q"}},
                         "spec": {"schedulingGates": [{"name": "sluice.dev/admission"}]}});
        let with = |f: &dyn Fn(&mut Value)| {
            let mut v = old.clone();
            f(&mut v);
            v
        };
        let cases: Vec<(&str, Value, Value, bool)> = vec![
            ("no change", old.clone(), alice.clone(), false),
            (
                "a user's annotation",
                with(&|v| v["metadata"]["annotations"] = json!({"team": "a"})),
                alice.clone(),
                false,
            ),
            (
                "an admission token added",
                with(&|v| {
                    v["metadata"]["annotations"] = json!({"sluice.dev/admitted-at-creation": "t"})
                }),
                alice.clone(),
                true,
            ),
            (
                "the gate removed",
                with(&|v| v["spec"]["schedulingGates"] = json!([])),
                alice.clone(),
                true,
            ),
            (
                "a label changed",
                with(&|v| v["metadata"]["labels"]["x"] = json!("y")),
                alice.clone(),
                true,
            ),
            (
                "a resize",
                old.clone(),
                json!({"userInfo": {"username": "alice"}, "subResource": "resize"}),
                true,
            ),
            (
                "the status",
                old.clone(),
                json!({"userInfo": {"username": "alice"}, "subResource": "status"}),
                false,
            ),
        ];
        for (case, object, request, expected) in cases {
            assert_eq!(
                pod_webhook_called(&object, &old, request),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn only_pods_and_jobs_with_a_scavenger_mark_reach_the_scavenger_webhook() {
        let config = validating(&endpoint(), "sluice-system", SLUICE, None);
        let webhook = config
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .find(|w| w.name == "scavenger-workloads.sluice.dev")
            .expect("webhook");
        let conditions = webhook.match_conditions.unwrap_or_default();
        let called = |object: &Value, old: &Value, user: &str| {
            conditions.iter().all(|c| holds(c, object, old, user))
        };
        let label = crate::api::SCAVENGER_JOB_LABEL;
        let class = crate::api::SCAVENGER_PRIORITY_CLASS;
        let plain_pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        let labelled_pod = json!({"metadata": {"name": "p", "labels": {label: "x"}}, "spec": {}});
        let classed_pod = json!({"metadata": {"name": "p"}, "spec": {"priorityClassName": class}});
        let plain_job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {}}}});
        let classed_job = json!({"metadata": {"name": "j"},
            "spec": {"template": {"spec": {"priorityClassName": class}}}});
        let labelled_job = json!({"metadata": {"name": "j"},
            "spec": {"template": {"metadata": {"labels": {label: "x"}}, "spec": {}}}});
        assert!(!called(&plain_pod, &Value::Null, "alice"));
        assert!(!called(&plain_job, &Value::Null, "alice"));
        for marked in [&labelled_pod, &classed_pod, &classed_job, &labelled_job] {
            assert!(called(marked, &Value::Null, "alice"), "{marked}");
            assert!(!called(marked, &Value::Null, SLUICE), "{marked}");
        }
        // Removing the label is an update that reaches it too.
        assert!(called(&plain_pod, &labelled_pod, "alice"));
    }
}
