//! Webhook latency and outcomes, registered by the caller in its Prometheus registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// How an admission request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Allowed,
    Patched,
    Denied,
    /// Not an AdmissionReview we could read: 4xx without a review answer.
    RejectedBadRequest,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Patched => "patched",
            Outcome::Denied => "denied",
            Outcome::RejectedBadRequest => "rejected_bad_request",
        }
    }

    pub(crate) fn of(response: &kube::core::admission::AdmissionResponse) -> Outcome {
        if !response.allowed {
            Outcome::Denied
        } else if response.patch.is_some() {
            Outcome::Patched
        } else {
            Outcome::Allowed
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub operation: &'static str,
    pub outcome: &'static str,
}

/// `sluice_webhook_request_duration_seconds{operation}` and
/// `sluice_webhook_requests_total{operation,outcome}`.
#[derive(Clone)]
pub struct WebhookMetrics {
    pub duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    pub requests: Family<OutcomeLabels, Counter>,
}

/// Fine below a millisecond, where a healthy webhook answers, coarse up to a second.
const BUCKETS: [f64; 22] = [
    0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_4, 0.000_5, 0.000_75, 0.001,
    0.001_5, 0.002, 0.003, 0.005, 0.007_5, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

impl Default for WebhookMetrics {
    /// Metrics that are recorded but not registered anywhere (tests, embedding).
    fn default() -> Self {
        WebhookMetrics {
            duration: Family::new_with_constructor(histogram as fn() -> Histogram),
            requests: Family::default(),
        }
    }
}

impl WebhookMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = WebhookMetrics::default();
        registry.register(
            "sluice_webhook_request_duration_seconds",
            "Time to answer an admission review, by operation",
            metrics.duration.clone(),
        );
        // prometheus-client appends the _total suffix of a counter.
        registry.register(
            "sluice_webhook_requests",
            "Admission reviews answered, by operation and outcome",
            metrics.requests.clone(),
        );
        metrics
    }

    pub fn record(&self, operation: &'static str, outcome: Outcome, seconds: f64) {
        self.duration
            .get_or_create(&OperationLabels { operation })
            .observe(seconds);
        self.requests
            .get_or_create(&OutcomeLabels {
                operation,
                outcome: outcome.as_str(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_the_documented_names() {
        let mut registry = Registry::default();
        let metrics = WebhookMetrics::new(&mut registry);
        metrics.record("mutate_pods", Outcome::Patched, 0.0002);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("sluice_webhook_request_duration_seconds_bucket{le=\"0.0002\",operation=\"mutate_pods\"} 1"), "{text}");
        assert!(
            text.contains(
                "sluice_webhook_requests_total{operation=\"mutate_pods\",outcome=\"patched\"} 1"
            ),
            "{text}"
        );
    }
}
