//! The `workflow` executor end to end on Argo Workflows' real controller (hack/cluster.sh
//! --with-argo, which hack/test.sh starts) with sluice on the host.
//!
//! kwok runs no container, so the test plays two parts that real nodes play: the kubelet (a step's
//! pod ends when annotated `sluice.dev/kwok-phase`, hack/kwok/stages.yaml) and argoexec's wait
//! container, which reports a step's outputs to Argo as a WorkflowTaskResult named after the node
//! (the test writes that object as argoexec would, before the pod ends). Everything else is Argo's
//! own controller and sluice's: the Workflow created from the Task, its pods gated by the queue,
//! outputs resolved by Argo into the entrypoint's, phases, kill, timeout and deletion.
//! Run with `hack/test.sh --test e2e_tasks_workflow`.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use sluice::api::TaskPhase;
use support::*;
use task_support::*;

const T: Duration = Duration::from_secs(90);

/// A step that asks for 1 cpu and outputs the parameter `out` (written by argoexec in real life).
fn step(name: &str) -> Value {
    json!({"name": name, "outputs": {"parameters": [{"name": "out", "valueFrom": {"path": "/tmp/out"}}]},
        "container": {"image": "busybox", "command": ["sh", "-c", "echo ${task.name} > /tmp/out"],
            "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}})
}

/// A DAG of two independent 1-cpu steps; the entrypoint's outputs are theirs.
fn two_step_workflow() -> Value {
    json!({"spec": {"entrypoint": "main", "templates": [
        {"name": "main",
         "outputs": {"parameters": [
             {"name": "a", "valueFrom": {"parameter": "{{tasks.a.outputs.parameters.out}}"}},
             {"name": "b", "valueFrom": {"parameter": "{{tasks.b.outputs.parameters.out}}"}}]},
         "dag": {"tasks": [{"name": "a", "template": "step-a"}, {"name": "b", "template": "step-b"}]}},
        step("step-a"), step("step-b")]}})
}

fn workflow_task(name: &str, queue: &str, template: Value, timeout: Option<&str>) -> Value {
    let mut spec = json!({"executor": {"workflow": {"queue": queue, "template": template}}});
    if let Some(t) = timeout {
        spec["timeout"] = json!(t);
    }
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec})
}

/// Plays argoexec's wait container and the kubelet for a step's pod: reports `out` as the step's
/// output (a WorkflowTaskResult named after its node, complete), then ends the pod Succeeded.
async fn finish_step(env: &TestEnv, pod: &Pod, workflow: &str, out: &str) {
    let node = pod
        .annotations()
        .get("workflows.argoproj.io/node-id")
        .cloned()
        .unwrap_or_else(|| pod.name_any());
    let results: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &argo("WorkflowTaskResult", "workflowtaskresults"),
    );
    let result: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTaskResult",
        "metadata": {"name": node, "labels": {
            "workflows.argoproj.io/workflow": workflow,
            "workflows.argoproj.io/report-outputs-completed": "true"}},
        "outputs": {"parameters": [{"name": "out", "value": out}]},
    }))
    .expect("task result");
    create(&results, &result).await;
    env.pods()
        .patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"sluice.dev/kwok-phase": "Succeeded"}}}),
            ),
        )
        .await
        .expect("end the pod");
}

#[tokio::test]
async fn a_workflow_task_runs_through_the_gate_and_returns_its_outputs() {
    let mut env = env_or_skip!("task-wf");
    require_argo(
        &env,
        "start it with hack/cluster.sh up --with-argo (hack/test.sh does)",
    )
    .await;
    // Room for one step at a time: the second step's pod waits at the gate.
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    create_task(
        &env,
        workflow_task("flow", &queue, two_step_workflow(), None),
    )
    .await;
    let wf = wait_for("the Workflow flow-wf", T, || async {
        workflows(&env).get_opt("flow-wf").await.ok().flatten()
    })
    .await;
    assert_eq!(wf.owner_references()[0].kind, "Task");
    let (admitted, gated) = wait_for("two step pods, one admitted and one gated", T, || async {
        let pods = workflow_pods(&env, "flow-wf").await;
        let running: Vec<Pod> = pods
            .iter()
            .filter(|p| {
                !is_gated(p)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .cloned()
            .collect();
        let gated: Vec<Pod> = pods.iter().filter(|p| is_gated(p)).cloned().collect();
        (pods.len() == 2 && running.len() == 1 && gated.len() == 1)
            .then(|| (running[0].clone(), gated[0].clone()))
    })
    .await;
    for pod in [&admitted, &gated] {
        assert_eq!(pod.labels().get("sluice.dev/queue"), Some(&queue));
        assert_eq!(
            pod.labels().get("sluice.dev/task").map(String::as_str),
            Some("flow")
        );
    }
    wait_phase(&env, "flow", TaskPhase::Running, T).await;

    finish_step(&env, &admitted, "flow-wf", "\"first\"").await;
    let second = wait_for("the second step to be admitted", T, || async {
        let p = env.pods().get(&gated.name_any()).await.ok()?;
        (!is_gated(&p) && p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await;
    finish_step(&env, &second, "flow-wf", "2").await;

    let done = wait_phase(&env, "flow", TaskPhase::Success, T).await;
    let status = done.status.expect("status");
    assert_eq!(status.executor.as_deref(), Some("workflow"));
    let first_is_a = admitted.name_any().contains("step-a");
    let expected = if first_is_a {
        json!({"a": "first", "b": 2})
    } else {
        json!({"a": 2, "b": "first"})
    };
    assert_eq!(status.result, Some(expected));
    env.cleanup().await;
}

fn one_step_workflow() -> Value {
    json!({"spec": {"entrypoint": "step", "templates": [step("step")]}})
}

async fn first_pod_running(env: &TestEnv, workflow: &str) -> Pod {
    wait_for(&format!("{workflow}'s pod to run"), T, || async {
        workflow_pods(env, workflow)
            .await
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await
}

async fn wait_workflow_and_pods_gone(env: &TestEnv, workflow: &str) {
    wait_for(
        &format!("{workflow} and its pods to be gone"),
        T,
        || async {
            let wf = workflows(env).get_opt(workflow).await.ok()?;
            (wf.is_none() && workflow_pods(env, workflow).await.is_empty()).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_workflow_task_is_killed_by_kill_timeout_and_deletion() {
    let mut env = env_or_skip!("task-wf-kill");
    require_argo(
        &env,
        "start it with hack/cluster.sh up --with-argo (hack/test.sh does)",
    )
    .await;
    let queue = env.queue("q", json!({"cpu": "4"}), "BestEffortFIFO").await;
    create_task(
        &env,
        workflow_task("killed", &queue, one_step_workflow(), None),
    )
    .await;
    create_task(
        &env,
        workflow_task("timed", &queue, one_step_workflow(), Some("4s")),
    )
    .await;
    create_task(
        &env,
        workflow_task("deleted", &queue, one_step_workflow(), None),
    )
    .await;
    first_pod_running(&env, "killed-wf").await;
    first_pod_running(&env, "deleted-wf").await;

    kill_now(&env, "killed").await;
    let killed = wait_killed(&env, "killed", "killTimestamp", T).await;
    assert!(went_through_killing(&killed), "went through Killing");
    // Killed only once the Workflow and its pods were gone.
    assert!(
        workflows(&env)
            .get_opt("killed-wf")
            .await
            .expect("read")
            .is_none()
    );
    assert!(workflow_pods(&env, "killed-wf").await.is_empty());

    let timed = wait_phase(&env, "timed", TaskPhase::Killed, T).await;
    let status = timed.status.expect("status");
    assert_eq!(status.message, "killed: timeout 4s exceeded");
    wait_workflow_and_pods_gone(&env, "timed-wf").await;

    workflows(&env)
        .delete("deleted-wf", &DeleteParams::default())
        .await
        .expect("delete the Workflow");
    let gone = wait_phase(&env, "deleted", TaskPhase::Killed, T).await;
    let message = gone.status.expect("status").message;
    assert!(
        message.contains("Workflow deleted-wf was deleted"),
        "{message}"
    );
    env.cleanup().await;
}
