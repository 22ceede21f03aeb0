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

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, ResourceExt};
use serde_json::json;
use sluice::api::{ApplicationEnd, WorkloadPhase};
use support::*;

/// The pyspark installation hack/cluster.sh --with-spark-operator made.
fn spark_home() -> PathBuf {
    if let Some(home) = std::env::var_os("SPARK_HOME") {
        return PathBuf::from(home);
    }
    let cache = std::env::var_os("SLUICE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/sluice")
        });
    let venv = std::fs::read_dir(&cache)
        .ok()
        .and_then(|d| d.filter_map(Result::ok).map(|e| e.path()).find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pyspark-"))))
        .unwrap_or_else(|| panic!("no pyspark in {}: run the tests with hack/test.sh (it starts the cluster with --with-spark-operator)", cache.display()));
    let lib = venv.join("lib");
    let python = std::fs::read_dir(&lib).ok().and_then(|d| {
        d.filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.join("site-packages/pyspark").exists())
    });
    python
        .map(|p| p.join("site-packages/pyspark"))
        .unwrap_or_else(|| panic!("no pyspark package under {}", lib.display()))
}

/// A spark-submit in its own process group, stopped (group and all) when dropped.
struct SparkSubmit(Child);

impl Drop for SparkSubmit {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SIGKILL: the JVM runs shutdown hooks on TERM that can wait on the API server; the
        // namespace deletion removes the executors anyway.
        // `--` is vital: procps' kill reads "-KILL -<pgid>" as kill(-1), every process there is.
        if pgid > 1 {
            let _ = Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{pgid}")])
                .status();
        }
        let _ = self.0.wait();
    }
}

/// Starts Spark's own spark-submit in client mode: a job of 20 one-core tasks with dynamic allocation
/// (1 to `max_executors` executors of 1 cpu, 512m), in the test namespace, with `extra` confs.
async fn spark_submit(
    env: &TestEnv,
    name: &str,
    max_executors: u32,
    extra: &[String],
) -> SparkSubmit {
    let home = spark_home();
    let job = std::env::temp_dir().join(format!("{}-{name}-job.py", env.namespace));
    std::fs::write(&job, "from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\nprint(spark.sparkContext.parallelize(range(100), 20).count())\n").expect("job");
    let server = {
        let config = kube::Config::infer().await.expect("config");
        config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string()
    };
    let python = home
        .ancestors()
        .nth(4)
        .map(|venv| venv.join("bin/python"))
        .expect("venv python");
    let log_path = std::env::temp_dir().join(format!("{}-{name}-spark.log", env.namespace));
    eprintln!("spark-submit log: {}", log_path.display());
    let log = std::fs::File::create(&log_path).expect("log");
    let mut command = Command::new(home.join("bin/spark-submit"));
    command
        .args([
            "--master",
            &format!("k8s://{server}"),
            "--deploy-mode",
            "client",
            "--name",
            name,
        ])
        .args([
            "--conf",
            &format!("spark.kubernetes.namespace={}", env.namespace),
        ])
        .args([
            "--conf",
            "spark.kubernetes.container.image=apache/spark:4.0.0",
        ])
        .args([
            "--conf",
            "spark.kubernetes.authenticate.driver.serviceAccountName=spark",
        ])
        .args([
            "--conf",
            "spark.dynamicAllocation.enabled=true",
            "--conf",
            "spark.dynamicAllocation.shuffleTracking.enabled=true",
        ])
        .args([
            "--conf",
            "spark.dynamicAllocation.minExecutors=1",
            "--conf",
            "spark.dynamicAllocation.initialExecutors=1",
        ])
        .args([
            "--conf",
            &format!("spark.dynamicAllocation.maxExecutors={max_executors}"),
        ])
        .args([
            "--conf",
            "spark.executor.cores=1",
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.driver.host=127.0.0.1",
        ]);
    for conf in extra {
        command.args(["--conf", conf]);
    }
    let child = command
        .arg(&job)
        .env("SPARK_HOME", &home)
        .env("PYSPARK_PYTHON", &python)
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("spark-submit");
    SparkSubmit(child)
}

async fn service_account(env: &TestEnv, name: &str) {
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.namespace);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa"),
    )
    .await
    .expect("sa");
}

#[tokio::test]
async fn spark_dynamic_allocation_is_governed_and_bounded() {
    let mut env = env_or_skip!("spark");
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    service_account(&env, "spark").await;
    // Another workload holds 1 cpu; Spark gets the other 3.
    env.create_pod(pod("other", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let spark = spark_submit(
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
    let executors = executor_pods(&env).await;
    assert_eq!(
        executors.len(),
        6,
        "Spark created exactly maxExecutors pods: its allocator does not hot-loop"
    );
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
    env.pods()
        .delete("other", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete other");
    env.wait_queue_counts(&queue, 2, 4).await;
    let executors = executor_pods(&env).await;
    assert_eq!(executors.len(), 6, "still no extra pods");
    assert_eq!(holding(&executors).len(), 4);
    drop(spark);
    env.cleanup().await;
}

/// Waits until Spark's driver has created `count` executor pods. Its JVM starts on the host, beside
/// the cluster and the other tests: on a loaded two-core machine that alone can take a minute.
async fn wait_for_executors(env: &TestEnv, count: usize) {
    wait_for(
        &format!("Spark's driver to create {count} executor pods"),
        Duration::from_secs(240),
        || async { (executor_pods(env).await.len() >= count).then_some(()) },
    )
    .await;
}

/// Every executor pod in the test namespace.
async fn executor_pods(env: &TestEnv) -> Vec<k8s_openapi::api::core::v1::Pod> {
    env.pods()
        .list(&ListParams::default().labels("spark-role=executor"))
        .await
        .expect("list executor pods")
        .items
}

fn spark_applications(env: &TestEnv) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sparkoperator.k8s.io", "v1beta2", "SparkApplication"),
        "sparkapplications",
    );
    Api::namespaced_with(env.client.clone(), &env.namespace, &resource)
}

/// A SparkApplication submitted with no queue label in a namespace whose default queue is `q`: the
/// operator's driver pod waits until the whole gang (driver + minimum executors) fits; the driver
/// then asks for executors, which queue one by one; when the operator marks the application
/// COMPLETED, its ledger says so and nothing is reserved for it any more.
#[tokio::test]
async fn a_spark_application_in_a_default_queue_namespace_is_governed_from_driver_to_executors() {
    let mut env = env_or_skip!("sparkapp");
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    Api::<Namespace>::all(env.client.clone())
        .patch(
            &env.namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sluice.dev/default-queue": queue}}})),
        )
        .await
        .expect("label the namespace with its default queue");
    service_account(&env, "spark").await;
    // 3 of the 4 cpu are taken: the application's gang (driver 1 + 1 minimum executor) must wait.
    env.create_pod(pod("other", &queue, "3")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let apps = spark_applications(&env);
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "etl"},
        "spec": {
            "type": "Scala", "mode": "cluster", "sparkVersion": "4.0.4",
            "image": "docker.io/apache/spark:4.0.4",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark"},
            "executor": {"cores": 1, "memory": "512m"},
            "dynamicAllocation": {"enabled": true, "minExecutors": 1, "initialExecutors": 1, "maxExecutors": 4},
        },
    }))
    .expect("SparkApplication");
    let created = apps
        .create(&PostParams::default(), &app)
        .await
        .expect("create the SparkApplication");
    assert_eq!(
        created.labels().get("sluice.dev/queue"),
        Some(&queue),
        "the application took its namespace's default queue"
    );

    // The operator's spark-submit creates the driver pod, which waits: its gang does not fit.
    let driver_pods =
        ListParams::default().labels("spark-role=driver,sparkoperator.k8s.io/app-name=etl");
    let driver = wait_for(
        "the operator to create the driver pod",
        Duration::from_secs(120),
        || async {
            env.pods()
                .list(&driver_pods)
                .await
                .ok()?
                .items
                .into_iter()
                .next()
        },
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
    env.pods()
        .delete("other", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete other");
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
    let spark = spark_submit(
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
    let executors = executor_pods(&env).await;
    assert_eq!(
        executors.len(),
        4,
        "Spark created exactly maxExecutors pods"
    );
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
        .wait_workload_status(
            "sparkapplication-etl",
            "the ledger to count driver and executors",
            Duration::from_secs(30),
            |s| s.admitted_pods == 4 && s.pending_pods == 1,
        )
        .await;
    assert_eq!(status.phase, WorkloadPhase::Running);

    // The driver pod succeeds: the operator marks the application COMPLETED, and its ledger ends
    // even though one executor is still behind the gate, which is never admitted.
    drop(spark);
    end_pod(&env.pods(), &driver_name, "Succeeded").await;
    let dwl = wait_for(
        "the ledger to record the application's end",
        Duration::from_secs(120),
        || async {
            env.workloads()
                .get("sparkapplication-etl")
                .await
                .ok()
                .filter(|d| d.spec.application_ended.is_some())
        },
    )
    .await;
    assert_eq!(dwl.spec.application_ended, Some(ApplicationEnd::Succeeded));
    let status = env
        .wait_workload_status(
            "sparkapplication-etl",
            "the ledger to say Finished",
            Duration::from_secs(30),
            |s| s.phase == WorkloadPhase::Finished,
        )
        .await;
    assert!(
        status.reserved.is_empty(),
        "nothing reserved after the end: {:?}",
        status.reserved
    );
    env.cleanup().await;
}
