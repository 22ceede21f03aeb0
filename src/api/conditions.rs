use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Kubernetes-style condition (the shape of metav1.Condition).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// CamelCase type, e.g. `Admitted`, `QuotaReserved`, `Finished`.
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    /// CamelCase machine-readable reason.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl Condition {
    /// Builds a condition, keeping the old transition time when the status did not change, so that
    /// rewriting the same condition is a no-op for the API server.
    pub fn updated(
        previous: Option<&Condition>,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
        now: &str,
    ) -> Condition {
        let last_transition_time = match previous {
            Some(old) if old.status == status => old.last_transition_time.clone(),
            _ => now.to_string(),
        };
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message,
            last_transition_time,
            observed_generation: None,
        }
    }
}
