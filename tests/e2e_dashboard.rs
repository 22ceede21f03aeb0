//! The dashboard (issue 35) in a real headless Chromium against the local cluster, sluice on the
//! host serving it (`hack/cluster.sh` starts it with `--dashboard-addr`, SLUICE_DASHBOARD_ADDR).
//! Viewers log in through the page's form with ServiceAccount tokens (TokenRequest): an operator
//! (may list DynamicWorkloads cluster-wide) and a namespace user (may list them in one namespace).
//!
//! It checks that the queue bars match the CapacityQueue statuses, that a pod created into a full
//! queue appears in waiting work with its reason within a second (the DOM polled), that a
//! preemption appears in recent preemptions and a cohort reclaim as a reclaim, that a workload's
//! page shows its Kubernetes Events (and not an event written about it from another namespace),
//! that every resource of a queue is charted, and that the namespace user's page and API answers
//! hold nothing of another namespace. It writes its screenshots to target/screenshots/ (over
//! docs/src/images/dashboard-*.png with SLUICE_UPDATE_SCREENSHOTS=1).
//! Run with `hack/test.sh --test e2e_dashboard`.

#[path = "support/browser.rs"]
mod browser;
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use sluice::api::CapacityQueue;
use sluice::resources::ResourceList;
use support::*;

use browser::Browser;

/// How long anything the cluster does may take (admission, preemption, status writes).
const SLOW: Duration = Duration::from_secs(60);
/// The issue's bound: a change is on the page within a second.
const LIVE: Duration = Duration::from_secs(1);

fn dashboard_url() -> String {
    let addr = std::env::var("SLUICE_DASHBOARD_ADDR")
        .expect("SLUICE_DASHBOARD_ADDR (hack/cluster.sh env): sluice must serve its dashboard");
    format!("http://{addr}/")
}

/// Where a screenshot goes: beside the test's other output, or over the book's own images with
/// `SLUICE_UPDATE_SCREENSHOTS=1` (a test run must not change the checkout: the real-node phase
/// after it labels the image it builds from the tree, and a changed tree makes it `-dirty`).
fn image(name: &str) -> std::path::PathBuf {
    let dir = if std::env::var("SLUICE_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        repo_root().join("docs/src/images")
    } else {
        repo_root().join("target/screenshots")
    };
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir.join(name)
}

/// A ServiceAccount `name` in `namespace` and a token for it (TokenRequest, one hour).
async fn token(env: &TestEnv, namespace: &str, name: &str) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(env.client.clone(), namespace);
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa");
    create(&api, &sa).await;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    api.create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token")
}

/// A ClusterRole that reads DynamicWorkloads (what the install's user roles give `view`), named
/// after the test's namespace. Deleted at the end.
async fn reader_role(env: &TestEnv) -> String {
    let name = format!("{}-dwl-reader", env.namespace);
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sluice-e2e": "true"}},
        "rules": [{"apiGroups": ["sluice.dev"], "resources": ["dynamicworkloads"], "verbs": ["get", "list", "watch"]}],
    }))
    .expect("role");
    create(&Api::<ClusterRole>::all(env.client.clone()), &role).await;
    name
}

async fn bind_in(env: &TestEnv, namespace: &str, sa: &str, role: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{sa}-view")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    }))
    .expect("binding");
    create(
        &Api::<RoleBinding>::namespaced(env.client.clone(), namespace),
        &binding,
    )
    .await;
}

/// `role` everywhere: an operator. Deleted at the end.
async fn bind_everywhere(env: &TestEnv, namespace: &str, sa: &str, role: &str) -> String {
    let name = format!("{namespace}-dashboard-operator");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sluice-e2e": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
    }))
    .expect("binding");
    create(
        &Api::<ClusterRoleBinding>::all(env.client.clone()),
        &binding,
    )
    .await;
    name
}

async fn priority_class(env: &TestEnv, name: &str, value: i32) {
    let class: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sluice-e2e": "true"}}, "value": value,
    }))
    .expect("class");
    create(&Api::<PriorityClass>::all(env.client.clone()), &class).await;
}

fn prio_pod(name: &str, queue: &str, cpu: &str, class: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut p = pod(name, queue, cpu);
    p.spec.as_mut().expect("spec").priority_class_name = Some(class.to_string());
    p
}

/// A queue admitting only `namespace` (by its automatic name label).
async fn queue_for(env: &mut TestEnv, suffix: &str, namespace: &str, cpu: &str) -> String {
    env.queue_with_spec(
        suffix,
        json!({
            "quota": {"cpu": cpu, "memory": "8Gi"},
            "queueingStrategy": "BestEffortFIFO",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }),
    )
    .await
}

/// The cpu bar of `queue` as the page shows it: `used,reserved,quota` in millicores.
fn cpu_bar_js(queue: &str) -> String {
    format!(
        r#"(() => {{ const r = document.querySelector('[data-queue="{queue}"] .bar-row[data-resource="cpu"]');
            return r ? [r.dataset.used, r.dataset.reserved, r.dataset.quota].join(",") : null; }})()"#
    )
}

/// The same from the CapacityQueue's status.
async fn cpu_bar_of_status(env: &TestEnv, queue: &str) -> String {
    let q = Api::<CapacityQueue>::all(env.client.clone())
        .get(queue)
        .await
        .expect("get queue");
    let status = q.status.unwrap_or_default();
    let milli = |m| {
        ResourceList::from_quantities(m)
            .expect("quantities")
            .get("cpu")
    };
    format!(
        "{},{},{}",
        milli(&status.usage),
        milli(&status.reserved),
        milli(&q.spec.quota)
    )
}

async fn log_in(page: &mut Browser, token: &str) {
    page.goto(&dashboard_url()).await;
    page.wait_for(
        "the login form",
        SLOW,
        "!document.getElementById('login').hidden",
    )
    .await;
    let submit = format!(
        "document.getElementById('token').value = {}; document.getElementById('login').requestSubmit(); true",
        serde_json::to_string(token).expect("token")
    );
    page.eval(&submit).await;
    page.wait_for(
        "the first live state",
        SLOW,
        "!document.getElementById('nav').hidden && document.getElementById('live').classList.contains('on')",
    )
    .await;
}

async fn show(page: &mut Browser, view: &str) {
    page.eval(&format!("location.hash = '{view}'; true")).await;
    page.wait_for(
        &format!("view {view}"),
        SLOW,
        &format!("!document.getElementById('view-{}').hidden && document.getElementById('view-{}').children.length > 0",
            view.trim_start_matches('#').split('/').next().unwrap_or_default(),
            view.trim_start_matches('#').split('/').next().unwrap_or_default()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_queues_waiting_work_and_preemptions_per_tenant() {
    if !cluster_or_skip() || !browser::chromium_or_skip() {
        return;
    }
    let mut a = TestEnv::new("dash-a").await;
    let mut b = TestEnv::new("dash-b").await;
    let (ns_a, ns_b) = (a.namespace.clone(), b.namespace.clone());
    let (low, high) = (format!("{ns_a}-low"), format!("{ns_a}-high"));
    priority_class(&a, &low, 100).await;
    priority_class(&a, &high, 1000).await;
    let reader = reader_role(&a).await;
    let operator_binding = bind_everywhere(&a, &ns_a, "operator", &reader).await;
    let operator_token = token(&a, &ns_a, "operator").await;
    bind_in(&a, &ns_a, "viewer", &reader).await;
    let viewer_token = token(&a, &ns_a, "viewer").await;

    // Queue A full with two low-priority pods; queue B (another tenant) full, one pod waiting.
    let qa = queue_for(&mut a, "qa", &ns_a, "2").await;
    let qb = queue_for(&mut b, "qb", &ns_b, "1").await;
    a.create_pod(prio_pod("low-1", &qa, "1", &low)).await;
    a.create_pod(prio_pod("low-2", &qa, "1", &low)).await;
    b.create_pod(pod("secret-b-running", &qb, "1")).await;
    a.wait_queue_counts(&qa, 0, 2).await;
    b.wait_queue_counts(&qb, 0, 1).await;
    b.create_pod(pod("secret-b-waiting", &qb, "1")).await;
    b.wait_queue_counts(&qb, 1, 1).await;

    let mut operator = Browser::launch("operator", 1280, 820).await;
    log_in(&mut operator, &operator_token).await;

    // Queues: the bars are the statuses.
    show(&mut operator, "#queues").await;
    for q in [&qa, &qb] {
        let want = cpu_bar_of_status(&a, q).await;
        operator
            .wait_for(
                &format!("queue {q}'s cpu bar to show {want}"),
                SLOW,
                &format!("{} === '{want}'", cpu_bar_js(q)),
            )
            .await;
    }
    operator.screenshot(&image("dashboard-queues.png")).await;

    // Waiting work: a pod created into the full queue is there with its reason within a second.
    show(&mut operator, "#waiting").await;
    let created = Instant::now();
    a.create_pod(prio_pod("waiter", &qa, "1", &low)).await;
    let row = format!(
        r#"(() => {{ const r = document.querySelector('tr[data-workload="{ns_a}/waiter"] .reason');
            return r ? r.textContent : null; }})()"#
    );
    let (reason, _) = operator.wait_for("the waiting pod's row", SLOW, &row).await;
    let latency = created.elapsed();
    eprintln!("waiting pod on the page {latency:?} after its creation: {reason}");
    assert!(
        reason.as_str().unwrap_or_default().contains("cpu"),
        "it says it waits for cpu: {reason}"
    );
    assert!(
        latency <= LIVE,
        "on the page after {latency:?}, more than {LIVE:?}"
    );
    // The operator sees the other tenant's waiting work too (the filter below is not vacuous).
    operator
        .wait_for(
            "the other namespace's waiting pod",
            SLOW,
            &format!(
                r#"document.querySelector('tr[data-workload="{ns_b}/secret-b-waiting"]') !== null"#
            ),
        )
        .await;
    operator.screenshot(&image("dashboard-waiting.png")).await;

    // One workload.
    show(&mut operator, &format!("#workload/{ns_a}/waiter")).await;
    operator
        .wait_for(
            "the workload's pod sets",
            SLOW,
            "document.querySelector('[data-testid=podsets] tbody tr') !== null",
        )
        .await;

    // A preemption: a high-priority pod takes a low one's place.
    show(&mut operator, "#preemptions").await;
    a.create_pod(prio_pod("urgent", &qa, "1", &high)).await;
    let preempted = format!(
        r#"(() => {{ for (const r of document.querySelectorAll('[data-testid=preemptions] tbody tr'))
              if (r.querySelector('.by').textContent === '{ns_a}/urgent') return r.dataset.workload;
            return null; }})()"#
    );
    let (victim, _) = operator
        .wait_for("the preemption by urgent", SLOW, &preempted)
        .await;
    let victim = victim.as_str().unwrap_or_default().to_string();
    assert!(
        victim == format!("{ns_a}/low-1") || victim == format!("{ns_a}/low-2"),
        "a low-priority pod was the victim: {victim}"
    );
    let kind = format!(
        r#"document.querySelector('[data-testid=preemptions] tr[data-workload="{victim}"]').dataset.kind"#
    );
    let (kind, _) = operator.wait_for("the victim's kind", SLOW, &kind).await;
    assert_eq!(kind, json!("preemption"), "a preemption within the queue");

    // A cohort reclaim: a borrower runs on its lender's idle quota, the lender takes it back.
    let cohort = format!("{ns_a}-pool");
    let in_cohort = |cpu: &str| {
        json!({
            "quota": {"cpu": cpu, "memory": "8Gi"}, "cohort": cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns_a}},
        })
    };
    let lender = a.queue_with_spec("lender", in_cohort("1")).await;
    let borrower = a.queue_with_spec("borrower", in_cohort("1")).await;
    a.create_pod(pod("borrow-1", &borrower, "1")).await;
    a.wait_queue_counts(&borrower, 0, 1).await;
    a.create_pod(pod("borrow-2", &borrower, "1")).await;
    a.wait_queue_counts(&borrower, 0, 2).await;
    a.create_pod(pod("reclaimer", &lender, "1")).await;
    // The operator sees every namespace, other tests' reclaims too: this test's row only.
    let reclaimed = format!(
        r#"(() => {{ const r = document.querySelector('[data-testid=preemptions] tr[data-kind="reclaim"][data-workload^="{ns_a}/"]');
            return r ? [r.dataset.workload, r.querySelector('.by').textContent, r.querySelector('.kind').textContent].join(" ") : null; }})()"#
    );
    let (row, _) = operator
        .wait_for("the cohort reclaim", SLOW, &reclaimed)
        .await;
    assert_eq!(
        row,
        json!(format!("{ns_a}/borrow-2 {ns_a}/reclaimer cohort reclaim")),
        "the borrowing pod reclaimed, by the lender's, shown as a reclaim"
    );
    operator
        .screenshot(&image("dashboard-preemptions.png"))
        .await;

    // The preemptor's page: its Kubernetes Events (sluice's Waiting and Admitted, told on its
    // pod). An event written in namespace B about it is not its own and is not shown, not even
    // to an operator.
    let mut forged: k8s_openapi::api::core::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "forged-about-a"},
        "involvedObject": {"apiVersion": "sluice.dev/v1alpha1", "kind": "DynamicWorkload",
            "namespace": ns_a, "name": "urgent"},
        "reason": "Forged", "message": "secret-b was here", "type": "Warning",
        "action": "Forge", "reportingComponent": "forger", "reportingInstance": "forger-1",
    }))
    .expect("event");
    // A new-style event (eventTime set): the API server lets its namespace differ from the
    // object's.
    forged.event_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        jiff::Timestamp::now(),
    ));
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(b.client.clone(), &ns_b)
        .create(&PostParams::default(), &forged)
        .await
        .expect("create an event in namespace B");
    show(&mut operator, &format!("#workload/{ns_a}/urgent")).await;
    operator
        .wait_for(
            "the preemptor's Admitted event",
            SLOW,
            r#"document.querySelector('[data-testid=events] tr[data-reason="Admitted"]') !== null"#,
        )
        .await;
    let text = operator
        .text("document.getElementById('view-workload')")
        .await;
    assert!(
        !text.contains("Forged") && !text.contains("secret-b"),
        "an event of another namespace about the workload is shown:\n{text}"
    );
    operator.screenshot(&image("dashboard-workload.png")).await;

    // History: the queue's usage samples (every 5 s in the local cluster; the page reloads them).
    show(&mut operator, "#history").await;
    operator
        .wait_for(
            "queue A's usage chart with three samples",
            SLOW,
            &format!(
                r#"(() => {{ const p = document.querySelector('[data-history="{qa}"] path.line');
                 return p !== null && (p.getAttribute('d').match(/L/g) || []).length >= 2; }})()"#
            ),
        )
        .await;
    // Every resource of the queue's quota is charted, not only the first.
    operator
        .wait_for(
            "queue A's memory chart",
            SLOW,
            &format!(r#"document.querySelector('[data-history="{qa}"] svg[data-resource="memory"] path.line') !== null"#),
        )
        .await;
    operator.screenshot(&image("dashboard-history.png")).await;
    operator.close().await;

    // The namespace user: nothing of namespace B, on any view or in any answer.
    let mut viewer = Browser::launch("viewer", 1280, 820).await;
    viewer.goto(&dashboard_url()).await;
    let (status, _) = viewer
        .wait_for("an answer", SLOW, "fetch('/api/state').then(r => r.status)")
        .await;
    assert_eq!(status, json!(401), "no state without logging in");
    log_in(&mut viewer, &viewer_token).await;
    for view in ["#queues", "#waiting", "#preemptions", "#history"] {
        show(&mut viewer, view).await;
        let text = viewer.text("document.body").await;
        assert!(
            !text.contains(&ns_b) && !text.contains("secret-b"),
            "{view} shows namespace B:\n{text}"
        );
        if view == "#waiting" {
            assert!(
                text.contains(&format!("{ns_a}/waiter")),
                "its own waiting work: {text}"
            );
            assert!(
                text.contains("2/2 cpu used"),
                "its reason, figures kept: {text}"
            );
            viewer
                .screenshot(&image("dashboard-namespace-user.png"))
                .await;
        }
    }
    show(&mut viewer, &format!("#workload/{ns_a}/urgent")).await;
    viewer
        .wait_for(
            "its workload's events",
            SLOW,
            r#"document.querySelector('[data-testid=events] tr[data-reason="Admitted"]') !== null"#,
        )
        .await;
    let text = viewer.text("document.body").await;
    assert!(
        !text.contains(&ns_b) && !text.contains("secret-b"),
        "its workload page shows namespace B:\n{text}"
    );
    let urgent = format!("/api/workload/{ns_a}/urgent");
    for path in ["/api/state", "/api/history", "/api/me", urgent.as_str()] {
        let (body, _) = viewer
            .wait_for(path, SLOW, &format!("fetch('{path}').then(r => r.text())"))
            .await;
        let body = body.as_str().unwrap_or_default();
        assert!(
            !body.contains(&ns_b) && !body.contains(&qb),
            "{path} leaks namespace B: {body}"
        );
    }
    let (status, _) = viewer
        .wait_for(
            "the other namespace's workload",
            SLOW,
            &format!("fetch('/api/workload/{ns_b}/secret-b-waiting').then(r => r.status)"),
        )
        .await;
    assert_eq!(
        status,
        json!(404),
        "another namespace's workload is not found"
    );
    viewer.close().await;

    for name in [&low, &high] {
        let _ = Api::<PriorityClass>::all(a.client.clone())
            .delete(name, &DeleteParams::default())
            .await;
    }
    let _ = Api::<ClusterRoleBinding>::all(a.client.clone())
        .delete(&operator_binding, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(a.client.clone())
        .delete(&reader, &DeleteParams::default())
        .await;
    a.cleanup().await;
    b.cleanup().await;
}
