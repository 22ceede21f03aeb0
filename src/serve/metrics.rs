//! The metrics registry (every metric under its own `sluice_...` name) and the plain-HTTP
//! `/metrics` endpoint.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::metrics::ControllerMetrics;
use crate::scavenger::metrics::ScavengerMetrics;

/// Every metric sluice serves, registered under its own name (`sluice_...`, no prefix).
pub fn metrics_registry() -> (
    Registry,
    ControllerMetrics,
    crate::tasks::TaskMetrics,
    sluice_webhooks::WebhookMetrics,
    ScavengerMetrics,
) {
    let mut registry = Registry::default();
    let controller_metrics = ControllerMetrics::new(&mut registry);
    let task_metrics = crate::tasks::TaskMetrics::new(&mut registry);
    let webhook_metrics = sluice_webhooks::WebhookMetrics::new(&mut registry);
    let scavenger_metrics = ScavengerMetrics::new(&mut registry);
    (
        registry,
        controller_metrics,
        task_metrics,
        webhook_metrics,
        scavenger_metrics,
    )
}

pub(super) async fn serve_metrics(
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &registry) {
                    Ok(()) => (
                        axum::http::StatusCode::OK,
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        body,
                    ),
                    Err(e) => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        [(axum::http::header::CONTENT_TYPE, "text/plain")],
                        format!("could not encode metrics: {e}"),
                    ),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))?;
    info!(%addr, "metrics on /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("metrics server")
}

#[cfg(test)]
mod tests {
    #[test]
    fn metrics_are_served_under_their_documented_names() {
        let (registry, controller, _, _, _) = super::metrics_registry();
        controller.status_writes.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let names: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
            .collect();
        assert!(!names.is_empty());
        for name in &names {
            assert!(name.starts_with("sluice_"), "metric {name} in:\n{text}");
        }
        assert!(names.contains(&"sluice_status_writes_total"), "{text}");
        let reference = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/src/reference/metrics.md"
        ))
        .expect("docs/src/reference/metrics.md");
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut words = line.split_whitespace().skip(2);
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let documented = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            assert!(
                reference.contains(&format!("`{documented}`")),
                "docs/src/reference/metrics.md lacks `{documented}`: run hack/gen-manifests.sh"
            );
        }
    }
}
