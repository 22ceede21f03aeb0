//! Spark, end to end: Spark's own spark-submit (from the pinned pyspark wheel, Java 17) runs a job in
//! client mode against the local API server with dynamic allocation. Its driver runs here on the host
//! and asks Kubernetes for executor pods as tasks back up: real allocation behaviour. (The executors
//! run on kwok nodes, so they never register and Spark keeps wanting them: a steady demand.)
//!
//! The SparkApplication path: the real Spark operator (hack/cluster.sh --with-spark-operator) turns a
//! SparkApplication into a driver pod; that pod runs on a kwok node, so the driver process itself
//! runs here in client mode bound to it (`spark.kubernetes.driver.pod.name`), and the executors are
//! the real ones Spark creates, owned by the driver pod.

mod support;

use std::time::Duration;

use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use sluice::api::{ApplicationEnd, WorkloadPhase};
use support::*;

#[tokio::test]
async fn spark_dynamic_allocation_is_governed_and_bounded() {
    let (env, queue) = env_and_queue!("spark", json!({"cpu": "4"}), "BestEffortFIFO");
    env.create_service_account("spark").await;
    // Another workload holds 1 cpu; Spark gets the other 3.
    env.create_pod(pod("other", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let spark = submit_dynamic_spark(
        &env,
        "etl",
        6,
        &[format!(
            "spark.kubernetes.executor.label.sluice.dev/queue={queue}"
        )],
    )
    .await;

    // Spark asks for up to 6 executors: 3 fit, 3 wait behind the gate, all in one DynamicWorkload.
    // The driver's JVM start is the slow, load-dependent part: wait for its pods before the queue.
    wait_for_executors(&env, 6).await;
    env.wait_queue_counts(&queue, 3, 4).await;
    let executors = exactly_max_executors(&env, 6).await;
    let app_id = executors[0]
        .labels()
        .get("spark-app-selector")
        .cloned()
        .expect("spark-app-selector");
    let dwl = env
        .workloads()
        .get(&format!("spark-{app_id}"))
        .await
        .expect("one DynamicWorkload for the Spark application");
    let status = env
        .wait_workload_status(
            &dwl.name_any(),
            "the Spark workload's status",
            Duration::from_secs(30),
            |s| s.pending_pods == 3,
        )
        .await;
    assert_eq!(status.admitted_pods, 3);
    assert!(
        status.message.contains("needs 1 cpu more"),
        "{}",
        status.message
    );

    // Another workload ends: one waiting executor takes its place.
    env.delete_pod_now("other").await;
    env.wait_queue_counts(&queue, 2, 4).await;
    let executors = env.pods_labelled("spark-role=executor").await;
    assert_eq!(executors.len(), 6, "still no extra pods");
    assert_eq!(holding(&executors).len(), 4);
    drop(spark);
    env.cleanup().await;
}

/// Waits until Spark's driver has created `count` executor pods. Its JVM starts on the host, beside
/// the cluster and the other tests: on a loaded two-core machine that alone can take a minute.
/// The executor pods, which must be exactly `max` (Spark's maxExecutors): its allocator does not
/// hot-loop.
async fn exactly_max_executors(env: &TestEnv, max: usize) -> Vec<k8s_openapi::api::core::v1::Pod> {
    let executors = env.pods_labelled("spark-role=executor").await;
    assert_eq!(
        executors.len(),
        max,
        "Spark created exactly maxExecutors pods: its allocator does not hot-loop"
    );
    executors
}

async fn wait_for_executors(env: &TestEnv, count: usize) {
    wait_for(
        &format!("Spark's driver to create {count} executor pods"),
        Duration::from_secs(240),
        || async { (env.pods_labelled("spark-role=executor").await.len() >= count).then_some(()) },
    )
    .await;
}

/// A SparkApplication submitted with no queue label in a namespace whose default queue is `q`: the
/// operator's driver pod waits until the whole gang (driver + minimum executors) fits; the driver
/// then asks for executors, which queue one by one; when the operator marks the application
/// COMPLETED, its ledger says so and nothing is reserved for it any more.
#[tokio::test]
async fn a_spark_application_in_a_default_queue_namespace_is_governed_from_driver_to_executors() {
    let (env, queue) = env_and_queue!("sparkapp", json!({"cpu": "4"}), "BestEffortFIFO");
    env.set_default_queue(&queue).await;
    env.create_service_account("spark").await;
    // 3 of the 4 cpu are taken: the application's gang (driver 1 + 1 minimum executor) must wait.
    env.create_pod(pod("other", &queue, "3")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let apps = spark_applications(&env);
    let mut spec = spark_pi(json!({"serviceAccount": "spark"}), json!({}));
    spec["dynamicAllocation"] =
        json!({"enabled": true, "minExecutors": 1, "initialExecutors": 1, "maxExecutors": 4});
    let app = spark_application("etl", None, spec);
    let created = create(&apps, &app).await;
    assert_eq!(
        created.labels().get("sluice.dev/queue"),
        Some(&queue),
        "the application took its namespace's default queue"
    );

    // The operator's spark-submit creates the driver pod, which waits: its gang does not fit.
    let driver_pods =
        ListParams::default().labels("spark-role=driver,sparkoperator.k8s.io/app-name=etl");
    let driver = wait_first(
        &env.pods(),
        &driver_pods,
        "the operator to create the driver pod",
        Duration::from_secs(120),
    )
    .await;
    assert!(is_gated(&driver), "the driver waits for its gang's quota");
    let status = env
        .wait_workload_status(
            "sparkapplication-etl",
            "the application's ledger to say why it waits",
            Duration::from_secs(30),
            |s| s.pending_pods == 1,
        )
        .await;
    assert_eq!(status.phase, WorkloadPhase::Pending);
    assert!(
        status.message.contains("needs 1 cpu more"),
        "{}",
        status.message
    );

    // Room for the gang: the driver is admitted with one executor's quota reserved.
    env.delete_pod_now("other").await;
    let driver_name = driver.name_any();
    wait_for("the driver pod to run", Duration::from_secs(60), || async {
        let p = env.pods().get(&driver_name).await.ok()?;
        (p.status?.phase? == "Running").then_some(())
    })
    .await;
    let status = env
        .wait_workload_status(
            "sparkapplication-etl",
            "one executor's quota reserved",
            Duration::from_secs(30),
            |s| s.admitted_pods == 1 && s.reserved.get("cpu").is_some_and(|q| q.0 == "1"),
        )
        .await;
    assert_eq!(status.pending_pods, 0);

    // The driver process itself runs here, bound to the driver pod; its executors get the labels the
    // operator gives them, and no queue label: the namespace default governs them.
    let spark = submit_dynamic_spark(
        &env,
        "etl",
        4,
        &[
            format!("spark.kubernetes.driver.pod.name={driver_name}"),
            "spark.kubernetes.executor.label.sparkoperator.k8s.io/app-name=etl".to_string(),
        ],
    )
    .await;
    // 4 cpu: the driver and 3 executors run, the 4th executor waits.
    wait_for_executors(&env, 4).await;
    env.wait_queue_counts(&queue, 1, 4).await;
    let executors = exactly_max_executors(&env, 4).await;
    for e in &executors {
        assert_eq!(
            e.labels().get("sluice.dev/queue"),
            Some(&queue),
            "{} took the default queue",
            e.name_any()
        );
        let owner = e.owner_references().first().map(|o| o.name.clone());
        assert_eq!(
            owner.as_deref(),
            Some(driver_name.as_str()),
            "{} is owned by the driver pod",
            e.name_any()
        );
    }
    assert_eq!(holding(&executors).len(), 3);
    let status = env
        .wait_workload_pods("sparkapplication-etl", 4, 1, Duration::from_secs(30))
        .await;
    assert_eq!(status.phase, WorkloadPhase::Running);

    // The driver pod succeeds: the operator marks the application COMPLETED, and its ledger ends
    // even though one executor is still behind the gate, which is never admitted.
    drop(spark);
    end_pod(&env.pods(), &driver_name, "Succeeded").await;
    let dwl = env
        .wait_workload(
            "sparkapplication-etl",
            "the ledger to record the application's end",
            Duration::from_secs(120),
            |d| d.spec.application_ended.is_some(),
        )
        .await;
    assert_eq!(dwl.spec.application_ended, Some(ApplicationEnd::Succeeded));
    let status = env
        .wait_workload_phase(
            "sparkapplication-etl",
            WorkloadPhase::Finished,
            Duration::from_secs(30),
        )
        .await;
    assert!(
        status.reserved.is_empty(),
        "nothing reserved after the end: {:?}",
        status.reserved
    );
    env.cleanup().await;
}
