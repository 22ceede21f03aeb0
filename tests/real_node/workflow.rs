//! The `workflow` executor with steps that really run: Argo Workflows' controller on the host
//! (`hack/cluster.sh up --real-node --with-argo`), its executor argoexec built from the same module
//! into the image `sluice.local/argoexec:<version>` on the real node, sluice in-cluster. Every step
//! pod has argoexec's init and wait containers and a busybox main container; the outputs are those
//! argoexec's wait container reports (WorkflowTaskResults), resolved by Argo into the Workflow's,
//! read by sluice into the Task's result. kwok's version of these tests, where the test plays
//! argoexec, is tests/e2e_tasks_workflow.rs.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use sluice::api::{Task, TaskPhase};

use super::support::*;
use super::task_support::*;
use super::{BUSYBOX, NODE_LABEL, NODE_TAINT, real_node_name, sluice_in_cluster};

/// Steps start within this (local images; the first step also waits for the controller's pass).
const T: Duration = Duration::from_secs(120);
/// The ServiceAccount of the step pods: argoexec's wait container reports outputs with it.
const STEP_ACCOUNT: &str = "workflow-step";

/// What argoexec's wait container needs (Argo's own executor Role): create and patch
/// WorkflowTaskResults in the Workflow's namespace.
async fn step_account(env: &TestEnv) {
    let pp = PostParams::default();
    let ns = &env.namespace;
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": STEP_ACCOUNT}})).expect("sa");
    let role: Role = serde_json::from_value(json!({"metadata": {"name": STEP_ACCOUNT},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
            "verbs": ["create", "patch"]}]}))
    .expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": STEP_ACCOUNT},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": STEP_ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": STEP_ACCOUNT, "namespace": ns}]}))
    .expect("binding");
    Api::<ServiceAccount>::namespaced(env.client.clone(), ns)
        .create(&pp, &sa)
        .await
        .expect("create the step ServiceAccount");
    Api::<Role>::namespaced(env.client.clone(), ns)
        .create(&pp, &role)
        .await
        .expect("create the step Role");
    Api::<RoleBinding>::namespaced(env.client.clone(), ns)
        .create(&pp, &binding)
        .await
        .expect("create the step RoleBinding");
}

/// How a Workflow test starts: the real node there (its name returned), Argo installed, sluice
/// in-cluster, [`super::HEAVY`] held (returned: held until the test ends), the steps' ServiceAccount.
async fn start(env: &TestEnv) -> (tokio::sync::MutexGuard<'static, ()>, String) {
    let node = real_node_name(env).await;
    require_argo(
        env,
        "hack/test.sh --test real_node brings it up (hack/cluster.sh up --real-node --with-argo)",
    )
    .await;
    sluice_in_cluster(env).await;
    let heavy = super::HEAVY.lock().await;
    step_account(env).await;
    (heavy, node)
}

/// A busybox step on the real node running `script`, asking for 100m; its output parameter `out`
/// is the file /tmp/out, which argoexec reads after the main container ends.
fn step(name: &str, script: &str, inputs: &[&str]) -> Value {
    let params: Vec<Value> = inputs.iter().map(|p| json!({"name": p})).collect();
    json!({"name": name,
        "inputs": {"parameters": params},
        "outputs": {"parameters": [{"name": "out", "valueFrom": {"path": "/tmp/out"}}]},
        "container": {"image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", script],
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}})
}

/// The Workflow's spec around `templates`: on the real node, the step ServiceAccount.
fn on_real_node(entrypoint: &str, templates: Vec<Value>) -> Value {
    json!({"spec": {"entrypoint": entrypoint, "serviceAccountName": STEP_ACCOUNT,
        "nodeSelector": {NODE_LABEL.0: NODE_LABEL.1},
        "tolerations": [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "templates": templates}})
}

/// A DAG: `a` and `b` independent (each 100m, a few seconds of work), `join` after both, taking
/// their outputs as inputs. The entrypoint's outputs are the three steps'.
fn dag_workflow() -> Value {
    let from =
        |task: &str| json!({"parameter": format!("{{{{tasks.{task}.outputs.parameters.out}}}}")});
    on_real_node(
        "main",
        vec![
            json!({"name": "main",
                "outputs": {"parameters": [
                    {"name": "a", "valueFrom": from("a")},
                    {"name": "b", "valueFrom": from("b")},
                    {"name": "joined", "valueFrom": from("join")}]},
                "dag": {"tasks": [
                    {"name": "a", "template": "a"},
                    {"name": "b", "template": "b"},
                    {"name": "join", "template": "join", "dependencies": ["a", "b"],
                     "arguments": {"parameters": [
                         {"name": "a", "value": "{{tasks.a.outputs.parameters.out}}"},
                         {"name": "b", "value": "{{tasks.b.outputs.parameters.out}}"}]}}]}}),
            step("a", "sleep 3; printf '%s' '${task.name}-a' > /tmp/out", &[]),
            step(
                "b",
                "sleep 3; printf '%s' \"$(expr 6 '*' 7)\" > /tmp/out",
                &[],
            ),
            step(
                "join",
                "printf '{\"a\":\"%s\",\"b\":%s}' '{{inputs.parameters.a}}' '{{inputs.parameters.b}}' > /tmp/out",
                &["a", "b"],
            ),
        ],
    )
}

fn workflow_task(name: &str, queue: &str, template: Value) -> Task {
    serde_json::from_value(json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
        "metadata": {"name": name},
        "spec": {"executor": {"workflow": {"queue": queue, "template": template}}}}))
    .expect("task")
}

fn main_running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.name == "main" && c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Every container of a finished step pod (init, wait, main) ended 0 in containerd on `node`.
fn assert_ran_for_real(pod: &Pod, node: &str) {
    let name = pod.name_any();
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(node),
        "{name} ran on the real node"
    );
    let status = pod.status.as_ref().expect("status");
    let all: Vec<_> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    let mut names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["init", "main", "wait"],
        "{name}: argoexec's init and wait containers beside main"
    );
    for c in all {
        let t = c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .unwrap_or_else(|| panic!("{name}/{} terminated: {:?}", c.name, c.state));
        assert_eq!(t.exit_code, 0, "{name}/{}: {t:?}", c.name);
        assert!(
            t.container_id
                .as_deref()
                .is_some_and(|id| id.starts_with("containerd://")),
            "{name}/{} ran in containerd: {t:?}",
            c.name
        );
        if c.name != "main" {
            assert!(
                c.image.contains("argoexec"),
                "{name}/{} is argoexec: {}",
                c.name,
                c.image
            );
        }
    }
}

#[tokio::test]
async fn a_workflow_task_runs_real_steps_behind_the_gate_and_returns_argoexecs_outputs() {
    let mut env = env_or_skip!("real-wf");
    let (_heavy, node) = start(&env).await;
    // Room for one 100m step at a time: of the two independent steps, one waits at the gate.
    let queue = env
        .queue("q", json!({"cpu": "100m"}), "BestEffortFIFO")
        .await;
    tasks(&env)
        .create(
            &PostParams::default(),
            &workflow_task("flow", &queue, dag_workflow()),
        )
        .await
        .expect("create the Task");
    let (first, gated) = wait_for(
        "a step running on the real node while the other waits gated",
        T,
        || async {
            let pods = workflow_pods(&env, "flow-wf").await;
            let running = pods.iter().find(|p| !is_gated(p) && main_running(p))?;
            let gated = pods.iter().find(|p| is_gated(p))?;
            Some((running.clone(), gated.clone()))
        },
    )
    .await;
    for p in [&first, &gated] {
        assert_eq!(p.labels().get("sluice.dev/queue"), Some(&queue));
        assert_eq!(
            p.labels().get("sluice.dev/task").map(String::as_str),
            Some("flow")
        );
    }
    assert!(
        gated
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none(),
        "the gated step is not scheduled"
    );
    let running = tasks(&env).get("flow").await.expect("the Task");
    assert_eq!(
        running.status.as_ref().map(|s| s.phase),
        Some(TaskPhase::Running),
        "Running while the Workflow runs: {:?}",
        running.status
    );
    env.wait_queue_counts(&queue, 1, 1).await;

    let done = wait_for("Task flow to succeed", Duration::from_secs(240), || async {
        let t = tasks(&env).get("flow").await.ok()?;
        let st = t.status.clone()?;
        if st.phase.is_final() && st.phase != TaskPhase::Success {
            panic!("Task flow ended {}: {}", st.phase, st.message);
        }
        (st.phase == TaskPhase::Success).then_some(t)
    })
    .await;
    let status = done.status.expect("status");
    assert_eq!(status.executor.as_deref(), Some("workflow"));
    // argoexec's outputs, as Argo resolved them into the entrypoint's: JSON where they parse.
    assert_eq!(
        status.result,
        Some(json!({"a": "flow-a", "b": 42, "joined": {"a": "flow-a", "b": 42}})),
        "the Task's result is the Workflow's outputs"
    );
    let wf = workflows(&env).get("flow-wf").await.expect("the Workflow");
    assert_eq!(
        wf.data.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded")
    );
    // Reported by argoexec's wait containers, one WorkflowTaskResult per step (nothing in this test
    // writes them; Argo's controller folds them into the nodes' outputs and deletes them once the
    // Workflow is done): each step's exit code and its `out`, read from /tmp/out.
    let nodes = wf
        .data
        .pointer("/status/nodes")
        .and_then(Value::as_object)
        .expect("the Workflow's nodes");
    let mut outs: Vec<&str> = nodes
        .values()
        .filter(|n| n["type"] == "Pod")
        .map(|n| {
            assert_eq!(n["outputs"]["exitCode"], "0", "{n}");
            let out = &n["outputs"]["parameters"][0];
            assert_eq!(out["valueFrom"]["path"], "/tmp/out", "{n}");
            out["value"].as_str().unwrap_or_else(|| panic!("{n}"))
        })
        .collect();
    outs.sort_unstable();
    assert_eq!(outs, ["42", "flow-a", r#"{"a":"flow-a","b":42}"#]);
    let pods = workflow_pods(&env, "flow-wf").await;
    assert_eq!(pods.len(), 3, "three step pods");
    for p in &pods {
        assert_ran_for_real(p, &node);
    }
    // The step that waited ran after the first had ended (the queue holds one at a time).
    let ended = |p: &Pod| finished_at(p, "main");
    let started = |p: &Pod| started_at(p, "main");
    let (first_now, gated_now) = (by_name(&pods, &first), by_name(&pods, &gated));
    assert!(
        started(gated_now) >= ended(first_now),
        "the gated step started ({:?}) after the first ended ({:?})",
        started(gated_now),
        ended(first_now)
    );
    env.cleanup().await;
}

fn by_name<'a>(pods: &'a [Pod], like: &Pod) -> &'a Pod {
    pods.iter()
        .find(|p| p.name_any() == like.name_any())
        .unwrap_or_else(|| panic!("pod {} is still there", like.name_any()))
}

fn terminated(pod: &Pod, container: &str) -> k8s_openapi::api::core::v1::ContainerStateTerminated {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.state.as_ref()?.terminated.clone())
        .unwrap_or_else(|| panic!("{}/{container} terminated", pod.name_any()))
}

fn started_at(pod: &Pod, container: &str) -> Option<jiff::Timestamp> {
    terminated(pod, container).started_at.map(|t| t.0)
}

fn finished_at(pod: &Pod, container: &str) -> Option<jiff::Timestamp> {
    terminated(pod, container).finished_at.map(|t| t.0)
}

#[tokio::test]
async fn killing_a_really_running_workflow_stays_killing_until_its_pods_are_gone() {
    let mut env = env_or_skip!("real-wf-kill");
    let (_heavy, _node) = start(&env).await;
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    // A step that ignores SIGTERM (so does its `sleep`): its pod ends only when the kubelet kills
    // it after the grace period, 5 s, so a kill has a Killing phase that lasts.
    let mut template = on_real_node(
        "long",
        vec![step("long", "trap '' TERM; echo started; sleep 600", &[])],
    );
    template["spec"]["podSpecPatch"] = json!("{\"terminationGracePeriodSeconds\": 5}");
    tasks(&env)
        .create(
            &PostParams::default(),
            &workflow_task("long", &queue, template),
        )
        .await
        .expect("create the Task");
    let pod = wait_for("the step's main container to run", T, || async {
        workflow_pods(&env, "long-wf")
            .await
            .into_iter()
            .find(main_running)
    })
    .await;
    wait_for("Task long to be Running", T, || async {
        let t = tasks(&env).get("long").await.ok()?;
        (t.status?.phase == TaskPhase::Running).then_some(())
    })
    .await;

    kill_now(&env, "long").await;
    // Killing while the step's pod is still there (its containers stopping).
    wait_for("Killing while the step's pod exists", T, || async {
        let t = tasks(&env).get("long").await.ok()?;
        let killing = t.status?.phase == TaskPhase::Killing;
        let pod_there = env.pods().get_opt(&pod.name_any()).await.ok()??;
        (killing && pod_there.meta().uid == pod.meta().uid).then_some(())
    })
    .await;
    let killed = wait_for("Task long to be Killed", T, || async {
        let t = tasks(&env).get("long").await.ok()?;
        let st = t.status?;
        assert!(
            matches!(
                st.phase,
                TaskPhase::Running | TaskPhase::Killing | TaskPhase::Killed
            ),
            "{st:?}"
        );
        (st.phase == TaskPhase::Killed).then_some(st)
    })
    .await;
    assert!(killed.killing_at.is_some(), "went through Killing");
    assert!(
        killed.message.contains("killTimestamp"),
        "{}",
        killed.message
    );
    // Killed only once the Workflow and its pod were gone.
    assert!(
        workflows(&env)
            .get_opt("long-wf")
            .await
            .expect("read")
            .is_none()
    );
    assert!(
        env.pods()
            .get_opt(&pod.name_any())
            .await
            .expect("read")
            .is_none(),
        "the step's pod is gone"
    );
    env.cleanup().await;
}

/// The counter demo's last step (manifests/samples/task-counter.yaml): `task-final`, spawned by
/// `task-<limit>` with the workflow executor its input names, ran its two steps on the real node
/// behind the queue, and its result is what argoexec reported: the count and the verdict on it.
pub(super) async fn assert_counter_final_step(env: &TestEnv, task: &Task, limit: i64, node: &str) {
    let name = task.name_any();
    let status = task.status.clone().expect("status");
    assert_eq!(status.phase, TaskPhase::Success, "{name}: {status:?}");
    assert_eq!(status.executor.as_deref(), Some("workflow"));
    assert_eq!(task.spec.parent, Some(format!("task-{limit}")));
    assert_eq!(
        status.result,
        Some(json!({"count": limit, "verdict": "reached"})),
        "{name}'s result: the Workflow's outputs"
    );
    let workflow = format!("{name}-wf");
    let wf = workflows(env).get(&workflow).await.expect("the Workflow");
    assert_eq!(
        wf.data.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded")
    );
    let pods = workflow_pods(env, &workflow).await;
    assert_eq!(pods.len(), 2, "two steps: count, then verdict");
    for p in &pods {
        assert_ran_for_real(p, node);
        assert!(
            p.labels().contains_key("sluice.dev/queue"),
            "{} is governed by the TaskCluster's queue",
            p.name_any()
        );
    }
    eprintln!("{name}: {:?}", status.result);
}
