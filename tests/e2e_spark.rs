//! Spark, end to end: Spark's own spark-submit (from the pinned pyspark wheel, Java 17) runs a job in
//! client mode against the local API server with dynamic allocation. Its driver runs here on the host
//! and asks Kubernetes for executor pods as tasks back up: real allocation behaviour. (The executors
//! run on kwok nodes, so they never register and Spark keeps wanting them: a steady demand.)

mod support;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::*;

/// The pyspark installation hack/cluster.sh --with-spark-operator made.
fn spark_home() -> PathBuf {
    if let Some(home) = std::env::var_os("SPARK_HOME") {
        return PathBuf::from(home);
    }
    let cache = std::env::var_os("SLUICE_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/sluice"));
    let venv = std::fs::read_dir(&cache)
        .ok()
        .and_then(|d| d.filter_map(Result::ok).map(|e| e.path()).find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("pyspark-"))))
        .unwrap_or_else(|| panic!("no pyspark in {}: run the tests with hack/test.sh (it starts the cluster with --with-spark-operator)", cache.display()));
    let lib = venv.join("lib");
    let python = std::fs::read_dir(&lib).ok().and_then(|d| d.filter_map(Result::ok).map(|e| e.path()).find(|p| p.join("site-packages/pyspark").exists()));
    python.map(|p| p.join("site-packages/pyspark")).unwrap_or_else(|| panic!("no pyspark package under {}", lib.display()))
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
            let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{pgid}")]).status();
        }
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn spark_dynamic_allocation_is_governed_and_bounded() {
    let mut env = TestEnv::new("spark").await;
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    let sas: Api<ServiceAccount> = Api::namespaced(env.client.clone(), &env.namespace);
    sas.create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "spark"}})).expect("sa")).await.expect("sa");
    // Another workload holds 1 cpu; Spark gets the other 3.
    env.create_pod(pod("other", &queue, "1")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let home = spark_home();
    let job = std::env::temp_dir().join(format!("{}-job.py", env.namespace));
    std::fs::write(&job, "from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\nprint(spark.sparkContext.parallelize(range(100), 20).count())\n").expect("job");
    let server = {
        let config = kube::Config::infer().await.expect("config");
        config.cluster_url.to_string().trim_end_matches('/').to_string()
    };
    let python = home.ancestors().nth(4).map(|venv| venv.join("bin/python")).expect("venv python");
    let log = std::fs::File::create(std::env::temp_dir().join(format!("{}-spark.log", env.namespace))).expect("log");
    let child = Command::new(home.join("bin/spark-submit"))
        .args(["--master", &format!("k8s://{server}"), "--deploy-mode", "client", "--name", "etl"])
        .args(["--conf", &format!("spark.kubernetes.namespace={}", env.namespace)])
        .args(["--conf", "spark.kubernetes.container.image=apache/spark:4.0.0"])
        .args(["--conf", &format!("spark.kubernetes.executor.label.sluice.dev/queue={queue}")])
        .args(["--conf", "spark.kubernetes.authenticate.driver.serviceAccountName=spark"])
        .args(["--conf", "spark.dynamicAllocation.enabled=true", "--conf", "spark.dynamicAllocation.shuffleTracking.enabled=true"])
        .args(["--conf", "spark.dynamicAllocation.minExecutors=1", "--conf", "spark.dynamicAllocation.initialExecutors=1", "--conf", "spark.dynamicAllocation.maxExecutors=6"])
        .args(["--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.host=127.0.0.1"])
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
    let _spark = SparkSubmit(child);

    // Spark asks for up to 6 executors: 3 fit, 3 wait behind the gate, all in one DynamicWorkload.
    env.wait_queue_counts(&queue, 3, 4).await;
    let executors = env.pods().list(&ListParams::default().labels("spark-role=executor")).await.expect("pods").items;
    assert_eq!(executors.len(), 6, "Spark created exactly maxExecutors pods: its allocator does not hot-loop");
    let app_id = executors[0].labels().get("spark-app-selector").cloned().expect("spark-app-selector");
    let dwl = env.workloads().get(&format!("spark-{app_id}")).await.expect("one DynamicWorkload for the Spark application");
    let status = wait_for("the Spark workload's status", Duration::from_secs(30), || async {
        env.workloads().get(&dwl.name_any()).await.ok()?.status.filter(|s| s.pending_pods == 3)
    })
    .await;
    assert_eq!(status.admitted_pods, 3);
    assert!(status.message.contains("needs 1 cpu more"), "{}", status.message);

    // Another workload ends: one waiting executor takes its place.
    env.pods().delete("other", &DeleteParams::default().grace_period(0)).await.expect("delete other");
    env.wait_queue_counts(&queue, 2, 4).await;
    let executors = env.pods().list(&ListParams::default().labels("spark-role=executor")).await.expect("pods").items;
    assert_eq!(executors.len(), 6, "still no extra pods");
    assert_eq!(holding(&executors).len(), 4);
    drop(_spark);
    env.cleanup().await;
}
