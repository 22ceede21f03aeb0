//! Resource quantities as integers (milli-units), parsed the way Kubernetes parses them, and pod
//! requests counted the way the scheduler counts them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

mod quantity;
mod requests;

pub use quantity::{TOO_LARGE, describe_quantity, format_quantity, parse_amount, parse_quantity};
pub use requests::{ResourceError, pod_requests};

/// A set of resource amounts in milli-units (1 cpu = 1000, 1 byte of memory = 1000).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceList(pub BTreeMap<String, i64>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid quantity {quantity:?}: {reason}")]
pub struct QuantityError {
    pub quantity: String,
    pub reason: &'static str,
}

impl ResourceList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Adds, saturating at i64::MAX. Amounts are never negative (parsing refuses them), so a
    /// saturated total is only ever too high: a queue looks full, it never looks emptier than it
    /// is. Where an application asks, use the `try_` forms and refuse it instead.
    pub fn add(&mut self, name: &str, milli: i64) {
        // The name is copied only when missing: adding into a list that already has the
        // resource (a pass's tallies, most of the time) allocates nothing.
        match self.0.get_mut(name) {
            Some(slot) => *slot = slot.saturating_add(milli),
            None => {
                self.0.insert(name.to_string(), milli);
            }
        }
    }

    /// Sets `name` to `milli`, copying the name only when it is missing.
    fn set(&mut self, name: &str, milli: i64) {
        match self.0.get_mut(name) {
            Some(slot) => *slot = milli,
            None => {
                self.0.insert(name.to_string(), milli);
            }
        }
    }

    pub fn add_all(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            self.add(name, *value);
        }
    }

    /// Adds `other` `times` times, saturating as [`ResourceList::add`] does.
    pub fn add_scaled(&mut self, other: &ResourceList, times: i64) {
        for (name, value) in &other.0 {
            self.add(name, value.saturating_mul(times));
        }
    }

    /// Adds `other`, or names the first resource whose total would overflow (the list is then
    /// left partly added: callers refuse the whole thing).
    pub fn try_add_all(&mut self, other: &ResourceList) -> Result<(), String> {
        self.try_add_scaled(other, 1)
    }

    /// Adds `other` `times` times, or names the first resource whose total would overflow.
    pub fn try_add_scaled(&mut self, other: &ResourceList, times: i64) -> Result<(), String> {
        for (name, value) in &other.0 {
            let now = self.get(name);
            let sum = value
                .checked_mul(times)
                .and_then(|v| now.checked_add(v))
                .ok_or_else(|| name.clone())?;
            self.set(name, sum);
        }
        Ok(())
    }

    /// Every entry the larger of the two.
    pub fn max_with(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            let larger = self.get(name).max(*value);
            self.set(name, larger);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }

    /// Parses a Kubernetes resource list of amounts (a quota, a pod set's requests): none negative.
    pub fn from_quantities(map: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        let mut list = ResourceList::new();
        for (name, quantity) in map {
            list.0.insert(name.clone(), parse_amount(&quantity.0)?);
        }
        Ok(list)
    }

    /// The list for a message: each resource worth naming (not `pods`, not zero) written by
    /// `each` from its name and its amount described (`describe_quantity`), joined by commas;
    /// `none` when there is none.
    pub fn describe(&self, each: impl Fn(&str, &str) -> String, none: &str) -> String {
        let parts: Vec<String> = (self.0.iter())
            .filter(|(name, amount)| name.as_str() != "pods" && **amount > 0)
            .map(|(name, amount)| each(name, &describe_quantity(name, *amount)))
            .collect();
        if parts.is_empty() {
            none.into()
        } else {
            parts.join(", ")
        }
    }

    /// The list as Kubernetes quantities, formatted for people (`2`, `500m`, `8Gi`).
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.0
            .iter()
            .map(|(name, value)| (name.clone(), Quantity(format_quantity(name, *value))))
            .collect()
    }
}

/// `cpu=2,memory=4Gi` (as the quantities are written), or `empty` when there are none.
pub fn quantities_text(map: &BTreeMap<String, Quantity>, empty: &str) -> String {
    if map.is_empty() {
        return empty.into();
    }
    map.iter()
        .map(|(name, quantity)| format!("{name}={}", quantity.0))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
