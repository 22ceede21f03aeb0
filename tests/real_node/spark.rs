//! Spark for real: Spark's own spark-submit (the pinned pyspark, Java 17 on the host) runs a job in
//! client mode with dynamic allocation and shuffle tracking; its executors run in the image
//! hack/images/ builds (sluice.local/spark, Java 17 and pyspark's jars) on the real node, through a
//! CapacityQueue that admits fewer executors than Spark asks for. The driver stays on the host: the
//! executors reach it on the real node's bridge address (the pods' gateway).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;
use sluice::api::{CapacityQueue, DynamicWorkloadStatus};

use super::support::*;
use super::{NODE_LABEL, NODE_TAINT};

/// hack/images/images.sh: sluice.local/spark:<pyspark version> (hack/versions.sh PYSPARK_VERSION).
const SPARK_IMAGE: &str = "sluice.local/spark:4.0.4";
/// The pods' gateway on the real node: the host's address on the bridge sluice0 (hack/realnode.sh,
/// REAL_NODE_SUBNET 10.88.0.0/24). The driver binds here so that executors can reach it; loopback,
/// where the API server is, is not reachable from a pod.
const DRIVER_HOST: &str = "10.88.0.1";
/// Tasks of the first stage, each sleeping this long in the executor's JVM (no CPU: the machine is
/// small): a backlog that makes Spark ask for executors, long enough to see them queue.
const TASKS: u32 = 24;
const TASK_MILLIS: u32 = 3000;
/// Spark asks for up to this many executors.
const MAX_EXECUTORS: i32 = 3;
/// Executors start, register and run within this (the image is local; JVMs start slowly on 2 cores).
const EXECUTOR_TIMEOUT: Duration = Duration::from_secs(240);

/// The job: the first stage's TASKS one-row partitions sleep (`reflect` of Thread.sleep, evaluated in
/// the executors) and shuffle into a sum by key; a word count over a known text shuffles again.
/// Prints one line `RESULT {...}`, then holds the SparkContext (and its idle executors, which
/// dynamic allocation ends) until the file `stop` exists.
const JOB: &str = r#"
import json, os, sys, time
from collections import Counter
from pyspark.sql import SparkSession, functions as F
stop, tasks, millis = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
spark = SparkSession.builder.getOrCreate()
slow = spark.range(0, tasks, 1, tasks).selectExpr(
    "id", f"length(reflect('java.lang.Thread', 'sleep', cast({millis} as bigint))) * 0 as z")
sums = {r["k"]: r["s"] for r in slow.selectExpr("id % 4 as k", "id + z as v").groupBy("k").agg(F.sum("v").alias("s")).collect()}
lines = ["the quick brown fox jumps over the lazy dog", "the dog sleeps", "a fox is quick"]
text = [lines[i % 3] for i in range(150)]
# The lines are made in the executors' JVMs (rows from range): no Python runs there.
literal = ", ".join("'%s'" % l for l in lines)
words = spark.range(0, 150, 1, 6).selectExpr(f"element_at(array({literal}), cast(id % 3 + 1 as int)) as line") \
    .select(F.explode(F.split("line", " ")).alias("w")).groupBy("w").count().collect()
counts = {r["w"]: r["count"] for r in words}
want = Counter(w for l in text for w in l.split(" "))
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print("RESULT " + json.dumps({"sums": {str(k): v for k, v in sorted(sums.items())},
      "words": counts, "words_ok": counts == dict(want), "executors_now": executors}), flush=True)
while not os.path.exists(stop):
    time.sleep(0.2)
spark.stop()
"#;

/// The executors' pod template: the real node's selector and toleration (Spark has confs for
/// selectors, none for tolerations).
fn pod_template(dir: &Path) -> PathBuf {
    let path = dir.join("executor-template.json");
    let template = json!({
        "apiVersion": "v1", "kind": "Pod",
        "spec": {
            "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
            "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 2,
        },
    });
    std::fs::write(&path, template.to_string()).expect("write the pod template");
    path
}

fn submit(env: &TestEnv, queue: &str, dir: &Path) -> SparkSubmit {
    let home = spark_home(
        "pyspark-4.0.4",
        "the real node's phase of hack/test.sh builds the Spark image \
         (SLUICE_REAL_NODE_IMAGES=spark), which installs it",
    );
    let job = dir.join("job.py");
    std::fs::write(&job, JOB).expect("write the job");
    let server = api_url();
    let confs = [
        format!("spark.kubernetes.namespace={}", env.namespace),
        format!("spark.kubernetes.container.image={SPARK_IMAGE}"),
        "spark.kubernetes.container.image.pullPolicy=Never".into(),
        format!(
            "spark.kubernetes.executor.podTemplateFile={}",
            pod_template(dir).display()
        ),
        format!("spark.kubernetes.executor.label.sluice.dev/queue={queue}"),
        format!("spark.driver.host={DRIVER_HOST}"),
        format!("spark.driver.bindAddress={DRIVER_HOST}"),
        "spark.driver.memory=768m".into(),
        // Dynamic allocation from nothing, up to MAX_EXECUTORS; idle executors (and those whose
        // shuffle output is no longer needed) end after 10 s.
        "spark.dynamicAllocation.enabled=true".into(),
        "spark.dynamicAllocation.shuffleTracking.enabled=true".into(),
        "spark.dynamicAllocation.shuffleTracking.timeout=10s".into(),
        "spark.dynamicAllocation.minExecutors=0".into(),
        "spark.dynamicAllocation.initialExecutors=0".into(),
        format!("spark.dynamicAllocation.maxExecutors={MAX_EXECUTORS}"),
        "spark.dynamicAllocation.executorIdleTimeout=10s".into(),
        "spark.dynamicAllocation.schedulerBacklogTimeout=1s".into(),
        // One task slot each, a 512m heap, a pod asking for half a cpu (the queue counts requests).
        "spark.executor.cores=1".into(),
        "spark.kubernetes.executor.request.cores=500m".into(),
        "spark.kubernetes.executor.limit.cores=1".into(),
        "spark.executor.memory=512m".into(),
        "spark.executor.memoryOverhead=256m".into(),
        "spark.sql.shuffle.partitions=4".into(),
        "spark.ui.enabled=false".into(),
    ];
    Submission {
        server: &server,
        name: "wordcount",
        confs: &confs,
        job: &job,
        args: &[
            dir.join("stop").display().to_string(),
            TASKS.to_string(),
            TASK_MILLIS.to_string(),
        ],
        local_ip: DRIVER_HOST,
        log: &dir.join("spark.log"),
    }
    .start(&home)
}

/// The API server's URL from the kubeconfig (spark-submit's --master k8s://...).
fn api_url() -> String {
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let text = std::fs::read_to_string(&path).expect("read the kubeconfig");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no server: in {path}"))
}

/// Executors that run on the real node with their container started.
fn running_on(pods: &[Pod], node: &str) -> usize {
    pods.iter()
        .filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .count()
}

fn spark_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("spark.log")).unwrap_or_default()
}

fn ledger(s: &DynamicWorkloadStatus) -> String {
    format!(
        "admitted {} pending {} used {:?} ({})",
        s.admitted_pods, s.pending_pods, s.used, s.pod_set_summary
    )
}

// Long: one story in steps (submit, gate, admit as quota frees, compute, give back), each step
// asserting the ledger; split, the steps would pass half a dozen values between them.
#[tokio::test]
async fn spark_executors_run_on_the_real_node_admitted_as_quota_frees_and_give_it_back() {
    let mut env = env_or_skip!("real-spark");
    let (_heavy, node) = super::heavy_start(&env).await;
    // 1 cpu: two executors of 500m. Another workload holds 500m: Spark gets one executor at first.
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    env.create_pod(pod("other", &queue, "500m")).await;
    env.wait_queue_counts(&queue, 0, 1).await;

    let dir = std::env::temp_dir().join(&env.namespace);
    std::fs::create_dir_all(&dir).expect("temp dir");
    eprintln!("spark-submit log: {}", dir.join("spark.log").display());
    let spark = submit(&env, &queue, &dir);

    // Spark asks for MAX_EXECUTORS as the first stage backs up: one is admitted and runs on the
    // real node, the others wait behind the gate, all in one DynamicWorkload.
    let app = wait_for(
        "Spark to ask for its executors",
        EXECUTOR_TIMEOUT,
        || async {
            let pods = env.pods_labelled("spark-role=executor").await;
            (pods.len() == MAX_EXECUTORS as usize)
                .then(|| pods[0].labels().get("spark-app-selector").cloned())?
        },
    )
    .await;
    let dwl = format!("spark-{app}");
    // Every (admitted, pending) the ledger shows, in order, from a watch.
    let history: Arc<Mutex<Vec<(i32, i32)>>> = Arc::default();
    let watch = {
        let (history, api, name) = (history.clone(), env.workloads(), dwl.clone());
        tokio::spawn(async move {
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let mut stream =
                std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
            while let Some(Ok(d)) = stream.next().await {
                if let Some(s) = d.status {
                    let mut h = history.lock().expect("history");
                    if h.last() != Some(&(s.admitted_pods, s.pending_pods)) {
                        h.push((s.admitted_pods, s.pending_pods));
                    }
                }
            }
        })
    };
    let s = env
        .wait_workload_status(
            &dwl,
            "one executor admitted, two waiting",
            Duration::from_secs(60),
            |s| s.admitted_pods == 1 && s.pending_pods == MAX_EXECUTORS - 1,
        )
        .await;
    eprintln!("ledger, quota held by another workload: {}", ledger(&s));
    assert!(s.message.contains("cpu more"), "{}", s.message);
    wait_for(
        "the admitted executor to run on the real node",
        EXECUTOR_TIMEOUT,
        || async {
            (running_on(&env.pods_labelled("spark-role=executor").await, &node) == 1).then_some(())
        },
    )
    .await;
    assert_eq!(
        gated(&env.pods_labelled("spark-role=executor").await).len(),
        MAX_EXECUTORS as usize - 1
    );

    // The other workload ends: its quota goes to a waiting executor, which runs and registers.
    env.delete_pod_now("other").await;
    let s = env
        .wait_workload_status(
            &dwl,
            "a second executor admitted",
            Duration::from_secs(60),
            |s| s.admitted_pods == 2 && s.pending_pods == MAX_EXECUTORS - 2,
        )
        .await;
    eprintln!("ledger, the other workload ended: {}", ledger(&s));
    wait_for(
        "two executors running on the real node",
        EXECUTOR_TIMEOUT,
        || async {
            (running_on(&env.pods_labelled("spark-role=executor").await, &node) == 2).then_some(())
        },
    )
    .await;

    // The job's real result.
    let result = wait_for(
        "the job's RESULT line",
        Duration::from_secs(600),
        || async {
            let log = spark_log(&dir);
            if log.contains("Traceback") || log.contains("Exception in thread \"main\"") {
                panic!("the Spark job failed:\n{log}");
            }
            log.lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .map(|r| serde_json::from_str::<serde_json::Value>(r).expect("RESULT is JSON"))
        },
    )
    .await;
    eprintln!("job result: {result}");
    // ids 0..24 by id % 4: 0+4+...+20 = 60, 1+5+...+21 = 66, 72, 78.
    assert_eq!(result["sums"], json!({"0": 60, "1": 66, "2": 72, "3": 78}));
    assert_eq!(result["words_ok"], json!(true), "{result}");
    assert_eq!(result["words"]["the"], json!(150));
    assert_eq!(result["words"]["fox"], json!(100));
    let log = spark_log(&dir);
    assert!(
        log.contains("Registered executor")
            || log.contains("registered executor")
            || result["executors_now"].as_i64().is_some_and(|n| n >= 1),
        "executors registered with the driver on the host: {result}"
    );

    // Idle executors end (dynamic allocation) and the waiting one is withdrawn: their quota goes
    // back to the queue, and the ledger, whose last pod is gone, is deleted (a client-mode Spark
    // application has no object of its own to keep it).
    let q = wait_for(
        "the queue to hold nothing",
        Duration::from_secs(180),
        || async {
            let q = Api::<CapacityQueue>::all(env.client.clone())
                .get(&queue)
                .await
                .ok()?;
            let st = q.status.clone()?;
            let nothing = st.admitted_pods == 0
                && st.pending_pods == 0
                && st.usage.get("cpu").is_none_or(|c| c.0 == "0");
            nothing.then_some(st)
        },
    )
    .await;
    eprintln!(
        "queue after the executors ended: usage {:?}, {} admitted, {} pending",
        q.usage, q.admitted_pods, q.pending_pods
    );
    wait_for(
        "the ledger of the ended application to go",
        Duration::from_secs(60),
        || async {
            match env.workloads().get_opt(&dwl).await.ok()? {
                None => Some(()),
                Some(d) => d
                    .status
                    .filter(|s| s.admitted_pods == 0 && s.pending_pods == 0)
                    .map(|_| ()),
            }
        },
    )
    .await;
    assert!(
        env.pods_labelled("spark-role=executor")
            .await
            .iter()
            .all(|p| is_ended(p) || p.metadata.deletion_timestamp.is_some())
    );
    let history = history.lock().expect("history").clone();
    eprintln!("the ledger, step by step: {history:?}");
    for want in [(1, 2), (2, 1)] {
        assert!(
            history.contains(&want),
            "the ledger showed (admitted, pending) = {want:?}: {history:?}"
        );
    }
    assert!(
        history
            .iter()
            .rev()
            .take_while(|s| **s != (2, 1))
            .any(|s| s.0 < 2)
            || history.last() == Some(&(2, 1)),
        "{history:?}"
    );
    std::fs::write(dir.join("stop"), b"").expect("stop the driver");
    drop(spark);
    watch.abort();
    let _ = std::fs::remove_dir_all(&dir);
    env.cleanup().await;
}
