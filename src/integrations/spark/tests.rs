use serde_json::json;

use super::*;
use crate::resources::parse_quantity;

fn app(spec: Value) -> DynamicObject {
    crate::integrations::testing::application(
        "sparkoperator.k8s.io/v1beta2",
        "SparkApplication",
        "etl",
        spec,
    )
}

fn memory_mib(set: &PodSetSpec) -> i64 {
    parse_quantity(&set.requests["memory"].0).expect("memory") / 1000 / MIB
}

#[test]
fn memory_overhead_follows_sparks_rule() {
    // JVM: max(0.1 × 1g, 384m) = 384m; 8g: 0.1 × 8g = 819.2m.
    let sets = SparkApplications.demand(&app(json!({"type": "Scala", "driver": {"cores": 1, "memory": "1g"}, "executor": {"cores": 2, "memory": "8g", "instances": 3}}))).expect("demand");
    assert_eq!(memory_mib(&sets[0]), 1024 + 384);
    assert_eq!(memory_mib(&sets[1]), 8192 + 820);
    assert_eq!(sets[1].requests["cpu"].0, "2");
    assert_eq!((sets[1].min_count, sets[1].max_count), (3, Some(3)));
    // Python: factor 0.4.
    let sets = SparkApplications
        .demand(&app(
            json!({"type": "Python", "driver": {"memory": "2g"}, "executor": {"memory": "2g"}}),
        ))
        .expect("demand");
    assert_eq!(memory_mib(&sets[1]), 2048 + 820);
    // Explicit overhead and factor win.
    let sets = SparkApplications.demand(&app(json!({"memoryOverheadFactor": "0.2", "driver": {"memory": "4g", "memoryOverhead": "1g"}, "executor": {"memory": "4g"}}))).expect("demand");
    assert_eq!(memory_mib(&sets[0]), 4096 + 1024);
    assert_eq!(memory_mib(&sets[1]), 4096 + 820);
}

#[test]
fn off_heap_pyspark_memory_and_core_request_count() {
    let sets = SparkApplications.demand(&app(json!({
        "sparkConf": {"spark.memory.offHeap.enabled": "true", "spark.memory.offHeap.size": "1g", "spark.executor.pyspark.memory": "512m"},
        "driver": {"memory": "1g"}, "executor": {"memory": "1g", "coreRequest": "500m"},
    })))
    .expect("demand");
    assert_eq!(memory_mib(&sets[1]), 1024 + 384 + 1024 + 512);
    assert_eq!(sets[1].requests["cpu"].0, "500m");
}

#[test]
fn dynamic_allocation_sets_the_gang_to_the_minimum() {
    let sets = SparkApplications.demand(&app(json!({"driver": {}, "executor": {"instances": 2},
        "dynamicAllocation": {"enabled": true, "initialExecutors": 2, "minExecutors": 1, "maxExecutors": 10}}))).expect("demand");
    assert_eq!((sets[0].name.as_str(), sets[0].min_count), ("driver", 1));
    assert_eq!((sets[1].min_count, sets[1].max_count), (1, Some(10)));
}

fn refusal(spec: Value) -> String {
    match SparkApplications.demand(&app(spec)) {
        Ok(sets) => panic!("accepted: {sets:?}"),
        Err(e) => e.to_string(),
    }
}

/// Issue 16, hole 2: SparkApplications are never validated as pods.
#[test]
fn a_negative_executor_memory_is_refused_naming_the_field() {
    let err = refusal(json!({"driver": {}, "executor": {"memory": "-4g"}}));
    assert!(
        err.starts_with("spec.executor.memory: \"-4g\" must not be negative"),
        "{err}"
    );
    let err = refusal(json!({"sparkConf": {"spark.driver.memory": "-1g"}}));
    assert!(
        err.starts_with(r#"spec.sparkConf["spark.driver.memory"]"#),
        "{err}"
    );
    let err = refusal(json!({"executor": {"memory": "1g", "memoryOverhead": "-512m"}}));
    assert!(err.starts_with("spec.executor.memoryOverhead"), "{err}");
}

#[test]
fn negative_executor_counts_and_cores_are_refused_naming_the_field() {
    let err = refusal(json!({"executor": {"instances": -3}}));
    assert_eq!(err, "spec.executor.instances: must not be negative (-3)");
    let err = refusal(json!({"dynamicAllocation": {"enabled": true, "minExecutors": -1}}));
    assert!(
        err.starts_with("spec.dynamicAllocation.minExecutors"),
        "{err}"
    );
    let err = refusal(json!({"dynamicAllocation": {"enabled": true, "maxExecutors": -1}}));
    assert!(
        err.starts_with("spec.dynamicAllocation.maxExecutors"),
        "{err}"
    );
    let err = refusal(json!({"executor": {"cores": -2}}));
    assert!(err.starts_with("spec.executor.cores"), "{err}");
    let err = refusal(json!({"executor": {"coreRequest": "-500m"}}));
    assert!(
        err.starts_with(
            "spec.executor.coreRequest: invalid quantity \"-500m\": must not be negative"
        ),
        "{err}"
    );
    let err = refusal(json!({"executor": {"coreRequest": "0e2000000000x"}}));
    assert!(err.starts_with("spec.executor.coreRequest"), "{err}");
}

#[test]
fn executors_times_memory_beyond_what_sluice_counts_are_refused() {
    // 1 TiB is 1.1e15 milli-bytes: 10,000 of them overflow an i64.
    let err = refusal(json!({"executor": {"memory": "1t", "instances": 10000}}));
    assert!(
        err.starts_with("spec.executor.instances: 10000 pods need more memory"),
        "{err}"
    );
    let err = refusal(json!({"executor": {"memory": "8000000t"}}));
    assert!(err.contains("more than sluice can count"), "{err}");
    let err = refusal(json!({"memoryOverheadFactor": "1e300", "executor": {"memory": "1g"}}));
    assert!(err.contains("more than sluice can count"), "{err}");
    let err = refusal(json!({"memoryOverheadFactor": "-0.5"}));
    assert!(err.starts_with("spec.memoryOverheadFactor"), "{err}");
}

#[test]
fn pods_are_identified_by_sparks_labels() {
    let mut pod = Pod::default();
    let labels = |extra: &[(&str, &str)]| {
        let mut m: BTreeMap<String, String> = [
            (APP_SELECTOR_LABEL, "spark-0a1b"),
            (ROLE_LABEL, "executor"),
            (QUEUE_LABEL, "q"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        m.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        m
    };
    pod.metadata.labels = Some(labels(&[]));
    let id = SparkApplications
        .identify_pod(&pod)
        .expect("spark-submit pod");
    assert_eq!(
        (
            id.workload.as_deref(),
            id.pod_set.as_str(),
            id.recorded,
            id.min_count
        ),
        (Some("spark-spark-0a1b"), "executor", false, Some(0))
    );
    pod.metadata.labels = Some(labels(&[(OPERATOR_APP_LABEL, "etl")]));
    let id = SparkApplications.identify_pod(&pod).expect("operator pod");
    assert_eq!(
        (id.workload.as_deref(), id.recorded),
        (Some("sparkapplication-etl"), true)
    );
}

#[test]
fn spark_sizes() {
    assert_eq!(spark_memory("4g", "f").ok(), Some(4 << 30));
    assert_eq!(spark_memory("512m", "f").ok(), Some(512 << 20));
    assert_eq!(spark_memory("1024", "f").ok(), Some(1024));
    assert!(spark_memory("4x", "f").is_err());
}

#[test]
fn an_application_has_ended_when_the_operator_says_so() {
    let mut a = app(json!({"type": "Scala"}));
    assert_eq!(SparkApplications.ended(&a), None);
    for (state, end) in [
        ("RUNNING", None),
        ("COMPLETED", Some(ApplicationEnd::Succeeded)),
        ("FAILED", Some(ApplicationEnd::Failed)),
        ("SUBMISSION_FAILED", Some(ApplicationEnd::Failed)),
    ] {
        a.data["status"] = json!({"applicationState": {"state": state}});
        assert_eq!(SparkApplications.ended(&a), end, "{state}");
    }
}
