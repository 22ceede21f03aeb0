//! Issue 16, the quota promise under attack: end to end on the local control plane with sluice
//! running on the host. Run with `hack/test.sh --test e2e_hardening`.

mod support;

/// Holes 6 and 8: the ungate patch by name, and two leaders.
mod leader_and_ungate {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    use kube::{Client, ResourceExt};
    use serde_json::json;
    use sluice::leader::{LeaderElector, LeaseSettings, Term};
    use sluice::queue::controller::ungate_patch;
    use sluice::queue::pod_cache::CachedPod;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::{mpsc, watch};
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    use super::support::*;

    /// sluice's own identity: the only one the webhook lets remove the gate.
    const SLUICE_USER: &str = "system:serviceaccount:sluice-system:sluice";

    async fn client_as(user: Option<&str>, server: Option<SocketAddr>) -> Client {
        let _ = client().await; // says how to get a cluster when there is none
        let mut config = kube::Config::infer().await.expect("kubeconfig");
        config.auth_info.impersonate = user.map(str::to_string);
        if let Some(addr) = server {
            config.cluster_url = format!("https://{addr}").parse().expect("proxy url");
        }
        Client::try_from(config).expect("client")
    }

    #[tokio::test]
    async fn a_pod_recreated_under_the_same_name_is_not_ungated_by_its_predecessors_patch() {
        let (env, queue) = env_and_queue!("same-name", json!({"cpu": "1"}), "BestEffortFIFO");
        env.create_pod(pod("holder", &queue, "1")).await;
        env.create_pod(pod("a", &queue, "1")).await;
        env.wait_queue_counts(&queue, 1, 1).await;
        let first = env.pods().get("a").await.expect("pod a");
        assert!(is_gated(&first), "the queue is full: a waits");
        // What the controller would send to admit the first pod.
        let patch = ungate_patch(
            &CachedPod::from_pod(first.clone()),
            "2026-01-01T00:00:00Z",
            "e2e@1",
            None,
        )
        .expect("ungate patch");

        env.pods()
            .delete("a", &DeleteParams::default())
            .await
            .expect("delete a");
        wait_absent(&env.pods(), "a", Duration::from_secs(30)).await;
        let second = env.create_pod(pod("a", &queue, "1")).await;
        assert_ne!(second.uid(), first.uid());
        assert!(is_gated(&second), "no room: the new pod is gated");

        let as_sluice: Api<Pod> =
            Api::namespaced(client_as(Some(SLUICE_USER), None).await, &env.namespace);
        let err = as_sluice
            .patch("a", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .expect_err("the first pod's patch must not apply to the second");
        // The API server answers a failed JSON-patch test with 422 Invalid, without details.
        match &err {
            kube::Error::Api(status) => assert_eq!(status.code, 422, "{status:?}"),
            other => panic!("an API error expected: {other}"),
        }
        // The same patch for the pod as it is now (its uid the only difference) would apply: the
        // uid test alone refused the first (a dry run, so the second pod stays gated).
        let fresh = ungate_patch(
            &CachedPod::from_pod(second.clone()),
            "2026-01-01T00:00:00Z",
            "e2e@1",
            None,
        )
        .expect("ungate patch");
        as_sluice
            .patch(
                "a",
                &PatchParams::default().dry_run(),
                &Patch::<()>::Json(fresh),
            )
            .await
            .expect("the patch for the pod that is there applies");
        let now = env.pods().get("a").await.expect("pod a");
        assert_eq!(now.uid(), second.uid());
        assert!(is_gated(&now), "the second pod still waits");
        env.cleanup().await;
    }

    /// A TCP proxy to the API server that can be frozen: bytes stop flowing both ways, as in a
    /// network partition (connections stay open, requests hang).
    struct Partition {
        addr: SocketAddr,
        frozen: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Partition {
        async fn to(target: String) -> Partition {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind proxy");
            let addr = listener.local_addr().expect("proxy addr");
            let (frozen, watching) = watch::channel(false);
            let task = tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                        continue;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::spawn(forward(ri, wo, watching.clone()));
                    tokio::spawn(forward(ro, wi, watching.clone()));
                }
            });
            Partition { addr, frozen, task }
        }

        fn freeze(&self) {
            let _ = self.frozen.send(true);
        }
    }

    impl Drop for Partition {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// Copies `from` to `to`, holding every chunk while the partition is frozen.
    async fn forward(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut frozen: watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if frozen.wait_for(|f| !*f).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    #[derive(Debug, PartialEq, Eq, Clone, Copy)]
    enum Happened {
        Leads(&'static str),
        StopsAdmitting(&'static str),
    }

    fn lease_settings(namespace: &str, identity: &str) -> LeaseSettings {
        LeaseSettings {
            namespace: namespace.into(),
            name: "e2e-lease".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(6),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_millis(500),
            call_timeout: Duration::from_secs(1),
        }
    }

    /// Runs an elector that reports when it leads and when it stops admitting.
    fn elect(
        elector: LeaderElector,
        name: &'static str,
        events: mpsc::UnboundedSender<(Happened, Instant)>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let leads = events.clone();
            let stops: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
                let _ = events.send((Happened::StopsAdmitting(name), Instant::now()));
            });
            elector
                .run(
                    shutdown,
                    move |leading| {
                        if leading {
                            let _ = leads.send((Happened::Leads(name), Instant::now()));
                        }
                    },
                    stops,
                    |term: Arc<Term>| async move { term.cancelled().cancelled().await },
                )
                .await;
        })
    }

    async fn next_event(
        events: &mut mpsc::UnboundedReceiver<(Happened, Instant)>,
        log: &mut Vec<(Happened, Instant)>,
        wanted: Happened,
    ) -> Instant {
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some((event, at)) = events.recv().await {
                log.push((event, at));
                if event == wanted {
                    return Some(at);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(at)) => at,
            _ => panic!("{wanted:?} did not happen; so far: {log:?}"),
        }
    }

    #[tokio::test]
    async fn a_stalled_leader_stops_admitting_before_another_replica_takes_over() {
        let env = env_or_skip!("two-leaders");
        let config = kube::Config::infer().await.expect("kubeconfig");
        let target = format!(
            "{}:{}",
            config.cluster_url.host().expect("API server host"),
            config.cluster_url.port_u16().unwrap_or(443)
        );
        let partition = Partition::to(target).await;
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let mut log = Vec::new();
        let shutdown = CancellationToken::new();

        let first = LeaderElector::new(
            client_as(None, Some(partition.addr)).await,
            lease_settings(&env.namespace, "first"),
        );
        let first = elect(first, "first", events_tx.clone(), shutdown.clone());
        next_event(&mut events, &mut log, Happened::Leads("first")).await;

        let second = LeaderElector::new(
            client_as(None, None).await,
            lease_settings(&env.namespace, "second"),
        );
        let second = elect(second, "second", events_tx, shutdown.clone());
        // The first leader's renewals now hang: it must stop on its own, then the second leads.
        partition.freeze();
        let took_over = next_event(&mut events, &mut log, Happened::Leads("second")).await;
        let stopped = log
            .iter()
            .find(|(e, _)| *e == Happened::StopsAdmitting("first"))
            .map(|(_, at)| *at);
        assert!(
            stopped.is_some_and(|stopped| stopped < took_over),
            "the first leader must stop admitting before the second leads: {log:?}"
        );

        shutdown.cancel();
        let _ = second.await;
        first.abort(); // its release hangs in the partition until its timeout; no need to wait
        drop(partition);
        env.cleanup().await;
    }
}
