//! Resource quantities as integers (milli-units), parsed the way Kubernetes parses them, and pod
//! requests counted the way the scheduler counts them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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

    pub fn add(&mut self, name: &str, milli: i64) {
        let slot = self.0.entry(name.to_string()).or_insert(0);
        *slot = slot.saturating_add(milli);
    }

    pub fn add_all(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            self.add(name, *value);
        }
    }

    /// Adds `other` `times` times.
    pub fn add_scaled(&mut self, other: &ResourceList, times: i64) {
        for (name, value) in &other.0 {
            self.add(name, value.saturating_mul(times));
        }
    }

    /// Every entry the larger of the two.
    pub fn max_with(&mut self, other: &ResourceList) {
        for (name, value) in &other.0 {
            let slot = self.0.entry(name.clone()).or_insert(0);
            *slot = (*slot).max(*value);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.values().all(|v| *v == 0)
    }

    /// Parses a Kubernetes resource list.
    pub fn from_quantities(map: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        let mut list = ResourceList::new();
        for (name, quantity) in map {
            list.add(name, parse_quantity(&quantity.0)?);
        }
        Ok(list)
    }

    /// The list as Kubernetes quantities, formatted for people (`2`, `500m`, `8Gi`).
    pub fn to_quantities(&self) -> BTreeMap<String, Quantity> {
        self.0
            .iter()
            .map(|(name, value)| (name.clone(), Quantity(format_quantity(name, *value))))
            .collect()
    }
}

/// Parses a Kubernetes quantity ("4", "500m", "1.5", "8Gi", "1e3", "100M") into milli-units,
/// rounding up as Kubernetes does when a value has more precision than a milli-unit.
pub fn parse_quantity(text: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        quantity: text.to_string(),
        reason,
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." {
        return Err(err("no number"));
    }
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    if fraction.contains('.') {
        return Err(err("more than one decimal point"));
    }
    // value = digits × 10^decimal_exp × 2^binary_exp, then × 1000 for milli-units.
    let (mut decimal_exp, binary_exp): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other if other.starts_with(['e', 'E']) => {
            let exp: i32 = other[1..].parse().map_err(|_| err("bad exponent"))?;
            (exp, 0)
        }
        _ => return Err(err("unknown suffix")),
    };
    decimal_exp += 3; // milli-units
    let digits = format!("{whole}{fraction}");
    decimal_exp -= fraction.len() as i32;
    let mut value: i128 = 0;
    for d in digits.bytes() {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(i128::from(d - b'0')))
            .ok_or_else(|| err("too large"))?;
    }
    value = value
        .checked_mul(1i128 << binary_exp)
        .ok_or_else(|| err("too large"))?;
    if decimal_exp >= 0 {
        for _ in 0..decimal_exp {
            value = value.checked_mul(10).ok_or_else(|| err("too large"))?;
        }
    } else {
        let divisor = 10i128
            .checked_pow(decimal_exp.unsigned_abs())
            .ok_or_else(|| err("too small"))?;
        // Round up: 0.1m of cpu still asks for 1m.
        value = (value + divisor - 1) / divisor;
    }
    let value = i64::try_from(value).map_err(|_| err("too large"))?;
    Ok(if negative { -value } else { value })
}

/// Formats milli-units for people: cpu-like values as `2` or `1500m`, byte-like values (memory,
/// storage) in the largest binary unit that divides them, everything else as a plain number.
pub fn format_quantity(name: &str, milli: i64) -> String {
    let bytes_like =
        name == "memory" || name.ends_with("storage") || name.starts_with("hugepages-");
    if bytes_like && milli % 1000 == 0 {
        let bytes = milli / 1000;
        for (suffix, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            if bytes != 0 && bytes % (1i64 << shift) == 0 {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
        return bytes.to_string();
    }
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Formats an amount for a message: memory in Gi/Mi with decimals allowed, cpu in cores.
pub fn describe_quantity(name: &str, milli: i64) -> String {
    if name == "memory" {
        let bytes = milli as f64 / 1000.0;
        let gib = bytes / (1u64 << 30) as f64;
        if gib >= 1.0 {
            return format!("{}Gi", trim_float(gib));
        }
        return format!("{}Mi", trim_float(bytes / (1u64 << 20) as f64));
    }
    if milli % 1000 == 0 {
        return (milli / 1000).to_string();
    }
    trim_float(milli as f64 / 1000.0)
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn container_requests(container: &Container) -> Result<ResourceList, QuantityError> {
    // The scheduler uses requests, and limits where a request is missing (the API server defaults
    // requests from limits, so this matters only for objects that were never stored).
    let resources = container.resources.as_ref();
    let mut list = ResourceList::new();
    if let Some(limits) = resources.and_then(|r| r.limits.as_ref()) {
        list = ResourceList::from_quantities(limits)?;
    }
    if let Some(requests) = resources.and_then(|r| r.requests.as_ref()) {
        for (name, q) in requests {
            list.0.insert(name.clone(), parse_quantity(&q.0)?);
        }
    }
    Ok(list)
}

/// What a pod requests, as the scheduler counts it: the larger of (all app containers + sidecars)
/// and each init container together with the sidecars started before it, plus the pod overhead,
/// plus one `pods`.
pub fn pod_requests(spec: &PodSpec) -> Result<ResourceList, QuantityError> {
    let mut containers = ResourceList::new();
    for c in &spec.containers {
        containers.add_all(&container_requests(c)?);
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let requests = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            // A sidecar runs beside everything that starts after it.
            sidecars.add_all(&requests);
            init_peak.max_with(&sidecars);
        } else {
            let mut during = sidecars.clone();
            during.add_all(&requests);
            init_peak.max_with(&during);
        }
    }
    let mut total = containers;
    total.add_all(&sidecars);
    total.max_with(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add_all(&ResourceList::from_quantities(overhead)?);
    }
    total.0.insert("pods".to_string(), 1000);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_quantities() {
        assert_eq!(parse_quantity("4"), Ok(4000));
        assert_eq!(parse_quantity("500m"), Ok(500));
        assert_eq!(parse_quantity("1.5"), Ok(1500));
        assert_eq!(parse_quantity("0.1m"), Ok(1)); // rounds up
        assert_eq!(parse_quantity("8Gi"), Ok(8 * (1 << 30) * 1000));
        assert_eq!(parse_quantity("100M"), Ok(100_000_000 * 1000));
        assert_eq!(parse_quantity("1e3"), Ok(1_000_000));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 * (1 << 29) * 1000));
        assert_eq!(parse_quantity("2k"), Ok(2_000_000));
        assert!(parse_quantity("").is_err());
        assert!(parse_quantity("abc").is_err());
        assert!(parse_quantity("1.2.3").is_err());
        assert!(parse_quantity("4X").is_err());
        assert!(parse_quantity("99999999999999999999Ei").is_err());
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_quantity("cpu", 4000), "4");
        assert_eq!(format_quantity("cpu", 1500), "1500m");
        assert_eq!(format_quantity("memory", 8 * (1 << 30) * 1000), "8Gi");
        assert_eq!(format_quantity("memory", 1536 * (1 << 20) * 1000), "1536Mi");
        assert_eq!(format_quantity("pods", 3000), "3");
        assert_eq!(describe_quantity("cpu", 2500), "2.5");
        assert_eq!(describe_quantity("memory", 3 * (1 << 29) * 1000), "1.5Gi");
    }

    fn container(cpu: &str, restart_always: bool) -> Container {
        Container {
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    Quantity(cpu.to_string()),
                )])),
                ..Default::default()
            }),
            restart_policy: restart_always.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn counts_pod_requests_like_the_scheduler() {
        let spec = PodSpec {
            containers: vec![container("1", false), container("500m", false)],
            init_containers: Some(vec![container("2", false)]),
            overhead: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity("100m".into()),
            )])),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        // max(1.5, 2) + 0.1
        assert_eq!(r.get("cpu"), 2100);
        assert_eq!(r.get("pods"), 1000);

        // A sidecar adds to the app containers and to init containers after it.
        let spec = PodSpec {
            containers: vec![container("1", false)],
            init_containers: Some(vec![container("250m", true), container("2", false)]),
            ..Default::default()
        };
        let r = pod_requests(&spec).unwrap();
        assert_eq!(r.get("cpu"), 2250);
    }
}
