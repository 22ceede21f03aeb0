use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub operation: &'static str,
    pub outcome: &'static str,
}

/// Webhook request latency and outcomes.
#[derive(Clone)]
pub struct WebhookMetrics {
    pub duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    pub requests: Family<OutcomeLabels, Counter>,
}

fn buckets() -> Histogram {
    // 50 µs .. ~1.6 s
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.00005, 2.0, 16,
    ))
}

impl Default for WebhookMetrics {
    /// Metrics that are recorded but not registered anywhere (tests, embedding).
    fn default() -> Self {
        WebhookMetrics {
            duration: Family::new_with_constructor(buckets as fn() -> Histogram),
            requests: Family::default(),
        }
    }
}

impl WebhookMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = WebhookMetrics::default();
        registry.register(
            "sluice_webhook_request_duration_seconds",
            "Time to answer an admission review, by operation",
            m.duration.clone(),
        );
        registry.register(
            "sluice_webhook_requests",
            "Admission reviews answered, by operation and outcome",
            m.requests.clone(),
        );
        m
    }

    pub fn record(&self, operation: &'static str, outcome: &'static str, seconds: f64) {
        self.duration
            .get_or_create(&OperationLabels { operation })
            .observe(seconds);
        self.requests
            .get_or_create(&OutcomeLabels { operation, outcome })
            .inc();
    }
}
