//! ScavengerJobs whose containers really run, on the real node: an exit code other than 0 fails one
//! for good, and the checkpoint-counter demo (manifests/samples/scavengerjob.yaml's script) resumes
//! from its checkpoint on a volume after an interruption.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use serde_json::{Value, json};
use sluice::api::{SCAVENGER_JOB_LABEL, ScavengerJob, ScavengerPhase};

use super::support::*;
use super::{BUSYBOX, NODE_LABEL, NODE_TAINT, RUN_TIMEOUT, real_node_name, sluice_in_cluster};

/// sluice on the host (`--with-sluice`, URL webhooks) or, without it, in-cluster from manifests/.
async fn sluice_running(env: &TestEnv) {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(env.client.clone());
    let on_host = mutating
        .get_opt("sluice")
        .await
        .expect("get webhooks")
        .and_then(|m| m.webhooks)
        .is_some_and(|w| w.iter().any(|w| w.client_config.url.is_some()));
    if !on_host {
        sluice_in_cluster(env).await;
    }
}

fn spec(script: &str) -> Value {
    json!({
        "image": BUSYBOX, "command": ["sh", "-c", script], "duration": "10m",
        "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                      "limits": {"cpu": "100m", "memory": "32Mi"}},
        "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
        "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    })
}

async fn create(env: &TestEnv, name: &str, spec: Value) {
    let sj: ScavengerJob = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("ScavengerJob");
    let api: Api<ScavengerJob> = Api::namespaced(env.client.clone(), &env.namespace);
    // The webhook judges mounts from a watch: a claim created a moment ago may not be in it yet.
    wait_for(
        &format!("ScavengerJob {name} accepted"),
        RUN_TIMEOUT,
        || async {
            api.create(&PostParams::default(), &sj)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
}

/// The pod of run `run` of the ScavengerJob `name` (its Job is `<name>-run-<run>`).
async fn run_pod(env: &TestEnv, name: &str, run: usize) -> Pod {
    let job = format!("{name}-run-{run}");
    wait_for(&format!("a pod of Job {job}"), RUN_TIMEOUT, || async {
        let pods = env
            .pods()
            .list(&ListParams::default().labels(&format!(
                "{SCAVENGER_JOB_LABEL}={name},batch.kubernetes.io/job-name={job}"
            )))
            .await
            .ok()?;
        pods.items.into_iter().next()
    })
    .await
}

async fn log(env: &TestEnv, pod: &str) -> String {
    env.pods()
        .logs(pod, &LogParams::default())
        .await
        .unwrap_or_default()
}

#[tokio::test]
async fn a_scavenger_job_whose_container_exits_3_fails_for_good() {
    let env = env_or_skip!("real-sj-fail");
    real_node_name(&env).await;
    sluice_running(&env).await;
    create(&env, "crash", spec("echo working; sleep 2; exit 3")).await;
    let s = env
        .wait_scavenger_status("crash", "Failed", RUN_TIMEOUT, |s| {
            s.phase == ScavengerPhase::Failed
        })
        .await;
    assert!(s.message.contains("code 3"), "{s:?}");
    assert_eq!(s.running_timestamps.len(), 1, "never retried: {s:?}");
    let pod = run_pod(&env, "crash", 1).await;
    assert!(log(&env, &pod.name_any()).await.contains("working"));
    eprintln!("{}", s.message);
    env.cleanup().await;
}

/// A program that exits 1 at once on SIGTERM: when its pod is deleted, the Job fails by its
/// podFailurePolicy (exit code not 0) and the Job controller removes the pod, possibly before a
/// pass of sluice looks. The deletion came first, and sluice's pod watch saw it: an interruption.
#[tokio::test]
async fn a_pod_deleted_while_it_runs_interrupts_even_if_it_exits_1_on_sigterm() {
    let env = env_or_skip!("real-sj-sigterm");
    real_node_name(&env).await;
    sluice_running(&env).await;
    let script = "trap 'echo stopping; exit 1' TERM; echo working; while true; do sleep 0.2; done";
    create(&env, "impatient", spec(script)).await;
    let first = run_pod(&env, "impatient", 1).await.name_any();
    wait_for("the first run to work", RUN_TIMEOUT, || async {
        log(&env, &first).await.contains("working").then_some(())
    })
    .await;
    env.pods()
        .delete(&first, &DeleteParams::default())
        .await
        .expect("delete the pod");
    let s = env
        .wait_scavenger_status("impatient", "interrupted, or failed", RUN_TIMEOUT, |s| {
            s.interrupted_count >= 1 || s.phase == ScavengerPhase::Failed
        })
        .await;
    assert_ne!(
        s.phase,
        ScavengerPhase::Failed,
        "a deletion is not a failure: {s:?}"
    );
    let s = env
        .wait_scavenger_status("impatient", "running again", RUN_TIMEOUT, |s| {
            s.running_timestamps.len() == 2
        })
        .await;
    assert_eq!(s.interrupted_count, 1, "{s:?}");
    eprintln!("{} interruption(s); {}", s.interrupted_count, s.message);
    env.cleanup().await;
}

/// manifests/samples/scavengerjob.yaml's counter, shorter: to 40, five steps a second.
const COUNTER: &str = r#"n=$(cat /data/count 2>/dev/null || echo 0)
echo "run $SCAVENGER_RUN (interrupted $SCAVENGER_INTERRUPTED_COUNT times) resumes at $n"
while [ "$n" -lt 40 ]; do
  n=$((n + 1))
  echo "$n" > /data/count.tmp && mv /data/count.tmp /data/count
  echo "step $n"
  sleep 0.2
done
echo "done at $n""#;

#[tokio::test]
async fn the_checkpoint_counter_resumes_after_an_interruption() {
    let env = env_or_skip!("real-sj-counter");
    real_node_name(&env).await;
    sluice_running(&env).await;
    // A hostPath volume on the real node, bound to the claim by its own storage class.
    let class = env.namespace.clone();
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": class},
        "spec": {"capacity": {"storage": "16Mi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "persistentVolumeReclaimPolicy": "Delete",
                 "hostPath": {"path": format!("/tmp/sluice-counter-{class}"), "type": "DirectoryOrCreate"}},
    }))
    .expect("pv");
    let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
    pvs.create(&PostParams::default(), &pv).await.expect("pv");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "counter"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "16Mi"}}},
    }))
    .expect("pvc");
    Api::<PersistentVolumeClaim>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("pvc");
    let mut s = spec(COUNTER);
    s["mounts"] = json!([{"persistentVolumeClaim": "counter", "mountPath": "/data"}]);
    create(&env, "counter", s).await;
    // Let it count a few steps, then take its pod away from outside.
    let first = run_pod(&env, "counter", 1).await;
    let first_name = first.name_any();
    wait_for("the first run to count to 5", RUN_TIMEOUT, || async {
        log(&env, &first_name)
            .await
            .contains("step 5\n")
            .then_some(())
    })
    .await;
    env.pods()
        .delete(&first_name, &DeleteParams::default())
        .await
        .expect("delete the pod");
    let first_log = log(&env, &first_name).await;
    env.wait_scavenger_status(
        "counter",
        "interrupted once and running again",
        RUN_TIMEOUT,
        |s| s.interrupted_count == 1 && s.running_timestamps.len() == 2,
    )
    .await;
    let second = run_pod(&env, "counter", 2).await;
    let done = env
        .wait_scavenger_status("counter", "Completed", RUN_TIMEOUT, |s| {
            s.phase == ScavengerPhase::Completed
        })
        .await;
    let second_log = log(&env, &second.name_any()).await;
    let resumed: u32 = second_log
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the second run's first line: {second_log}"));
    assert!(
        resumed >= 5,
        "resumed from the checkpoint, not from 0:\n{second_log}"
    );
    assert!(second_log.contains("done at 40"), "{second_log}");
    assert!(second_log.contains("(interrupted 1 times)"), "{second_log}");
    eprintln!(
        "--- run 1 ---\n{}",
        first_log.lines().take(3).collect::<Vec<_>>().join("\n")
    );
    eprintln!(
        "--- run 2 ---\n{}",
        second_log.lines().take(2).collect::<Vec<_>>().join("\n")
    );
    eprintln!("{done:?}");
    env.cleanup().await;
    let _ = pvs.delete(&class, &DeleteParams::default()).await;
}
