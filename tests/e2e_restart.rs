//! Invariant 2 on a real cluster: the controller killed with SIGKILL in the middle of a run and
//! restarted rebuilds its state from the cluster, never exceeds the quota, and admits every pod.
//! Its own test binary: it stops the shared sluice process, which other tests must not see.

mod support;

use std::time::Duration;

use kube::ResourceExt;

use serde_json::json;
use support::*;

#[tokio::test]
async fn killed_controller_never_over_admits_and_admits_everyone_after_restart() {
    let (env, queue) = env_and_queue!("restart", json!({"cpu": "3"}), "BestEffortFIFO");
    let (peak, watch_task) = watch_usage(env.pods());

    const PODS: usize = 12;
    for i in 0..PODS {
        env.create_pod(pod(&format!("p{i:02}"), &queue, "1")).await;
    }
    env.wait_queue_counts(&queue, (PODS - 3) as i32, 3).await;

    // End one admitted pod and kill the controller at once: its pass may be half done.
    let first = holding(&env.list_pods().await)[0].name_any();
    end_pod(&env.pods(), &first, "Succeeded").await;
    kill_sluice();

    // While it is down, more admitted pods end: nobody admits their successors yet.
    let ended_while_down: Vec<String> = holding(&env.list_pods().await)
        .iter()
        .take(2)
        .map(|p| p.name_any())
        .collect();
    for name in &ended_while_down {
        end_pod(&env.pods(), name, "Succeeded").await;
    }

    restart_sluice();

    // Keep ending admitted pods until every pod has been admitted and has ended.
    wait_for(
        "every pod to be admitted and end",
        Duration::from_secs(180),
        || async {
            let pods = env.list_pods().await;
            for p in holding(&pods) {
                if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.annotations().get(KWOK_PHASE_ANNOTATION).is_none()
                {
                    end_pod(&env.pods(), &p.name_any(), "Succeeded").await;
                }
            }
            (pods.len() == PODS && pods.iter().all(is_ended)).then_some(())
        },
    )
    .await;

    watch_task.abort();
    let peak = *peak.lock().expect("peak");
    assert!(
        peak <= 3000,
        "admitted pods held {peak}m cpu at some moment, over the 3 cpu quota"
    );
    assert!(peak >= 1000, "the usage watch saw admitted pods");
    env.cleanup().await;
}
