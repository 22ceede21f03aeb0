use serde_json::{Value, json};

use super::*;
use crate::integrations::testing::{assert_holds, patched};

fn scheduled(template: Value) -> DynamicObject {
    crate::integrations::testing::application(
        "sparkoperator.k8s.io/v1beta2",
        "ScheduledSparkApplication",
        "nightly",
        json!({"schedule": "@every 1m", "concurrencyPolicy": "Forbid", "template": template}),
    )
}

fn template() -> Value {
    json!({
        "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
        "driver": {"cores": 1, "memory": "512m"},
        "executor": {"cores": 1, "instances": 2, "memory": "512m", "labels": {"team": "data"}},
    })
}

#[test]
fn one_runs_demand_is_a_spark_applications_and_records_no_ledger() {
    let app = scheduled(template());
    let sets = ScheduledSparkApplications.demand(&app).expect("demand");
    assert_eq!(sets.len(), 2);
    assert_eq!((sets[1].name.as_str(), sets[1].min_count), ("executor", 2));
    assert!(!ScheduledSparkApplications.records_workload(&app));
    assert_eq!(
        ScheduledSparkApplications.identify_pod(&Pod::default()),
        None
    );
}

#[test]
fn the_queue_label_goes_into_the_templates_driver_and_executor() {
    let app = scheduled(template());
    let doc = patched(&app, ScheduledSparkApplications.pods_patch(&app, "q"));
    for role in ["driver", "executor"] {
        let queue = format!("/spec/template/{role}/labels/sluice.dev~1queue");
        assert_holds(&doc, &[(queue.as_str(), json!("q"))]);
    }
    assert_holds(
        &doc,
        &[("/spec/template/executor/labels/team", json!("data"))],
    );
    // No template: nothing to label (and the validator refuses it).
    let bare: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "ScheduledSparkApplication",
        "metadata": {"name": "n", "namespace": "ns"}, "spec": {"schedule": "@every 1m"},
    }))
    .expect("bare");
    assert!(ScheduledSparkApplications.pods_patch(&bare, "q").is_empty());
    assert_eq!(
        ScheduledSparkApplications
            .demand(&bare)
            .expect_err("no template")
            .to_string(),
        "spec.template is missing"
    );
}

#[test]
fn hostile_templates_are_refused_naming_the_field_under_the_template() {
    let mut t = template();
    t["executor"]["instances"] = json!(-4);
    assert_eq!(
        ScheduledSparkApplications
            .demand(&scheduled(t))
            .expect_err("negative")
            .to_string(),
        "spec.template.executor.instances: must not be negative (-4)"
    );
    let mut t = template();
    t["driver"]["memory"] = json!("-1g");
    let err = ScheduledSparkApplications
        .demand(&scheduled(t))
        .expect_err("negative memory")
        .to_string();
    assert!(err.starts_with("spec.template.driver.memory: "), "{err}");
}
