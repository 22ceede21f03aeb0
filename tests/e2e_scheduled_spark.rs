//! ScheduledSparkApplications, end to end: the real Spark operator (hack/cluster.sh
//! --with-spark-operator) creates a SparkApplication at each time of the schedule, as its
//! concurrencyPolicy allows; each run carries the queue label and has a DynamicWorkload of its own.

mod support;

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use sluice::api::WorkloadPhase;
use support::*;

fn scheduled_spark_applications(env: &TestEnv) -> Api<DynamicObject> {
    let kind = (
        "sparkoperator.k8s.io",
        "v1beta2",
        "ScheduledSparkApplication",
    );
    dynamic_api(env, kind, "scheduledsparkapplications")
}

fn template(executor_instances: i64) -> Value {
    spark_pi(
        json!({"serviceAccount": "spark"}),
        json!({"instances": executor_instances}),
    )
}

fn scheduled(name: &str, queue: &str, schedule: &str, template: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "ScheduledSparkApplication",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {"schedule": schedule, "concurrencyPolicy": "Forbid", "template": template},
    }))
    .expect("scheduled")
}

async fn runs(env: &TestEnv, name: &str) -> Vec<DynamicObject> {
    let mut items = spark_applications(env)
        .list(
            &ListParams::default()
                .labels(&format!("sparkoperator.k8s.io/scheduled-app-name={name}")),
        )
        .await
        .expect("list runs")
        .items;
    items.sort_by_key(|a| a.creation_timestamp());
    items
}

fn time_at(app: &DynamicObject, pointer: &str) -> Option<Timestamp> {
    app.data.pointer(pointer)?.as_str()?.parse().ok()
}

/// The driver pod of `run`, once the operator's spark-submit has created it.
async fn driver_of(env: &TestEnv, run: &str) -> String {
    let selector = format!("spark-role=driver,sparkoperator.k8s.io/app-name={run}");
    wait_for(
        &format!("{run}'s driver pod"),
        Duration::from_secs(120),
        || async {
            let pods = env
                .pods()
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            pods.items.into_iter().next().map(|p| p.name_any())
        },
    )
    .await
}

#[tokio::test]
async fn each_run_is_its_own_governed_workload_and_forbid_still_holds() {
    let (env, queue) = env_and_queue!("sspark", json!({"cpu": "4"}), "BestEffortFIFO");
    env.create_service_account("spark").await;

    let schedules = scheduled_spark_applications(&env);
    let created = schedules
        .create(
            &PostParams::default(),
            &scheduled("nightly", &queue, "@every 10s", template(1)),
        )
        .await
        .expect("create the ScheduledSparkApplication");
    for role in ["driver", "executor"] {
        assert_eq!(
            created
                .data
                .pointer(&format!("/spec/template/{role}/labels/sluice.dev~1queue")),
            Some(&json!(queue)),
            "the queue label is in the template's {role}"
        );
    }
    assert!(
        env.workloads()
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .is_empty(),
        "the schedule records no ledger of its own"
    );

    // The first run: the queue label on it, and its own DynamicWorkload.
    let first = wait_for("the first run", Duration::from_secs(60), || async {
        runs(&env, "nightly").await.into_iter().next()
    })
    .await;
    if let (Some(run), Some(schedule)) = (first.creation_timestamp(), created.creation_timestamp())
    {
        eprintln!(
            "@every 10s: the first run was created {} s after the schedule",
            run.0.as_second() - schedule.0.as_second()
        );
    }
    assert_eq!(first.labels().get("sluice.dev/queue"), Some(&queue));
    let first_name = first.name_any();
    let first_workload = format!("sparkapplication-{first_name}");
    let dwl = wait_for(
        "the first run's DynamicWorkload",
        Duration::from_secs(30),
        || async { env.workloads().get(&first_workload).await.ok() },
    )
    .await;
    assert_eq!(dwl.spec.queue_name, queue);
    let driver = driver_of(&env, &first_name).await;
    env.wait_workload_status(
        &first_workload,
        "the first run admitted",
        Duration::from_secs(60),
        |s| {
            s.pod_sets
                .iter()
                .any(|p| p.name == "driver" && p.admitted + p.running >= 1)
        },
    )
    .await;

    // Forbid: while the first run runs, the schedule's next time passes without a second run.
    let schedule_at = |app: &DynamicObject| time_at(app, "/status/nextRun");
    wait_for(
        "the schedule's next time to pass",
        Duration::from_secs(60),
        || async {
            let app = schedules.get("nightly").await.ok()?;
            let next = schedule_at(&app)?;
            (Timestamp::now().as_second() > next.as_second() + 3).then_some(())
        },
    )
    .await;
    assert_eq!(
        runs(&env, "nightly").await.len(),
        1,
        "Forbid: no second run while the first runs"
    );

    // The first run's driver ends: the operator completes it, and the next time starts a second
    // run, with its own ledger.
    end_pod(&env.pods(), &driver, "Succeeded").await;
    env.wait_workload_phase(
        &first_workload,
        WorkloadPhase::Finished,
        Duration::from_secs(60),
    )
    .await;
    let second = wait_for("a second run", Duration::from_secs(60), || async {
        runs(&env, "nightly").await.into_iter().nth(1)
    })
    .await;
    assert_eq!(second.labels().get("sluice.dev/queue"), Some(&queue));
    let second_workload = format!("sparkapplication-{}", second.name_any());
    wait_for(
        "the second run's DynamicWorkload",
        Duration::from_secs(30),
        || async { env.workloads().get(&second_workload).await.ok() },
    )
    .await;
    schedules
        .delete("nightly", &Default::default())
        .await
        .expect("delete the schedule");
    env.cleanup().await;
}

#[tokio::test]
async fn a_schedule_whose_run_could_never_fit_is_refused_naming_the_field() {
    let (env, queue) = env_and_queue!("sspark-hostile", json!({"cpu": "2"}), "BestEffortFIFO");
    let schedules = scheduled_spark_applications(&env);
    let err = schedules
        .create(
            &PostParams::default(),
            &scheduled("big", &queue, "@every 1m", template(4)),
        )
        .await
        .expect_err("5 cpu in a 2 cpu queue")
        .to_string();
    assert!(
        err.contains("needs 5 cpu") && err.contains("quota of 2 cpu"),
        "{err}"
    );
    let mut negative = template(1);
    negative["executor"]["instances"] = json!(-1);
    let err = schedules
        .create(
            &PostParams::default(),
            &scheduled("neg", &queue, "@every 1m", negative),
        )
        .await
        .expect_err("negative instances")
        .to_string();
    assert!(err.contains("spec.template.executor.instances"), "{err}");
    env.cleanup().await;
}
